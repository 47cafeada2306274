//! The canonical scenes of docs/relationships.md, one test per scene. Every memory is
//! shaped as the rule extractor writes it (kind tag first, then its relationship tags
//! and topics; importance and intensity from the kind's base and the severity) and goes
//! through what relate calls per conversation: [`conversation_deltas`], then
//! [`apply_conversation`]. The prompt words are [`relationship_summary`]'s.
//!
//! `cargo test -p npcmem-core scene_table -- --ignored --nocapture` prints the measured
//! values of every scene under the default rules and the `seed` preset.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::context::relationship_summary;
use crate::extraction::rules::{Kind, Severity, shaped};
use crate::memory::EmotionalValence;

fn stored(
    memory_type: &str,
    tags: &[&str],
    importance: f64,
    valence: EmotionalValence,
    intensity: f64,
) -> StoredMemory {
    // Built from JSON as relate receives it, so wire fields added with a default need no
    // change here.
    serde_json::from_value(serde_json::json!({
        "id": Uuid::nil(),
        "memory_type": memory_type,
        "content": "scene",
        "tags": tags,
        "importance": importance,
        "confidence": 0.8,
        "emotional_valence": valence,
        "emotional_intensity": intensity,
        "safety_flag": "clean",
    }))
    .expect("a stored memory")
}

/// An event memory as the extractor writes it.
fn event(kind: Kind, severity: Severity) -> StoredMemory {
    event_with_valence(kind, severity, shaped(kind, severity, &[]).emotional_valence)
}

/// The same, with the valence the extractor set from the evidence (a fight against the
/// NPC is negative).
fn event_with_valence(kind: Kind, severity: Severity, valence: EmotionalValence) -> StoredMemory {
    let topics: &[&str] = match kind {
        Kind::Trade => &["sword", "haggling"],
        Kind::Combat => &["wolves"],
        _ => &[],
    };
    let memory = shaped(kind, severity, topics);
    let tags: Vec<&str> = memory.tags.iter().map(String::as_str).collect();
    stored("episodic", &tags, memory.importance, valence, memory.emotional_intensity)
}

/// A fact the extractor keeps as a semantic memory: `[<fact kind>, "fact"]`.
fn fact(fact_kind: &str) -> StoredMemory {
    stored("semantic", &[fact_kind, "fact"], 0.35, EmotionalValence::Neutral, 0.085)
}

fn day(n: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a valid date") + TimeDelta::days(n)
}

/// One NPC–player story: each conversation applied as relate applies it.
#[derive(Debug, Clone)]
struct Story {
    rules: RelateRules,
    relationship: Relationship,
    day: i64,
    signals: Vec<String>,
}

impl Story {
    fn new(rules: &RelateRules) -> Self {
        Self::from_faction(rules, 0.0)
    }

    fn from_faction(rules: &RelateRules, faction_modifier: f64) -> Self {
        Self {
            rules: rules.clone(),
            relationship: Relationship::initial(faction_modifier),
            day: 0,
            signals: Vec::new(),
        }
    }

    /// A conversation on the next day.
    fn talk(&mut self, memories: &[StoredMemory]) -> Applied {
        self.day += 1;
        self.talk_again_today(memories)
    }

    /// Another conversation on the same day (the farming cap's tally carries over).
    fn talk_again_today(&mut self, memories: &[StoredMemory]) -> Applied {
        let deltas = conversation_deltas(memories, &self.rules);
        let applied =
            apply_conversation(&self.relationship, &deltas, memories.len() as i32, day(self.day), &self.rules);
        self.signals.extend(applied.crossings.iter().map(|crossing| crossing.event_type.clone()));
        self.relationship = applied.after.clone();
        applied
    }

    fn get(&self, dimension: Dimension) -> f64 {
        self.relationship.get(dimension)
    }

    fn stage(&self) -> Stage {
        self.relationship.stage
    }

    fn words(&self) -> String {
        relationship_summary(&self.relationship)
    }

    fn fired(&self, event_type: &str) -> usize {
        self.signals.iter().filter(|signal| *signal == event_type).count()
    }

    fn describe(&self) -> String {
        let [trust, fear, respect, loyalty, friendliness, _] = self.relationship.dims;
        format!(
            "trust {trust:.3} fear {fear:.3} respect {respect:.3} loyalty {loyalty:.3} friendliness {friendliness:.3} \
             disposition {:.3} {} {:?} | {}",
            self.relationship.disposition,
            self.stage().as_str(),
            self.signals,
            self.words()
        )
    }
}

// The scenes, as functions of the rules so the table can be printed for any preset.

fn life_saved(rules: &RelateRules) -> Story {
    let mut story = Story::new(rules);
    story.talk(&[event(Kind::Rescue, Severity::Severe)]);
    story
}

fn two_death_threats(rules: &RelateRules) -> Story {
    let mut story = Story::new(rules);
    story.talk(&[event(Kind::Threat, Severity::Severe)]);
    // The same day: the strictest case for the farming cap.
    story.talk_again_today(&[event(Kind::Threat, Severity::Severe)]);
    story
}

/// The story after the promise, and after the theft.
fn theft_after_a_promise(rules: &RelateRules, theft: Severity) -> (Story, Story) {
    let mut story = Story::new(rules);
    story.talk(&[event(Kind::Promise, Severity::Moderate)]);
    let promised = story.clone();
    story.talk(&[event(Kind::Theft, theft)]);
    (promised, story)
}

/// Trust after each of ten fair trades, one a day.
fn ten_fair_trades(rules: &RelateRules) -> (Story, Vec<f64>) {
    let mut story = Story::new(rules);
    let mut trust = vec![story.get(Dimension::Trust)];
    for _ in 0..10 {
        story.talk(&[event(Kind::Trade, Severity::Minor)]);
        trust.push(story.get(Dimension::Trust));
    }
    (story, trust)
}

fn first_words_a_death_threat(rules: &RelateRules, severity: Severity) -> Story {
    let mut story = Story::new(rules);
    story.talk(&[event(Kind::Threat, severity)]);
    story
}

fn gifts(rules: &RelateRules, count: usize) -> Story {
    let mut story = Story::new(rules);
    for _ in 0..count {
        story.talk(&[event(Kind::Gift, Severity::Minor)]);
    }
    story
}

fn good_turns(rules: &RelateRules, count: usize) -> Story {
    let mut story = Story::new(rules);
    for _ in 0..count {
        story.talk(&[event(Kind::Help, Severity::Moderate)]);
    }
    story
}

fn insults(rules: &RelateRules, count: usize) -> Story {
    let mut story = Story::new(rules);
    for _ in 0..count {
        story.talk(&[event(Kind::Insult, Severity::Moderate)]);
    }
    story
}

/// A friend made by four good turns, then betrayed (an oath broken: severe).
fn betrayed_friend(rules: &RelateRules) -> (Story, Story) {
    let friend = good_turns(rules, 4);
    let mut story = friend.clone();
    story.talk(&[event(Kind::Betrayal, Severity::Severe)]);
    (friend, story)
}

fn the_reported_threats_and_thefts(rules: &RelateRules) -> Story {
    let mut story = Story::new(rules);
    story.talk(&[event(Kind::Threat, Severity::Moderate)]);
    story.talk(&[event(Kind::Theft, Severity::Moderate)]);
    story.talk(&[event(Kind::Threat, Severity::Moderate)]);
    story.talk(&[event(Kind::Theft, Severity::Moderate)]);
    story
}

fn threatened_then_rescued(rules: &RelateRules) -> Story {
    let mut story = two_death_threats(rules);
    story.talk(&[event(Kind::Rescue, Severity::Severe)]);
    story
}

fn rank(stage: Stage) -> u8 {
    stage_rank(stage)
}

#[test]
fn saving_a_strangers_life_makes_a_friend_who_feels_warmly() {
    let story = life_saved(&RelateRules::default());
    assert!(rank(story.stage()) >= rank(Stage::Friend), "{}", story.describe());
    let words = story.words();
    assert!(words.contains("warmly") && words.contains("trust them"), "{words}");
    assert!(!words.contains("neutral"), "{words}");
}

#[test]
fn two_death_threats_make_the_npc_hostile_and_cowed() {
    let story = two_death_threats(&RelateRules::default());
    let (trust, fear) = (story.get(Dimension::Trust), story.get(Dimension::Fear));
    assert!(trust < 0.2 || fear > 0.7, "{}", story.describe());
    // The defaults do both, on the same day.
    assert!(trust < 0.2 && story.fired("npc_hostile") == 1, "{}", story.describe());
    assert!(fear > 0.7 && story.fired("npc_cowered") == 1, "{}", story.describe());
    assert_eq!(story.stage(), Stage::Enemy);
    assert!(story.words().contains("hostile") && story.words().contains("terrified"), "{}", story.words());
}

#[test]
fn theft_after_a_promise_costs_at_least_a_quarter_of_the_trust() {
    for theft in [Severity::Moderate, Severity::Severe] {
        let (promised, robbed) = theft_after_a_promise(&RelateRules::default(), theft);
        assert!(promised.get(Dimension::Trust) > 0.5, "a promise earns a little: {}", promised.describe());
        let lost = promised.get(Dimension::Trust) - robbed.get(Dimension::Trust);
        assert!(lost >= 0.25, "{theft:?} theft cost {lost:.3}: {}", robbed.describe());
        assert!(rank(robbed.stage()) < rank(Stage::Acquaintance), "{}", robbed.describe());
    }
    // A petty theft costs less, but still more than the promise earned.
    let (promised, robbed) = theft_after_a_promise(&RelateRules::default(), Severity::Minor);
    let lost = promised.get(Dimension::Trust) - robbed.get(Dimension::Trust);
    assert!((0.15..0.25).contains(&lost), "{lost:.3}");
}

/// Stories that reach every stage, from strangers of hostile, neutral and allied
/// factions.
fn starting_points(rules: &RelateRules) -> Vec<Story> {
    let mut stories = Vec::new();
    for modifier in [-0.3, 0.0, 0.3] {
        let stranger = Story::from_faction(rules, modifier);
        let mut met = stranger.clone();
        met.talk(&[event(Kind::Trade, Severity::Minor)]);
        let mut rescued = stranger.clone();
        rescued.talk(&[event(Kind::Rescue, Severity::Severe)]);
        let mut helped_four_times = stranger.clone();
        for _ in 0..4 {
            helped_four_times.talk(&[event(Kind::Help, Severity::Moderate)]);
        }
        // A friend on the edge of close friend, held back only by the count of meetings:
        // the fifth, even an insult, would promote it but for the stage rule.
        let mut almost_close = stranger.clone();
        for _ in 0..4 {
            almost_close.talk(&[event(Kind::Help, Severity::Moderate), event(Kind::Gift, Severity::Minor)]);
        }
        let mut regular = stranger.clone();
        for _ in 0..7 {
            regular.talk(&[event(Kind::Help, Severity::Moderate), event(Kind::Trade, Severity::Minor)]);
        }
        let mut devoted = stranger.clone();
        for _ in 0..8 {
            devoted.talk(&[event(Kind::Rescue, Severity::Severe), event(Kind::Gift, Severity::Minor)]);
        }
        let mut threatened = stranger.clone();
        threatened.talk(&[event(Kind::Threat, Severity::Severe)]);
        let mut hated = stranger.clone();
        for _ in 0..4 {
            hated.talk(&[event(Kind::Threat, Severity::Severe), event(Kind::Insult, Severity::Severe)]);
        }
        stories.extend([stranger, met, rescued, helped_four_times, almost_close, regular, devoted, threatened, hated]);
    }
    stories
}

fn harms() -> Vec<StoredMemory> {
    let mut harms = Vec::new();
    for severity in Severity::ALL {
        harms.push(event(Kind::Insult, severity));
        harms.push(event(Kind::Threat, severity));
    }
    harms
}

#[test]
fn an_insult_or_a_threat_never_raises_the_stage() {
    let rules = RelateRules::default();
    let starts = starting_points(&rules);
    let stages: Vec<Stage> = starts.iter().map(Story::stage).collect();
    for stage in [Stage::Stranger, Stage::Acquaintance, Stage::Friend, Stage::CloseFriend, Stage::TrustedAlly] {
        assert!(stages.contains(&stage), "no starting point is a {stage:?}: {stages:?}");
    }
    assert!(stages.contains(&Stage::Rival) && stages.contains(&Stage::Enemy), "{stages:?}");
    for start in &starts {
        for harm in harms() {
            let mut story = start.clone();
            let applied = story.talk(std::slice::from_ref(&harm));
            assert!(
                rank(applied.after.stage) <= rank(applied.before.stage),
                "{:?} raised {:?} to {:?}",
                harm.tags,
                applied.before.stage,
                applied.after.stage
            );
            // The same on a day the farming cap is already spent.
            let mut capped = start.clone();
            capped.day -= 1;
            let applied = capped.talk_again_today(std::slice::from_ref(&harm));
            assert!(rank(applied.after.stage) <= rank(applied.before.stage));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// From any history of extracted events, an insult or a threat never raises the stage.
    #[test]
    fn no_history_lets_an_insult_or_a_threat_raise_the_stage(
        history in prop::collection::vec((0..Kind::EVENTS.len(), 0..Severity::ALL.len(), any::<bool>()), 0..16),
        harm in 0..6usize,
        modifier in prop::sample::select(vec![-0.3, -0.1, 0.0, 0.1, 0.3]),
    ) {
        let rules = RelateRules::default();
        let mut story = Story::from_faction(&rules, modifier);
        for (kind, severity, same_day) in history {
            let memory = event(Kind::EVENTS[kind], Severity::ALL[severity]);
            if same_day {
                story.talk_again_today(&[memory]);
            } else {
                story.talk(&[memory]);
            }
        }
        let applied = story.talk(&[harms()[harm].clone()]);
        prop_assert!(rank(applied.after.stage) <= rank(applied.before.stage));
    }
}

/// Most one fair trade may add to trust, and ten in all.
const TRADE_TRUST_STEP_MAX: f64 = 0.015;
const TEN_TRADES_TRUST_MAX: f64 = 0.65;

#[test]
fn fair_trades_build_trust_slowly() {
    let (story, trust) = ten_fair_trades(&RelateRules::default());
    for pair in trust.windows(2) {
        let step = pair[1] - pair[0];
        assert!(step > 0.0 && step <= TRADE_TRUST_STEP_MAX + 1e-9, "a trade moved trust by {step:.3}: {trust:?}");
    }
    assert!(story.get(Dimension::Trust) <= TEN_TRADES_TRUST_MAX, "{}", story.describe());
    assert_eq!(story.stage(), Stage::Acquaintance, "a customer, not yet a friend: {}", story.describe());
    assert_eq!(story.get(Dimension::Fear), 0.0);
}

#[test]
fn severity_scales_every_delta() {
    let rules = RelateRules::default();
    let mut memories: Vec<(String, [StoredMemory; 3])> = Kind::EVENTS
        .into_iter()
        .map(|kind| (format!("{kind:?}"), Severity::ALL.map(|severity| event(kind, severity))))
        .collect();
    memories.push((
        "combat against the NPC".into(),
        Severity::ALL.map(|severity| event_with_valence(Kind::Combat, severity, EmotionalValence::Negative)),
    ));
    for (name, [minor, moderate, severe]) in memories {
        let [minor, moderate, severe] = [minor, moderate, severe].map(|memory| conversation_deltas(&[memory], &rules));
        assert!(severe.iter().any(|delta| *delta != 0.0), "{name} moves nothing");
        for dimension in Dimension::ALL {
            let index = dimension.index();
            let (a, b, c) = (minor[index], moderate[index], severe[index]);
            if c == 0.0 {
                assert!(a == 0.0 && b == 0.0, "{name} {dimension:?}: {a} {b} {c}");
                continue;
            }
            let same_sign = a.signum() == c.signum() && b.signum() == c.signum();
            assert!(same_sign && a.abs() < b.abs() && b.abs() < c.abs(), "{name} {dimension:?}: {a} {b} {c}");
        }
    }
}

#[test]
fn a_stranger_whose_first_words_are_a_death_threat_is_not_a_neutral_acquaintance() {
    let story = first_words_a_death_threat(&RelateRules::default(), Severity::Severe);
    assert!(matches!(story.stage(), Stage::Rival | Stage::Enemy), "{}", story.describe());
    assert!(story.words().contains("afraid of them"), "{}", story.words());
    assert!(!story.words().contains("neutral"), "{}", story.words());
    // Even a threat the extractor judged moderate leaves the NPC afraid, not neutral.
    let story = first_words_a_death_threat(&RelateRules::default(), Severity::Moderate);
    assert_ne!(story.stage(), Stage::Friend);
    assert!(!story.words().contains("neutral"), "{}", story.words());
}

#[test]
fn gifts_warm_the_npc_but_do_not_buy_a_friend() {
    let rules = RelateRules::default();
    let one = gifts(&rules, 1);
    assert!(one.get(Dimension::Friendliness) > 0.52, "{}", one.describe());
    let three = gifts(&rules, 3);
    assert!(three.get(Dimension::Friendliness) >= 0.6, "{}", three.describe());
    assert!(three.words().contains("like them"), "{}", three.words());
    assert_eq!(three.stage(), Stage::Acquaintance, "trust is earned, not bought: {}", three.describe());
    assert!(three.get(Dimension::Trust) < 0.6);
}

#[test]
fn three_good_turns_make_a_friend() {
    let rules = RelateRules::default();
    let once = good_turns(&rules, 1);
    assert_eq!(once.stage(), Stage::Acquaintance, "{}", once.describe());
    assert!(once.get(Dimension::Trust) > 0.52);
    let thrice = good_turns(&rules, 3);
    assert_eq!(thrice.stage(), Stage::Friend, "{}", thrice.describe());
    assert!(thrice.words().contains("warmly"), "{}", thrice.words());
}

#[test]
fn repeated_insults_make_a_rival_and_then_contempt() {
    let rules = RelateRules::default();
    let three = insults(&rules, 3);
    assert_eq!(three.stage(), Stage::Rival, "{}", three.describe());
    assert!(three.get(Dimension::Friendliness) < 0.25, "{}", three.describe());
    // Insults wound pride, they are not a betrayal.
    assert!(three.get(Dimension::Trust) > 0.35, "{}", three.describe());
    assert!(three.words().contains("despise them"), "{}", three.words());
    let five = insults(&rules, 5);
    assert_eq!(five.fired("npc_despise"), 1, "{}", five.describe());
    assert_eq!(five.stage(), Stage::Enemy, "{}", five.describe());
}

#[test]
fn a_betrayal_breaks_a_friendship() {
    let (friend, betrayed) = betrayed_friend(&RelateRules::default());
    assert_eq!(friend.stage(), Stage::Friend, "{}", friend.describe());
    assert!(friend.get(Dimension::Trust) - betrayed.get(Dimension::Trust) >= 0.25, "{}", betrayed.describe());
    assert!(friend.get(Dimension::Loyalty) - betrayed.get(Dimension::Loyalty) >= 0.15, "{}", betrayed.describe());
    assert!(rank(betrayed.stage()) <= rank(Stage::Acquaintance), "{}", betrayed.describe());
    assert!(betrayed.words().contains("distrust them"), "{}", betrayed.words());
}

#[test]
fn facts_move_no_feelings() {
    let rules = RelateRules::default();
    let facts = [fact("player_name"), fact("player_origin"), fact("npc_promise")];
    assert_eq!(conversation_deltas(&facts, &rules), [0.0; 6]);
    let mut story = Story::new(&rules);
    story.talk(&facts);
    assert_eq!(story.relationship.dims, Relationship::initial(0.0).dims);
    assert_eq!(story.stage(), Stage::Acquaintance);
    assert!(story.words().contains("neutral"), "{}", story.words());
}

#[test]
fn fighting_beside_the_npc_earns_respect_and_fighting_it_earns_fear() {
    let rules = RelateRules::default();
    let mut beside = Story::new(&rules);
    beside.talk(&[event(Kind::Combat, Severity::Severe)]);
    assert!(beside.get(Dimension::Respect) > 0.55 && beside.get(Dimension::Fear) == 0.0, "{}", beside.describe());
    assert!(beside.words().contains("well disposed"), "{}", beside.words());
    let mut against = Story::new(&rules);
    against.talk(&[event_with_valence(Kind::Combat, Severity::Severe, EmotionalValence::Negative)]);
    assert!(against.get(Dimension::Fear) >= 0.15, "{}", against.describe());
    assert!(against.get(Dimension::Trust) < 0.45, "{}", against.describe());
    assert!(against.words().contains("wary of them"), "{}", against.words());
}

#[test]
fn four_conversations_of_threats_and_theft_make_an_enemy() {
    let story = the_reported_threats_and_thefts(&RelateRules::default());
    assert!(story.get(Dimension::Trust) < 0.2, "{}", story.describe());
    assert_eq!(story.fired("npc_hostile"), 1, "{}", story.describe());
    assert_eq!(story.stage(), Stage::Enemy);
    assert!(story.words().starts_with("Relationship: Enemy. You are hostile toward them"), "{}", story.words());
}

#[test]
fn one_rescue_does_not_erase_two_death_threats() {
    let story = threatened_then_rescued(&RelateRules::default());
    assert!(rank(story.stage()) < rank(Stage::Friend), "{}", story.describe());
    assert!(story.get(Dimension::Trust) < 0.5, "{}", story.describe());
    assert!(story.get(Dimension::Fear) < two_death_threats(&RelateRules::default()).get(Dimension::Fear));
}

#[test]
fn the_seed_preset_shows_the_reported_failures() {
    // Why the defaults differ from the original design's magnitudes.
    let seed = RelateRules::seed();
    let reported = the_reported_threats_and_thefts(&seed);
    assert!(reported.get(Dimension::Trust) >= 0.2 && reported.fired("npc_hostile") == 0, "{}", reported.describe());
    assert_eq!(reported.stage(), Stage::Rival);
    let threatened = first_words_a_death_threat(&seed, Severity::Severe);
    assert_eq!(threatened.stage(), Stage::Acquaintance, "{}", threatened.describe());
    assert!(threatened.get(Dimension::Fear) < 0.15, "not even wary: {}", threatened.describe());
    let rescued = life_saved(&seed);
    assert_eq!(rescued.stage(), Stage::Acquaintance, "{}", rescued.describe());
    assert!(!rescued.words().contains("warmly"), "{}", rescued.words());
    let twice = two_death_threats(&seed);
    assert!(twice.get(Dimension::Trust) >= 0.2 && twice.get(Dimension::Fear) <= 0.7, "{}", twice.describe());
}

/// The measured table of docs/relationships.md, for both presets.
#[test]
#[ignore = "prints the scene table: run with --ignored --nocapture"]
fn scene_table() {
    for (name, rules) in [("default", RelateRules::default()), ("seed", RelateRules::seed())] {
        println!("== {name}");
        let row = |scene: &str, story: &Story| println!("{scene:<44} {}", story.describe());
        row("life saved (rescue, severe)", &life_saved(&rules));
        row("two death threats (same day)", &two_death_threats(&rules));
        for theft in Severity::ALL {
            let (promised, robbed) = theft_after_a_promise(&rules, theft);
            row("promise", &promised);
            row(&format!("  then theft ({theft:?})"), &robbed);
        }
        let (story, trust) = ten_fair_trades(&rules);
        row("ten fair trades", &story);
        println!("  trust per trade {trust:?}");
        for severity in Severity::ALL {
            row(&format!("first words a threat ({severity:?})"), &first_words_a_death_threat(&rules, severity));
        }
        row("one gift", &gifts(&rules, 1));
        row("three gifts", &gifts(&rules, 3));
        row("one good turn", &good_turns(&rules, 1));
        row("three good turns", &good_turns(&rules, 3));
        row("three insults", &insults(&rules, 3));
        row("five insults", &insults(&rules, 5));
        let (friend, betrayed) = betrayed_friend(&rules);
        row("friend (four good turns)", &friend);
        row("  then betrayed (severe)", &betrayed);
        row("threats and thefts (reported)", &the_reported_threats_and_thefts(&rules));
        row("two death threats, then a rescue", &threatened_then_rescued(&rules));
        let mut beside = Story::new(&rules);
        beside.talk(&[event(Kind::Combat, Severity::Severe)]);
        row("fought beside the NPC (severe)", &beside);
        let mut against = Story::new(&rules);
        against.talk(&[event_with_valence(Kind::Combat, Severity::Severe, EmotionalValence::Negative)]);
        row("fought against the NPC (severe)", &against);
    }
}
