//! `npcmem consolidate run JOB`: runs a maintenance job now, in this process, under the
//! same leader lock the consolidate service's scheduler takes (so it never overlaps a
//! scheduled run). `consolidate` queues the pairs on `P.job.consolidate`; the running
//! consolidate service's workers do them.

use std::io::Write;

use npcmem_consolidate::{Job, JobContext};
use npcmem_store::{PgConnection, admin, maintenance};
use serde_json::json;
use sqlx::Connection;

use crate::error::CliError;
use crate::{Context, connect};

#[derive(Debug, clap::Subcommand)]
pub enum ConsolidateCommand {
    /// Run JOB (decay, consolidate or reinforce) now and print its outcome.
    Run {
        #[arg(value_enum)]
        job: Job,
        /// Heap pages one decay statement covers.
        #[arg(long, default_value_t = 2_000)]
        decay_batch_pages: i64,
        /// Slices of the NPC id space for the prune and reinforce passes.
        #[arg(long, default_value_t = 32)]
        slices: u32,
        /// Turns kept per pair for recall (decay blanks older transcripts).
        #[arg(long, env = "NPCMEM_RECALL_MAX_TURNS_PER_PAIR", default_value_t = 5_000)]
        recall_max_turns: i64,
    },
}

pub async fn run(context: &Context, command: ConsolidateCommand, out: &mut dyn Write) -> Result<(), CliError> {
    let ConsolidateCommand::Run { job, decay_batch_pages, slices, recall_max_turns } = command;
    let actor = context.options.actor()?;
    let timeout = context.options.connect_timeout();
    let pool = connect::postgres_with(&context.common, timeout, context.common.database_max_connections.max(2)).await?;
    let nats = match connect::nats(&context.common, timeout).await {
        Ok(client) => Some(client),
        Err(error) => {
            eprintln!("npcmem: warning: {error}; caches will not be told (their TTL expires them)");
            None
        }
    };
    let topology = connect::topology(&context.common);
    let jobs = JobContext { pool: pool.clone(), nats, topology, decay_batch_pages, slices, recall_max_turns };
    let mut lock = PgConnection::connect(&context.common.database_url).await?;
    if !maintenance::try_lock_job(&mut lock, job.as_str()).await? {
        return Err(CliError::Failed(format!(
            "{} is running on a consolidate replica right now; try again when it has finished",
            job.as_str()
        )));
    }
    let outcome = jobs.run(job, chrono::Utc::now()).await;
    let _ = maintenance::unlock_job(&mut lock, job.as_str()).await;
    let _ = lock.close().await;
    let outcome = outcome?;
    let mut connection = pool.acquire().await?;
    admin::record_action(
        &mut connection,
        &actor,
        "consolidate.run",
        &json!({ "job": job.as_str(), "outcome": outcome }),
    )
    .await?;
    let text = serde_json::to_string_pretty(&outcome).map_err(|error| CliError::failed("json", error))?;
    writeln!(out, "{text}")?;
    Ok(())
}
