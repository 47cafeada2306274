//! The `job.consolidate` worker: one pair at a time, its clusters of old episodic
//! memories summarised (by the LLM within the shared consolidation rate, else by the
//! rules summariser) before a transaction that stores each semantic memory and deletes
//! its unlocked sources together — an LLM failing half-way leaves nothing half-written.

use std::collections::BTreeSet;

use chrono::{TimeDelta, Utc};
use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Outcome, run_batch};
use npcmem_core::consolidation::{
    CONSOLIDATION_MAX_OUTPUT_TOKENS, CONSOLIDATION_TEMPERATURE, Cluster, MIN_AGE_DAYS, Summary, clusters,
    consolidation_messages, parse_summary, summarise_with_rules,
};
use npcmem_core::memory::MemoryType;
use npcmem_core::validate::{ValidationError, decode_message};
use npcmem_core::wire::{CacheInvalidate, ConsolidateJob};
use npcmem_llm::{CircuitBreaker, CompletionOptions, LlmClient, LlmError, LlmProvider};
use npcmem_store::{StoreError, budgets, locks, maintenance, memories};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::jobs::JobContext;

const MAX_JOB_BYTES: usize = 4 * 1024;

/// The configured model and its breaker.
pub struct Summariser {
    pub client: LlmClient,
    pub breaker: CircuitBreaker,
    /// LLM consolidations per minute, shared by every replica.
    pub per_minute: i64,
}

pub struct ConsolidateWorker {
    jobs: JobContext,
    llm: Option<Summariser>,
}

impl ConsolidateWorker {
    pub fn new(jobs: JobContext, llm: Option<Summariser>) -> Self {
        Self { jobs, llm }
    }

    /// Consolidates one pair; returns the semantic memories created.
    pub async fn consolidate_pair(&self, npc_id: Uuid, player_id: Uuid) -> Result<usize, StoreError> {
        let now = Utc::now();
        let cutoff = now - TimeDelta::days(MIN_AGE_DAYS);
        let episodes = {
            let mut connection = self.jobs.pool.acquire().await?;
            maintenance::old_episodes(&mut connection, npc_id, player_id, cutoff).await?
        };
        let found = clusters(&episodes);
        if found.is_empty() {
            return Ok(0);
        }
        let mut summaries = Vec::with_capacity(found.len());
        for cluster in &found {
            summaries.push(self.summarise(cluster).await?);
        }
        let mut transaction = self.jobs.pool.begin().await?;
        locks::lock_pairs(&mut transaction, locks::PairScope::Memories, &[(npc_id, player_id)]).await?;
        let present: BTreeSet<Uuid> = maintenance::old_episodes(&mut transaction, npc_id, player_id, cutoff)
            .await?
            .into_iter()
            .map(|episode| episode.id)
            .collect();
        let mut created = 0;
        for (cluster, (summary, extractor)) in found.iter().zip(&summaries) {
            // Another worker (or an eviction) got here first: leave the cluster alone.
            if !cluster.episodes.iter().all(|episode| present.contains(&episode.id)) {
                continue;
            }
            maintenance::store_consolidation(
                &mut transaction,
                npc_id,
                player_id,
                summary,
                &cluster.episodes,
                extractor,
                now,
            )
            .await?;
            created += 1;
        }
        memories::enforce_caps(&mut transaction, &[(npc_id, player_id)], MemoryType::Semantic).await?;
        transaction.commit().await?;
        if created > 0 {
            self.jobs.invalidate(&[CacheInvalidate { npc_id: Some(npc_id), player_id: Some(player_id) }]).await;
        }
        Ok(created)
    }

    /// The LLM's summary when a model is configured, the rate grants a call and the
    /// breaker lets it through and the reply is usable; the rules summary otherwise.
    async fn summarise(&self, cluster: &Cluster) -> Result<(Summary, &'static str), StoreError> {
        let Some(llm) = &self.llm else { return Ok((summarise_with_rules(cluster), "consolidation:rules")) };
        let granted = {
            let mut connection = self.jobs.pool.acquire().await?;
            budgets::grant_requests(&mut connection, budgets::CONSOLIDATION_RATE, Utc::now(), 1, llm.per_minute).await?
        };
        if granted == 0 {
            debug!(tag = %cluster.tag, "consolidation rate reached, summarising with rules");
            return Ok((summarise_with_rules(cluster), "consolidation:rules"));
        }
        let options = CompletionOptions {
            temperature: CONSOLIDATION_TEMPERATURE,
            max_tokens: CONSOLIDATION_MAX_OUTPUT_TOKENS,
            json_mode: false,
        };
        let messages = consolidation_messages(cluster);
        let reply = llm
            .breaker
            .call(|| async {
                let completion = llm.client.complete(&messages, &options).await?;
                parse_summary(&completion.content, cluster)
                    .ok_or_else(|| LlmError::InvalidResponse("no usable consolidation summary".into()))
            })
            .await;
        match reply {
            Ok(summary) => Ok((summary, "consolidation:llm")),
            Err(error) => {
                warn!(%error, tag = %cluster.tag, "llm consolidation failed, summarising with rules");
                Ok((summarise_with_rules(cluster), "consolidation:rules"))
            }
        }
    }
}

impl BatchWork for ConsolidateWorker {
    type Item = (Uuid, Uuid);
    /// One pair asked twice in a batch is consolidated once.
    type Key = (Uuid, Uuid);

    fn decode(&self, delivery: &Delivery) -> Result<(Uuid, Uuid), ValidationError> {
        decode_message::<ConsolidateJob>(delivery.payload(), MAX_JOB_BYTES).map(|job| (job.npc_id, job.player_id))
    }

    fn key(&self, pair: &(Uuid, Uuid)) -> Option<(Uuid, Uuid)> {
        Some(*pair)
    }

    /// Each pair commits on its own, so one failing pair fails alone.
    async fn process(&self, pairs: &[(Uuid, Uuid)], _batch: &[Delivery]) -> Result<Outcome, Failure> {
        let mut outcome = Outcome::done();
        for (index, (npc_id, player_id)) in pairs.iter().enumerate() {
            if let Err(error) = self.consolidate_pair(*npc_id, *player_id).await {
                let failure = Failure::from(error);
                warn!(%failure, %npc_id, %player_id, "consolidating a pair failed");
                outcome.fail(index, failure);
            }
        }
        Ok(outcome)
    }
}

impl BatchHandler for ConsolidateWorker {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}
