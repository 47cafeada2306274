//! `npcmem switch list|set`: the runtime switches — degraded mode, gossip and
//! consolidation on/off — kept in `runtime_switches`, and the error-budget checks that
//! decide degraded mode while it is `auto`. A change is logged in
//! `admin_actions` and announced on `P.control.changed`, so services re-read the table at
//! once instead of at their next timed read.

use std::io::Write;

use npcmem_core::wire::ControlChanged;
use npcmem_store::{admin, switches};
use serde_json::json;

use npcmem_bus::Topology;

use crate::Context;
use crate::error::CliError;

/// The switches a service reads; a name outside these is a typo, refused.
pub const KNOWN: &[(&str, &str)] = &[
    (
        "degraded",
        "degraded mode: gossip and scheduled jobs stop, enrich caches three times as long; \
         auto (the default) while an error budget is breached",
    ),
    ("gossip_enabled", "gossip ticks (true) or not (false)"),
    ("consolidation_enabled", "scheduled maintenance jobs on or off"),
];

#[derive(Debug, clap::Subcommand)]
pub enum SwitchCommand {
    /// Every switch with its value, who set it and when; then each service instance's
    /// error-budget checks.
    List,
    /// Set a switch: `npcmem switch set degraded true`.
    Set {
        /// One of degraded, gossip_enabled, consolidation_enabled.
        name: String,
        /// true or false; `degraded` also takes auto (follow the error budgets).
        value: String,
    },
}

pub async fn run(context: &Context, command: SwitchCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        SwitchCommand::List => list(context, out).await,
        SwitchCommand::Set { name, value } => set(context, &name, &value, out).await,
    }
}

async fn list(context: &Context, out: &mut dyn Write) -> Result<(), CliError> {
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    let rows = switches::list(&mut connection).await?;
    let mut table = crate::table::Table::new(&["switch", "value", "updated_by", "updated_at", "meaning"]);
    for row in rows {
        let meaning = KNOWN.iter().find(|(name, _)| *name == row.switch).map_or("", |(_, meaning)| meaning);
        table.row(vec![
            row.switch,
            row.value.0.to_string(),
            row.updated_by,
            row.updated_at.to_rfc3339(),
            meaning.to_owned(),
        ]);
    }
    table.write(out)?;
    let checks = npcmem_store::error_budgets::current(&mut connection).await?;
    let breached = checks.iter().filter(|check| check.breached).count();
    writeln!(out, "\nerror budgets ({breached} breached; degraded while the switch is auto and any is):")?;
    let mut table = crate::table::Table::new(&["service", "instance", "check", "value", "breached", "since"]);
    for check in checks {
        table.row(vec![
            check.service,
            check.instance,
            check.check_name,
            check.value.map_or_else(|| "-".to_owned(), |value| format!("{value:.3}")),
            check.breached.to_string(),
            check.since.to_rfc3339(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

async fn set(context: &Context, name: &str, value: &str, out: &mut dyn Write) -> Result<(), CliError> {
    if !KNOWN.iter().any(|(known, _)| *known == name) {
        let names: Vec<&str> = KNOWN.iter().map(|(known, _)| *known).collect();
        return Err(CliError::BadInput(format!("unknown switch {name:?}; the switches are {}", names.join(", "))));
    }
    let value = match (name, value.parse::<bool>()) {
        (_, Ok(flag)) => json!(flag),
        ("degraded", Err(_)) if value == "auto" => json!("auto"),
        ("degraded", Err(_)) => {
            return Err(CliError::BadInput(format!("switch degraded takes true, false or auto, not {value:?}")));
        }
        (_, Err(_)) => return Err(CliError::BadInput(format!("switch {name} takes true or false, not {value:?}"))),
    };
    let actor = context.options.actor()?;
    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    switches::set(&mut transaction, name, &value, &actor).await?;
    admin::record_action(&mut transaction, &actor, "switch.set", &json!({ "switch": name, "value": value })).await?;
    transaction.commit().await?;
    // Services also re-read the table on a timer: NATS is best effort here.
    let change = ControlChanged { switch: name.to_owned(), value: value.clone() };
    let payload = serde_json::to_vec(&change).expect("control.changed serialises");
    context.publish_core(Topology::control_changed, vec![payload], "services see the switch at their next read").await;
    writeln!(out, "{name} = {value}")?;
    Ok(())
}
