//! Gossip rules: which fact a speaker shares with a listener, what the listener's copy looks like, and the queue of
//! co-located speaker → listener pairs that keeps a tick's cost proportional to its
//! budget. Pure: the gossip service owns the state and the storage.

use std::collections::VecDeque;
use std::sync::Arc;

use chrono::{DateTime, Utc};
// The queue looks NPCs and pairs up by the thousand per tick: SipHash was a third of that.
use foldhash::{HashMap, HashSet};
use uuid::Uuid;

use crate::memory::round3;
use crate::perspective::Perspective;
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
    /// Who did what to whom, so each holder reads it from their own side; shared by every
    /// copy gossip makes of it.
    pub perspective: Option<Arc<Perspective>>,
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

/// The listener's copy: same content and origin, confidence − 0.1 (rounded),
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
        perspective: fact.perspective.clone(),
    }
}

/// Where NPCs are, and the pre-computed queue of co-located (speaker, listener) pairs
/// whose speaker has something worth saying. A move pairs the mover with its new room
/// mates; a speaker that learned something is offered to the mates who do not know it
/// ([`GossipQueue::offer`]); nothing else is re-paired, so neither a tick nor a rebuild
/// is O(NPCs²). A pair is queued at most once, and pairs whose NPCs no longer share a
/// room are dropped when reached (or all at once when moves have left more of them than
/// live ones), so a world on the move does not grow the queue. NPCs and rooms are
/// numbered internally: a queued pair costs 8 bytes, plus 8 in the set that keeps it
/// unique.
#[derive(Debug, Default)]
pub struct GossipQueue {
    index_of: HashMap<Uuid, u32>,
    npcs: Vec<Uuid>,
    /// Per NPC number: its room number (`NO_ROOM` before its first move) and whether it
    /// holds something worth telling.
    room_of: Vec<u32>,
    talker: Vec<bool>,
    room_index: HashMap<String, u32>,
    room_names: Vec<String>,
    members: Vec<Vec<u32>>,
    /// NPCs that moved since the last rebuild.
    moved_in: HashSet<u32>,
    queue: VecDeque<(u32, u32)>,
    queued: HashSet<u64>,
    /// At most how many queued pairs moves have parted since the last compaction.
    parted: usize,
}

const NO_ROOM: u32 = u32::MAX;

fn pair_key(speaker: u32, listener: u32) -> u64 {
    (u64::from(speaker) << 32) | u64::from(listener)
}

impl GossipQueue {
    fn number(&mut self, npc: Uuid) -> u32 {
        if let Some(index) = self.index_of.get(&npc) {
            return *index;
        }
        let index = u32::try_from(self.npcs.len()).expect("fewer than 4 billion NPCs");
        self.index_of.insert(npc, index);
        self.npcs.push(npc);
        self.room_of.push(NO_ROOM);
        self.talker.push(false);
        index
    }

    /// `npc` is now in `room` (a new NPC, or a move).
    pub fn moved(&mut self, npc: Uuid, room: &str) {
        let index = self.number(npc);
        let room = match self.room_index.get(room) {
            Some(room) => *room,
            None => {
                let number = u32::try_from(self.room_names.len()).expect("fewer than 4 billion rooms");
                self.room_index.insert(room.to_owned(), number);
                self.room_names.push(room.to_owned());
                self.members.push(Vec::new());
                number
            }
        };
        let old = std::mem::replace(&mut self.room_of[index as usize], room);
        if old == room {
            return;
        }
        if old != NO_ROOM {
            let members = &mut self.members[old as usize];
            members.retain(|member| *member != index);
            self.parted += 2 * members.len();
        }
        self.members[room as usize].push(index);
        self.moved_in.insert(index);
    }

    /// Whether `npc` holds a gossip-worthy fact now.
    pub fn set_talker(&mut self, npc: Uuid, has_gossip: bool) {
        let index = self.number(npc);
        self.talker[index as usize] = has_gossip;
    }

    /// The numbers of the NPCs in `npc`'s room, itself excluded.
    fn mate_numbers(&self, npc: Uuid) -> Vec<u32> {
        let Some(&index) = self.index_of.get(&npc) else { return Vec::new() };
        let room = self.room_of[index as usize];
        if room == NO_ROOM {
            return Vec::new();
        }
        self.members[room as usize].iter().copied().filter(|mate| *mate != index).collect()
    }

    /// The NPCs in `npc`'s room, itself excluded.
    pub fn mates(&self, npc: Uuid) -> Vec<Uuid> {
        self.mate_numbers(npc).into_iter().map(|mate| self.npcs[mate as usize]).collect()
    }

    /// Offers `speaker` to each room mate `wants` (one who does not know what it just
    /// learned, say): [`GossipQueue::offer`] for each, without a lookup per mate.
    pub fn offer_to_mates(&mut self, speaker: Uuid, wants: impl Fn(Uuid) -> bool) {
        let Some(&index) = self.index_of.get(&speaker) else { return };
        for mate in self.mate_numbers(speaker) {
            if wants(self.npcs[mate as usize]) {
                self.push(index, mate);
            }
        }
    }

    pub fn room_of(&self, npc: Uuid) -> Option<&str> {
        let room = *self.room_of.get(*self.index_of.get(&npc)? as usize)?;
        self.room_names.get(room as usize).map(String::as_str)
    }

    fn push(&mut self, speaker: u32, listener: u32) -> bool {
        if speaker == listener || !self.queued.insert(pair_key(speaker, listener)) {
            return false;
        }
        self.queue.push_back((speaker, listener));
        true
    }

    fn together(&self, speaker: u32, listener: u32) -> bool {
        let room = self.room_of[speaker as usize];
        room != NO_ROOM && room == self.room_of[listener as usize] && self.talker[speaker as usize]
    }

    /// Pairs the NPCs that moved with their room mates, both ways. Returns the pairs added.
    pub fn rebuild(&mut self) -> usize {
        let mut added = 0;
        for npc in std::mem::take(&mut self.moved_in) {
            let room = self.room_of[npc as usize];
            let mates = std::mem::take(&mut self.members[room as usize]);
            for &mate in &mates {
                if self.talker[npc as usize] {
                    added += usize::from(self.push(npc, mate));
                }
                if self.talker[mate as usize] {
                    added += usize::from(self.push(mate, npc));
                }
            }
            self.members[room as usize] = mates;
        }
        if self.parted > 100_000 && self.parted > self.queue.len() / 2 {
            self.compact();
        }
        added
    }

    /// Drops every pair whose NPCs no longer share a room (or whose speaker has nothing
    /// left to tell): O(queue), rare.
    fn compact(&mut self) {
        let mut queue = std::mem::take(&mut self.queue);
        queue.retain(|(speaker, listener)| {
            let keep = self.together(*speaker, *listener);
            if !keep {
                self.queued.remove(&pair_key(*speaker, *listener));
            }
            keep
        });
        self.queue = queue;
        self.parted = 0;
    }

    pub fn is_dirty(&self) -> bool {
        !self.moved_in.is_empty()
    }

    /// The next pair still co-located, speaker still a talker; stale ones are dropped.
    /// The pair leaves the queue: [`GossipQueue::offer`] puts it back.
    pub fn next_pair(&mut self) -> Option<(Uuid, Uuid)> {
        while let Some((speaker, listener)) = self.queue.pop_front() {
            self.queued.remove(&pair_key(speaker, listener));
            if self.together(speaker, listener) {
                return Some((self.npcs[speaker as usize], self.npcs[listener as usize]));
            }
        }
        None
    }

    /// Queues a pair unless it is queued already: one that just exchanged a fact (its
    /// speaker may have more to tell; pairs with nothing to say are not put back), or a
    /// speaker that learned what a room mate does not know yet.
    pub fn offer(&mut self, speaker: Uuid, listener: Uuid) {
        let (speaker, listener) = (self.number(speaker), self.number(listener));
        self.push(speaker, listener);
    }

    /// NPCs with a known room.
    pub fn placed(&self) -> usize {
        self.room_of.iter().filter(|room| **room != NO_ROOM).count()
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
