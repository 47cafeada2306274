use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::*;
use crate::memory::EmotionalValence;

/// Built the way relate receives it (JSON), so fields added to the wire type with a
/// default need no change here.
fn memory(tags: &[&str], importance: f64, valence: EmotionalValence, intensity: f64) -> StoredMemory {
    serde_json::from_value(serde_json::json!({
        "id": Uuid::nil(),
        "memory_type": "episodic",
        "content": "x",
        "tags": tags,
        "importance": importance,
        "confidence": 0.9,
        "emotional_valence": valence,
        "emotional_intensity": intensity,
        "safety_flag": "clean",
    }))
    .expect("a stored memory")
}

fn at(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, day, 12, 0, 0).unwrap()
}

#[test]
fn deltas_follow_the_seed_formula() {
    let rules = RelateRules::seed();
    // helpful: trust +0.05 × 0.6 × (0.5 + 0.5·0.4) = 0.021, plus valence positive +0.01.
    let deltas = conversation_deltas(&[memory(&["helpful"], 0.6, EmotionalValence::Positive, 0.4)], &rules);
    assert!((deltas[Dimension::Trust.index()] - (0.05 * 0.6 * 0.7 + 0.01)).abs() < 1e-12);
    assert!((deltas[Dimension::Friendliness.index()] - (0.03 * 0.6 * 0.7 + 0.02)).abs() < 1e-12);
    assert_eq!(deltas[Dimension::Fear.index()], 0.0);
    let mut semantic = memory(&["threat"], 0.5, EmotionalValence::Negative, 1.0);
    semantic.memory_type = MemoryType::Semantic;
    let deltas = conversation_deltas(&[semantic], &rules);
    assert!((deltas[Dimension::Trust.index()] + 0.04).abs() < 1e-12, "no intensity, no valence for semantic");
}

#[test]
fn suspect_memories_change_nothing() {
    let mut flagged = memory(&["heroic"], 0.7, EmotionalValence::Positive, 1.0);
    flagged.safety_flag = SafetyFlag::Suspect;
    assert_eq!(conversation_deltas(&[flagged], &RelateRules::default()), [0.0; 6]);
}

#[test]
fn repeated_help_makes_a_friend_and_threats_make_an_enemy() {
    let rules = RelateRules::default();
    let help = conversation_deltas(&[memory(&["helpful"], 0.7, EmotionalValence::Positive, 0.8)], &rules);
    let mut relationship = Relationship::initial(0.0);
    let mut stages = Vec::new();
    for day in 1..=20 {
        relationship = apply_conversation(&relationship, &help, 1, at(day), &rules).after;
        stages.push(relationship.stage);
    }
    assert_eq!(stages[0], Stage::Acquaintance);
    assert!(stages.contains(&Stage::Friend), "{stages:?}");
    assert!(relationship.get(Dimension::Trust) > 0.6);
    let threat = conversation_deltas(&[memory(&["threat"], 0.7, EmotionalValence::Negative, 1.0)], &rules);
    let mut enemy = Relationship::initial(0.0);
    let mut crossings = Vec::new();
    for day in 1..=10 {
        let applied = apply_conversation(&enemy, &threat, 1, at(day), &rules);
        crossings.extend(applied.crossings.iter().map(|c| c.event_type.clone()));
        enemy = applied.after;
    }
    assert!(enemy.get(Dimension::Trust) < 0.2 && enemy.get(Dimension::Fear) > 0.3);
    assert_eq!(enemy.stage, Stage::Enemy);
    assert_eq!(crossings.iter().filter(|c| *c == "npc_hostile").count(), 1, "fired once: {crossings:?}");
    for value in enemy.dims {
        assert!((0.0..=1.0).contains(&value));
    }
}

#[test]
fn the_farming_cap_limits_daily_gains_not_losses() {
    let rules = RelateRules::default();
    let gift = conversation_deltas(&[memory(&["gift", "helpful"], 0.7, EmotionalValence::Positive, 1.0)], &rules);
    let start = Relationship::initial(0.0);
    let mut relationship = start.clone();
    for _ in 0..100 {
        relationship = apply_conversation(&relationship, &gift, 1, at(1), &rules).after;
    }
    for dimension in Dimension::ALL {
        let gained = relationship.get(dimension) - start.get(dimension);
        assert!(gained <= 0.2 + 1e-9, "{dimension:?} gained {gained}");
    }
    assert_eq!(relationship.interaction_count, 100);
    let next_day = apply_conversation(&relationship, &gift, 1, at(2), &rules).after;
    assert!(next_day.get(Dimension::Friendliness) > relationship.get(Dimension::Friendliness), "a new day");
}

#[test]
fn values_are_rounded_so_thresholds_compare_exactly() {
    let rules = RelateRules::default();
    let mut relationship = Relationship::initial(0.0);
    relationship.dims[Dimension::Trust.index()] = 0.3;
    let mut deltas = [0.0; 6];
    deltas[Dimension::Trust.index()] = -0.1;
    let applied = apply_conversation(&relationship, &deltas, 0, at(1), &rules);
    assert_eq!(applied.after.get(Dimension::Trust), 0.2);
    assert!(applied.crossings.is_empty(), "0.2 is not below 0.2");
}

#[test]
fn an_empty_conversation_counts_and_milestones_fire_every_ten_memories() {
    let rules = RelateRules::default();
    let applied = apply_conversation(&Relationship::initial(0.0), &[0.0; 6], 0, at(1), &rules);
    assert_eq!(applied.after.interaction_count, 1);
    assert_eq!(applied.stage_change, Some((Stage::Stranger, Stage::Acquaintance)));
    let mut relationship = applied.after;
    relationship.memory_count = 8;
    let applied = apply_conversation(&relationship, &[0.0; 6], 3, at(1), &rules);
    assert_eq!(applied.milestone, Some(10));
    assert_eq!(apply_conversation(&applied.after, &[0.0; 6], 3, at(1), &rules).milestone, None);
}

#[test]
fn faction_modifiers_sum_and_clamp() {
    let rules = RelateRules::default();
    let attitudes = |npc: &str, player: &str| match (npc, player) {
        ("city_guard", "thieves_guild") => Some(Attitude::Hostile),
        ("city_guard", "smugglers") => Some(Attitude::Unfriendly),
        ("temple", "pilgrims") => Some(Attitude::Friendly),
        _ => None,
    };
    let guard = vec!["city_guard".to_string()];
    let thief = vec!["thieves_guild".to_string(), "smugglers".to_string()];
    assert_eq!(faction_modifier(&guard, &thief, attitudes, &rules), -0.3, "−0.4 clamped to −0.3");
    let initial = Relationship::initial(-0.3);
    assert_eq!((initial.get(Dimension::Trust), initial.get(Dimension::Friendliness)), (0.2, 0.2));
    assert_eq!(initial.stage, Stage::Stranger);
    assert_eq!(faction_modifier(&["temple".into()], &["pilgrims".into()], attitudes, &rules), 0.1);
}

#[test]
fn disposition_and_stage_follow_design_9() {
    let dims = [0.85, 0.0, 0.6, 0.7, 0.8, 0.0];
    let disposition = disposition(&dims);
    assert_eq!(disposition, round3(2.0 * (0.35 * 0.85 + 0.35 * 0.8 + 0.15 * 0.6 + 0.15 * 0.7) - 1.0));
    assert_eq!(stage(&dims, disposition, 3), Stage::TrustedAlly);
    let afraid = [0.5, 1.0, 0.5, 0.5, 0.5, 0.0];
    assert_eq!(super::disposition(&afraid), -0.25);
    assert_eq!(stage(&afraid, -0.25, 1), Stage::Rival);
    assert_eq!(stage(&afraid, -0.25, 0), Stage::Stranger);
}

#[test]
fn reputation_levels_fire_on_the_way_up_and_down() {
    let levels = RelateRules::default().reputation_levels;
    assert_eq!(reputation_crossings(0.2, 0.3, &levels), vec![(0.25, true)]);
    assert_eq!(reputation_crossings(0.6, -0.3, &levels), vec![(-0.25, false), (0.25, false), (0.5, false)]);
    assert!(reputation_crossings(0.3, 0.4, &levels).is_empty());
}

#[test]
fn rules_files_override_tables_and_bad_ones_are_refused() {
    let rules = RelateRules::from_toml(
        r#"
        farming_cap_per_day = 0.3
        milestone_every = 5
        [tags.bribe]
        trust = 0.01
        loyalty = -0.05
        "#,
    )
    .expect("a valid file");
    assert_eq!(rules.farming_cap_per_day, 0.3);
    assert_eq!(rules.tags.len(), 1, "a tags table replaces the default one");
    assert_eq!(rules.thresholds.len(), 6, "tables left out keep the defaults");
    let unknown = RelateRules::from_toml("[tags.helpful]\ncourage = 0.1\n").unwrap_err();
    assert!(unknown.to_string().contains("courage"), "{unknown}");
    let out_of_range = RelateRules::from_toml("[tags.helpful]\ntrust = 3.0\n").unwrap_err();
    assert_eq!(out_of_range.to_string(), "relate rules: tags.helpful.trust: magnitude 3 is outside [-1, 1]");
    assert!(RelateRules::from_toml("milestone_every = 0").is_err());
    assert!(RelateRules::from_toml("surprise = 1").unwrap_err().to_string().contains("surprise"));
    assert!(RelateRules::default().validate().is_ok());
}

#[test]
fn the_defaults_scale_valence_by_intensity_and_read_negative_fights_apart() {
    let rules = RelateRules::default();
    // insult: friendliness −0.25 × 0.45 × (0.5 + 0.5·0.425), plus valence −0.03 × the same factor.
    let factor = 0.5 + 0.5 * 0.425;
    let deltas = conversation_deltas(&[memory(&["insult"], 0.45, EmotionalValence::Negative, 0.425)], &rules);
    assert!((deltas[Dimension::Friendliness.index()] - (-0.25 * 0.45 * factor - 0.03 * factor)).abs() < 1e-12);
    let beside = conversation_deltas(&[memory(&["combat", "wolves"], 0.6, EmotionalValence::Positive, 0.5)], &rules);
    let against = conversation_deltas(&[memory(&["combat", "wolves"], 0.6, EmotionalValence::Negative, 0.5)], &rules);
    assert!(beside[Dimension::Fear.index()] < 0.0 && against[Dimension::Fear.index()] > 0.0);
    assert!(against[Dimension::Trust.index()] < 0.0);
    // The `seed` preset knows no negative variant: a fight is a fight.
    let seed = RelateRules::seed();
    let against = conversation_deltas(&[memory(&["combat"], 0.6, EmotionalValence::Negative, 0.5)], &seed);
    assert!(against[Dimension::Fear.index()] < 0.0);
}

#[test]
fn facts_are_inert_by_default() {
    let mut fact = memory(&["player_name", "fact"], 0.35, EmotionalValence::Positive, 0.1);
    fact.memory_type = MemoryType::Semantic;
    assert_eq!(conversation_deltas(std::slice::from_ref(&fact), &RelateRules::default()), [0.0; 6]);
    // Even a fact carrying an event's tag ("a regular customer") moves nothing.
    fact.tags = vec!["trade".into(), "fact".into()];
    assert_eq!(conversation_deltas(std::slice::from_ref(&fact), &RelateRules::default()), [0.0; 6]);
    assert!(conversation_deltas(&[fact], &RelateRules::seed())[Dimension::Trust.index()] > 0.0);
}

#[test]
fn fear_is_exempt_from_the_farming_cap_by_default_but_not_in_the_seed() {
    let mut deltas = [0.0; 6];
    deltas[Dimension::Fear.index()] = 0.3;
    deltas[Dimension::Friendliness.index()] = 0.3;
    let start = Relationship::initial(0.0);
    let rules = RelateRules::default();
    let twice =
        apply_conversation(&apply_conversation(&start, &deltas, 1, at(1), &rules).after, &deltas, 1, at(1), &rules);
    assert_eq!(twice.after.get(Dimension::Fear), 0.6);
    assert_eq!(twice.after.get(Dimension::Friendliness), 0.7, "goodwill stays capped");
    let seed = RelateRules::seed();
    let twice =
        apply_conversation(&apply_conversation(&start, &deltas, 1, at(1), &seed).after, &deltas, 1, at(1), &seed);
    assert_eq!(twice.after.get(Dimension::Fear), 0.2);
}

#[test]
fn a_conversation_that_lowers_the_disposition_never_promotes() {
    let rules = RelateRules::default();
    // Four meetings in, everything but the count says close friend.
    let mut friend = Relationship::initial(0.0);
    friend.dims = [0.8, 0.0, 0.6, 0.6, 0.9, 0.0];
    friend.disposition = disposition(&friend.dims);
    friend.interaction_count = 4;
    friend.stage = stage(&friend.dims, friend.disposition, 4);
    assert_eq!(friend.stage, Stage::Friend);
    let mut small_slight = [0.0; 6];
    small_slight[Dimension::Friendliness.index()] = -0.05;
    let applied = apply_conversation(&friend, &small_slight, 1, at(1), &rules);
    assert_eq!(stage(&applied.after.dims, applied.after.disposition, 5), Stage::CloseFriend, "by the numbers alone");
    assert_eq!(applied.after.stage, Stage::Friend);
    assert_eq!(applied.stage_change, None);
    // A kind word on the same meeting count promotes.
    let applied = apply_conversation(&friend, &[0.0; 6], 1, at(1), &rules);
    assert_eq!(applied.after.stage, Stage::CloseFriend);
    // A stranger of an allied faction who is insulted is met, not befriended.
    let allied = Relationship::initial(0.3);
    let applied = apply_conversation(&allied, &small_slight, 1, at(1), &rules);
    assert_eq!(applied.after.stage, Stage::Acquaintance);
    assert_eq!(apply_conversation(&allied, &[0.0; 6], 1, at(1), &rules).after.stage, Stage::Friend);
}

#[test]
fn presets_pick_the_tables_a_file_starts_from() {
    assert_eq!(RelateRules::from_toml("").expect("empty is valid"), RelateRules::default());
    assert_eq!(RelateRules::from_toml("preset = \"default\"").expect("valid"), RelateRules::default());
    assert_eq!(RelateRules::from_toml("preset = \"seed\"").expect("valid"), RelateRules::seed());
    let seed_with_cap = RelateRules::from_toml("preset = \"seed\"\nfarming_cap_per_day = 0.3\n").expect("valid");
    assert_eq!(seed_with_cap.farming_cap_per_day, 0.3);
    assert_eq!(seed_with_cap.tags, RelateRules::seed().tags, "the seed's tables where the file says nothing");
    assert!(seed_with_cap.farming_cap_exempt.is_empty());
    let unknown = RelateRules::from_toml("preset = \"gentle\"").unwrap_err();
    assert!(unknown.to_string().contains("gentle"), "{unknown}");
    let bad_negative = RelateRules::from_toml("[tags_when_negative.combat]\nfear = 2.0\n").unwrap_err();
    assert_eq!(
        bad_negative.to_string(),
        "relate rules: tags_when_negative.combat.fear: magnitude 2 is outside [-1, 1]"
    );
    assert!(RelateRules::from_toml("farming_cap_exempt = [\"courage\"]").is_err());
    assert!(RelateRules::from_toml("inert_tags = [\" \"]").is_err());
    assert!(RelateRules::seed().validate().is_ok());
}
