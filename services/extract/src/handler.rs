//! The `job.extract` batch handler.

use std::collections::BTreeSet;

use chrono::Utc;
use npcmem_bus::{BatchHandler, Delivery, Disposition, Topology};
use npcmem_core::extraction::ExtractedMemory;
use npcmem_core::extraction::rules::RulesExtractor;
use npcmem_core::extraction::safety::{SafetyContext, SafetyFilter};
use npcmem_core::memory::{MemoryType, SafetyFlag, SalienceInputs, compute_salience, round3};
use npcmem_core::validate::decode_message;
use npcmem_core::wire::{
    CacheInvalidate, ConversationEnded, ExtractJob, ExtractorKind, MemoryStored, NpcInfo, PlayerInfo, SCHEMA_VERSION,
    StoredMemory, TranscriptMessage,
};
use npcmem_store::conversations::{self, ClaimedConversation};
use npcmem_store::memories::{self, AuditEntry, NewMemory};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::{PgPool, StoreError, locks};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::metrics::ExtractMetrics;

/// Jobs are tiny; anything larger is not a job.
const MAX_JOB_BYTES: usize = 4 * 1024;

pub struct ExtractHandler {
    pool: PgPool,
    nats: async_nats::Client,
    topology: Topology,
    metrics: ExtractMetrics,
}

/// One conversation's extraction result, ready to store.
struct Extraction {
    claim: ClaimedConversation,
    extractor: ExtractorKind,
    memories: Vec<Reviewed>,
}

struct Reviewed {
    id: Uuid,
    memory: ExtractedMemory,
    flag: SafetyFlag,
    reasons: Vec<String>,
    original_importance: f64,
}

impl ExtractHandler {
    pub fn new(pool: PgPool, nats: async_nats::Client, topology: Topology, metrics: ExtractMetrics) -> Self {
        Self { pool, nats, topology, metrics }
    }

    async fn claim(&self, conversation_ids: &[Uuid]) -> Result<Vec<ClaimedConversation>, StoreError> {
        let mut connection = self.pool.acquire().await?;
        conversations::claim_for_extraction(&mut connection, conversation_ids).await
    }

    /// Stores every extraction whose claim still holds, in one transaction; returns the
    /// pairs touched so their caches can be invalidated.
    async fn store(&self, extractions: &[Extraction]) -> Result<Vec<(Uuid, Uuid)>, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let claims: Vec<(Uuid, i32, &str)> =
            extractions.iter().map(|e| (e.claim.conversation_id, e.claim.attempts, e.extractor.as_str())).collect();
        let completed: BTreeSet<Uuid> =
            conversations::complete_extraction(&mut transaction, &claims).await?.into_iter().collect();
        let owned: Vec<&Extraction> =
            extractions.iter().filter(|e| completed.contains(&e.claim.conversation_id)).collect();
        let pairs: Vec<(Uuid, Uuid)> = owned.iter().map(|e| (e.claim.npc_id, e.claim.player_id)).collect();
        locks::lock_pairs(&mut transaction, locks::PairScope::Memories, &pairs).await?;

        let now = Utc::now();
        let mut rows = Vec::new();
        let mut audit = Vec::new();
        let mut events = Vec::with_capacity(owned.len());
        let mut touched_types: BTreeSet<(Uuid, Uuid, MemoryType)> = BTreeSet::new();
        for extraction in &owned {
            let claim = &extraction.claim;
            for reviewed in &extraction.memories {
                let memory = &reviewed.memory;
                rows.push(NewMemory {
                    id: reviewed.id,
                    npc_id: claim.npc_id,
                    player_id: claim.player_id,
                    memory_type: memory.memory_type,
                    content: memory.content.clone(),
                    tags: memory.tags.clone(),
                    importance: memory.importance,
                    confidence: memory.confidence,
                    salience: round3(compute_salience(
                        &SalienceInputs {
                            importance: memory.importance,
                            last_accessed: now,
                            access_count: 0,
                            locked: false,
                            emotional_intensity: memory.emotional_intensity,
                        },
                        now,
                    )),
                    location: claim.location.clone(),
                    emotional_valence: memory.emotional_valence.as_str(),
                    emotional_intensity: memory.emotional_intensity,
                    safety_flag: reviewed.flag.as_str(),
                    source_conversation_id: Some(claim.conversation_id),
                    extractor: extraction.extractor.as_str(),
                    created_at: now,
                });
                touched_types.insert((claim.npc_id, claim.player_id, memory.memory_type));
                if reviewed.flag != SafetyFlag::Clean {
                    audit.push(AuditEntry {
                        memory_id: reviewed.id,
                        npc_id: claim.npc_id,
                        player_id: claim.player_id,
                        conversation_id: claim.conversation_id,
                        content: memory.content.clone(),
                        reasons: reviewed.reasons.clone(),
                        safety_flag: reviewed.flag.as_str(),
                        original_importance: reviewed.original_importance,
                    });
                }
            }
            events.push(memory_stored_event(&self.topology, extraction));
        }
        memories::insert_batch(&mut transaction, &rows).await?;
        let mut evicted = 0;
        for memory_type in MemoryType::ALL {
            let touched: Vec<(Uuid, Uuid)> = touched_types
                .iter()
                .filter(|(_, _, kind)| *kind == memory_type)
                .map(|(npc_id, player_id, _)| (*npc_id, *player_id))
                .collect();
            evicted += memories::enforce_caps(&mut transaction, &touched, memory_type).await?;
        }
        memories::record_audit(&mut transaction, &audit).await?;
        outbox::enqueue(&mut transaction, &events).await?;
        transaction.commit().await?;

        self.metrics.evicted(evicted);
        for row in &rows {
            self.metrics.stored(row.memory_type.as_str());
        }
        for entry in &audit {
            self.metrics.safety_flag(entry.safety_flag);
        }
        for extraction in &owned {
            self.metrics.extraction("success", extraction.extractor.as_str());
        }
        Ok(pairs)
    }

    /// DESIGN §3: `cache.invalidate` is core NATS, best effort after the commit (the
    /// enricher's cache TTL is the safety net).
    async fn invalidate_caches(&self, pairs: &[(Uuid, Uuid)]) {
        let subject = self.topology.cache_invalidate();
        let unique: BTreeSet<&(Uuid, Uuid)> = pairs.iter().collect();
        for (npc_id, player_id) in unique {
            let message = CacheInvalidate { npc_id: Some(*npc_id), player_id: Some(*player_id) };
            let payload = serde_json::to_vec(&message).expect("cache.invalidate always serialises");
            if let Err(error) = self.nats.publish(subject.clone(), payload.into()).await {
                debug!(%error, "cache.invalidate publish failed; the cache TTL will expire the entry");
            }
        }
    }
}

impl BatchHandler for ExtractHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        let mut dispositions = Vec::with_capacity(batch.len());
        let mut conversation_ids = Vec::with_capacity(batch.len());
        for delivery in batch {
            match decode_message::<ExtractJob>(delivery.payload(), MAX_JOB_BYTES) {
                Ok(job) => {
                    conversation_ids.push(job.conversation_id);
                    dispositions.push(Disposition::Done);
                }
                Err(error) => dispositions.push(error.into()),
            }
        }
        conversation_ids.sort_unstable();
        conversation_ids.dedup();
        if conversation_ids.is_empty() {
            return dispositions;
        }
        let retry_all = |dispositions: &mut Vec<Disposition>, reason: String| {
            for disposition in dispositions.iter_mut().filter(|d| matches!(d, Disposition::Done)) {
                *disposition = Disposition::Retry(reason.clone());
            }
        };
        // Complete, skipped and forgotten conversations are not claimed: their jobs are
        // simply acknowledged (a redelivered job does no work and writes nothing).
        let claims = match self.claim(&conversation_ids).await {
            Ok(claims) => claims,
            Err(error) => {
                warn!(%error, "claiming conversations failed, will retry");
                retry_all(&mut dispositions, error.to_string());
                return dispositions;
            }
        };
        debug!(jobs = conversation_ids.len(), claimed = claims.len(), "claimed conversations");
        let extractions =
            match tokio::task::spawn_blocking(move || claims.into_iter().map(extract_rules).collect()).await {
                Ok(extractions) => extractions,
                Err(error) => {
                    warn!(%error, "extraction task failed, will retry");
                    retry_all(&mut dispositions, error.to_string());
                    return dispositions;
                }
            };
        let extractions: Vec<Extraction> = extractions;
        match self.store(&extractions).await {
            Ok(pairs) => self.invalidate_caches(&pairs).await,
            Err(error) => {
                warn!(%error, "storing memories failed, will retry");
                retry_all(&mut dispositions, error.to_string());
            }
        }
        dispositions
    }
}

/// Rebuilds the conversation from its ledger row for the extractors.
fn conversation_of(claim: &ClaimedConversation) -> ConversationEnded {
    // The ledger only ever holds transcripts ingest validated and wrote; a row that no
    // longer parses (edited by hand) is treated as empty rather than failing forever.
    let messages: Vec<TranscriptMessage> = serde_json::from_value(claim.transcript.clone()).unwrap_or_default();
    ConversationEnded {
        schema_version: SCHEMA_VERSION,
        conversation_id: claim.conversation_id,
        npc_id: claim.npc_id,
        player_id: claim.player_id,
        npc: NpcInfo {
            name: claim.npc_name.clone(),
            role: claim.npc_role.clone(),
            factions: claim.npc_factions.clone(),
        },
        player: PlayerInfo { name: claim.player_name.clone(), factions: claim.player_factions.clone() },
        location: claim.location.clone(),
        started_at: claim.started_at,
        ended_at: claim.ended_at,
        messages,
    }
}

/// The rules extractor followed by the safety filter (seed §Defense-in-Depth): every
/// memory comes from a player conversation, so all are player-sourced.
fn extract_rules(claim: ClaimedConversation) -> Extraction {
    let conversation = conversation_of(&claim);
    let context = SafetyContext {
        player_name: claim.player_name.clone(),
        npc_name: claim.npc_name.clone(),
        player_sourced: true,
    };
    let memories = RulesExtractor::shared()
        .extract(&conversation)
        .into_iter()
        .map(|memory| {
            let original_importance = memory.importance;
            let outcome = SafetyFilter::shared().review(memory, &context);
            Reviewed {
                id: Uuid::new_v4(),
                memory: outcome.memory,
                flag: outcome.flag,
                reasons: outcome.reasons,
                original_importance,
            }
        })
        .collect();
    Extraction { claim, extractor: ExtractorKind::Rules, memories }
}

/// `event.memory.stored` (DESIGN §3), `Nats-Msg-Id` = event_id.
fn memory_stored_event(topology: &Topology, extraction: &Extraction) -> OutboxMessage {
    let claim = &extraction.claim;
    let event = MemoryStored {
        schema_version: SCHEMA_VERSION,
        event_id: Uuid::new_v4(),
        conversation_id: claim.conversation_id,
        npc_id: claim.npc_id,
        player_id: claim.player_id,
        npc_factions: claim.npc_factions.clone(),
        player_factions: claim.player_factions.clone(),
        extractor: extraction.extractor,
        ended_at: claim.ended_at,
        memories: extraction
            .memories
            .iter()
            .map(|reviewed| StoredMemory {
                id: reviewed.id,
                memory_type: reviewed.memory.memory_type,
                content: reviewed.memory.content.clone(),
                tags: reviewed.memory.tags.clone(),
                importance: reviewed.memory.importance,
                confidence: reviewed.memory.confidence,
                emotional_valence: reviewed.memory.emotional_valence,
                emotional_intensity: reviewed.memory.emotional_intensity,
                safety_flag: reviewed.flag,
            })
            .collect(),
    };
    OutboxMessage {
        subject: topology.event("memory.stored"),
        msg_id: Some(event.event_id.to_string()),
        payload: serde_json::to_vec(&event).expect("events always serialise"),
        headers: Default::default(),
    }
}
