//! Gossip rules (seed §Knowledge Graph & Gossip Subsystem, `GossipSystem`): which fact a
//! speaker shares with a listener, what the listener's copy looks like, and the queue of
//! co-located speaker → listener pairs that keeps a tick's cost proportional to its
//! budget. Pure: the gossip service owns the state and the storage.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::memory::round3;
use crate::wire::KnowledgeCategory;

pub mod contradiction;

/// Seed `MIN_IMPORTANCE_TO_PROPAGATE`, `MIN_CONFIDENCE_TO_PROPAGATE`,
/// `CONFIDENCE_DECAY_PER_HOP`, `max_hops`.
pub const MIN_IMPORTANCE: f64 = 0.5;
pub const MIN_CONFIDENCE: f64 = 0.2;
pub const CONFIDENCE_DECAY_PER_HOP: f64 = 0.1;
pub const MAX_HOPS: i32 = 5;
/// Seed `MAX_FACTS_PER_NPC`: the lowest-importance fact goes when a new one would pass it.
pub const MAX_FACTS_PER_NPC: usize = 500;

/// A fact one NPC holds.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldFact {
    pub id: Uuid,
    /// The fact this copy descends from (its own id for an original).
    pub origin_fact_id: Uuid,
    pub holder: Uuid,
    pub category: KnowledgeCategory,
    pub subject_id: Option<Uuid>,
    pub content: String,
    pub tags: Vec<String>,
    pub confidence: f64,
    pub importance: f64,
    pub hop_count: i32,
    /// The NPCs the fact passed through on its way here, speakers in order.
    pub provenance: Vec<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl HeldFact {
    /// Worth passing on at all, to anyone (seed `_select_gossip` thresholds, expiry).
    pub fn gossip_worthy(&self, now: DateTime<Utc>) -> bool {
        self.importance >= MIN_IMPORTANCE
            && self.confidence >= MIN_CONFIDENCE
            && self.hop_count < MAX_HOPS
            && self.expires_at.is_none_or(|at| at > now)
    }

    /// A secret: spreading it to a new NPC is a `secret_learned` story signal.
    pub fn is_secret(&self) -> bool {
        self.tags.iter().any(|tag| tag == "secret")
    }
}

/// What drives an NPC to talk (seed: social, safety, loyalty, curiosity), each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drives {
    pub social: f64,
    pub safety: f64,
    pub loyalty: f64,
    pub curiosity: f64,
}

impl Default for Drives {
    fn default() -> Self {
        Self { social: 0.5, safety: 0.5, loyalty: 0.5, curiosity: 0.5 }
    }
}

const DANGER_TAGS: &[&str] = &["threat", "dangerous", "combat", "betrayal", "bandits", "violence", "theft"];

/// How strongly the speaker's drives pull toward sharing `fact` (seed "need-driven"
/// selection): safety for dangers, loyalty for faction intelligence, curiosity for world
/// events and places, social for gossip about people.
pub fn drive_pull(fact: &HeldFact, drives: &Drives) -> f64 {
    let dangerous = fact.tags.iter().any(|tag| DANGER_TAGS.contains(&tag.as_str()));
    let mut pull = 0.0_f64;
    if dangerous {
        pull = pull.max(drives.safety);
    }
    match fact.category {
        KnowledgeCategory::FactionIntel => pull = pull.max(drives.loyalty),
        KnowledgeCategory::WorldEvent | KnowledgeCategory::LocationInfo => pull = pull.max(drives.curiosity),
        KnowledgeCategory::NpcGossip | KnowledgeCategory::PlayerTrait => pull = pull.max(drives.social),
    }
    pull
}

/// The fact `speaker` shares with `listener`, if any: gossip-worthy, the listener not in
/// its provenance (no loops) and not already knowing its origin; the highest
/// importance × (1 + drive pull) wins (ties: higher confidence, then id).
pub fn select<'a>(
    candidates: &'a [HeldFact],
    listener: Uuid,
    speaker_drives: &Drives,
    listener_knows: impl Fn(Uuid) -> bool,
    now: DateTime<Utc>,
) -> Option<&'a HeldFact> {
    candidates
        .iter()
        .filter(|fact| fact.gossip_worthy(now) && fact.holder != listener)
        .filter(|fact| !fact.provenance.contains(&listener) && !listener_knows(fact.origin_fact_id))
        .max_by(|a, b| {
            let score = |fact: &HeldFact| fact.importance * (1.0 + drive_pull(fact, speaker_drives));
            score(a).total_cmp(&score(b)).then(a.confidence.total_cmp(&b.confidence)).then(b.id.cmp(&a.id))
        })
}

/// The listener's copy: same content and origin, confidence − 0.1 (rounded, DESIGN §9),
/// one more hop, the speaker appended to the provenance.
pub fn propagate(fact: &HeldFact, speaker: Uuid, listener: Uuid, new_id: Uuid) -> HeldFact {
    let mut provenance = fact.provenance.clone();
    provenance.push(speaker);
    HeldFact {
        id: new_id,
        origin_fact_id: fact.origin_fact_id,
        holder: listener,
        category: fact.category,
        subject_id: fact.subject_id,
        content: fact.content.clone(),
        tags: fact.tags.clone(),
        confidence: round3((fact.confidence - CONFIDENCE_DECAY_PER_HOP).max(0.0)),
        importance: fact.importance,
        hop_count: fact.hop_count + 1,
        provenance,
        expires_at: fact.expires_at,
    }
}

/// Where NPCs are, and the pre-computed queue of co-located (speaker, listener) pairs
/// whose speaker has something worth saying. Moves and new facts mark rooms dirty; only
/// dirty rooms are re-paired, so neither a tick nor a rebuild is O(NPCs²).
#[derive(Debug, Default)]
pub struct GossipQueue {
    room_of: HashMap<Uuid, String>,
    rooms: HashMap<String, Vec<Uuid>>,
    talkers: HashSet<Uuid>,
    dirty: HashSet<String>,
    queue: VecDeque<(Uuid, Uuid)>,
}

impl GossipQueue {
    /// `npc` is now in `room` (a new NPC, or a move).
    pub fn moved(&mut self, npc: Uuid, room: &str) {
        if let Some(old) = self.room_of.insert(npc, room.to_owned()) {
            if old == room {
                return;
            }
            if let Some(members) = self.rooms.get_mut(&old) {
                members.retain(|member| *member != npc);
            }
            self.dirty.insert(old);
        }
        self.rooms.entry(room.to_owned()).or_default().push(npc);
        self.dirty.insert(room.to_owned());
    }

    /// Whether `npc` holds a gossip-worthy fact now (it gained or lost one).
    pub fn set_talker(&mut self, npc: Uuid, has_gossip: bool) {
        let changed = if has_gossip { self.talkers.insert(npc) } else { self.talkers.remove(&npc) };
        if changed && let Some(room) = self.room_of.get(&npc) {
            self.dirty.insert(room.clone());
        }
    }

    pub fn room_of(&self, npc: Uuid) -> Option<&str> {
        self.room_of.get(&npc).map(String::as_str)
    }

    /// Re-pairs the dirty rooms: every talker with every other NPC of its room. Pairs of
    /// rooms that changed are dropped lazily by [`GossipQueue::next_pair`] (they no longer
    /// share a room). Returns the pairs added.
    pub fn rebuild(&mut self) -> usize {
        let mut added = 0;
        for room in std::mem::take(&mut self.dirty) {
            let Some(members) = self.rooms.get(&room) else { continue };
            for speaker in members.iter().filter(|npc| self.talkers.contains(npc)) {
                for listener in members.iter().filter(|npc| *npc != speaker) {
                    self.queue.push_back((*speaker, *listener));
                    added += 1;
                }
            }
        }
        added
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The next pair still co-located, speaker still a talker; stale ones are dropped.
    pub fn next_pair(&mut self) -> Option<(Uuid, Uuid)> {
        while let Some((speaker, listener)) = self.queue.pop_front() {
            let together = self.room_of.get(&speaker).is_some_and(|room| self.room_of.get(&listener) == Some(room));
            if together && self.talkers.contains(&speaker) {
                return Some((speaker, listener));
            }
        }
        None
    }

    /// Puts a pair that just exchanged a fact back at the end: its speaker may have more
    /// to tell (pairs with nothing to say are simply not put back).
    pub fn requeue(&mut self, speaker: Uuid, listener: Uuid) {
        self.queue.push_back((speaker, listener));
    }

    /// NPCs with a known room.
    pub fn placed(&self) -> usize {
        self.room_of.len()
    }

    /// Pairs waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests;
