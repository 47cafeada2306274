//! `npcmem consolidate run JOB`: runs a maintenance job now, in this process, under the
//! same leader lock the consolidate service's scheduler takes (so it never overlaps a
//! scheduled run). `consolidate` queues the pairs on `P.job.consolidate`; the running
//! consolidate service's workers do them.

use anyhow::{Context as _, bail};
use npcmem_bus::Topology;
use npcmem_consolidate::{Job, JobContext};
use npcmem_service::CommonConfig;
use npcmem_store::{PgConnection, maintenance};
use sqlx::Connection;

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
    },
}

pub async fn run(common: &CommonConfig, command: ConsolidateCommand) -> anyhow::Result<()> {
    let ConsolidateCommand::Run { job, decay_batch_pages, slices } = command;
    let pool = npcmem_store::connect(&common.database_url, &common.pool_options())
        .await
        .context("cannot reach Postgres (NPCMEM_DATABASE_URL)")?;
    npcmem_store::migrate(&pool).await.context("cannot apply the migrations")?;
    let nats = async_nats::connect(common.nats_url.as_str()).await.ok();
    if nats.is_none() {
        eprintln!("npcmem: NATS at {} unreachable; caches will not be told (their TTL expires them)", common.nats_url);
    }
    let topology = Topology::new(&common.subject_prefix, &common.stream_prefix, common.topology_settings());
    let jobs = JobContext { pool, nats, topology, decay_batch_pages, slices };
    let mut lock = PgConnection::connect(&common.database_url).await?;
    if !maintenance::try_lock_job(&mut lock, job.as_str()).await? {
        bail!("{} is running on a consolidate replica right now; try again when it has finished", job.as_str());
    }
    let outcome = jobs.run(job, chrono::Utc::now()).await;
    let _ = maintenance::unlock_job(&mut lock, job.as_str()).await;
    let _ = lock.close().await;
    println!("{}", serde_json::to_string_pretty(&outcome?)?);
    Ok(())
}
