//! Player privacy: `opt-out` / `opt-in` (ingest stops or resumes
//! recording a player's conversations) and `forget-player` (the right to be forgotten:
//! every row about the player goes, ledger rows stay as tombstones).

use std::io::Write;

use chrono::Utc;
use npcmem_core::wire::CacheInvalidate;
use npcmem_store::{admin, privacy};
use serde_json::json;
use uuid::Uuid;

use crate::error::CliError;
use crate::{Context, stream_erase};

#[derive(Debug, clap::Args)]
pub struct ForgetArgs {
    /// The player's id.
    pub player_id: Uuid,
    /// Confirm: this cannot be undone.
    #[arg(long)]
    pub yes: bool,
}

/// Records the player's choice as of now; a `world.player_privacy` message stamped later
/// overrides it (latest wins, as for the game's own messages).
pub async fn set_opt_out(
    context: &Context,
    player_id: Uuid,
    opted_out: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    let changed = privacy::set_allow_memory(&mut transaction, player_id, !opted_out, Utc::now()).await?;
    let action = if opted_out { "opt-out" } else { "opt-in" };
    admin::record_action(&mut transaction, &actor, action, &json!({ "player_id": player_id })).await?;
    transaction.commit().await?;
    if !changed {
        return Err(CliError::Failed(format!(
            "player {player_id}: a newer privacy setting is already recorded; nothing changed"
        )));
    }
    if opted_out {
        writeln!(out, "player {player_id} opted out: ingest no longer records their conversations")?;
    } else {
        writeln!(out, "player {player_id} opted in: ingest records their conversations again")?;
    }
    Ok(())
}

/// Forgets a player: one transaction removes every row about them (see
/// `privacy::forget_player`), then every message of this world's streams that names them
/// is erased (see `stream_erase`) and the enrichers drop their cached pairs. Prints what
/// went, per table and per stream.
pub async fn forget(context: &Context, args: ForgetArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if !args.yes {
        return Err(CliError::BadInput(format!(
            "forget-player removes everything about player {} for good; run it again with --yes",
            args.player_id
        )));
    }
    let actor = context.options.actor()?;
    let pool = context.postgres().await?;
    // NATS first: a forget that cannot reach the streams should not half-happen.
    let bus = context.bus().await?;
    let mut transaction = pool.begin().await?;
    let report = privacy::forget_player(&mut transaction, args.player_id, Utc::now()).await?;
    let removed: serde_json::Map<String, serde_json::Value> =
        report.iter().map(|(table, rows)| (table.to_string(), json!(rows))).collect();
    // The log says a player was forgotten and how much went, not who.
    admin::record_action(&mut transaction, &actor, "forget-player", &json!({ "removed": removed })).await?;
    transaction.commit().await?;
    let erased = stream_erase::erase_player(&bus, args.player_id).await?;
    context.invalidate_caches(&[CacheInvalidate { npc_id: None, player_id: Some(args.player_id) }]).await;
    writeln!(out, "forgot player {}", args.player_id)?;
    let mut table = crate::table::Table::new(&["table", "rows"]);
    for (name, rows) in &report {
        table.row(vec![name.to_string(), rows.to_string()]);
    }
    table.write(out)?;
    let mut streams = crate::table::Table::new(&["stream", "messages read", "erased"]);
    for stream in &erased {
        streams.row(vec![stream.stream.clone(), stream.scanned.to_string(), stream.erased.to_string()]);
    }
    streams.write(out)?;
    writeln!(
        out,
        "conversations older than now from this player are refused from here on; their ledger rows stay as tombstones"
    )?;
    Ok(())
}
