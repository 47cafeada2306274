//! The maintenance jobs. Each is safe to run again: decay recomputes and prunes to the
//! caps, the consolidation plan only queues pairs that still have clusters, and
//! reinforcement counts only conversations it has not counted before.

use std::collections::BTreeSet;
use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};
use npcmem_bus::Topology;
use npcmem_core::consolidation::{MIN_AGE_DAYS, MIN_CLUSTER_SIZE, MIN_PATTERN_CONVERSATIONS};
use npcmem_core::memory::MemoryType;
use npcmem_core::wire::{CacheInvalidate, ConsolidateJob, SCHEMA_VERSION};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::{PgPool, StoreError, maintenance, memories};
use serde_json::json;
use tracing::info;
use uuid::Uuid;

/// The jobs `npcmem consolidate run JOB` and the scheduler know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Job {
    /// Recompute salience of every unlocked memory, prune beyond the per-pair caps.
    Decay,
    /// Queue every pair with a consolidation cluster on `P.job.consolidate`.
    Consolidate,
    /// Create or reinforce procedural memories of recurring tag patterns.
    Reinforce,
}

impl Job {
    pub const ALL: [Job; 3] = [Job::Decay, Job::Consolidate, Job::Reinforce];

    pub fn as_str(&self) -> &'static str {
        match self {
            Job::Decay => "decay",
            Job::Consolidate => "consolidate",
            Job::Reinforce => "reinforce",
        }
    }
}

/// What the jobs run on.
#[derive(Clone)]
pub struct JobContext {
    pub pool: PgPool,
    /// Where `cache.invalidate` goes after a commit; None: nobody to tell (tests, bench).
    pub nats: Option<async_nats::Client>,
    pub topology: Topology,
    pub decay_batch_pages: i64,
    pub slices: u32,
    /// Turns kept per pair for recall; older transcripts are blanked.
    pub recall_max_turns: i64,
}

impl JobContext {
    pub async fn run(&self, job: Job, now: DateTime<Utc>) -> Result<serde_json::Value, StoreError> {
        let started = Instant::now();
        let mut outcome = match job {
            Job::Decay => self.decay(now).await?,
            Job::Consolidate => self.plan_consolidation(now).await?,
            Job::Reinforce => self.reinforce(now).await?,
        };
        outcome["seconds"] = json!(started.elapsed().as_secs_f64());
        info!(job = job.as_str(), %outcome, "job finished");
        Ok(outcome)
    }

    /// Decay: the caps per type and NPC-id slice, then the
    /// salience at `now` of every unlocked memory left, a slice of heap pages per statement;
    /// then the recall cap on each pair's transcripts.
    pub async fn decay(&self, now: DateTime<Utc>) -> Result<serde_json::Value, StoreError> {
        let mut connection = self.pool.acquire().await?;
        // Prune first (episodic by the salience at `now`), so the rescoring pass does not
        // rewrite the rows about to go.
        let mut pruned = 0;
        for memory_type in MemoryType::ALL {
            for (low, high) in maintenance::uuid_slices(self.slices) {
                pruned += maintenance::prune_slice(&mut connection, memory_type, low, high, now).await?;
            }
        }
        let pages = maintenance::memory_pages(&mut connection).await?;
        let mut rescored = 0;
        let mut first = 0;
        while first < pages {
            let end = first + self.decay_batch_pages;
            rescored += maintenance::decay_pages(&mut connection, now, first, end).await?;
            first = end;
        }
        let turns_evicted = npcmem_store::recall::evict_beyond_cap(&mut connection, self.recall_max_turns).await?;
        drop(connection);
        // Nearly every pair changed: one message tells every enricher to drop everything.
        self.invalidate(&[CacheInvalidate { npc_id: None, player_id: None }]).await;
        Ok(json!({"rescored": rescored, "pruned": pruned, "pages": pages, "transcripts_evicted": turns_evicted}))
    }

    /// Fans the consolidation backlog out: one `job.consolidate` per pair with a cluster,
    /// through the outbox, so every replica's worker shares it.
    pub async fn plan_consolidation(&self, now: DateTime<Utc>) -> Result<serde_json::Value, StoreError> {
        let cutoff = now - TimeDelta::days(MIN_AGE_DAYS);
        let mut connection = self.pool.acquire().await?;
        let pairs = maintenance::consolidation_candidates(&mut connection, cutoff, MIN_CLUSTER_SIZE as i64).await?;
        drop(connection);
        for chunk in pairs.chunks(1_000) {
            let messages: Vec<OutboxMessage> = chunk
                .iter()
                .map(|(npc_id, player_id)| {
                    let job = ConsolidateJob { schema_version: SCHEMA_VERSION, npc_id: *npc_id, player_id: *player_id };
                    OutboxMessage {
                        subject: self.topology.job_consolidate(),
                        // One job per pair and run; a replayed plan within the dedup window adds none.
                        msg_id: Some(format!("consolidate-{npc_id}-{player_id}-{}", now.timestamp())),
                        payload: serde_json::to_vec(&job).expect("jobs always serialise"),
                        headers: Default::default(),
                    }
                })
                .collect();
            let mut transaction = self.pool.begin().await?;
            outbox::enqueue(&mut transaction, &messages).await?;
            transaction.commit().await?;
        }
        Ok(json!({"pairs_queued": pairs.len()}))
    }

    /// Procedural reinforcement: a tag pattern seen in ≥ 3 conversations of a pair becomes
    /// (or strengthens) a procedural memory; caps hold afterwards.
    pub async fn reinforce(&self, now: DateTime<Utc>) -> Result<serde_json::Value, StoreError> {
        let mut reinforced = 0;
        let mut touched: BTreeSet<(Uuid, Uuid)> = BTreeSet::new();
        for (low, high) in maintenance::uuid_slices(self.slices) {
            let mut transaction = self.pool.begin().await?;
            let patterns =
                maintenance::recurring_patterns(&mut transaction, low, high, MIN_PATTERN_CONVERSATIONS as i64).await?;
            let mut slice_pairs = BTreeSet::new();
            for pattern in &patterns {
                if maintenance::reinforce(&mut transaction, pattern, now).await? {
                    reinforced += 1;
                    slice_pairs.insert((pattern.npc_id, pattern.player_id));
                }
            }
            let pairs: Vec<(Uuid, Uuid)> = slice_pairs.iter().copied().collect();
            memories::enforce_caps(&mut transaction, &pairs, MemoryType::Procedural).await?;
            transaction.commit().await?;
            touched.extend(slice_pairs);
        }
        let messages: Vec<CacheInvalidate> = touched
            .iter()
            .map(|(npc_id, player_id)| CacheInvalidate { npc_id: Some(*npc_id), player_id: Some(*player_id) })
            .collect();
        self.invalidate(&messages).await;
        Ok(json!({"reinforced": reinforced, "pairs": touched.len()}))
    }

    pub async fn invalidate(&self, messages: &[CacheInvalidate]) {
        if let Some(nats) = &self.nats {
            npcmem_bus::publish::invalidate_caches(nats, &self.topology, messages).await;
        }
    }
}
