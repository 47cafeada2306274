//! `npcmem audit`: flagged memories with the content filter's reasons, and `--review ID` to mark one reviewed.

use std::io::Write;

use npcmem_store::admin;
use npcmem_store::audit::{self, AuditRow, Review};
use serde_json::json;

use crate::Context;
use crate::error::CliError;
use crate::table::{Table, number, optional, time};

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Also list entries already reviewed.
    #[arg(long, conflicts_with = "review")]
    all: bool,
    /// Mark the audit entry with this id reviewed.
    #[arg(long, value_name = "ID")]
    review: Option<i64>,
    /// Who reviewed it (default: the actor).
    #[arg(long, value_name = "NAME", requires = "review")]
    reviewer: Option<String>,
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
    /// Print a JSON array instead of a table.
    #[arg(long, conflicts_with = "review")]
    json: bool,
}

pub async fn run(context: &Context, args: AuditArgs, out: &mut dyn Write) -> Result<(), CliError> {
    match args.review {
        Some(id) => review(context, id, args.reviewer, out).await,
        None => list(context, args.all, args.limit, args.json, out).await,
    }
}

async fn list(
    context: &Context,
    include_reviewed: bool,
    limit: i64,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    let entries = audit::entries(&mut connection, include_reviewed, limit).await?;
    if json {
        let document = serde_json::to_string_pretty(&entries).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{document}")?;
        return Ok(());
    }
    if entries.is_empty() {
        let what = if include_reviewed { "no flagged memories" } else { "no flagged memories awaiting review" };
        writeln!(out, "{what}")?;
        return Ok(());
    }
    let mut table = Table::new(&[
        "id",
        "flagged",
        "flag",
        "npc",
        "player",
        "memory",
        "importance",
        "reasons",
        "reviewed",
        "content",
    ]);
    for entry in &entries {
        table.row(vec![
            entry.id.to_string(),
            time(entry.flagged_at),
            entry.safety_flag.clone(),
            entry.npc_id.to_string(),
            optional(entry.player_id),
            format!("{}{}", entry.memory_id, if entry.memory_exists { "" } else { " (gone)" }),
            number(entry.original_importance),
            entry.reasons.join(", "),
            reviewed(entry),
            entry.content.clone(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

fn reviewed(entry: &AuditRow) -> String {
    match (&entry.reviewed_by, entry.reviewed_at) {
        (Some(by), Some(at)) => format!("{by} {}", time(at)),
        (None, Some(at)) => time(at),
        _ => "-".into(),
    }
}

async fn review(context: &Context, id: i64, reviewer: Option<String>, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let reviewer = match reviewer.map(|name| name.trim().to_string()) {
        Some(name) if name.is_empty() || name.chars().count() > 200 => {
            return Err(CliError::BadInput("--reviewer must be 1 to 200 characters".into()));
        }
        Some(name) => name,
        None => actor.clone(),
    };
    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    match audit::mark_reviewed(&mut transaction, id, &reviewer, chrono::Utc::now()).await? {
        Review::NotFound => Err(CliError::NotFound(format!("no audit entry with id {id}"))),
        Review::AlreadyReviewed(entry) => {
            transaction.rollback().await?;
            writeln!(out, "audit entry {id} was already reviewed ({}); nothing changed", reviewed(&entry))?;
            Ok(())
        }
        Review::Marked(entry) => {
            let details = json!({ "audit_id": id, "memory_id": entry.memory_id, "reviewer": reviewer });
            admin::record_action(&mut transaction, &actor, "audit.review", &details).await?;
            transaction.commit().await?;
            writeln!(out, "audit entry {id} (memory {}) marked reviewed by {reviewer}", entry.memory_id)?;
            Ok(())
        }
    }
}
