//! The relate tables: tag → dimension map, valence adjustments, crossing thresholds,
//! farming cap, milestone interval, faction attitudes. The seed's values are the
//! defaults; a TOML file (`NPCMEM_RELATE_RULES`) may replace any table without a rebuild,
//! and is refused with a clear message when it names an unknown dimension or a number
//! out of range.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Dimension;
use crate::memory::EmotionalValence;

/// A threshold direction (seed `MemoryEventBridge.THRESHOLDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Above,
    Below,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    pub dimension: Dimension,
    pub direction: Direction,
    pub value: f64,
    /// The signal's `event_type`, e.g. `npc_hostile`.
    pub event_type: String,
}

impl Threshold {
    /// Seed: below = previous ≥ threshold and current < threshold; above = previous ≤
    /// threshold and current > threshold (values are compared rounded, DESIGN §9).
    pub fn crossed(&self, old: f64, new: f64) -> bool {
        match self.direction {
            Direction::Below => old >= self.value && new < self.value,
            Direction::Above => old <= self.value && new > self.value,
        }
    }
}

/// The seed's `FactionAttitude`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attitude {
    Allied,
    Friendly,
    Neutral,
    Unfriendly,
    Hostile,
}

impl Attitude {
    pub const ALL: [Attitude; 5] =
        [Attitude::Allied, Attitude::Friendly, Attitude::Neutral, Attitude::Unfriendly, Attitude::Hostile];

    pub fn as_str(&self) -> &'static str {
        match self {
            Attitude::Allied => "allied",
            Attitude::Friendly => "friendly",
            Attitude::Neutral => "neutral",
            Attitude::Unfriendly => "unfriendly",
            Attitude::Hostile => "hostile",
        }
    }

    pub fn parse(text: &str) -> Option<Attitude> {
        Attitude::ALL.into_iter().find(|attitude| attitude.as_str() == text)
    }
}

/// Every table relate uses. Fields left out of a file keep their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelateRules {
    /// Tag → (dimension → base delta); actual delta = base × importance (× intensity
    /// factor for episodic memories).
    pub tags: BTreeMap<String, BTreeMap<Dimension, f64>>,
    /// Valence → (dimension → delta), added once per episodic memory.
    pub valence: BTreeMap<String, BTreeMap<Dimension, f64>>,
    pub thresholds: Vec<Threshold>,
    /// Most a pair's dimension may rise per UTC day (DESIGN §9 farming cap).
    pub farming_cap_per_day: f64,
    /// `signal.memory_milestone` every this many memories per pair.
    pub milestone_every: i32,
    /// Attitude → modifier on the initial trust and friendliness.
    pub attitudes: BTreeMap<Attitude, f64>,
    /// The summed faction modifier is clamped to ±this.
    pub max_faction_modifier: f64,
    /// Faction reputation levels whose crossing emits `signal.faction_reputation_shift`.
    pub reputation_levels: Vec<f64>,
}

impl Default for RelateRules {
    /// The seed's tables (`TAG_DIMENSION_MAP`, `VALENCE_ADJUSTMENTS`, `THRESHOLDS`,
    /// `FactionAttitude`) and DESIGN §9's cap, milestone and reputation levels.
    fn default() -> Self {
        use Dimension::*;
        let map = |entries: &[(Dimension, f64)]| entries.iter().copied().collect::<BTreeMap<_, _>>();
        let tags = [
            ("helpful", map(&[(Trust, 0.05), (Friendliness, 0.03), (Respect, 0.02)])),
            ("combat", map(&[(Respect, 0.04), (Fear, -0.02)])),
            ("heroic", map(&[(Trust, 0.06), (Respect, 0.05)])),
            ("trade", map(&[(Trust, 0.02), (Friendliness, 0.01)])),
            ("threat", map(&[(Trust, -0.08), (Fear, 0.06)])),
            ("betrayal", map(&[(Trust, -0.15), (Loyalty, -0.10), (Friendliness, -0.08)])),
            ("gift", map(&[(Friendliness, 0.04), (Loyalty, 0.02)])),
            ("insult", map(&[(Friendliness, -0.06), (Respect, -0.03)])),
        ]
        .into_iter()
        .map(|(tag, effects)| (tag.to_owned(), effects))
        .collect();
        let valence = [
            ("positive", map(&[(Friendliness, 0.02), (Trust, 0.01)])),
            ("negative", map(&[(Friendliness, -0.02), (Trust, -0.01)])),
            ("neutral", map(&[])),
        ]
        .into_iter()
        .map(|(valence, effects)| (valence.to_owned(), effects))
        .collect();
        let threshold = |dimension, direction, value, event_type: &str| Threshold {
            dimension,
            direction,
            value,
            event_type: event_type.to_owned(),
        };
        Self {
            tags,
            valence,
            thresholds: vec![
                threshold(Trust, Direction::Below, 0.2, "npc_hostile"),
                threshold(Trust, Direction::Above, 0.8, "npc_trusted_ally"),
                threshold(Fear, Direction::Above, 0.7, "npc_cowered"),
                threshold(Respect, Direction::Above, 0.8, "npc_respect"),
                threshold(Friendliness, Direction::Above, 0.9, "npc_best_friend"),
                threshold(Friendliness, Direction::Below, 0.1, "npc_despise"),
            ],
            farming_cap_per_day: 0.2,
            milestone_every: 10,
            attitudes: [
                (Attitude::Allied, 0.3),
                (Attitude::Friendly, 0.1),
                (Attitude::Neutral, 0.0),
                (Attitude::Unfriendly, -0.1),
                (Attitude::Hostile, -0.3),
            ]
            .into_iter()
            .collect(),
            max_faction_modifier: 0.3,
            reputation_levels: vec![-0.5, -0.25, 0.25, 0.5],
        }
    }
}

/// A rules file that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RulesError {
    #[error("relate rules are not valid TOML for this schema: {0}")]
    Parse(String),
    #[error("relate rules: {0}")]
    Invalid(String),
}

impl RelateRules {
    /// Parses and checks a rules file; tables it leaves out keep the seed's defaults.
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let rules: RelateRules = toml::from_str(text).map_err(|error| RulesError::Parse(error.to_string()))?;
        rules.validate()?;
        Ok(rules)
    }

    pub fn validate(&self) -> Result<(), RulesError> {
        let invalid = |message: String| Err(RulesError::Invalid(message));
        let in_unit = |value: f64| value.is_finite() && (-1.0..=1.0).contains(&value);
        for (tag, effects) in &self.tags {
            if tag.trim().is_empty() {
                return invalid("a tag name is empty".into());
            }
            for (dimension, magnitude) in effects {
                if !in_unit(*magnitude) {
                    return invalid(format!(
                        "tags.{tag}.{}: magnitude {magnitude} is outside [-1, 1]",
                        dimension.as_str()
                    ));
                }
            }
        }
        for (valence, effects) in &self.valence {
            if !["positive", "negative", "neutral"].contains(&valence.as_str()) {
                return invalid(format!("valence.{valence}: not one of positive, negative, neutral"));
            }
            for (dimension, magnitude) in effects {
                if !in_unit(*magnitude) {
                    return invalid(format!(
                        "valence.{valence}.{}: magnitude {magnitude} is outside [-1, 1]",
                        dimension.as_str()
                    ));
                }
            }
        }
        for threshold in &self.thresholds {
            if !(threshold.value.is_finite() && (0.0..=1.0).contains(&threshold.value)) {
                return invalid(format!(
                    "threshold {}: value {} is outside [0, 1]",
                    threshold.event_type, threshold.value
                ));
            }
            if threshold.event_type.trim().is_empty() {
                return invalid("a threshold has an empty event_type".into());
            }
        }
        if !(self.farming_cap_per_day.is_finite() && (0.0..=1.0).contains(&self.farming_cap_per_day)) {
            return invalid(format!("farming_cap_per_day {} is outside [0, 1]", self.farming_cap_per_day));
        }
        if self.milestone_every < 1 {
            return invalid(format!("milestone_every {} must be at least 1", self.milestone_every));
        }
        for (attitude, modifier) in &self.attitudes {
            if !in_unit(*modifier) {
                return invalid(format!("attitudes.{}: modifier {modifier} is outside [-1, 1]", attitude.as_str()));
            }
        }
        if !(self.max_faction_modifier.is_finite() && (0.0..=1.0).contains(&self.max_faction_modifier)) {
            return invalid(format!("max_faction_modifier {} is outside [0, 1]", self.max_faction_modifier));
        }
        if let Some(level) = self.reputation_levels.iter().find(|level| !in_unit(**level)) {
            return invalid(format!("reputation level {level} is outside [-1, 1]"));
        }
        Ok(())
    }

    /// The dimensions a tag moves, with their base deltas (none for an unknown tag).
    pub fn tag_effects(&self, tag: &str) -> impl Iterator<Item = (Dimension, f64)> + '_ {
        self.tags.get(tag).into_iter().flat_map(|effects| effects.iter().map(|(d, m)| (*d, *m)))
    }

    pub fn valence_effects(&self, valence: EmotionalValence) -> impl Iterator<Item = (Dimension, f64)> + '_ {
        self.valence.get(valence.as_str()).into_iter().flat_map(|effects| effects.iter().map(|(d, m)| (*d, *m)))
    }

    pub fn attitude_modifier(&self, attitude: Attitude) -> f64 {
        self.attitudes.get(&attitude).copied().unwrap_or(0.0)
    }
}
