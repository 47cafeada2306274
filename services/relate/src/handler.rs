//! The `event.memory.stored` batch handler: each conversation's deltas applied exactly
//! once, one by one in stream order, with optimistic concurrency on the relationship
//! version; crossings, stage changes, milestones and faction-reputation shifts detected
//! inside the transaction and written to the outbox with it, each with an id derived from
//! what happened, so a recomputation republishes the same id.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Outcome, Topology, publish, run_batch};
use npcmem_core::derived_id::Happening;
use npcmem_core::relationship::{
    Applied, Attitude, Direction, RelateRules, Relationship, conversation_deltas, faction_modifier,
    reputation_crossings,
};
use npcmem_core::validate::{ValidationError, decode_message};
use npcmem_core::wire::{CacheInvalidate, MemoryStored, RelationshipChanged, SCHEMA_VERSION, Signal, signal_type};
use npcmem_store::factions::{self, Side};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::relationships::{self, AppliedConversation, Write};
use npcmem_store::{PgConnection, PgPool, StoreError, privacy};
use tracing::debug;
use uuid::Uuid;

use crate::metrics::RelateMetrics;

/// Events carry at most 3 memories of ≤ 500 chars; anything this large is not an event.
const MAX_EVENT_BYTES: usize = 256 * 1024;

type Pair = (Uuid, Uuid);

pub struct RelateHandler {
    pool: PgPool,
    nats: async_nats::Client,
    topology: Topology,
    rules: Arc<RelateRules>,
    metrics: RelateMetrics,
    max_retries: u32,
}

enum Attempt {
    Committed(Vec<Pair>),
    /// Another writer changed a relationship or applied a conversation first.
    Conflict,
}

impl RelateHandler {
    pub fn new(
        pool: PgPool,
        nats: async_nats::Client,
        topology: Topology,
        rules: RelateRules,
        metrics: RelateMetrics,
        max_retries: u32,
    ) -> Self {
        Self { pool, nats, topology, rules: Arc::new(rules), metrics, max_retries: max_retries.max(1) }
    }

    async fn apply_with_retries(&self, events: &[MemoryStored]) -> Result<Vec<Pair>, Failure> {
        for attempt in 1..=self.max_retries {
            match self.apply_once(events).await {
                Ok(Attempt::Committed(pairs)) => return Ok(pairs),
                Ok(Attempt::Conflict) => self.metrics.conflict(),
                Err(error @ StoreError::Conflict(_)) => {
                    debug!(%error, attempt, "relationship write conflicted, retrying");
                    self.metrics.conflict();
                }
                Err(error) => return Err(error.into()),
            }
            // Jittered, growing pause, so racing replicas stop colliding.
            let jitter = Uuid::new_v4().as_u128() as u64 % 5;
            tokio::time::sleep(Duration::from_millis(u64::from(attempt) * 4 + jitter)).await;
        }
        Err(Failure::transient(format!("relationships changed by other writers {} times in a row", self.max_retries)))
    }

    async fn apply_once(&self, events: &[MemoryStored]) -> Result<Attempt, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let ids: Vec<Uuid> = events.iter().map(|event| event.conversation_id).collect();
        let done: BTreeSet<Uuid> = relationships::applied(&mut transaction, &ids).await?.into_iter().collect();
        let todo: Vec<&MemoryStored> = events.iter().filter(|event| !done.contains(&event.conversation_id)).collect();
        // A forgotten player's conversations stay forgotten, even those already on their way.
        let players: Vec<Uuid> = todo.iter().map(|event| event.player_id).collect();
        let forgotten = privacy::forgotten_players(&mut transaction, &players).await?;
        let todo: Vec<&MemoryStored> = todo
            .into_iter()
            .filter(|event| forgotten.get(&event.player_id).is_none_or(|at| event.ended_at >= *at))
            .collect();
        if todo.is_empty() {
            return Ok(Attempt::Committed(Vec::new()));
        }
        let mut pairs: Vec<Pair> = Vec::new();
        for event in &todo {
            let pair = (event.npc_id, event.player_id);
            if !pairs.contains(&pair) {
                pairs.push(pair);
            }
        }
        let stored: HashMap<Pair, Relationship> =
            relationships::load(&mut transaction, &pairs).await?.into_iter().collect();
        let attitudes = self.attitudes_for_new_pairs(&mut transaction, &todo, &stored).await?;

        let now = Utc::now();
        let mut states: HashMap<Pair, Relationship> = HashMap::new();
        let mut ledger = Vec::with_capacity(todo.len());
        let mut messages = Vec::new();
        let mut signal_labels = Vec::new();
        for event in &todo {
            let pair = (event.npc_id, event.player_id);
            let state = match states.remove(&pair).or_else(|| stored.get(&pair).cloned()) {
                Some(state) => state,
                None => {
                    let npc_factions = attitudes.npc_factions(event);
                    let modifier = faction_modifier(
                        npc_factions,
                        &event.player_factions,
                        |faction, toward| attitudes.lookup(faction, toward),
                        &self.rules,
                    );
                    Relationship::initial(modifier)
                }
            };
            let deltas = conversation_deltas(&event.memories, &self.rules);
            let applied = npcmem_core::relationship::apply_conversation(
                &state,
                &deltas,
                event.memories.len() as i32,
                event.ended_at,
                &self.rules,
            );
            ledger.push(AppliedConversation {
                conversation_id: event.conversation_id,
                npc_id: event.npc_id,
                player_id: event.player_id,
                version: applied.after.version,
                deltas,
                memory_count: event.memories.len() as i32,
                ended_at: event.ended_at,
            });
            for (message, labels) in self.signals(event, &applied, now) {
                messages.push(message);
                signal_labels.push(labels);
            }
            messages.push(self.relationship_changed(event, &applied));
            states.insert(pair, applied.after);
        }

        let writes: Vec<Write<'_>> = pairs
            .iter()
            .map(|pair| Write {
                npc_id: pair.0,
                player_id: pair.1,
                relationship: &states[pair],
                read_version: stored.get(pair).map(|relationship| relationship.version),
            })
            .collect();
        if relationships::write(&mut transaction, &writes).await?.len() != writes.len() {
            return Ok(Attempt::Conflict);
        }
        ledger.sort_unstable_by_key(|row| row.conversation_id);
        if relationships::record_applied(&mut transaction, &ledger).await? != ledger.len() as u64 {
            return Ok(Attempt::Conflict);
        }
        for (message, labels) in self.reputation_shifts(&mut transaction, &todo, now).await? {
            messages.push(message);
            signal_labels.push(labels);
        }
        outbox::enqueue(&mut transaction, &messages).await?;
        transaction.commit().await?;

        self.metrics.updates(todo.len() as u64);
        for (signal, event_type) in &signal_labels {
            self.metrics.signal(signal, event_type);
        }
        Ok(Attempt::Committed(pairs))
    }

    /// Faction attitudes of the NPCs meeting a player for the first time. An event
    /// without the NPC's factions falls back to its recorded membership.
    async fn attitudes_for_new_pairs(
        &self,
        connection: &mut PgConnection,
        todo: &[&MemoryStored],
        stored: &HashMap<Pair, Relationship>,
    ) -> Result<Attitudes, StoreError> {
        let mut attitudes = Attitudes::default();
        let new: Vec<&&MemoryStored> =
            todo.iter().filter(|event| !stored.contains_key(&(event.npc_id, event.player_id))).collect();
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for event in new {
            if event.npc_factions.is_empty() && !attitudes.recorded.contains_key(&event.npc_id) {
                let recorded = factions::get(connection, Side::Npc, event.npc_id).await?.unwrap_or_default();
                attitudes.recorded.insert(event.npc_id, recorded);
            }
            wanted.extend(attitudes.npc_factions(event).iter().cloned());
        }
        let wanted: Vec<String> = wanted.into_iter().collect();
        for (faction, toward, attitude) in relationships::attitudes(connection, &wanted).await? {
            attitudes.table.insert((faction, toward), attitude);
        }
        Ok(attitudes)
    }

    /// Threshold crossings, a stage change and a milestone of one applied conversation,
    /// each with the id of what happened ([`Happening`]).
    fn signals(
        &self,
        event: &MemoryStored,
        applied: &Applied,
        now: chrono::DateTime<Utc>,
    ) -> Vec<(OutboxMessage, (&'static str, String))> {
        let after = &applied.after;
        let (npc_id, player_id, conversation_id, version) =
            (event.npc_id, event.player_id, event.conversation_id, after.version);
        let base = |signal_id: Uuid| Signal {
            schema_version: SCHEMA_VERSION,
            signal_id,
            signal_type: signal_type::RELATIONSHIP_CHANGED.to_owned(),
            event_type: None,
            npc_id,
            player_id: Some(player_id),
            dimension: None,
            old_value: None,
            new_value: None,
            stage: Some(after.stage.as_str().to_owned()),
            conversation_id: Some(conversation_id),
            version: Some(version),
            at: now,
            extra: serde_json::Map::new(),
        };
        let mut signals = Vec::new();
        for crossing in &applied.crossings {
            let happening = Happening::ThresholdCrossed {
                npc_id,
                player_id,
                conversation_id,
                version,
                dimension: crossing.dimension.as_str(),
                threshold: crossing.threshold,
                upward: crossing.direction == Direction::Above,
            };
            signals.push(Signal {
                event_type: Some(crossing.event_type.clone()),
                dimension: Some(crossing.dimension.as_str().to_owned()),
                old_value: Some(crossing.old_value),
                new_value: Some(crossing.new_value),
                ..base(happening.id())
            });
        }
        if let Some((old, new)) = applied.stage_change {
            let happening = Happening::StageChanged {
                npc_id,
                player_id,
                conversation_id,
                version,
                from: old.as_str(),
                to: new.as_str(),
            };
            let mut extra = serde_json::Map::new();
            extra.insert("old_stage".into(), old.as_str().into());
            signals.push(Signal {
                event_type: Some(npcmem_core::wire::relationship_event_type::STAGE_CHANGED.to_owned()),
                extra,
                ..base(happening.id())
            });
        }
        if let Some(memory_count) = applied.milestone {
            let happening = Happening::MemoryMilestone { npc_id, player_id, conversation_id, version, memory_count };
            let mut extra = serde_json::Map::new();
            extra.insert("memory_count".into(), memory_count.into());
            signals.push(Signal {
                signal_type: signal_type::MEMORY_MILESTONE.to_owned(),
                extra,
                ..base(happening.id())
            });
        }
        signals.into_iter().map(|signal| self.signal_message(signal)).collect()
    }

    /// Recomputes the reputation of the player with each faction of the NPCs involved and
    /// turns level crossings into `signal.faction_reputation_shift`.
    async fn reputation_shifts(
        &self,
        connection: &mut PgConnection,
        todo: &[&MemoryStored],
        now: chrono::DateTime<Utc>,
    ) -> Result<Vec<(OutboxMessage, (&'static str, String))>, StoreError> {
        let mut keys = Vec::new();
        let mut trigger: HashMap<(String, Uuid), &MemoryStored> = HashMap::new();
        for event in todo {
            for faction in &event.npc_factions {
                keys.push((faction.clone(), event.player_id));
                trigger.insert((faction.clone(), event.player_id), event);
            }
        }
        let changes = relationships::recompute_reputation(connection, &keys).await?;
        let mut messages = Vec::new();
        for change in changes {
            let old = change.old.unwrap_or(0.0);
            let Some(event) = trigger.get(&(change.faction.clone(), change.player_id)) else { continue };
            for (level, upward) in reputation_crossings(old, change.new, &self.rules.reputation_levels) {
                let happening = Happening::ReputationCrossed {
                    faction: &change.faction,
                    player_id: change.player_id,
                    level,
                    upward,
                    version: change.version,
                };
                let mut extra = serde_json::Map::new();
                extra.insert("faction".into(), change.faction.clone().into());
                extra.insert("level".into(), level.into());
                extra.insert("npcs_known".into(), change.npcs_known.into());
                let signal = Signal {
                    schema_version: SCHEMA_VERSION,
                    signal_id: happening.id(),
                    signal_type: signal_type::FACTION_REPUTATION_SHIFT.to_owned(),
                    event_type: Some(if upward { "reputation_up" } else { "reputation_down" }.to_owned()),
                    npc_id: event.npc_id,
                    player_id: Some(change.player_id),
                    dimension: Some("reputation".to_owned()),
                    old_value: Some(old),
                    new_value: Some(change.new),
                    stage: None,
                    conversation_id: Some(event.conversation_id),
                    version: None,
                    at: now,
                    extra,
                };
                messages.push(self.signal_message(signal));
            }
        }
        Ok(messages)
    }

    /// `P.signal.<signal_type>` through the outbox, `Nats-Msg-Id` = signal_id.
    fn signal_message(&self, signal: Signal) -> (OutboxMessage, (&'static str, String)) {
        let labels = (signal_label(&signal.signal_type), signal.event_type.clone().unwrap_or_default());
        let message = OutboxMessage {
            subject: self.topology.signal(&signal.signal_type),
            msg_id: Some(signal.signal_id.to_string()),
            payload: serde_json::to_vec(&signal).expect("signals always serialise"),
            headers: Default::default(),
        };
        (message, labels)
    }

    fn relationship_changed(&self, event: &MemoryStored, applied: &Applied) -> OutboxMessage {
        let happening = Happening::RelationshipChanged {
            npc_id: event.npc_id,
            player_id: event.player_id,
            conversation_id: event.conversation_id,
            version: applied.after.version,
        };
        let changed = RelationshipChanged {
            schema_version: SCHEMA_VERSION,
            event_id: happening.id(),
            npc_id: event.npc_id,
            player_id: event.player_id,
            conversation_id: Some(event.conversation_id),
            version: applied.after.version,
            old: applied.before.snapshot(),
            new: applied.after.snapshot(),
        };
        OutboxMessage {
            subject: self.topology.event("relationship.changed"),
            msg_id: Some(changed.event_id.to_string()),
            payload: serde_json::to_vec(&changed).expect("events always serialise"),
            headers: Default::default(),
        }
    }

    async fn invalidate_caches(&self, pairs: &[Pair]) {
        let messages: Vec<CacheInvalidate> = pairs
            .iter()
            .map(|(npc_id, player_id)| CacheInvalidate { npc_id: Some(*npc_id), player_id: Some(*player_id) })
            .collect();
        publish::invalidate_caches(&self.nats, &self.topology, &messages).await;
    }
}

fn signal_label(signal_type: &str) -> &'static str {
    signal_type::ALL.into_iter().find(|known| *known == signal_type).unwrap_or("other")
}

/// Attitudes between factions, and NPC memberships looked up for events without them.
#[derive(Default)]
struct Attitudes {
    table: HashMap<(String, String), Attitude>,
    recorded: HashMap<Uuid, Vec<String>>,
}

impl Attitudes {
    fn lookup(&self, faction: &str, toward: &str) -> Option<Attitude> {
        self.table.get(&(faction.to_owned(), toward.to_owned())).copied()
    }

    fn npc_factions<'a>(&'a self, event: &'a MemoryStored) -> &'a [String] {
        if event.npc_factions.is_empty() {
            self.recorded.get(&event.npc_id).map(Vec::as_slice).unwrap_or_default()
        } else {
            &event.npc_factions
        }
    }
}

impl BatchWork for RelateHandler {
    type Item = MemoryStored;
    /// The same conversation twice in one batch is applied once.
    type Key = Uuid;

    fn decode(&self, delivery: &Delivery) -> Result<MemoryStored, ValidationError> {
        decode_message::<MemoryStored>(delivery.payload(), MAX_EVENT_BYTES)
    }

    fn key(&self, event: &MemoryStored) -> Option<Uuid> {
        Some(event.conversation_id)
    }

    async fn process(&self, events: &[MemoryStored], batch: &[Delivery]) -> Result<Outcome, Failure> {
        // Each event's span continues its conversation's trace and ends once applied.
        // An event's Nats-Msg-Id is its event_id.
        let _spans = npcmem_service::telemetry::batch_spans(
            "relate conversation",
            batch,
            events.iter().map(|event| (event.event_id, event.conversation_id)),
        );
        let pairs = self.apply_with_retries(events).await?;
        self.invalidate_caches(&pairs).await;
        Ok(Outcome::done())
    }
}

impl BatchHandler for RelateHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}
