//! The relate tables: tag → dimension map, valence adjustments, crossing thresholds,
//! farming cap, milestone interval, faction attitudes. The defaults are tuned so the
//! canonical scenes of docs/relationships.md hold; the original design's values stay available as
//! [`RelateRules::seed`] (`preset = "seed"`). A TOML file (`NPCMEM_RELATE_RULES`) may
//! replace any table without a rebuild, and is refused with a clear message when it
//! names an unknown dimension or a number out of range.

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
    /// threshold and current > threshold (values are compared rounded).
    pub fn crossed(&self, old: f64, new: f64) -> bool {
        match self.direction {
            Direction::Below => old >= self.value && new < self.value,
            Direction::Above => old <= self.value && new > self.value,
        }
    }
}

/// The original design's `FactionAttitude`.
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
    /// Tag → effects used instead of its `tags` entry when the memory's valence is
    /// negative: a fight against the NPC frightens it where a fight beside it reassures.
    pub tags_when_negative: BTreeMap<String, BTreeMap<Dimension, f64>>,
    /// Valence → (dimension → delta), added once per episodic memory.
    pub valence: BTreeMap<String, BTreeMap<Dimension, f64>>,
    /// Scale the valence adjustment by the memory's intensity factor as the tag effects
    /// are, so a minor insult nudges less than a severe one.
    pub scale_valence_by_intensity: bool,
    /// A memory carrying any of these tags is knowledge, not an event ("the player's
    /// name is Aria"): it moves nothing.
    pub inert_tags: Vec<String>,
    pub thresholds: Vec<Threshold>,
    /// Most a pair's dimension may rise per UTC day.
    pub farming_cap_per_day: f64,
    /// Dimensions whose rise the farming cap does not hold back. The cap stops a player
    /// farming goodwill; fear rising is no gift to farm, and a capped fear would leave a
    /// twice-threatened NPC calm.
    pub farming_cap_exempt: Vec<Dimension>,
    /// `signal.memory_milestone` every this many memories per pair.
    pub milestone_every: i32,
    /// Attitude → modifier on the initial trust and friendliness.
    pub attitudes: BTreeMap<Attitude, f64>,
    /// The summed faction modifier is clamped to ±this.
    pub max_faction_modifier: f64,
    /// Faction reputation levels whose crossing emits `signal.faction_reputation_shift`.
    pub reputation_levels: Vec<f64>,
}

/// Named sets of defaults a rules file can start from (`preset = "seed"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RulesPreset {
    /// Tuned so the scenes of docs/relationships.md read true.
    #[default]
    Default,
    /// The original design's magnitudes and mechanics, unchanged.
    Seed,
}

impl RulesPreset {
    pub fn rules(self) -> RelateRules {
        match self {
            RulesPreset::Default => RelateRules::default(),
            RulesPreset::Seed => RelateRules::seed(),
        }
    }
}

type Effects = BTreeMap<Dimension, f64>;

fn effects(entries: &[(Dimension, f64)]) -> Effects {
    entries.iter().copied().collect()
}

fn named<'a>(entries: impl IntoIterator<Item = (&'a str, Effects)>) -> BTreeMap<String, Effects> {
    entries.into_iter().map(|(name, effects)| (name.to_owned(), effects)).collect()
}

impl Default for RelateRules {
    /// The original design's structure with magnitudes tuned against the extractor's memories (see
    /// docs/relationships.md, "Canonical scenes"): the kinds the original design never mapped
    /// (rescue, theft, promise, secret, help) have effects, harm weighs several times
    /// what it did, a fight against the NPC frightens it, facts move nothing, valence
    /// scales with intensity, and fear is not held back by the farming cap.
    fn default() -> Self {
        use Dimension::*;
        let tags = named([
            ("helpful", effects(&[(Trust, 0.05), (Friendliness, 0.03), (Respect, 0.02)])),
            ("help", effects(&[(Trust, 0.05), (Friendliness, 0.05), (Loyalty, 0.03)])),
            ("combat", effects(&[(Respect, 0.15), (Fear, -0.05), (Loyalty, 0.06)])),
            ("heroic", effects(&[(Trust, 0.10), (Respect, 0.12), (Fear, -0.05)])),
            (
                "rescue",
                effects(&[(Trust, 0.25), (Friendliness, 0.20), (Loyalty, 0.25), (Respect, 0.10), (Fear, -0.15)]),
            ),
            ("trade", effects(&[(Trust, 0.06), (Friendliness, 0.03)])),
            ("threat", effects(&[(Trust, -0.25), (Fear, 0.60), (Friendliness, -0.20), (Loyalty, -0.10)])),
            ("betrayal", effects(&[(Trust, -0.45), (Loyalty, -0.35), (Friendliness, -0.25)])),
            ("theft", effects(&[(Trust, -0.15), (Friendliness, -0.10)])),
            ("gift", effects(&[(Friendliness, 0.12), (Loyalty, 0.05), (Trust, 0.03)])),
            ("insult", effects(&[(Friendliness, -0.25), (Respect, -0.15), (Trust, -0.05)])),
            ("promise", effects(&[(Trust, 0.08), (Friendliness, 0.03)])),
            ("secret", effects(&[(Trust, 0.08), (Friendliness, 0.04), (Loyalty, 0.04)])),
        ]);
        let tags_when_negative =
            named([("combat", effects(&[(Fear, 0.30), (Trust, -0.20), (Friendliness, -0.10), (Respect, 0.05)]))]);
        // Kindness slowly eases fear, or nothing but a rescue ever would.
        let valence = named([
            ("positive", effects(&[(Friendliness, 0.02), (Trust, 0.01), (Fear, -0.03)])),
            ("negative", effects(&[(Friendliness, -0.03), (Trust, -0.02)])),
            ("neutral", effects(&[])),
        ]);
        Self {
            tags,
            tags_when_negative,
            valence,
            scale_valence_by_intensity: true,
            inert_tags: vec!["fact".to_owned()],
            farming_cap_exempt: vec![Fear],
            ..Self::seed()
        }
    }
}

impl RelateRules {
    /// The original design's tables (`TAG_DIMENSION_MAP`, `VALENCE_ADJUSTMENTS`, `THRESHOLDS`,
    /// `FactionAttitude`) and the cap, milestone and reputation levels of docs/relationships.md, with the
    /// seed's mechanics (flat valence, every rise capped).
    pub fn seed() -> Self {
        use Dimension::*;
        let tags = named([
            ("helpful", effects(&[(Trust, 0.05), (Friendliness, 0.03), (Respect, 0.02)])),
            ("combat", effects(&[(Respect, 0.04), (Fear, -0.02)])),
            ("heroic", effects(&[(Trust, 0.06), (Respect, 0.05)])),
            ("trade", effects(&[(Trust, 0.02), (Friendliness, 0.01)])),
            ("threat", effects(&[(Trust, -0.08), (Fear, 0.06)])),
            ("betrayal", effects(&[(Trust, -0.15), (Loyalty, -0.10), (Friendliness, -0.08)])),
            ("gift", effects(&[(Friendliness, 0.04), (Loyalty, 0.02)])),
            ("insult", effects(&[(Friendliness, -0.06), (Respect, -0.03)])),
        ]);
        let valence = named([
            ("positive", effects(&[(Friendliness, 0.02), (Trust, 0.01)])),
            ("negative", effects(&[(Friendliness, -0.02), (Trust, -0.01)])),
            ("neutral", effects(&[])),
        ]);
        let threshold = |dimension, direction, value, event_type: &str| Threshold {
            dimension,
            direction,
            value,
            event_type: event_type.to_owned(),
        };
        Self {
            tags,
            tags_when_negative: BTreeMap::new(),
            valence,
            scale_valence_by_intensity: false,
            inert_tags: Vec::new(),
            thresholds: vec![
                threshold(Trust, Direction::Below, 0.2, "npc_hostile"),
                threshold(Trust, Direction::Above, 0.8, "npc_trusted_ally"),
                threshold(Fear, Direction::Above, 0.7, "npc_cowered"),
                threshold(Respect, Direction::Above, 0.8, "npc_respect"),
                threshold(Friendliness, Direction::Above, 0.9, "npc_best_friend"),
                threshold(Friendliness, Direction::Below, 0.1, "npc_despise"),
            ],
            farming_cap_per_day: 0.2,
            farming_cap_exempt: Vec::new(),
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

/// A rules file as written: a preset to start from, and the tables that replace the
/// preset's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    preset: RulesPreset,
    tags: Option<BTreeMap<String, Effects>>,
    tags_when_negative: Option<BTreeMap<String, Effects>>,
    valence: Option<BTreeMap<String, Effects>>,
    scale_valence_by_intensity: Option<bool>,
    inert_tags: Option<Vec<String>>,
    thresholds: Option<Vec<Threshold>>,
    farming_cap_per_day: Option<f64>,
    farming_cap_exempt: Option<Vec<Dimension>>,
    milestone_every: Option<i32>,
    attitudes: Option<BTreeMap<Attitude, f64>>,
    max_faction_modifier: Option<f64>,
    reputation_levels: Option<Vec<f64>>,
}

impl RulesFile {
    fn into_rules(self) -> RelateRules {
        let base = self.preset.rules();
        RelateRules {
            tags: self.tags.unwrap_or(base.tags),
            tags_when_negative: self.tags_when_negative.unwrap_or(base.tags_when_negative),
            valence: self.valence.unwrap_or(base.valence),
            scale_valence_by_intensity: self.scale_valence_by_intensity.unwrap_or(base.scale_valence_by_intensity),
            inert_tags: self.inert_tags.unwrap_or(base.inert_tags),
            thresholds: self.thresholds.unwrap_or(base.thresholds),
            farming_cap_per_day: self.farming_cap_per_day.unwrap_or(base.farming_cap_per_day),
            farming_cap_exempt: self.farming_cap_exempt.unwrap_or(base.farming_cap_exempt),
            milestone_every: self.milestone_every.unwrap_or(base.milestone_every),
            attitudes: self.attitudes.unwrap_or(base.attitudes),
            max_faction_modifier: self.max_faction_modifier.unwrap_or(base.max_faction_modifier),
            reputation_levels: self.reputation_levels.unwrap_or(base.reputation_levels),
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
    /// Parses and checks a rules file; tables it leaves out keep those of its `preset`
    /// (`default` unless it says `preset = "seed"`).
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let file: RulesFile = toml::from_str(text).map_err(|error| RulesError::Parse(error.to_string()))?;
        let rules = file.into_rules();
        rules.validate()?;
        Ok(rules)
    }

    pub fn validate(&self) -> Result<(), RulesError> {
        let invalid = |message: String| Err(RulesError::Invalid(message));
        let in_unit = |value: f64| value.is_finite() && (-1.0..=1.0).contains(&value);
        for (table, tags) in [("tags", &self.tags), ("tags_when_negative", &self.tags_when_negative)] {
            for (tag, effects) in tags {
                if tag.trim().is_empty() {
                    return invalid(format!("a tag name in {table} is empty"));
                }
                for (dimension, magnitude) in effects {
                    if !in_unit(*magnitude) {
                        return invalid(format!(
                            "{table}.{tag}.{}: magnitude {magnitude} is outside [-1, 1]",
                            dimension.as_str()
                        ));
                    }
                }
            }
        }
        if self.inert_tags.iter().any(|tag| tag.trim().is_empty()) {
            return invalid("an inert tag is empty".into());
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

    /// [`RelateRules::tag_effects`] for a memory of `valence`: a negative memory takes the
    /// tag's `tags_when_negative` entry when there is one.
    pub fn tag_effects_for(&self, tag: &str, valence: EmotionalValence) -> impl Iterator<Item = (Dimension, f64)> + '_ {
        let negative = (valence == EmotionalValence::Negative).then(|| self.tags_when_negative.get(tag)).flatten();
        negative.or_else(|| self.tags.get(tag)).into_iter().flat_map(|effects| effects.iter().map(|(d, m)| (*d, *m)))
    }

    /// True when a memory with these tags is knowledge rather than an event.
    pub fn is_inert(&self, tags: &[String]) -> bool {
        tags.iter().any(|tag| self.inert_tags.contains(tag))
    }

    pub fn valence_effects(&self, valence: EmotionalValence) -> impl Iterator<Item = (Dimension, f64)> + '_ {
        self.valence.get(valence.as_str()).into_iter().flat_map(|effects| effects.iter().map(|(d, m)| (*d, *m)))
    }

    pub fn attitude_modifier(&self, attitude: Attitude) -> f64 {
        self.attitudes.get(&attitude).copied().unwrap_or(0.0)
    }
}
