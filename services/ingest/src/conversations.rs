//! The `conversation.ended` batch handler.

use std::collections::HashSet;

use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Outcome, Topology, run_batch};
use npcmem_core::redact::{PiiRedactor, RedactionReport};
use npcmem_core::summary::summarize_conversation;
use npcmem_core::validate::{ConversationLimits, ValidationError, decode_conversation_ended};
use npcmem_core::wire::{ConversationEnded, ExtractJob, SCHEMA_VERSION};
use npcmem_service::telemetry;
use npcmem_store::conversations::{self, ConversationState, NewConversation};
use npcmem_store::factions::{self, FactionMembership, Side};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::privacy::{self, Refusal};
use npcmem_store::working_memory::{self, NewSummary};
use npcmem_store::{PgPool, StoreError, locks};
use tracing::debug;
use uuid::Uuid;

use crate::config::IngestConfig;
use crate::metrics::IngestMetrics;

pub struct ConversationHandler {
    pool: PgPool,
    topology: Topology,
    limits: ConversationLimits,
    summary_max_chars: usize,
    metrics: IngestMetrics,
}

/// A decoded, redacted conversation waiting to be written.
pub struct Accepted {
    conversation: ConversationEnded,
    redactions: RedactionReport,
    /// W3C trace context of the inbound message, passed on to the job when traces are
    /// off (when they are on, the job continues `span`).
    traceparent: Option<String>,
    /// This conversation's work in ingest, in the trace its message started.
    span: tracing::Span,
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
            let traceparent = telemetry::traceparent(&accepted.span).or_else(|| accepted.traceparent.clone());
            jobs.push(extract_job(&self.topology, conversation.conversation_id, traceparent.as_deref()));
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

impl BatchWork for ConversationHandler {
    type Item = Accepted;
    /// A conversation delivered twice in one batch is written once and both are acked.
    type Key = Uuid;

    fn decode(&self, delivery: &Delivery) -> Result<Accepted, ValidationError> {
        let mut conversation = decode_conversation_ended(delivery.payload(), &self.limits)?;
        let redactions = PiiRedactor::shared().redact_conversation(&mut conversation);
        let traceparent = delivery
            .headers()
            .and_then(|headers| headers.get(telemetry::TRACEPARENT))
            .map(|value| value.as_str().to_string());
        let span = telemetry::message_span(
            tracing::info_span!("ingest conversation", conversation_id = %conversation.conversation_id),
            delivery.headers(),
        );
        Ok(Accepted { conversation, redactions, traceparent, span })
    }

    fn key(&self, accepted: &Accepted) -> Option<Uuid> {
        Some(accepted.conversation.conversation_id)
    }

    async fn process(&self, accepted: &[Accepted], _batch: &[Delivery]) -> Result<Outcome, Failure> {
        let tally = self.commit(accepted).await?;
        debug!(accepted = tally.accepted, duplicate = tally.duplicate, skipped = tally.skipped, "batch committed");
        self.record(&tally, accepted);
        Ok(Outcome::done())
    }
}

impl BatchHandler for ConversationHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        let dispositions = run_batch(self, batch).await;
        let rejected = dispositions.iter().filter(|d| matches!(d, Disposition::Reject(_))).count();
        self.metrics.count("rejected", rejected as u64);
        dispositions
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

/// `job.extract` with `Nats-Msg-Id` = conversation_id (docs/wire-protocol.md).
fn extract_job(topology: &Topology, conversation_id: Uuid, traceparent: Option<&str>) -> OutboxMessage {
    let job = ExtractJob { schema_version: SCHEMA_VERSION, conversation_id };
    let mut headers = std::collections::BTreeMap::new();
    if let Some(traceparent) = traceparent {
        headers.insert(telemetry::TRACEPARENT.to_string(), traceparent.to_string());
    }
    OutboxMessage {
        subject: topology.job_extract(),
        msg_id: Some(conversation_id.to_string()),
        payload: serde_json::to_vec(&job).expect("jobs always serialise"),
        headers,
    }
}
