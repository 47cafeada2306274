//! `npcmem stats`: what is stored, how conversations fared, LLM vs rules extractions,
//! LLM tokens per day, and the DLQ depth. Postgres numbers are printed even when NATS is
//! down; the command then exits 4 so scripts know the DLQ line is missing.

use std::io::Write;

use chrono::{Days, Utc};
use npcmem_store::stats::{self, Count, StoreStats};
use serde::Serialize;

use crate::Context;
use crate::dlq::{self, Depth};
use crate::error::CliError;
use crate::table::Table;

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Days of token spend to show, today included.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=366))]
    days: u64,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Stats {
    #[serde(flatten)]
    store: StoreStats,
    dlq: Option<Depth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dlq_error: Option<String>,
}

pub async fn run(context: &Context, args: StatsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    let since = Utc::now().date_naive().checked_sub_days(Days::new(args.days - 1)).unwrap_or_default();
    let store = stats::collect(&mut connection, since).await?;
    let (dlq, dlq_error) = match context.bus().await {
        Ok(bus) => match dlq::depth(&bus).await {
            Ok(depth) => (Some(depth), None),
            Err(error) => (None, Some(error)),
        },
        Err(error) => (None, Some(error)),
    };
    let stats = Stats { store, dlq, dlq_error: dlq_error.as_ref().map(ToString::to_string) };
    if args.json {
        let document = serde_json::to_string_pretty(&stats).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{document}")?;
    } else {
        write_text(&stats, args.days, out)?;
    }
    match dlq_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn total(counts: &[Count]) -> i64 {
    counts.iter().map(|count| count.count).sum()
}

fn write_counts(out: &mut dyn Write, title: &str, counts: &[Count], unit: &str) -> std::io::Result<()> {
    let heading = format!("{title}: {} {unit}", total(counts));
    writeln!(out, "{}", heading.trim_end())?;
    let width = counts.iter().map(|count| count.key.chars().count()).max().unwrap_or(0);
    for count in counts {
        writeln!(out, "  {:<width$}  {}", count.key, count.count)?;
    }
    Ok(())
}

fn write_text(stats: &Stats, days: u64, out: &mut dyn Write) -> std::io::Result<()> {
    let store = &stats.store;
    write_counts(out, "memories", &store.memories_by_type, "")?;
    writeln!(out, "  of which locked: {}", store.locked_memories)?;
    let flagged: Vec<Count> =
        store.memories_by_safety_flag.iter().filter(|count| count.key != "clean").cloned().collect();
    for count in &flagged {
        writeln!(out, "  of which {}: {}", count.key, count.count)?;
    }
    writeln!(out, "relationships: {}", store.relationships)?;
    writeln!(out, "knowledge facts: {}", store.knowledge_facts)?;
    write_counts(out, "conversations", &store.conversations_by_state, "")?;
    write_counts(out, "extractions", &store.extractions_by_extractor, "completed")?;
    writeln!(out, "audit entries awaiting review: {}", store.unreviewed_audit_entries)?;
    writeln!(out)?;
    writeln!(out, "LLM tokens per day (last {days} days, UTC)")?;
    if store.tokens_by_day.is_empty() {
        writeln!(out, "  none spent")?;
    } else {
        let mut table = Table::new(&["day", "tokens", "calls", "npcs"]);
        for day in &store.tokens_by_day {
            table.row(vec![day.day.to_string(), day.spent.to_string(), day.calls.to_string(), day.npcs.to_string()]);
        }
        table.write(out)?;
    }
    writeln!(out)?;
    match (&stats.dlq, &stats.dlq_error) {
        (Some(depth), _) if !depth.stream_exists => {
            writeln!(out, "dead letters: 0 (stream {} not created yet; no service has started)", depth.stream)?;
        }
        (Some(depth), _) => {
            writeln!(out, "dead letters: {} ({} bytes in {})", depth.messages, depth.bytes, depth.stream)?;
            for (consumer, count) in &depth.by_consumer {
                writeln!(out, "  {consumer}  {count}")?;
            }
        }
        (None, Some(error)) => writeln!(out, "dead letters: unknown ({error})")?,
        (None, None) => writeln!(out, "dead letters: unknown")?,
    }
    Ok(())
}
