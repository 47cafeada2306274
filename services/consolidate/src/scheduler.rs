//! Runs each job once per schedule tick across all replicas: whoever takes the job's
//! advisory lock (a session lock on a connection of its own, so a dead leader's lock is
//! released with its connection) checks the tick's row in `job_runs`, runs the job if the
//! tick is still owed and records it finished. The others find the lock taken or the tick
//! done and stay idle; if the leader dies mid-run, the next poll of another replica runs
//! the tick again.

use std::time::Duration;

use chrono::Utc;
use npcmem_core::consolidation::Schedule;
use npcmem_store::{PgConnection, StoreError, maintenance, switches};
use sqlx::Connection;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::jobs::{Job, JobContext};

pub struct Scheduler {
    pub jobs: JobContext,
    pub database_url: String,
    pub schedules: Vec<(Job, Schedule)>,
    pub poll: Duration,
    /// Recorded in `job_runs.runner`.
    pub runner: String,
}

impl Scheduler {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            // `consolidation_enabled` off or degraded mode pauses scheduled jobs (a tick owed
            // when they run again still runs); `npcmem consolidate run` is not paused.
            let paused = match self.enabled().await {
                Ok(enabled) => !enabled,
                Err(error) => {
                    warn!(%error, "cannot read the runtime switches; scheduled jobs wait for the next poll");
                    true
                }
            };
            let due = if paused { &[][..] } else { &self.schedules[..] };
            for (job, schedule) in due {
                if *shutdown.borrow() {
                    return;
                }
                let tick = schedule.latest_tick(Utc::now());
                if let Err(error) = self.run_if_due(*job, tick).await {
                    warn!(job = job.as_str(), %error, "scheduled job failed; the next poll tries again");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    async fn enabled(&self) -> Result<bool, StoreError> {
        let mut connection = self.jobs.pool.acquire().await?;
        Ok(switches::read(&mut connection).await?.consolidation_runs())
    }

    /// Runs `job` for `tick` unless another replica holds it or the tick is done; true
    /// when this replica ran it.
    pub async fn run_if_due(&self, job: Job, tick: chrono::DateTime<Utc>) -> Result<bool, StoreError> {
        let mut connection = PgConnection::connect(&self.database_url).await?;
        if !maintenance::try_lock_job(&mut connection, job.as_str()).await? {
            return Ok(false);
        }
        let ran = async {
            if maintenance::tick_finished(&mut connection, job.as_str(), tick).await? {
                return Ok(false);
            }
            maintenance::start_tick(&mut connection, job.as_str(), tick, &self.runner).await?;
            info!(job = job.as_str(), %tick, runner = %self.runner, "running scheduled job");
            let outcome = self.jobs.run(job, Utc::now()).await?;
            maintenance::finish_tick(&mut connection, job.as_str(), tick, &outcome).await?;
            Ok::<_, StoreError>(true)
        }
        .await;
        // Closing the session releases the lock even if unlocking fails.
        let _ = maintenance::unlock_job(&mut connection, job.as_str()).await;
        let _ = connection.close().await;
        ran
    }
}
