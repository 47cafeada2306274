//! The memory model: memory kinds, safety flags, salience and growth caps.
//!
//! Rules: salience (`compute_salience`), the growth caps, the emotional weighting of
//! recency and rounding to 3 decimals.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The three memory kinds, stored in one table with this
/// discriminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    /// A specific interaction with temporal context ("Player bought a sword").
    Episodic,
    /// A general fact derived from several episodes ("Player is a regular customer").
    Semantic,
    /// A behavioural pattern ("Player always haggles").
    Procedural,
}

impl MemoryType {
    pub const ALL: [MemoryType; 3] = [MemoryType::Episodic, MemoryType::Semantic, MemoryType::Procedural];

    /// The wire and database spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            MemoryType::Episodic => "episodic",
            MemoryType::Semantic => "semantic",
            MemoryType::Procedural => "procedural",
        }
    }

    /// The type a wire or database spelling names.
    pub fn parse(text: &str) -> Option<MemoryType> {
        MemoryType::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// Whether a memory passed the content filter.
/// The filter flags instead of lowering importance, so flagged memories stay auditable.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SafetyFlag {
    #[default]
    Clean,
    /// Flagged by the content filter; kept for audit, never put into a prompt.
    Suspect,
    /// Real-world PII was removed from it.
    Redacted,
}

impl SafetyFlag {
    pub const ALL: [SafetyFlag; 3] = [SafetyFlag::Clean, SafetyFlag::Suspect, SafetyFlag::Redacted];

    pub fn as_str(&self) -> &'static str {
        match self {
            SafetyFlag::Clean => "clean",
            SafetyFlag::Suspect => "suspect",
            SafetyFlag::Redacted => "redacted",
        }
    }
}

/// Emotional colouring of an episode; the seed's extraction validator accepts exactly
/// these three values and falls back to neutral for anything else.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EmotionalValence {
    Positive,
    Negative,
    #[default]
    Neutral,
}

impl EmotionalValence {
    pub const ALL: [EmotionalValence; 3] =
        [EmotionalValence::Positive, EmotionalValence::Negative, EmotionalValence::Neutral];

    pub fn as_str(&self) -> &'static str {
        match self {
            EmotionalValence::Positive => "positive",
            EmotionalValence::Negative => "negative",
            EmotionalValence::Neutral => "neutral",
        }
    }
}

/// A string that names none of an enum's variants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownVariant {
    pub kind: &'static str,
    pub value: String,
}

macro_rules! string_enum_traits {
    ($enum_type:ty, $kind:literal) => {
        impl fmt::Display for $enum_type {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(self.as_str())
            }
        }

        impl FromStr for $enum_type {
            type Err = UnknownVariant;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                <$enum_type>::ALL
                    .into_iter()
                    .find(|variant| variant.as_str() == text)
                    .ok_or_else(|| UnknownVariant { kind: $kind, value: text.to_owned() })
            }
        }
    };
}

string_enum_traits!(MemoryType, "memory type");
string_enum_traits!(SafetyFlag, "safety flag");
string_enum_traits!(EmotionalValence, "emotional valence");

/// What `compute_salience` needs from a memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SalienceInputs {
    /// 0.0–1.0; values outside are clamped.
    pub importance: f64,
    /// Salience ages from the last time the memory went into a prompt.
    pub last_accessed: DateTime<Utc>,
    pub access_count: i64,
    /// Quest- or faction-locked memories never decay.
    pub locked: bool,
    /// 0.0–1.0; values outside are clamped. Non-episodic memories pass 0.0.
    pub emotional_intensity: f64,
}

/// Recency time constant of seed `compute_salience`, in days.
pub const RECENCY_DAYS: f64 = 30.0;
/// full emotional intensity lengthens the recency time constant by 10 %.
pub const EMOTIONAL_RECENCY_WEIGHT: f64 = 0.1;
/// Seed `compute_salience`: `1 + ln(1 + access_count) · 0.1`, capped at 1.5.
pub const ACCESS_BOOST_FACTOR: f64 = 0.1;
pub const ACCESS_BOOST_CAP: f64 = 1.5;

const SECONDS_PER_DAY: f64 = 86_400.0;

/// Unified salience for ranking memories of every type (plus the emotional weighting
/// of recency):
///
/// `min(importance × exp(−age_days / (30 · (1 + 0.1 · intensity))) × access_boost, 1)`
///
/// with `access_boost = min(1 + ln(1 + access_count) · 0.1, 1.5)`. Locked memories are
/// always 1.0. Ages are measured from `last_accessed`; a `last_accessed` in the future
/// (clock skew between services) counts as age 0. Importance and intensity are clamped
/// into [0, 1] (NaN counts as 0), a negative access count as 0, so the result is always
/// in [0, 1].
///
/// The emotional term changes only the decay time constant, by at most 10 %: an intense
/// memory fades more slowly but never outranks a more important fresh one by much (the
/// absolute difference is below 0.04 × importance at any age).
pub fn compute_salience(inputs: &SalienceInputs, now: DateTime<Utc>) -> f64 {
    if inputs.locked {
        return 1.0;
    }
    let importance = clamp_unit(inputs.importance);
    let emotional_intensity = clamp_unit(inputs.emotional_intensity);

    let age = now.signed_duration_since(inputs.last_accessed);
    let age_seconds = age.num_milliseconds() as f64 / 1000.0;
    let age_days = (age_seconds / SECONDS_PER_DAY).max(0.0);

    let recency_time_constant_days = RECENCY_DAYS * (1.0 + EMOTIONAL_RECENCY_WEIGHT * emotional_intensity);
    let recency = (-age_days / recency_time_constant_days).exp();

    let access_count = inputs.access_count.max(0) as f64;
    let access_boost = (1.0 + access_count.ln_1p() * ACCESS_BOOST_FACTOR).min(ACCESS_BOOST_CAP);

    let salience = (importance * recency * access_boost).min(1.0);
    debug_assert!((0.0..=1.0).contains(&salience), "salience {salience} out of range");
    salience
}

/// Clamps into [0, 1]; NaN becomes 0 so a bad number can never rank a memory first.
pub fn clamp_unit(value: f64) -> f64 {
    if value.is_nan() { 0.0 } else { value.clamp(0.0, 1.0) }
}

/// Rounds to 3 decimals, as confidences and relationship dimensions are stored, so that thresholds compare on the rounded value: `round3(0.3 - 0.1)` is
/// exactly `0.2`, not `0.19999999999999998`. Halves round away from zero. Non-finite
/// values pass through unchanged and `-0.0` becomes `0.0`.
pub fn round3(value: f64) -> f64 {
    // Beyond 2^52 / 1000 an f64 has no fractional digits left to round, and the
    // multiplication below could overflow to infinity.
    const NO_FRACTION_ABOVE: f64 = 4.0e12;
    if !value.is_finite() || value.abs() > NO_FRACTION_ABOVE {
        return value;
    }
    // `+ 0.0` turns a negative zero (e.g. from -0.0001) into a positive one.
    (value * 1000.0).round() / 1000.0 + 0.0
}

/// Hard per-pair caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryCaps {
    /// Evicted lowest salience first, locked memories exempt.
    pub episodic: usize,
    /// Evicted lowest confidence first.
    pub semantic: usize,
    /// Evicted lowest reinforcement count first.
    pub procedural: usize,
}

impl MemoryCaps {
    pub const fn for_type(&self, memory_type: MemoryType) -> usize {
        match memory_type {
            MemoryType::Episodic => self.episodic,
            MemoryType::Semantic => self.semantic,
            MemoryType::Procedural => self.procedural,
        }
    }
}

impl Default for MemoryCaps {
    fn default() -> Self {
        MEMORY_CAPS
    }
}

/// The seed's caps per NPC–player pair.
pub const MEMORY_CAPS: MemoryCaps = MemoryCaps { episodic: 200, semantic: 50, procedural: 20 };

/// The seed's cap for one memory type per NPC–player pair.
pub const fn cap_for(memory_type: MemoryType) -> usize {
    MEMORY_CAPS.for_type(memory_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    const TOLERANCE: f64 = 1e-12;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, 12, 0, 0).single().expect("valid date")
    }

    fn inputs_aged(age_days: i64) -> SalienceInputs {
        SalienceInputs {
            importance: 1.0,
            last_accessed: now() - Duration::days(age_days),
            access_count: 0,
            locked: false,
            emotional_intensity: 0.0,
        }
    }

    fn assert_close(actual: f64, expected: f64) {
        assert!((actual - expected).abs() < TOLERANCE, "expected {expected}, got {actual}");
    }

    #[test]
    fn salience_decays_with_the_seed_time_constant() {
        assert_close(compute_salience(&inputs_aged(0), now()), 1.0);
        assert_close(compute_salience(&inputs_aged(7), now()), 0.7918895663367816);
        assert_close(compute_salience(&inputs_aged(30), now()), 0.36787944117144233);
        assert_close(compute_salience(&inputs_aged(90), now()), 0.049787068367863944);
    }

    #[test]
    fn salience_scales_with_importance_and_access_count() {
        let inputs = SalienceInputs { importance: 0.8, access_count: 3, ..inputs_aged(7) };
        // 0.8 × exp(−7/30) × (1 + ln 4 · 0.1)
        assert_close(compute_salience(&inputs, now()), 0.7213350163048139);
    }

    #[test]
    fn access_boost_is_capped_at_one_and_a_half() {
        let half_importance = |access_count| SalienceInputs { importance: 0.5, access_count, ..inputs_aged(0) };
        assert_close(compute_salience(&half_importance(10), now()), 0.5 * 1.2397895272798372);
        // ln(1 + n) · 0.1 reaches 0.5 at n ≈ 147.4
        assert!(compute_salience(&half_importance(147), now()) < 0.75);
        assert_close(compute_salience(&half_importance(148), now()), 0.75);
        assert_close(compute_salience(&half_importance(1_000_000), now()), 0.75);
        assert_close(compute_salience(&half_importance(i64::MAX), now()), 0.75);
    }

    #[test]
    fn salience_never_exceeds_one() {
        let inputs = SalienceInputs { importance: 1.0, access_count: 1000, ..inputs_aged(0) };
        assert_close(compute_salience(&inputs, now()), 1.0);
    }

    #[test]
    fn locked_memories_are_always_fully_salient() {
        let inputs = SalienceInputs { importance: 0.1, locked: true, ..inputs_aged(365) };
        assert_eq!(compute_salience(&inputs, now()), 1.0);
    }

    #[test]
    fn future_last_accessed_counts_as_age_zero() {
        let inputs = SalienceInputs { importance: 0.6, ..inputs_aged(-3) };
        assert_close(compute_salience(&inputs, now()), 0.6);
    }

    #[test]
    fn out_of_range_inputs_are_clamped() {
        let too_important = SalienceInputs { importance: 7.0, emotional_intensity: 9.0, ..inputs_aged(30) };
        let fully_important = SalienceInputs { importance: 1.0, emotional_intensity: 1.0, ..inputs_aged(30) };
        assert_close(compute_salience(&too_important, now()), compute_salience(&fully_important, now()));
        let broken =
            SalienceInputs { importance: f64::NAN, emotional_intensity: f64::NAN, access_count: -5, ..inputs_aged(1) };
        assert_eq!(compute_salience(&broken, now()), 0.0);
        let negative = SalienceInputs { importance: -1.0, ..inputs_aged(0) };
        assert_eq!(compute_salience(&negative, now()), 0.0);
    }

    #[test]
    fn emotional_intensity_slows_decay_by_at_most_ten_percent() {
        let intense = |age_days| SalienceInputs { emotional_intensity: 1.0, ..inputs_aged(age_days) };
        // exp(−30/33) and exp(−90/33): the time constant grows from 30 to 33 days.
        assert_close(compute_salience(&intense(30), now()), 0.402890321529133);
        assert_close(compute_salience(&intense(90), now()), 0.06539740322986021);
        assert_close(compute_salience(&intense(0), now()), 1.0);

        for age_days in 0..=720 {
            let calm_salience = compute_salience(&inputs_aged(age_days), now());
            let intense_salience = compute_salience(&intense(age_days), now());
            assert!(intense_salience >= calm_salience);
            assert!(intense_salience - calm_salience < 0.04, "age {age_days}: {intense_salience} vs {calm_salience}");
            // Equivalent to aging at most 10 % slower.
            let ten_percent_younger = SalienceInputs {
                last_accessed: now() - Duration::seconds(age_days * 86_400 * 10 / 11),
                ..inputs_aged(0)
            };
            // Whole seconds in the younger age: allow for the truncated fraction.
            let younger_salience = compute_salience(&ten_percent_younger, now());
            assert!((intense_salience - younger_salience).abs() < 1e-6);
        }
    }

    #[test]
    fn round3_rounds_to_three_decimals() {
        assert_eq!(round3(0.3 - 0.1), 0.2);
        assert_eq!(round3(0.1 + 0.2), 0.3);
        assert_eq!(round3(0.12345), 0.123);
        assert_eq!(round3(0.1235), 0.124);
        assert_eq!(round3(0.0005), 0.001);
        assert_eq!(round3(1.0), 1.0);
        assert_eq!(round3(-0.2004), -0.2);
        let rounded_negative_zero = round3(-0.0001);
        assert_eq!(rounded_negative_zero, 0.0);
        assert!(rounded_negative_zero.is_sign_positive());
        assert!(round3(f64::NAN).is_nan());
        assert_eq!(round3(f64::INFINITY), f64::INFINITY);
        assert_eq!(round3(1e300), 1e300);
    }

    #[test]
    fn caps_follow_the_seed() {
        assert_eq!(cap_for(MemoryType::Episodic), 200);
        assert_eq!(cap_for(MemoryType::Semantic), 50);
        assert_eq!(cap_for(MemoryType::Procedural), 20);
        assert_eq!(MemoryCaps::default(), MEMORY_CAPS);
    }

    #[test]
    fn enums_use_lowercase_names_on_the_wire() {
        for memory_type in MemoryType::ALL {
            let json = serde_json::to_string(&memory_type).expect("serialises");
            assert_eq!(json, format!("\"{}\"", memory_type.as_str()));
            assert_eq!(memory_type.as_str().parse::<MemoryType>(), Ok(memory_type));
        }
        for flag in SafetyFlag::ALL {
            let json = serde_json::to_string(&flag).expect("serialises");
            assert_eq!(json, format!("\"{flag}\""));
            assert_eq!(flag.as_str().parse::<SafetyFlag>(), Ok(flag));
        }
        for valence in EmotionalValence::ALL {
            let json = serde_json::to_string(&valence).expect("serialises");
            assert_eq!(json, format!("\"{valence}\""));
            assert_eq!(valence.as_str().parse::<EmotionalValence>(), Ok(valence));
        }
        assert_eq!(EmotionalValence::default(), EmotionalValence::Neutral);
        assert_eq!(SafetyFlag::default(), SafetyFlag::Clean);
        assert!("Episodic".parse::<MemoryType>().is_err());
        assert!(serde_json::from_str::<EmotionalValence>("\"angry\"").is_err());
    }
}
