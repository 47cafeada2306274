//! Relationships between an NPC and a player: six dimensions in
//! [0, 1], the deltas memories cause, the daily farming cap, stage and disposition, and
//! the threshold crossings that become story signals.
//!
//! Pure: [`apply_conversation`] is the one code path that changes a relationship, so a
//! replay of the recorded deltas in the recorded order reproduces the stored values to
//! the last bit.

pub mod factions;
pub mod rules;
#[cfg(test)]
mod scenes;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::memory::{MemoryType, SafetyFlag, round3};
use crate::wire::{RelationshipSnapshot, StoredMemory};

pub use rules::{Attitude, Direction, RelateRules, RulesError, RulesPreset, Threshold};

/// The six dimensions, in the order [`Dims`] stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Trust,
    Fear,
    Respect,
    Loyalty,
    Friendliness,
    RomanticInterest,
}

impl Dimension {
    pub const ALL: [Dimension; 6] = [
        Dimension::Trust,
        Dimension::Fear,
        Dimension::Respect,
        Dimension::Loyalty,
        Dimension::Friendliness,
        Dimension::RomanticInterest,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Dimension::Trust => "trust",
            Dimension::Fear => "fear",
            Dimension::Respect => "respect",
            Dimension::Loyalty => "loyalty",
            Dimension::Friendliness => "friendliness",
            Dimension::RomanticInterest => "romantic_interest",
        }
    }

    pub fn index(&self) -> usize {
        *self as usize
    }
}

/// One value per [`Dimension`], indexed by [`Dimension::index`].
pub type Dims = [f64; 6];

/// The stages (docs/relationships.md), first match wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Stranger,
    Enemy,
    Rival,
    TrustedAlly,
    CloseFriend,
    Friend,
    Acquaintance,
}

impl Stage {
    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Stranger => "stranger",
            Stage::Enemy => "enemy",
            Stage::Rival => "rival",
            Stage::TrustedAlly => "trusted_ally",
            Stage::CloseFriend => "close_friend",
            Stage::Friend => "friend",
            Stage::Acquaintance => "acquaintance",
        }
    }

    pub fn parse(text: &str) -> Option<Stage> {
        [
            Stage::Stranger,
            Stage::Enemy,
            Stage::Rival,
            Stage::TrustedAlly,
            Stage::CloseFriend,
            Stage::Friend,
            Stage::Acquaintance,
        ]
        .into_iter()
        .find(|stage| stage.as_str() == text)
    }
}

/// A relationship as stored (one row of `relationships`).
#[derive(Debug, Clone, PartialEq)]
pub struct Relationship {
    pub dims: Dims,
    pub disposition: f64,
    pub stage: Stage,
    pub interaction_count: i32,
    pub memory_count: i32,
    pub first_interaction: Option<DateTime<Utc>>,
    pub last_interaction: Option<DateTime<Utc>>,
    /// The UTC day `gains` count for.
    pub gains_day: Option<NaiveDate>,
    /// Positive change per dimension applied on `gains_day` (the farming cap's tally).
    pub gains: Dims,
    pub version: i64,
}

impl Relationship {
    /// The initial values plus the faction modifier on trust and friendliness.
    /// Initialisation fires no signal: crossings are only ever detected on changes.
    pub fn initial(faction_modifier: f64) -> Self {
        let mut dims = [0.5, 0.0, 0.5, 0.5, 0.5, 0.0];
        for dimension in [Dimension::Trust, Dimension::Friendliness] {
            dims[dimension.index()] = round3((dims[dimension.index()] + faction_modifier).clamp(0.0, 1.0));
        }
        let disposition = disposition(&dims);
        Self {
            dims,
            disposition,
            stage: Stage::Stranger,
            interaction_count: 0,
            memory_count: 0,
            first_interaction: None,
            last_interaction: None,
            gains_day: None,
            gains: [0.0; 6],
            version: 0,
        }
    }

    pub fn get(&self, dimension: Dimension) -> f64 {
        self.dims[dimension.index()]
    }

    pub fn snapshot(&self) -> RelationshipSnapshot {
        RelationshipSnapshot {
            trust: self.get(Dimension::Trust),
            fear: self.get(Dimension::Fear),
            respect: self.get(Dimension::Respect),
            loyalty: self.get(Dimension::Loyalty),
            friendliness: self.get(Dimension::Friendliness),
            romantic_interest: self.get(Dimension::RomanticInterest),
            stage: self.stage.as_str().to_owned(),
        }
    }
}

/// disposition ∈ [−1, 1], rounded to 3 decimals.
pub fn disposition(dims: &Dims) -> f64 {
    let get = |dimension: Dimension| dims[dimension.index()];
    let warmth = 0.35 * get(Dimension::Trust)
        + 0.35 * get(Dimension::Friendliness)
        + 0.15 * get(Dimension::Respect)
        + 0.15 * get(Dimension::Loyalty);
    let dread = 0.5 * (get(Dimension::Fear) - 0.5).max(0.0);
    round3((2.0 * warmth - 1.0 - dread).clamp(-1.0, 1.0))
}

/// The stage (docs/relationships.md), first match wins.
pub fn stage(dims: &Dims, disposition: f64, interaction_count: i32) -> Stage {
    let trust = dims[Dimension::Trust.index()];
    let loyalty = dims[Dimension::Loyalty.index()];
    if interaction_count == 0 {
        Stage::Stranger
    } else if trust < 0.2 || disposition <= -0.45 {
        Stage::Enemy
    } else if disposition <= -0.2 {
        Stage::Rival
    } else if trust >= 0.8 && loyalty >= 0.65 && disposition >= 0.5 {
        Stage::TrustedAlly
    } else if trust >= 0.7 && disposition >= 0.45 && interaction_count >= 5 {
        Stage::CloseFriend
    } else if trust >= 0.6 && disposition >= 0.2 {
        Stage::Friend
    } else {
        Stage::Acquaintance
    }
}

/// The deltas of one conversation's memories (seed `RelationshipEvaluator`): per tag,
/// base × importance, × (0.5 + 0.5·intensity) for episodic memories; plus the valence
/// baseline for episodic memories (× the same intensity factor when
/// `rules.scale_valence_by_intensity`). A negative memory takes a tag's
/// `tags_when_negative` effects where they exist. Memories the safety filter flagged
/// `suspect` change nothing: a manipulation attempt must not buy trust; nor do memories
/// with an inert tag (facts are knowledge, not events).
pub fn conversation_deltas(memories: &[StoredMemory], rules: &RelateRules) -> Dims {
    let mut deltas = [0.0; 6];
    let counted = memories
        .iter()
        .filter(|memory| memory.safety_flag != SafetyFlag::Suspect)
        .filter(|memory| !rules.is_inert(&memory.tags));
    for memory in counted {
        let episodic = memory.memory_type == MemoryType::Episodic;
        let intensity_factor = if episodic { 0.5 + memory.emotional_intensity.clamp(0.0, 1.0) * 0.5 } else { 1.0 };
        let importance = memory.importance.clamp(0.0, 1.0);
        for tag in &memory.tags {
            for (dimension, base) in rules.tag_effects_for(tag, memory.emotional_valence) {
                deltas[dimension.index()] += base * importance * intensity_factor;
            }
        }
        if episodic {
            let scale = if rules.scale_valence_by_intensity { intensity_factor } else { 1.0 };
            for (dimension, adjustment) in rules.valence_effects(memory.emotional_valence) {
                deltas[dimension.index()] += adjustment * scale;
            }
        }
    }
    deltas
}

/// How good a standing a stage is, for "never raises the stage": enemy < rival <
/// stranger = acquaintance < friend < close friend < trusted ally.
pub fn stage_rank(stage: Stage) -> u8 {
    match stage {
        Stage::Enemy => 0,
        Stage::Rival => 1,
        Stage::Stranger | Stage::Acquaintance => 2,
        Stage::Friend => 3,
        Stage::CloseFriend => 4,
        Stage::TrustedAlly => 5,
    }
}

/// The stage after a conversation. A conversation that lowered the disposition never
/// promotes: without this an insult on the fifth meeting could make a close friend
/// (the interaction count alone unlocks it), and a first meeting with an NPC of an
/// allied faction that opened with a threat would make a friend.
fn stage_after(current: &Relationship, next: &Relationship) -> Stage {
    let computed = stage(&next.dims, next.disposition, next.interaction_count);
    if next.disposition >= current.disposition || stage_rank(computed) <= stage_rank(current.stage) {
        return computed;
    }
    match current.stage {
        Stage::Stranger => Stage::Acquaintance,
        held => held,
    }
}

/// What one conversation did to a relationship.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub before: Relationship,
    pub after: Relationship,
    /// Threshold crossings, old vs new value, in [`RelateRules::thresholds`] order.
    pub crossings: Vec<Crossing>,
    /// Some((old, new)) when the stage changed.
    pub stage_change: Option<(Stage, Stage)>,
    /// Some(n) when the memory count passed a multiple of the milestone interval (n is
    /// the multiple reached).
    pub milestone: Option<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    pub event_type: String,
    pub dimension: Dimension,
    /// The threshold's value and direction, which with the dimension name the crossing.
    pub threshold: f64,
    pub direction: Direction,
    pub old_value: f64,
    pub new_value: f64,
}

/// Applies one conversation: `deltas` (from [`conversation_deltas`]) under the daily
/// farming cap on positive change (except `rules.farming_cap_exempt`), clamped to
/// [0, 1] and rounded to 3 decimals; one more interaction (also with no memories),
/// `memory_count` more memories, and `last_interaction` = `ended_at` when later; the
/// stage, never promoted by a conversation that lowered the disposition. The version
/// goes up by one.
pub fn apply_conversation(
    current: &Relationship,
    deltas: &Dims,
    memory_count: i32,
    ended_at: DateTime<Utc>,
    rules: &RelateRules,
) -> Applied {
    let mut next = current.clone();
    let day = ended_at.date_naive();
    if next.gains_day != Some(day) {
        next.gains_day = Some(day);
        next.gains = [0.0; 6];
    }
    for dimension in Dimension::ALL {
        let index = dimension.index();
        let mut delta = deltas[index];
        if delta > 0.0 && !rules.farming_cap_exempt.contains(&dimension) {
            let room = (rules.farming_cap_per_day - next.gains[index]).max(0.0);
            delta = delta.min(room);
        }
        let old = next.dims[index];
        let new = round3((old + delta).clamp(0.0, 1.0));
        if new > old {
            next.gains[index] = round3(next.gains[index] + (new - old));
        }
        next.dims[index] = new;
    }
    next.interaction_count = next.interaction_count.saturating_add(1);
    next.memory_count = next.memory_count.saturating_add(memory_count.max(0));
    next.first_interaction = Some(next.first_interaction.map_or(ended_at, |first| first.min(ended_at)));
    next.last_interaction = Some(next.last_interaction.map_or(ended_at, |last| last.max(ended_at)));
    next.disposition = disposition(&next.dims);
    next.stage = stage_after(current, &next);
    next.version = current.version + 1;

    let crossings = rules
        .thresholds
        .iter()
        .filter_map(|threshold| {
            let old_value = current.get(threshold.dimension);
            let new_value = next.get(threshold.dimension);
            threshold.crossed(old_value, new_value).then(|| Crossing {
                event_type: threshold.event_type.clone(),
                dimension: threshold.dimension,
                threshold: threshold.value,
                direction: threshold.direction,
                old_value,
                new_value,
            })
        })
        .collect();
    let stage_change = (current.stage != next.stage).then_some((current.stage, next.stage));
    let every = rules.milestone_every.max(1);
    let milestone =
        (next.memory_count / every > current.memory_count / every).then_some(next.memory_count / every * every);
    Applied { before: current.clone(), after: next, crossings, stage_change, milestone }
}

/// The seed's faction modifier: the attitudes of the NPC's factions toward the player's
/// factions, summed and clamped to ±`rules.max_faction_modifier`.
pub fn faction_modifier(
    npc_factions: &[String],
    player_factions: &[String],
    attitude_of: impl Fn(&str, &str) -> Option<Attitude>,
    rules: &RelateRules,
) -> f64 {
    let mut total = 0.0;
    for npc_faction in npc_factions {
        for player_faction in player_factions {
            if let Some(attitude) = attitude_of(npc_faction, player_faction) {
                total += rules.attitude_modifier(attitude);
            }
        }
    }
    round3(total.clamp(-rules.max_faction_modifier, rules.max_faction_modifier))
}

/// A faction-reputation level crossed between `old` and `new` (±0.25, ±0.5):
/// the level and whether it was crossed upwards.
pub fn reputation_crossings(old: f64, new: f64, levels: &[f64]) -> Vec<(f64, bool)> {
    levels
        .iter()
        .filter_map(|&level| {
            if old < level && new >= level {
                Some((level, true))
            } else if old >= level && new < level {
                Some((level, false))
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
