//! Knowledge in: facts from important memories (`event.memory.stored`, durable
//! `gossip-learn`) and from the world (`world.observation`, `world.fact`), locations and
//! profiles (`world.npc_moved`, `world.npc_profile`; durable `gossip-world`). Fact ids
//! derive from the message, so a redelivery stores nothing twice.

use foldhash::HashSet;
use std::sync::Arc;
use std::task::Poll;

use chrono::{DateTime, Utc};
use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Topology, run_batch};
use npcmem_core::gossip::contradiction::{Outcome, Revision, claim_keys, opposing_keys, revise_batch};
use npcmem_core::gossip::{Drives, HeldFact};
use npcmem_core::memory::SafetyFlag;
use npcmem_core::perspective::Perspective;
use npcmem_core::validate::world::decode_world;
use npcmem_core::validate::{ValidationError, decode_message};
use npcmem_core::wire::{
    CacheInvalidate, KnowledgeCategory, MemoryStored, NpcMoved, NpcProfile, Observation, SCHEMA_VERSION, Signal,
    WorldFact, signal_type,
};
use npcmem_store::factions::{self, FactionMembership, Side};
use npcmem_store::knowledge::{self, Known, NewFact, Profile, Source};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::{PgConnection, PgPool, StoreError, privacy};
use uuid::Uuid;

const MAX_BYTES: usize = 256 * 1024;
/// Memories at least this important about a player become facts about them.
const MIN_LEARN_IMPORTANCE: f64 = 0.5;
const WORLD_TAGS: &[&str] = &["bandits", "world", "war", "raid", "festival", "plague", "news"];

/// A deterministic id per (message id, holder), the same on redelivery: a name-based
/// (SHA-1) UUID, so ids with structure (sequential, derived by the game) cannot collide
/// the way a bitwise mix of the two can.
pub fn derive_id(message_id: Uuid, holder: Uuid) -> Uuid {
    Uuid::new_v5(&message_id, holder.as_bytes())
}

/// What a memory teaches the NPC that made it: secrets are gossip (faction intel when the
/// memory is about a faction: tagged `faction` or naming one of the NPC's or the player's
/// factions), world tags world events, the rest a trait of the player.
pub fn fact_from_memory(event: &MemoryStored, memory: &npcmem_core::wire::StoredMemory) -> Option<HeldFact> {
    if memory.importance < MIN_LEARN_IMPORTANCE || memory.safety_flag == SafetyFlag::Suspect {
        return None;
    }
    let has = |tag: &str| memory.tags.iter().any(|t| t == tag);
    let category = if has("secret") {
        if has("faction") || names_a_faction(memory, event.npc_factions.iter().chain(&event.player_factions)) {
            KnowledgeCategory::FactionIntel
        } else {
            KnowledgeCategory::NpcGossip
        }
    } else if memory.tags.iter().any(|t| WORLD_TAGS.contains(&t.as_str())) {
        KnowledgeCategory::WorldEvent
    } else {
        KnowledgeCategory::PlayerTrait
    };
    Some(HeldFact {
        id: memory.id,
        origin_fact_id: memory.id,
        holder: event.npc_id,
        category,
        subject_id: Some(event.player_id),
        content: memory.content.clone(),
        tags: memory.tags.clone(),
        confidence: memory.confidence.clamp(0.0, 1.0),
        importance: memory.importance.clamp(0.0, 1.0),
        hop_count: 0,
        provenance: Vec::new(),
        expires_at: None,
        perspective: perspective_of(event, memory),
    })
}

/// Who did what to whom in the memory, for every holder to read from their own side.
fn perspective_of(event: &MemoryStored, memory: &npcmem_core::wire::StoredMemory) -> Option<Arc<Perspective>> {
    let perspective = Perspective {
        actor_id: memory.actor_id,
        target_id: memory.target_id,
        statement: memory.statement.clone(),
        npc_id: Some(event.npc_id),
        npc_name: event.npc_name.clone(),
        player_name: event.player_name.clone(),
    };
    let known = memory.statement.is_some() || memory.actor_id.is_some() || memory.target_id.is_some();
    known.then(|| Arc::new(perspective))
}

/// Whether a memory names a faction in its tags or words: `smiths_guild` matches the tag
/// `smiths_guild` and the words "smiths guild", in any case.
fn names_a_faction<'a>(memory: &npcmem_core::wire::StoredMemory, factions: impl Iterator<Item = &'a String>) -> bool {
    let content = memory.content.to_lowercase();
    factions.filter(|faction| !faction.trim().is_empty()).any(|faction| {
        let words = faction.to_lowercase().replace(['_', '-'], " ");
        memory.tags.iter().any(|tag| tag.eq_ignore_ascii_case(faction)) || content.contains(words.trim())
    })
}

/// What [`store_facts`] stored: the new facts (duplicates left out) and the revisions of
/// held facts they contradicted.
#[derive(Debug, Default)]
pub struct Stored {
    pub facts: Vec<NewFact>,
    pub revisions: Vec<Revision>,
    /// A [`Known::Unlikely`] batch written as nothing because a listener learned a fact
    /// its writer had not loaded (`knowledge::is_unchecked`): check these and write again.
    pub unchecked: Vec<NewFact>,
    /// New facts the cap dropped at once, as (holder, origin): never announced.
    pub dropped: Vec<(Uuid, Uuid)>,
    /// Written again after a full check in Postgres (the `unchecked` case).
    pub rechecked: bool,
}

/// Which new facts to check against what their holders hold in Postgres.
pub enum Check<'a> {
    Every,
    /// Only these (by fact id): the gossip leader knows from claim keys in memory that
    /// the others contradict nothing their listeners hold.
    Only(&'a HashSet<Uuid>),
}

/// New facts after the contradiction check, ready to write.
#[derive(Debug)]
pub struct Prepared {
    pub facts: Vec<NewFact>,
    pub revisions: Vec<Revision>,
}

impl Prepared {
    /// Whether writing takes more than the one insert statement (which is atomic alone).
    pub fn needs_transaction(&self, capped: &[Uuid]) -> bool {
        !self.revisions.is_empty() || !capped.is_empty()
    }
}

/// Checks new facts against what their holders hold and against each other (issue 6
/// item 4): contradicted facts are superseded or doubted, a new fact that only casts
/// doubt is stored as uncertain. Reads only.
pub async fn prepare_facts(
    connection: &mut PgConnection,
    facts: Vec<NewFact>,
    check: Check<'_>,
) -> Result<Prepared, StoreError> {
    let to_check: Vec<HeldFact> = match check {
        Check::Every => facts.iter().map(|new| new.fact.clone()).collect(),
        Check::Only(ids) => facts.iter().filter(|new| ids.contains(&new.fact.id)).map(|new| new.fact.clone()).collect(),
    };
    let held = if to_check.is_empty() {
        Vec::new()
    } else {
        // Only held facts sharing a claim key with a new fact's opposite can be
        // contradicted by it (the leader's pre-check): the rest are never kept, nor
        // compared fact by fact.
        let opposing: HashSet<(Uuid, u64)> = to_check
            .iter()
            .flat_map(|fact| opposing_keys(fact).into_iter().map(move |key| (fact.holder, key)))
            .collect();
        knowledge::contradiction_candidates(connection, &to_check, Utc::now(), |held| {
            claim_keys(held).into_iter().any(|key| opposing.contains(&(held.holder, key)))
        })
        .await?
    };
    // The facts move out, are revised and move back, uncloned.
    let (mut revised, how): (Vec<HeldFact>, Vec<_>) =
        facts.into_iter().map(|new| (new.fact, (new.source, new.source_memory_id, new.speaker_id))).unzip();
    let revisions = revise_batch(&mut revised, held);
    let facts = revised
        .into_iter()
        .zip(how)
        .map(|(fact, (source, source_memory_id, speaker_id))| NewFact { fact, source, source_memory_id, speaker_id })
        .collect();
    Ok(Prepared { facts, revisions })
}

/// Writes prepared facts with their `event.knowledge.learned` and any `extra` message per
/// fact (both queued only for facts actually inserted), applies the revisions of the
/// inserted ones, and holds the `capped` holders to the per-NPC cap. Unless
/// [`Prepared::needs_transaction`] is false, call inside a transaction (and then with
/// [`Known::Possible`]). `meanwhile` runs while the insert is on its way, with the facts
/// it stores unless the write fails or some turn out known already or unchecked.
pub async fn write_facts(
    connection: &mut PgConnection,
    topology: &Topology,
    prepared: Prepared,
    capped: &[Uuid],
    known: Known,
    extra: impl Fn(&NewFact) -> Option<OutboxMessage>,
    meanwhile: impl FnOnce(&[NewFact]),
) -> Result<Stored, StoreError> {
    let Prepared { facts, revisions } = prepared;
    let mut messages = Vec::with_capacity(facts.len());
    for new in &facts {
        messages.push((new.fact.id, learned_event(topology, new, &revisions)));
        if let Some(message) = extra(new) {
            messages.push((new.fact.id, message));
        }
    }
    let insert = knowledge::insert_facts(connection, &facts, &messages, known);
    let inserted: HashSet<Uuid> = match overlapping(insert, || meanwhile(&facts)).await {
        Ok(ids) => ids.into_iter().collect(),
        Err(error) if knowledge::is_unchecked(&error) => return Ok(Stored { unchecked: facts, ..Stored::default() }),
        Err(error) => return Err(error),
    };
    // A new fact its holder's cap dropped at once was never really learned: it revises
    // nothing and is not announced (this runs only for holders near the cap, so rarely).
    let evicted = knowledge::enforce_fact_caps(connection, capped).await?;
    let dropped_at_once: HashSet<Uuid> = evicted.into_iter().filter(|id| inserted.contains(id)).collect();
    let kept = |fact_id: &Uuid| inserted.contains(fact_id) && !dropped_at_once.contains(fact_id);
    // A redelivered fact was stored (and revised what it contradicts) the first time.
    let revisions: Vec<Revision> = revisions.into_iter().filter(|revision| kept(&revision.by)).collect();
    knowledge::apply_revisions(connection, &revisions).await?;
    let withdrawn: Vec<String> = messages
        .iter()
        .filter(|(fact_id, _)| dropped_at_once.contains(fact_id))
        .filter_map(|(_, message)| message.msg_id.clone())
        .collect();
    outbox::withdraw(connection, &withdrawn).await?;
    let (stored, dropped): (Vec<NewFact>, Vec<NewFact>) =
        facts.into_iter().filter(|new| inserted.contains(&new.fact.id)).partition(|new| kept(&new.fact.id));
    let dropped = dropped.iter().map(|new| (new.fact.holder, new.fact.origin_fact_id)).collect();
    Ok(Stored { facts: stored, revisions, unchecked: Vec::new(), dropped, rechecked: false })
}

/// Awaits `future`, running `meanwhile` right after its first poll: for a statement, once
/// it is sent, so that work runs while Postgres does its part.
async fn overlapping<F: Future>(future: F, meanwhile: impl FnOnce()) -> F::Output {
    let mut future = std::pin::pin!(future);
    let first = futures::poll!(future.as_mut());
    meanwhile();
    match first {
        Poll::Ready(output) => output,
        Poll::Pending => future.await,
    }
}

/// [`prepare_facts`] then [`write_facts`], every fact checked, in the caller's transaction.
pub async fn store_facts(
    connection: &mut PgConnection,
    topology: &Topology,
    facts: Vec<NewFact>,
    capped: &[Uuid],
    extra: impl Fn(&NewFact) -> Option<OutboxMessage>,
) -> Result<Stored, StoreError> {
    if facts.is_empty() {
        return Ok(Stored::default());
    }
    let prepared = prepare_facts(connection, facts, Check::Every).await?;
    write_facts(connection, topology, prepared, capped, Known::Possible, extra, |_| {}).await
}

/// `signal.secret_learned` for a secret-tagged fact reaching a new NPC, by gossip or in a
/// conversation (seed `SECRET_LEARNED`: "via gossip or dialogue"); not for what the game
/// itself authored or showed its NPCs.
pub fn secret_learned(topology: &Topology, new: &NewFact, now: DateTime<Utc>) -> Option<OutboxMessage> {
    let fact = &new.fact;
    if !fact.is_secret() || !matches!(new.source, Source::Gossip | Source::Conversation) {
        return None;
    }
    let mut extra = serde_json::Map::new();
    extra.insert("fact_id".into(), fact.id.to_string().into());
    extra.insert("origin_fact_id".into(), fact.origin_fact_id.to_string().into());
    extra.insert("content".into(), fact.content.clone().into());
    extra.insert("hop_count".into(), fact.hop_count.into());
    extra.insert("source".into(), new.source.as_str().into());
    if let Some(speaker) = new.speaker_id {
        extra.insert("from_npc_id".into(), speaker.to_string().into());
    }
    let signal = Signal {
        schema_version: SCHEMA_VERSION,
        // One per (listener, origin): a replayed tick or batch cannot emit it twice.
        signal_id: derive_id(fact.origin_fact_id, fact.holder),
        signal_type: signal_type::SECRET_LEARNED.to_owned(),
        event_type: None,
        npc_id: fact.holder,
        player_id: fact.subject_id,
        dimension: None,
        old_value: None,
        new_value: Some(fact.confidence),
        stage: None,
        conversation_id: None,
        version: None,
        at: now,
        extra,
    };
    Some(OutboxMessage {
        subject: topology.signal(signal_type::SECRET_LEARNED),
        msg_id: Some(signal.signal_id.to_string()),
        payload: serde_json::to_vec(&signal).expect("signals serialise"),
        headers: Default::default(),
    })
}

/// Tells the enrichers that these NPCs' knowledge (or mood) changed: after the commit,
/// best effort (the cache TTL is the safety net).
pub async fn invalidate_npcs(nats: &async_nats::Client, topology: &Topology, npcs: impl IntoIterator<Item = Uuid>) {
    let npcs: HashSet<Uuid> = npcs.into_iter().collect();
    let messages: Vec<CacheInvalidate> =
        npcs.into_iter().map(|npc| CacheInvalidate { npc_id: Some(npc), player_id: None }).collect();
    npcmem_bus::publish::invalidate_caches(nats, topology, &messages).await;
}

/// `event.knowledge.learned` for a stored fact, listing the held facts it contradicted.
pub fn learned_event(topology: &Topology, new: &NewFact, revisions: &[Revision]) -> OutboxMessage {
    let fact = &new.fact;
    let contradicted: Vec<Contradicted> = revisions
        .iter()
        .filter(|revision| revision.by == fact.id)
        .map(|revision| Contradicted {
            fact_id: revision.fact_id,
            outcome: revision.outcome.as_str(),
            confidence: match revision.outcome {
                Outcome::Doubted { confidence } => Some(confidence),
                Outcome::Superseded => None,
            },
        })
        .collect();
    let event = LearnedOut {
        schema_version: SCHEMA_VERSION,
        event_id: fact.id,
        npc_id: fact.holder,
        fact: LearnedFactOut {
            id: fact.id,
            origin_fact_id: fact.origin_fact_id,
            category: fact.category.as_str(),
            subject_id: fact.subject_id,
            content: &fact.content,
            tags: &fact.tags,
            confidence: fact.confidence,
            importance: fact.importance,
            hop_count: fact.hop_count,
            provenance: &fact.provenance,
            source: new.source.as_str(),
            source_memory_id: new.source_memory_id,
            expires_at: fact.expires_at,
            contradicted,
        },
        from_npc_id: new.speaker_id,
    };
    OutboxMessage {
        subject: topology.event("knowledge.learned"),
        msg_id: Some(fact.id.to_string()),
        payload: serde_json::to_vec(&event).expect("events serialise"),
        headers: Default::default(),
    }
}

/// The wire type `KnowledgeLearned` as written: borrowed, so a tick's hundreds of events
/// serialise without building a JSON tree for each one's `fact` document.
#[derive(serde::Serialize)]
struct LearnedOut<'a> {
    schema_version: u32,
    event_id: Uuid,
    npc_id: Uuid,
    fact: LearnedFactOut<'a>,
    from_npc_id: Option<Uuid>,
}

#[derive(serde::Serialize)]
struct LearnedFactOut<'a> {
    id: Uuid,
    origin_fact_id: Uuid,
    category: &'a str,
    subject_id: Option<Uuid>,
    content: &'a str,
    tags: &'a [String],
    confidence: f64,
    importance: f64,
    hop_count: i32,
    provenance: &'a [Uuid],
    source: &'a str,
    source_memory_id: Option<Uuid>,
    expires_at: Option<DateTime<Utc>>,
    contradicted: Vec<Contradicted>,
}

#[derive(serde::Serialize)]
struct Contradicted {
    fact_id: Uuid,
    outcome: &'static str,
    confidence: Option<f64>,
}

pub struct LearnHandler {
    pub pool: PgPool,
    pub topology: Topology,
    pub nats: async_nats::Client,
}

impl BatchWork for LearnHandler {
    /// The facts one event teaches, each with the end of its conversation.
    type Item = Vec<(NewFact, DateTime<Utc>)>;
    /// Fact ids derive from the memory: a redelivered event stores nothing twice anyway.
    type Key = ();

    fn decode(&self, delivery: &Delivery) -> Result<Self::Item, ValidationError> {
        let event = decode_message::<MemoryStored>(delivery.payload(), MAX_BYTES)?;
        Ok(event
            .memories
            .iter()
            .filter_map(|memory| fact_from_memory(&event, memory))
            .map(|fact| {
                let new =
                    NewFact { source_memory_id: Some(fact.id), fact, source: Source::Conversation, speaker_id: None };
                (new, event.ended_at)
            })
            .collect())
    }

    fn key(&self, _facts: &Self::Item) -> Option<()> {
        None
    }

    async fn process(&self, items: &[Self::Item], _batch: &[Delivery]) -> Result<npcmem_bus::Outcome, Failure> {
        let facts = items.iter().flatten().cloned().collect();
        let holders = commit_facts(&self.pool, &self.topology, facts).await?;
        invalidate_npcs(&self.nats, &self.topology, holders).await;
        Ok(npcmem_bus::Outcome::done())
    }
}

impl BatchHandler for LearnHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}

/// Stores facts learned from memories, each with the end of its conversation: a player
/// forgotten since that conversation is not learned about again. Returns the NPCs whose
/// knowledge changed.
async fn commit_facts(
    pool: &PgPool,
    topology: &Topology,
    facts: Vec<(NewFact, DateTime<Utc>)>,
) -> Result<Vec<Uuid>, StoreError> {
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    let mut transaction = pool.begin().await?;
    let facts = unforgotten(&mut transaction, facts).await?;
    let holders: Vec<Uuid> = facts.iter().map(|new| new.fact.holder).collect();
    let now = Utc::now();
    let stored =
        store_facts(&mut transaction, topology, facts, &holders, |new| secret_learned(topology, new, now)).await?;
    transaction.commit().await?;
    Ok(changed_holders(&stored))
}

/// The NPCs whose knowledge a write changed: the holders of new facts and of revised ones.
fn changed_holders(stored: &Stored) -> Vec<Uuid> {
    let learned = stored.facts.iter().map(|new| new.fact.holder);
    learned.chain(stored.revisions.iter().map(|revision| revision.holder)).collect()
}

/// Facts, each with when its source was said or sent, less those about a player forgotten
/// since (the right to be forgotten): a late or redelivered message must not bring
/// them back. Under shared player locks, held until the caller's transaction ends.
async fn unforgotten(
    connection: &mut PgConnection,
    facts: Vec<(NewFact, DateTime<Utc>)>,
) -> Result<Vec<NewFact>, StoreError> {
    let players: Vec<Uuid> = facts.iter().filter_map(|(new, _)| new.fact.subject_id).collect();
    if players.is_empty() {
        return Ok(facts.into_iter().map(|(new, _)| new).collect());
    }
    let forgotten = privacy::forgotten_players(connection, &players).await?;
    Ok(facts
        .into_iter()
        .filter(|(new, at)| new.fact.subject_id.and_then(|player| forgotten.get(&player)).is_none_or(|gone| at >= gone))
        .map(|(new, _)| new)
        .collect())
}

pub struct WorldHandler {
    pub pool: PgPool,
    pub topology: Topology,
    pub nats: async_nats::Client,
}

/// One decoded world message.
pub enum WorldItem {
    Moved {
        npc_id: Uuid,
        room_id: String,
        at: DateTime<Utc>,
    },
    /// As of its own `at`, else of its publication.
    Profile(DateTime<Utc>, NpcProfile),
    /// Facts of an observation or a world fact, each with when the message was sent.
    Facts(Vec<(NewFact, DateTime<Utc>)>),
    /// `world.player_privacy` belongs to ingest; other world subjects are not ours.
    Ignored,
}

impl BatchWork for WorldHandler {
    type Item = WorldItem;
    /// Fact ids derive from the message, locations and profiles keep the newest.
    type Key = ();

    fn decode(&self, delivery: &Delivery) -> Result<WorldItem, ValidationError> {
        let subject = delivery.subject();
        if subject == self.topology.subject("world.npc_moved") {
            decode_world::<NpcMoved>(delivery.payload(), MAX_BYTES).map(|moved| WorldItem::Moved {
                npc_id: moved.npc_id,
                room_id: moved.room_id,
                at: moved.at,
            })
        } else if subject == self.topology.subject("world.npc_profile") {
            // Without its own `at`, a profile is as of its publication, so a
            // redelivered older profile never wins over a newer one.
            decode_world::<NpcProfile>(delivery.payload(), MAX_BYTES)
                .map(|profile| WorldItem::Profile(profile.at.unwrap_or(delivery.published), profile))
        } else if subject == self.topology.subject("world.observation") {
            decode_world::<Observation>(delivery.payload(), MAX_BYTES).map(|observation| {
                let facts = observation.witness_ids.iter().map(|witness| {
                    let fact = world_fact(
                        observation.observation_id,
                        *witness,
                        observation.category,
                        observation.subject_id,
                        &observation.content,
                        &observation.tags,
                        observation.importance,
                        1.0,
                        None,
                        Source::DirectObservation,
                    );
                    (fact, delivery.published)
                });
                WorldItem::Facts(facts.collect())
            })
        } else if subject == self.topology.subject("world.fact") {
            decode_world::<WorldFact>(delivery.payload(), MAX_BYTES).map(|fact| {
                let facts = fact.npc_ids.iter().map(|npc| {
                    let new = world_fact(
                        fact.fact_id,
                        *npc,
                        fact.category,
                        fact.subject_id,
                        &fact.content,
                        &fact.tags,
                        fact.importance,
                        fact.confidence,
                        fact.expires_at,
                        Source::Authored,
                    );
                    (new, delivery.published)
                });
                WorldItem::Facts(facts.collect())
            })
        } else {
            Ok(WorldItem::Ignored)
        }
    }

    fn key(&self, _item: &WorldItem) -> Option<()> {
        None
    }

    async fn process(&self, items: &[WorldItem], _batch: &[Delivery]) -> Result<npcmem_bus::Outcome, Failure> {
        let mut facts = Vec::new();
        let mut moves = Vec::new();
        let mut profiles = Vec::new();
        for item in items {
            match item {
                WorldItem::Moved { npc_id, room_id, at } => moves.push((*npc_id, room_id.clone(), *at)),
                WorldItem::Profile(as_of, profile) => profiles.push((*as_of, profile)),
                WorldItem::Facts(new) => facts.extend(new.iter().cloned()),
                WorldItem::Ignored => {}
            }
        }
        let mut transaction = self.pool.begin().await?;
        // Player locks first, as ingest takes them (before any row lock), so a waiting
        // forget-player never sits between two writers. A fact sent before its player
        // was forgotten (a late or replayed message) is dropped.
        let facts = unforgotten(&mut transaction, facts).await?;
        knowledge::record_locations(&mut transaction, &moves).await?;
        let mut memberships = Vec::new();
        for (as_of, profile) in &profiles {
            let as_of = *as_of;
            knowledge::record_profile(
                &mut transaction,
                &Profile {
                    npc_id: profile.npc_id,
                    name: profile.name.clone(),
                    role: profile.role.clone(),
                    drives: profile.drives.as_ref().map(|d| Drives {
                        social: d.social,
                        safety: d.safety,
                        loyalty: d.loyalty,
                        curiosity: d.curiosity,
                    }),
                    mood: profile.mood.as_ref().map(|m| (m.mood.clone(), m.intensity, m.expires_at)),
                    as_of,
                },
            )
            .await?;
            memberships.push(FactionMembership { id: profile.npc_id, factions: profile.factions.clone(), as_of });
        }
        factions::record_batch(&mut transaction, Side::Npc, &memberships).await?;
        let holders: Vec<Uuid> = facts.iter().map(|new| new.fact.holder).collect();
        let stored = store_facts(&mut transaction, &self.topology, facts, &holders, |_| None).await?;
        transaction.commit().await?;
        // Enrich caches moods with knowledge per NPC: a profile changes what it shows.
        let changed = changed_holders(&stored).into_iter().chain(profiles.iter().map(|(_, p)| p.npc_id));
        invalidate_npcs(&self.nats, &self.topology, changed).await;
        Ok(npcmem_bus::Outcome::done())
    }
}

impl BatchHandler for WorldHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}

#[allow(clippy::too_many_arguments)]
fn world_fact(
    message_id: Uuid,
    holder: Uuid,
    category: KnowledgeCategory,
    subject_id: Option<Uuid>,
    content: &str,
    tags: &[String],
    importance: f64,
    confidence: f64,
    expires_at: Option<chrono::DateTime<Utc>>,
    source: Source,
) -> NewFact {
    NewFact {
        fact: HeldFact {
            id: derive_id(message_id, holder),
            origin_fact_id: message_id,
            holder,
            category,
            subject_id,
            content: content.to_owned(),
            tags: tags.to_vec(),
            confidence: npcmem_core::memory::round3(confidence.clamp(0.0, 1.0)),
            importance: importance.clamp(0.0, 1.0),
            hop_count: 0,
            provenance: Vec::new(),
            expires_at,
            perspective: None,
        },
        source,
        source_memory_id: None,
        speaker_id: None,
    }
}

#[cfg(test)]
mod tests {
    use npcmem_core::wire::KnowledgeLearned;

    use super::*;

    #[test]
    fn a_secret_about_a_faction_is_faction_intel() {
        let memory = |content: &str, tags: &[&str]| {
            serde_json::from_value::<npcmem_core::wire::StoredMemory>(serde_json::json!({
                "id": Uuid::now_v7(), "memory_type": "episodic", "content": content, "tags": tags,
                "importance": 0.6, "confidence": 0.9, "emotional_valence": "neutral",
                "emotional_intensity": 0.4, "safety_flag": "clean"}))
            .expect("a stored memory")
        };
        let event = |npc_factions: &[&str], player_factions: &[&str]| {
            serde_json::from_value::<MemoryStored>(serde_json::json!({
                "event_id": Uuid::now_v7(), "conversation_id": Uuid::now_v7(), "npc_id": Uuid::now_v7(),
                "player_id": Uuid::now_v7(), "npc_factions": npc_factions, "player_factions": player_factions,
                "extractor": "rules", "ended_at": "2026-12-03T10:00:00Z", "memories": []}))
            .expect("an event")
        };
        let category = |event: &MemoryStored, memory| fact_from_memory(event, &memory).map(|fact| fact.category);
        let guild = event(&["smiths_guild"], &["thieves-guild"]);
        let told = "Aria told me a secret: \"the Smiths Guild is broke\"";
        assert_eq!(category(&guild, memory(told, &["secret"])), Some(KnowledgeCategory::FactionIntel));
        let told = "Aria told me a secret: \"the thieves guild meets at dawn\"";
        assert_eq!(category(&guild, memory(told, &["secret"])), Some(KnowledgeCategory::FactionIntel));
        assert_eq!(
            category(&guild, memory("a plot", &["secret", "smiths_guild"])),
            Some(KnowledgeCategory::FactionIntel)
        );
        assert_eq!(category(&guild, memory("a plot", &["secret", "faction"])), Some(KnowledgeCategory::FactionIntel));
        let told = "Aria told me a secret: \"the miller is a mage\"";
        assert_eq!(category(&guild, memory(told, &["secret"])), Some(KnowledgeCategory::NpcGossip));
        assert_eq!(category(&event(&[], &[]), memory(told, &["secret"])), Some(KnowledgeCategory::NpcGossip));
        assert_eq!(category(&guild, memory("Aria paid in full", &["trade"])), Some(KnowledgeCategory::PlayerTrait));
    }

    #[test]
    fn derived_ids_of_structured_ids_are_distinct() {
        // A rotate-and-xor mix gave (1 << 17, 0) and (0, 1) the same id.
        assert_ne!(
            derive_id(Uuid::from_u128(1 << 17), Uuid::from_u128(0)),
            derive_id(Uuid::from_u128(0), Uuid::from_u128(1))
        );
        let ids: Vec<Uuid> = (0..300u128).map(|n| Uuid::from_u128(n << 17 | n)).collect();
        let mut derived = HashSet::default();
        for message in &ids {
            for holder in &ids {
                assert!(derived.insert(derive_id(*message, *holder)), "{message} {holder}");
            }
        }
        assert_eq!(derive_id(ids[1], ids[2]), derive_id(ids[1], ids[2]), "the same on redelivery");
    }

    /// The borrowed event is the wire type `KnowledgeLearned`, field for field.
    #[test]
    fn learned_event_is_the_wire_shape() {
        let (id, holder, speaker, doubted) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let new = NewFact {
            fact: HeldFact {
                id,
                origin_fact_id: Uuid::nil(),
                holder,
                category: KnowledgeCategory::NpcGossip,
                subject_id: None,
                content: "The mayor \"borrows\" from the tithe".into(),
                tags: vec!["secret".into()],
                confidence: 0.7,
                importance: 0.8,
                hop_count: 2,
                provenance: vec![speaker],
                expires_at: Some(DateTime::<Utc>::UNIX_EPOCH),
                perspective: None,
            },
            source: Source::Gossip,
            source_memory_id: None,
            speaker_id: Some(speaker),
        };
        let revision = Revision { holder, fact_id: doubted, by: id, outcome: Outcome::Doubted { confidence: 0.4 } };
        let topology = Topology::new("npcmem", "NPCMEM", Default::default());
        let message = learned_event(&topology, &new, &[revision]);
        assert_eq!(message.subject, topology.event("knowledge.learned"));
        assert_eq!(message.msg_id.as_deref(), Some(id.to_string().as_str()), "Nats-Msg-Id = event_id");
        let event: KnowledgeLearned = serde_json::from_slice(&message.payload).expect("decodes as the wire type");
        assert_eq!(
            (event.schema_version, event.event_id, event.npc_id, event.from_npc_id),
            (1, id, holder, Some(speaker))
        );
        let expected = serde_json::json!({
            "id": id, "origin_fact_id": Uuid::nil(), "category": "npc_gossip", "subject_id": null,
            "content": "The mayor \"borrows\" from the tithe", "tags": ["secret"], "confidence": 0.7,
            "importance": 0.8, "hop_count": 2, "provenance": [speaker], "source": "gossip",
            "source_memory_id": null, "expires_at": "1970-01-01T00:00:00Z",
            "contradicted": [{"fact_id": doubted, "outcome": "doubted", "confidence": 0.4}],
        });
        assert_eq!(event.fact, expected);
    }
}
