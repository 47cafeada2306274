//! The `conversation.ended` batch handler.

use std::collections::{HashMap, HashSet};

use npcmem_bus::dlq::DeadLetterCause;
use npcmem_bus::{BatchHandler, Delivery, Disposition, Topology};
use npcmem_core::redact::{PiiRedactor, RedactionReport};
use npcmem_core::summary::summarize_conversation;
use npcmem_core::validate::{ConversationLimits, ReasonCode, decode_conversation_ended};
use npcmem_core::wire::{ConversationEnded, ExtractJob, SCHEMA_VERSION};
use npcmem_store::conversations::{self, ConversationState, NewConversation};
use npcmem_store::factions::{self, FactionMembership, Side};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::privacy::{self, Refusal};
use npcmem_store::working_memory::{self, NewSummary};
use npcmem_store::{PgPool, StoreError, locks};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::config::IngestConfig;
use crate::metrics::IngestMetrics;

const TRACEPARENT: &str = "traceparent";

pub struct ConversationHandler {
    pool: PgPool,
    topology: Topology,
    limits: ConversationLimits,
    summary_max_chars: usize,
    metrics: IngestMetrics,
}

/// A decoded, redacted conversation waiting to be written.
struct Accepted {
    conversation: ConversationEnded,
    redactions: RedactionReport,
    /// W3C trace context of the inbound message, passed on to the job (DESIGN §6).
    traceparent: Option<String>,
}

/// How many of a batch's conversations ended up where, for metrics.
#[derive(Default)]
struct Tally {
    accepted: u64,
    skipped: u64,
    duplicate: u64,
}

impl ConversationHandler {
    pub fn new(config: &IngestConfig, pool: PgPool, topology: Topology, metrics: IngestMetrics) -> Self {
        Self { pool, topology, limits: config.limits(), summary_max_chars: config.summary_max_chars, metrics }
    }

    /// Writes the accepted conversations in one transaction and returns the tally.
    async fn commit(&self, accepted: &[Accepted]) -> Result<Tally, StoreError> {
        let mut transaction = self.pool.begin().await?;
        // Everything below goes in conversation_id order so that concurrent batches take
        // their row locks in one order and cannot deadlock.
        let mut sorted: Vec<&Accepted> = accepted.iter().collect();
        sorted.sort_unstable_by_key(|a| a.conversation.conversation_id);
        let player_ids: Vec<Uuid> = sorted.iter().map(|a| a.conversation.player_id).collect();
        // Shared player locks before reading privacy: forget-player takes them exclusively.
        locks::lock_players_shared(&mut transaction, &player_ids).await?;
        let privacy = privacy::statuses(&mut transaction, &player_ids).await?;

        let rows: Vec<NewConversation> = sorted
            .iter()
            .map(|a| {
                let refusal =
                    privacy.get(&a.conversation.player_id).and_then(|s| s.refusal_for(a.conversation.started_at));
                ledger_row(a, refusal)
            })
            .collect();
        let inserted: HashSet<Uuid> = conversations::insert_batch(&mut transaction, &rows).await?.into_iter().collect();

        // A game clock running ahead must not make a conversation "newest" for good: the
        // ordering timestamps are capped at now (the ledger keeps what the game sent).
        let now = chrono::Utc::now();
        let mut tally = Tally::default();
        let mut summaries = Vec::new();
        let mut jobs = Vec::new();
        let mut player_memberships = Vec::new();
        let mut npc_memberships = Vec::new();
        for (accepted, row) in sorted.iter().zip(&rows) {
            let conversation = &accepted.conversation;
            if !inserted.contains(&conversation.conversation_id) {
                tally.duplicate += 1;
                continue;
            }
            if row.state == ConversationState::Skipped {
                tally.skipped += 1;
                continue;
            }
            tally.accepted += 1;
            summaries.push(NewSummary {
                conversation_id: conversation.conversation_id,
                npc_id: conversation.npc_id,
                player_id: conversation.player_id,
                summary: summarize_conversation(conversation, self.summary_max_chars),
                ended_at: conversation.ended_at.min(now),
            });
            jobs.push(extract_job(&self.topology, conversation.conversation_id, accepted.traceparent.as_deref()));
            player_memberships.push(FactionMembership {
                id: conversation.player_id,
                factions: conversation.player.factions.clone(),
                as_of: conversation.ended_at.min(now),
            });
            npc_memberships.push(FactionMembership {
                id: conversation.npc_id,
                factions: conversation.npc.factions.clone(),
                as_of: conversation.ended_at.min(now),
            });
        }
        factions::record_batch(&mut transaction, Side::Player, &player_memberships).await?;
        factions::record_batch(&mut transaction, Side::Npc, &npc_memberships).await?;
        outbox::enqueue(&mut transaction, &jobs).await?;
        // Working memory last: its pair locks (two batches must not trim one pair at once)
        // are then held only for the trim and the commit, which keeps concurrent batches
        // that share a pair from serialising on the whole transaction. Every batch takes
        // its locks in the same statement order, so waits cannot form a cycle.
        let pairs: Vec<(Uuid, Uuid)> = summaries.iter().map(|s| (s.npc_id, s.player_id)).collect();
        locks::lock_pairs(&mut transaction, locks::PairScope::WorkingMemory, &pairs).await?;
        working_memory::record_batch(&mut transaction, &summaries).await?;
        transaction.commit().await?;
        Ok(tally)
    }

    fn record(&self, tally: &Tally, accepted: &[Accepted]) {
        self.metrics.count("accepted", tally.accepted);
        self.metrics.count("skipped", tally.skipped);
        self.metrics.count("duplicate", tally.duplicate);
        for a in accepted {
            let r = &a.redactions;
            for (kind, count) in [
                ("email", r.emails),
                ("phone", r.phones),
                ("address", r.addresses),
                ("ssn", r.ssns),
                ("card", r.cards),
                ("ip", r.ips),
            ] {
                self.metrics.count_redactions(kind, count);
            }
        }
    }
}

impl BatchHandler for ConversationHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        let redactor = PiiRedactor::shared();
        let mut dispositions: Vec<Disposition> = Vec::with_capacity(batch.len());
        // Index into `accepted` for each delivery that decoded; a conversation delivered
        // twice in one batch is written once and both deliveries are acked.
        let mut accepted: Vec<Accepted> = Vec::with_capacity(batch.len());
        let mut slot_of_delivery: Vec<Option<usize>> = Vec::with_capacity(batch.len());
        let mut slot_of_conversation: HashMap<Uuid, usize> = HashMap::new();
        for delivery in batch {
            match decode_conversation_ended(delivery.payload(), &self.limits) {
                Ok(mut conversation) => {
                    let slot = *slot_of_conversation.entry(conversation.conversation_id).or_insert_with(|| {
                        let redactions = redactor.redact_conversation(&mut conversation);
                        let traceparent = delivery
                            .headers()
                            .and_then(|headers| headers.get(TRACEPARENT))
                            .map(|value| value.as_str().to_string());
                        accepted.push(Accepted { conversation, redactions, traceparent });
                        accepted.len() - 1
                    });
                    slot_of_delivery.push(Some(slot));
                    dispositions.push(Disposition::Done);
                }
                Err(error) => {
                    self.metrics.count("rejected", 1);
                    slot_of_delivery.push(None);
                    dispositions.push(error.into());
                }
            }
        }
        if accepted.is_empty() {
            return dispositions;
        }
        match self.commit(&accepted).await {
            Ok(tally) => {
                debug!(
                    accepted = tally.accepted,
                    duplicate = tally.duplicate,
                    skipped = tally.skipped,
                    "batch committed"
                );
                self.record(&tally, &accepted);
                dispositions
            }
            Err(error) if error.is_transient() => {
                // Only the decoded ones are retried; bad inputs keep their own reason.
                warn!(%error, size = accepted.len(), "batch commit failed, will retry");
                let reason = error.to_string();
                for (disposition, slot) in dispositions.iter_mut().zip(&slot_of_delivery) {
                    if slot.is_some() {
                        *disposition = Disposition::Retry(reason.clone());
                    }
                }
                dispositions
            }
            Err(error) => {
                // A row the database refuses (a permanent error) must not hold back the
                // rest: write each conversation alone and reject only the ones that fail.
                warn!(%error, "batch refused by the database, retrying one by one");
                let mut failed_slots: HashMap<usize, Disposition> = HashMap::new();
                for (slot, one) in accepted.iter().enumerate() {
                    match self.commit(std::slice::from_ref(one)).await {
                        Ok(tally) => self.record(&tally, std::slice::from_ref(one)),
                        Err(error) if error.is_transient() => {
                            failed_slots.insert(slot, Disposition::Retry(error.to_string()));
                        }
                        Err(error) => {
                            self.metrics.count("rejected", 1);
                            failed_slots.insert(
                                slot,
                                Disposition::Reject(DeadLetterCause {
                                    code: ReasonCode::InvalidField,
                                    message: format!("refused by the database: {error}"),
                                }),
                            );
                        }
                    }
                }
                for (disposition, slot) in dispositions.iter_mut().zip(&slot_of_delivery) {
                    if let Some(failure) = slot.and_then(|s| failed_slots.get(&s)) {
                        *disposition = failure.clone();
                    }
                }
                dispositions
            }
        }
    }
}

fn ledger_row(accepted: &Accepted, refusal: Option<Refusal>) -> NewConversation {
    let conversation = &accepted.conversation;
    // Skipped rows prove the conversation arrived, nothing more: no transcript kept.
    let transcript = match refusal {
        None => serde_json::to_value(&conversation.messages).expect("transcripts always serialise"),
        Some(_) => serde_json::Value::Array(Vec::new()),
    };
    NewConversation {
        conversation_id: conversation.conversation_id,
        npc_id: conversation.npc_id,
        player_id: conversation.player_id,
        npc_name: conversation.npc.name.clone(),
        npc_role: conversation.npc.role.clone(),
        player_name: conversation.player.name.clone(),
        npc_factions: conversation.npc.factions.clone(),
        player_factions: conversation.player.factions.clone(),
        location: conversation.location.clone(),
        transcript,
        message_count: conversation.messages.len() as i32,
        redactions: accepted.redactions.total() as i32,
        state: if refusal.is_some() { ConversationState::Skipped } else { ConversationState::Pending },
        skip_reason: refusal.map(|r| r.as_str().to_string()),
        started_at: conversation.started_at,
        ended_at: conversation.ended_at,
    }
}

/// `job.extract` with `Nats-Msg-Id` = conversation_id (DESIGN §3).
fn extract_job(topology: &Topology, conversation_id: Uuid, traceparent: Option<&str>) -> OutboxMessage {
    let job = ExtractJob { schema_version: SCHEMA_VERSION, conversation_id };
    let mut headers = std::collections::BTreeMap::new();
    if let Some(traceparent) = traceparent {
        headers.insert(TRACEPARENT.to_string(), traceparent.to_string());
    }
    OutboxMessage {
        subject: topology.job_extract(),
        msg_id: Some(conversation_id.to_string()),
        payload: serde_json::to_vec(&job).expect("jobs always serialise"),
        headers,
    }
}
