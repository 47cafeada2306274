//! The `job.extract` batch handler.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{NaiveDate, Utc};
use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Outcome, Topology, publish, run_batch};
use npcmem_core::extraction::ExtractedMemory;
use npcmem_core::extraction::candidate::Party;
use npcmem_core::extraction::prompt::extraction_messages;
use npcmem_core::extraction::rules::RulesExtractor;
use npcmem_core::extraction::safety::{SafetyContext, SafetyFilter, reason};
use npcmem_core::memory::{MemoryType, SafetyFlag, SalienceInputs, compute_salience, round3};
use npcmem_core::tokens::count_chat_tokens;
use npcmem_core::validate::{ReasonCode, ValidationError, decode_message};
use npcmem_core::wire::{
    CacheInvalidate, ConversationEnded, ExtractJob, ExtractorKind, MemoryStored, NpcInfo, PlayerInfo, SCHEMA_VERSION,
    StoredMemory, TranscriptMessage,
};
use npcmem_service::telemetry;
use npcmem_store::budgets::{self, NpcSettlement};
use npcmem_store::conversations::{self, ClaimedConversation, MAX_EXTRACTION_ATTEMPTS};
use npcmem_store::memories::{self, AuditEntry, NewMemory};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::{PgPool, StoreError, locks};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::budget::budget_day;
use crate::embedding::EmbedQueue;
use crate::llm::{LlmExtractor, Prompt};
use crate::metrics::ExtractMetrics;

/// Jobs are tiny; anything larger is not a job.
const MAX_JOB_BYTES: usize = 4 * 1024;

pub struct ExtractHandler {
    pool: PgPool,
    nats: async_nats::Client,
    topology: Topology,
    metrics: ExtractMetrics,
    /// None: the rules extractor for every conversation (`NPCMEM_LLM_PROVIDER=rules`).
    llm: Option<Arc<LlmExtractor>>,
    /// How often jobs waiting on LLM calls tell JetStream they are still being worked on.
    progress_interval: Duration,
    /// Recall's embedding queue, when an embedder is configured.
    embedding: Option<EmbedQueue>,
    /// The trace span of each conversation being extracted, so that its
    /// `event.memory.stored` continues the trace (see [`OpenSpans`]).
    spans: Arc<Mutex<HashMap<Uuid, tracing::Span>>>,
}

/// A batch's spans, registered with the handler while the batch is worked on.
struct OpenSpans {
    open: Arc<Mutex<HashMap<Uuid, tracing::Span>>>,
    ids: Vec<Uuid>,
}

impl OpenSpans {
    fn register(open: &Arc<Mutex<HashMap<Uuid, tracing::Span>>>, batch: &[Delivery], ids: &[Uuid]) -> OpenSpans {
        // A job's Nats-Msg-Id is its conversation_id.
        let spans = telemetry::batch_spans("extract conversation", batch, ids.iter().map(|id| (*id, *id)));
        let ids = spans.iter().map(|(id, _)| *id).collect();
        open.lock().expect("span map").extend(spans);
        OpenSpans { open: open.clone(), ids }
    }
}

impl Drop for OpenSpans {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("span map");
        for id in &self.ids {
            open.remove(id);
        }
    }
}

/// What a store wrote, for the metrics once it commits.
struct Stored {
    pairs: Vec<(Uuid, Uuid)>,
    evicted: u64,
    memory_types: Vec<MemoryType>,
    flags: Vec<&'static str>,
    extractors: Vec<&'static str>,
}

/// What the store transaction settles of the per-NPC budgets.
struct Settlements {
    day: NaiveDate,
    npcs: Vec<NpcSettlement>,
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
    pub fn new(
        pool: PgPool,
        nats: async_nats::Client,
        topology: Topology,
        metrics: ExtractMetrics,
        llm: Option<Arc<LlmExtractor>>,
        ack_wait: Duration,
    ) -> Self {
        // Three progress acks per ack_wait: one lost ack does not let the job be redelivered.
        let progress_interval = (ack_wait / 3).max(Duration::from_millis(100));
        Self { pool, nats, topology, metrics, llm, progress_interval, embedding: None, spans: Arc::default() }
    }

    pub fn with_embedding(mut self, embedding: Option<EmbedQueue>) -> Self {
        self.embedding = embedding;
        self
    }

    /// The rules path: claim, extract on the blocking pool and store in one transaction
    /// (one commit per batch; a failed batch leaves its rows as they were). Returns the
    /// conversations that ran out of attempts.
    async fn handle_with_rules(&self, conversation_ids: &[Uuid]) -> Result<Vec<Uuid>, Failure> {
        let mut transaction = self.pool.begin().await?;
        let claims = conversations::claim_for_extraction(&mut transaction, conversation_ids).await?;
        let exhausted = fail_unclaimed(&mut transaction, conversation_ids, &claims).await?;
        debug!(jobs = conversation_ids.len(), claimed = claims.len(), "claimed conversations");
        let extractions = tokio::task::spawn_blocking(move || {
            claims.into_iter().map(|claim| extract_with(claim, None)).collect::<Vec<_>>()
        })
        .await?;
        let stored = self.store_in(&mut transaction, &extractions, None).await?;
        transaction.commit().await?;
        let pairs = self.count_stored(stored);
        self.invalidate_caches(&pairs).await;
        Ok(exhausted)
    }

    /// The LLM path: claim and reserve budget in one transaction, call the model for the
    /// conversations the budget pays for (at most K at a time, telling JetStream the jobs
    /// are in progress), fall back to rules for the others and for failed calls, store.
    async fn handle_with_llm(
        &self,
        llm: &LlmExtractor,
        conversation_ids: &[Uuid],
        batch: &[Delivery],
    ) -> Result<Vec<Uuid>, Failure> {
        let now = Utc::now();
        let day = budget_day(now);
        let mut transaction = self.pool.begin().await?;
        let claims = conversations::claim_for_extraction(&mut transaction, conversation_ids).await?;
        debug!(jobs = conversation_ids.len(), claimed = claims.len(), "claimed conversations");
        let exhausted = fail_unclaimed(&mut transaction, conversation_ids, &claims).await?;
        let output_cap = llm.output_cap();
        let prompts: Vec<Prompt> = claims
            .iter()
            .map(|claim| {
                let messages = extraction_messages(&conversation_of(claim));
                let tokens_per_attempt = count_chat_tokens(&messages) as i64 + output_cap;
                Prompt { npc_id: claim.npc_id, messages, tokens_per_attempt }
            })
            .collect();
        let routes = llm.plan(&mut transaction, now, day, &prompts).await?;
        if let Err(error) = transaction.commit().await {
            llm.release(&routes).await;
            return Err(error.into());
        }
        let calls = futures::future::join_all(prompts.iter().zip(&routes).map(|(prompt, route)| async move {
            match route {
                Ok(reservation) => Some(llm.call(prompt, *reservation).await),
                Err(_) => None,
            }
        }));
        let outcomes = self.with_progress(batch, calls).await;

        let mut per_npc: BTreeMap<Uuid, NpcSettlement> = BTreeMap::new();
        let mut results = Vec::with_capacity(claims.len());
        for ((claim, route), outcome) in claims.into_iter().zip(routes).zip(outcomes) {
            let memories = match (route, outcome) {
                (Err(fallback), _) => Err(fallback),
                (Ok(_), Some(outcome)) => {
                    let settlement = outcome.settlement;
                    let total = per_npc.entry(settlement.npc_id).or_insert(NpcSettlement {
                        npc_id: settlement.npc_id,
                        reserved: 0,
                        charged: 0,
                        calls: 0,
                    });
                    total.reserved += settlement.reserved;
                    total.charged += settlement.charged;
                    total.calls += settlement.calls;
                    self.metrics.llm_tokens(settlement.charged);
                    outcome.memories
                }
                (Ok(_), None) => unreachable!("every paid route was called"),
            };
            if let Err(fallback) = &memories {
                self.metrics.fallback(fallback.label());
            }
            results.push((claim, memories.ok()));
        }
        let extractions = tokio::task::spawn_blocking(move || {
            results.into_iter().map(|(claim, memories)| extract_with(claim, memories)).collect::<Vec<_>>()
        })
        .await?;
        let settlements = Settlements { day, npcs: per_npc.into_values().collect() };
        let pairs = self.store(&extractions, Some(&settlements)).await?;
        self.invalidate_caches(&pairs).await;
        Ok(exhausted)
    }

    /// Runs `work`, sending an in-progress ack for every job of `batch` each
    /// `progress_interval`, so long LLM calls do not outlive `ack_wait`.
    async fn with_progress<T>(&self, batch: &[Delivery], work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        let start = tokio::time::Instant::now() + self.progress_interval;
        let mut ticker = tokio::time::interval_at(start, self.progress_interval);
        loop {
            tokio::select! {
                output = &mut work => return output,
                _ = ticker.tick() => {
                    futures::future::join_all(batch.iter().map(Delivery::in_progress)).await;
                }
            }
        }
    }

    /// Stores every extraction whose claim still holds, in one transaction, with the
    /// per-NPC budget settlements; returns the pairs touched so their caches can be
    /// invalidated.
    async fn store(
        &self,
        extractions: &[Extraction],
        settlements: Option<&Settlements>,
    ) -> Result<Vec<(Uuid, Uuid)>, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let stored = self.store_in(&mut transaction, extractions, settlements).await?;
        transaction.commit().await?;
        Ok(self.count_stored(stored))
    }

    /// Metrics of a committed store; returns its pairs.
    fn count_stored(&self, stored: Stored) -> Vec<(Uuid, Uuid)> {
        self.metrics.evicted(stored.evicted);
        for memory_type in &stored.memory_types {
            self.metrics.stored(memory_type.as_str());
        }
        for flag in &stored.flags {
            self.metrics.safety_flag(flag);
        }
        for extractor in &stored.extractors {
            self.metrics.extraction("success", extractor);
        }
        stored.pairs
    }

    /// The writes of [`ExtractHandler::store`] inside `transaction`; returns the pairs of
    /// the extractions whose claim still held.
    async fn store_in(
        &self,
        transaction: &mut npcmem_store::PgConnection,
        extractions: &[Extraction],
        settlements: Option<&Settlements>,
    ) -> Result<Stored, StoreError> {
        if let Some(settlements) = settlements {
            budgets::settle_npcs(&mut *transaction, settlements.day, &settlements.npcs).await?;
        }
        let claims: Vec<(Uuid, i32, &str)> =
            extractions.iter().map(|e| (e.claim.conversation_id, e.claim.attempts, e.extractor.as_str())).collect();
        let completed: BTreeSet<Uuid> =
            conversations::complete_extraction(&mut *transaction, &claims).await?.into_iter().collect();
        let owned: Vec<&Extraction> =
            extractions.iter().filter(|e| completed.contains(&e.claim.conversation_id)).collect();
        let pairs: Vec<(Uuid, Uuid)> = owned.iter().map(|e| (e.claim.npc_id, e.claim.player_id)).collect();
        locks::lock_pairs(&mut *transaction, locks::PairScope::Memories, &pairs).await?;

        let now = Utc::now();
        let mut rows = Vec::new();
        let mut audit = Vec::new();
        let mut events = Vec::with_capacity(owned.len());
        let mut touched_types: BTreeSet<(Uuid, Uuid, MemoryType)> = BTreeSet::new();
        for extraction in &owned {
            let claim = &extraction.claim;
            // Dated when it happened, not when it was extracted; a game clock
            // running ahead is capped at now.
            let happened_at = claim.ended_at.min(now);
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
                            last_accessed: happened_at,
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
                    created_at: happened_at,
                    actor_id: party_id(claim, memory.actor),
                    target_id: party_id(claim, memory.target),
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
            if let Some(entry) = unremembered_attempt(extraction) {
                audit.push(entry);
            }
            let traceparent =
                self.spans.lock().expect("span map").get(&claim.conversation_id).and_then(telemetry::traceparent);
            events.push(memory_stored_event(&self.topology, extraction, traceparent));
        }
        memories::insert_batch(&mut *transaction, &rows).await?;
        let mut evicted = 0;
        for memory_type in MemoryType::ALL {
            let touched: Vec<(Uuid, Uuid)> = touched_types
                .iter()
                .filter(|(_, _, kind)| *kind == memory_type)
                .map(|(npc_id, player_id, _)| (*npc_id, *player_id))
                .collect();
            evicted += memories::enforce_caps(&mut *transaction, &touched, memory_type).await?;
        }
        memories::record_audit(&mut *transaction, &audit).await?;
        outbox::enqueue(&mut *transaction, &events).await?;
        Ok(Stored {
            pairs,
            evicted,
            memory_types: rows.iter().map(|row| row.memory_type).collect(),
            flags: audit.iter().map(|entry| entry.safety_flag).collect(),
            extractors: owned.iter().map(|extraction| extraction.extractor.as_str()).collect(),
        })
    }

    async fn invalidate_caches(&self, pairs: &[(Uuid, Uuid)]) {
        let unique: BTreeSet<&(Uuid, Uuid)> = pairs.iter().collect();
        let messages: Vec<CacheInvalidate> = unique
            .into_iter()
            .map(|(npc_id, player_id)| CacheInvalidate { npc_id: Some(*npc_id), player_id: Some(*player_id) })
            .collect();
        publish::invalidate_caches(&self.nats, &self.topology, &messages).await;
    }
}

/// An audit entry for a manipulation attempt in the player's lines that no stored memory
/// carries as `suspect` (an attempt that yields no memory would otherwise leave no trace).
/// Its `memory_id` is derived from the conversation and names no memory.
fn unremembered_attempt(extraction: &Extraction) -> Option<AuditEntry> {
    if extraction.memories.iter().any(|reviewed| reviewed.flag == SafetyFlag::Suspect) {
        return None;
    }
    let claim = &extraction.claim;
    let messages = claim.transcript.as_array()?;
    let player_lines =
        messages.iter().filter(|message| message["speaker"] == "player").filter_map(|message| message["text"].as_str());
    let (line, names) = SafetyFilter::shared().find_manipulation(player_lines)?;
    let mut reasons: Vec<String> = names.iter().map(|name| format!("{}{name}", reason::MANIPULATION_PREFIX)).collect();
    reasons.push(reason::NO_MEMORY.to_owned());
    Some(AuditEntry {
        memory_id: Uuid::new_v5(&claim.conversation_id, b"manipulation-attempt"),
        npc_id: claim.npc_id,
        player_id: claim.player_id,
        conversation_id: claim.conversation_id,
        content: line.chars().take(500).collect(),
        reasons,
        safety_flag: SafetyFlag::Suspect.as_str(),
        original_importance: 0.0,
    })
}

impl BatchWork for ExtractHandler {
    type Item = Uuid;
    /// One conversation's job twice in a batch is extracted once.
    type Key = Uuid;

    fn decode(&self, delivery: &Delivery) -> Result<Uuid, ValidationError> {
        decode_message::<ExtractJob>(delivery.payload(), MAX_JOB_BYTES).map(|job| job.conversation_id)
    }

    fn key(&self, conversation_id: &Uuid) -> Option<Uuid> {
        Some(*conversation_id)
    }

    async fn process(&self, conversation_ids: &[Uuid], batch: &[Delivery]) -> Result<Outcome, Failure> {
        let _spans = OpenSpans::register(&self.spans, batch, conversation_ids);
        // Sorted so concurrent batches claim their rows in one order.
        let mut sorted = conversation_ids.to_vec();
        sorted.sort_unstable();
        // Complete, skipped and forgotten conversations are not claimed: their jobs are
        // simply acknowledged (a redelivered job does no work, calls no model, writes nothing).
        let started = std::time::Instant::now();
        self.metrics.started(sorted.len());
        let extractor = if self.llm.is_some() { "llm" } else { "rules" };
        let result = match &self.llm {
            None => self.handle_with_rules(&sorted).await,
            Some(llm) => self.handle_with_llm(llm, &sorted, batch).await,
        };
        let failed = result.as_ref().map_or(0, Vec::len);
        self.metrics.finished(sorted.len(), failed, result.is_err(), started.elapsed().as_secs_f64(), extractor);
        let exhausted = result?;
        if let Some(embedding) = &self.embedding {
            embedding.offer(sorted);
        }
        let mut outcome = Outcome::done();
        for (index, id) in conversation_ids.iter().enumerate() {
            if exhausted.contains(id) {
                warn!(conversation_id = %id, "extraction gave up after its last attempt");
                outcome.fail(
                    index,
                    Failure::permanent(
                        ReasonCode::MaxDeliveries,
                        format!(
                            "extraction of conversation {id} failed {MAX_EXTRACTION_ATTEMPTS} times; marked failed"
                        ),
                    ),
                );
            }
        }
        Ok(outcome)
    }
}

impl BatchHandler for ExtractHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}

/// The conversations of `requested` that were not claimed because they used up their
/// attempts, now marked failed (the others were complete, skipped or forgotten).
async fn fail_unclaimed(
    connection: &mut npcmem_store::PgConnection,
    requested: &[Uuid],
    claims: &[ClaimedConversation],
) -> Result<Vec<Uuid>, StoreError> {
    if claims.len() == requested.len() {
        return Ok(Vec::new());
    }
    let claimed: BTreeSet<Uuid> = claims.iter().map(|claim| claim.conversation_id).collect();
    let unclaimed: Vec<Uuid> = requested.iter().filter(|id| !claimed.contains(id)).copied().collect();
    conversations::fail_exhausted(connection, &unclaimed).await
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

/// The model's memories, or the rules extractor's when there are none (`None`: not
/// asked, or it failed), followed by the safety filter: every
/// memory comes from a player conversation, so all are player-sourced.
fn extract_with(claim: ClaimedConversation, from_llm: Option<Vec<ExtractedMemory>>) -> Extraction {
    let (extractor, extracted) = match from_llm {
        Some(memories) => (ExtractorKind::Llm, memories),
        None => (ExtractorKind::Rules, RulesExtractor::shared().extract(&conversation_of(&claim))),
    };
    let context = SafetyContext {
        player_name: claim.player_name.clone(),
        npc_name: claim.npc_name.clone(),
        player_sourced: true,
    };
    let memories = extracted
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
    Extraction { claim, extractor, memories }
}

/// The id of a party to the conversation; none for someone else.
fn party_id(claim: &ClaimedConversation, party: Option<Party>) -> Option<Uuid> {
    match party? {
        Party::Player => Some(claim.player_id),
        Party::Npc => Some(claim.npc_id),
        Party::Other => None,
    }
}

/// `event.memory.stored` (docs/wire-protocol.md), `Nats-Msg-Id` = event_id.
fn memory_stored_event(topology: &Topology, extraction: &Extraction, traceparent: Option<String>) -> OutboxMessage {
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
                actor_id: party_id(claim, reviewed.memory.actor),
                target_id: party_id(claim, reviewed.memory.target),
                statement: reviewed.memory.statement.clone(),
            })
            .collect(),
        npc_name: Some(claim.npc_name.clone()),
        player_name: Some(claim.player_name.clone()),
    };
    OutboxMessage {
        subject: topology.event("memory.stored"),
        msg_id: Some(event.event_id.to_string()),
        payload: serde_json::to_vec(&event).expect("events always serialise"),
        headers: traceparent.map(|traceparent| (telemetry::TRACEPARENT.to_owned(), traceparent)).into_iter().collect(),
    }
}
