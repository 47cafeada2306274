use super::*;
use crate::wire::{NpcInfo, PlayerInfo, TranscriptMessage};
use chrono::Utc;
use proptest::prelude::*;
use uuid::Uuid;

fn conversation(lines: &[(Speaker, &str)]) -> ConversationEnded {
    ConversationEnded {
        schema_version: 1,
        conversation_id: Uuid::new_v4(),
        npc_id: Uuid::new_v4(),
        player_id: Uuid::new_v4(),
        npc: NpcInfo { name: "Brom".into(), role: Some("blacksmith".into()), factions: vec![] },
        player: PlayerInfo { name: "Aria".into(), factions: vec![] },
        location: None,
        started_at: Utc::now(),
        ended_at: Utc::now(),
        messages: lines
            .iter()
            .map(|(speaker, text)| TranscriptMessage { speaker: *speaker, text: text.to_string() })
            .collect(),
    }
}

fn kinds(lines: &[(Speaker, &str)]) -> Vec<&'static str> {
    RulesExtractor::shared().findings(&conversation(lines)).iter().map(|f| f.kind.as_str()).collect()
}

use Speaker::{Npc, Player};

#[test]
fn empty_and_npc_only_transcripts_yield_nothing() {
    assert!(RulesExtractor::shared().extract(&conversation(&[])).is_empty());
    assert!(kinds(&[(Npc, "Good morning."), (Npc, "Fine weather today.")]).is_empty());
}

#[test]
fn an_asking_price_is_not_a_trade_until_the_player_accepts_or_pays() {
    assert!(kinds(&[(Player, "I need a sword."), (Npc, "Fifty gold for a fine blade.")]).is_empty());
    assert!(kinds(&[(Player, "How much?"), (Npc, "Fifty gold."), (Player, "Too rich. Just looking.")]).is_empty());
    let bought = RulesExtractor::shared().findings(&conversation(&[
        (Player, "How much for the steel sword?"),
        (Npc, "Fifty gold."),
        (Player, "Fifty it is. Here."),
    ]));
    assert_eq!(bought.len(), 1);
    assert_eq!(bought[0].kind, Kind::Trade);
    assert_eq!(bought[0].content, "Aria bought a steel sword from you for fifty gold");
}

#[test]
fn a_threat_must_promise_the_npc_harm_and_mean_it() {
    let threat = RulesExtractor::shared()
        .findings(&conversation(&[(Player, "If the sword isn't ready by dawn, I'll burn your forge to the ground.")]));
    assert_eq!(threat[0].kind, Kind::Threat);
    assert_eq!(threat[0].severity, Severity::Severe);
    assert_eq!((threat[0].actor, threat[0].target), (Party::Player, Some(Party::Npc)));
    assert!(kinds(&[(Player, "Relax, I won't hurt you.")]).is_empty());
    assert!(kinds(&[(Player, "I'd kill for a pie right now.")]).is_empty());
    assert!(kinds(&[(Player, "Someone ought to drop him in the millpond.")]).is_empty());
    assert!(
        kinds(&[(Player, "Give me that cake or I'll break your rolling pin!"), (Npc, "Ha! I'd like to see you try.")])
            .is_empty(),
        "banter both laugh at"
    );
    assert!(
        kinds(&[(Player, "Their leader said, 'Next time I'll gut you like a fish.' Charming.")]).is_empty(),
        "quoted words are someone else's"
    );
}

#[test]
fn insults_are_aimed_at_the_npc_not_at_oneself_or_the_weather() {
    assert_eq!(kinds(&[(Player, "Useless old fool.")]), ["insult"]);
    assert_eq!(kinds(&[(Player, "Thou art a base and cozening hag.")]), ["insult"]);
    assert!(kinds(&[(Player, "I'm such an idiot, I left my purse.")]).is_empty());
    assert!(kinds(&[(Player, "Stupid sky. Stupid clouds.")]).is_empty());
}

#[test]
fn fighting_talked_of_is_not_a_fight_that_happened() {
    assert!(kinds(&[(Player, "If bandits came I'd fight them alongside you."), (Npc, "Let's hope not.")]).is_empty());
    assert!(kinds(&[(Npc, "I'm fighting off a cold myself.")]).is_empty());
    let fought = RulesExtractor::shared().findings(&conversation(&[
        (Player, "We fought the wolves together at the mill."),
        (Npc, "Aye, you stood with me."),
    ]));
    assert_eq!(fought[0].kind, Kind::Combat);
    assert_eq!(fought[0].target, Some(Party::Other));
    assert!(fought[0].content.contains("wolves"), "{}", fought[0].content);
}

#[test]
fn someone_elses_deed_is_not_the_players() {
    assert!(kinds(&[(Npc, "The smith's boy pulled me out. I'd be dead without him.")]).is_empty());
    assert!(kinds(&[(Npc, "Your mate fixed the leaky tap for me yesterday. Good lad, that.")]).is_empty());
}

#[test]
fn a_vow_commits_only_when_it_binds_the_speaker_to_something() {
    let vow = |text: &str| {
        let plain = text::plain(text);
        let start = plain.find("i promise").or_else(|| plain.find("i swear")).expect("a vow");
        let which = if plain[start..].starts_with("i promise") { "i promise" } else { "i swear" };
        events::commits(&plain, start, which)
    };
    assert!(vow("I promise I will bring it back."));
    assert!(vow("I'll be back by noon, I promise."));
    assert!(vow("I promise not to tell."));
    assert!(vow("I swear to return it"));
    assert!(!vow("I swear this always happens."));
    assert!(!vow("I swear to god it was huge"));
    assert!(!vow("i swear i'm turning into my mother"));
    assert_eq!(kinds(&[(Player, "I can't promise anything.")]), Vec::<&str>::new());
    assert_eq!(kinds(&[(Player, "I'll bring them first thing tomorrow. My word.")]), ["promise"]);
}

#[test]
fn what_the_player_reveals_is_kept_in_their_own_words() {
    let found = RulesExtractor::shared().findings(&conversation(&[
        (Npc, "Who are you?"),
        (Player, "My name is Aria Vell. I hail from the Northmarch."),
        (Player, "I'm looking for my sister. I can't stand crowded taverns."),
    ]));
    let kinds: Vec<&str> = found.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["player_name", "player_origin", "player_family", "player_goal", "player_preference"]);
    assert!(found[0].content.contains("\"My name is Aria Vell.\""), "{}", found[0].content);
    let memories = RulesExtractor::shared().extract(&conversation(&[(Player, "My name is Aria Vell.")]));
    assert_eq!(memories[0].memory_type, MemoryType::Semantic);
    assert_eq!(memories[0].tags[0], "player_name");
}

#[test]
fn non_ascii_and_long_lines_do_not_panic() {
    let long = "ä".repeat(5_000);
    let memories = RulesExtractor::shared().extract(&conversation(&[
        (Player, &long),
        (Player, "Ich schwöre, I promise I will return the ring über alles."),
        (Player, "Don't tell anyone — ÄÖÜ the mayor hides gold ßß under the mill."),
        (Npc, "…"),
        (Player, "'"),
    ]));
    for memory in memories {
        assert!(memory.content.chars().count() <= MAX_CONTENT_CHARS);
    }
}

#[test]
fn two_hundred_messages_give_at_most_three_events_and_three_facts() {
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines.push((Player, "You fool! I will burn your shop. I'll take the sword for 50 gold. My name is Aria."));
        lines.push((Npc, "You saved my daughter, though."));
    }
    let memories = RulesExtractor::shared().extract(&conversation(&lines));
    let events: Vec<_> = memories.iter().filter(|m| m.memory_type == MemoryType::Episodic).collect();
    assert_eq!(events.len(), MAX_MEMORIES_PER_EXTRACTION);
    assert!(events.windows(2).all(|w| w[0].importance >= w[1].importance), "most important first");
    assert!(memories.len() <= MAX_MEMORIES_PER_EXTRACTION + MAX_FACTS_PER_EXTRACTION);
}

proptest! {
    #[test]
    fn arbitrary_transcripts_never_panic_and_stay_in_range(
        texts in proptest::collection::vec(".{0,300}", 0..30),
        player_first in any::<bool>(),
    ) {
        let lines: Vec<(Speaker, &str)> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| (if (i % 2 == 0) == player_first { Player } else { Npc }, text.as_str()))
            .collect();
        let memories = RulesExtractor::shared().extract(&conversation(&lines));
        prop_assert!(memories.len() <= MAX_MEMORIES_PER_EXTRACTION + MAX_FACTS_PER_EXTRACTION);
        for memory in memories {
            prop_assert!(!memory.content.is_empty());
            prop_assert!(memory.content.chars().count() <= MAX_CONTENT_CHARS);
            prop_assert!((0.0..=MAX_EXTRACTED_IMPORTANCE).contains(&memory.importance));
            prop_assert!((0.0..=1.0).contains(&memory.emotional_intensity));
            prop_assert!(!memory.tags.is_empty());
        }
    }
}

#[test]
fn a_betrayal_needs_more_than_the_word_lie() {
    // An accusation is not its own proof; a correction of small talk wrongs no one.
    assert!(!kinds(&[(Player, "I never said that."), (Npc, "You lied.")]).contains(&"betrayal"));
    assert!(
        !kinds(&[(Player, "Actually that was a lie, I can't do calculus and it makes me sad.")]).contains(&"betrayal")
    );
    assert!(
        kinds(&[(Npc, "You lied to me. The mine was never yours to sell.")]).contains(&"betrayal"),
        "the accusation with what exposed it"
    );
    assert!(
        kinds(&[(Player, "That was a lie. I never had the map you paid for.")]).contains(&"betrayal"),
        "a lie owned up to, about what the NPC was told"
    );
}

#[test]
fn working_it_off_is_a_promise_only_where_something_is_owed() {
    assert!(
        !kinds(&[(Player, "I should stock up on carbs now because I will definitely work it off next year.")])
            .contains(&"promise")
    );
    assert!(
        kinds(&[(Npc, "Who pays for the window?"), (Player, "I broke it. I'll work it off.")]).contains(&"promise")
    );
}

#[test]
fn a_player_who_wants_to_buy_is_buying_not_selling() {
    let found = RulesExtractor::shared().findings(&conversation(&[
        (Player, "I want to buy a saddle."),
        (Npc, "Twelve gold."),
        (Player, "Twelve it is. Here."),
    ]));
    let trade = found.iter().find(|f| f.kind == Kind::Trade).expect("a trade");
    assert!(trade.content.contains("bought"), "{}", trade.content);
}

#[test]
fn a_bare_vow_seals_the_plan_said_just_before_it() {
    assert_eq!(
        kinds(&[
            (Npc, "The ferry left without my parcel."),
            (Player, "I'll fetch it from the quay myself. I swear it.")
        ]),
        ["promise"]
    );
    assert_eq!(
        kinds(&[(Npc, "Coins. On the counter."), (Player, "There. Won't happen again. I promise.")]),
        ["promise"]
    );
    // A vow with no plan before it in the same message promises nothing.
    assert!(kinds(&[(Player, "I'll see."), (Npc, "Will you?"), (Player, "I swear.")]).is_empty());
}

#[test]
fn a_negated_objection_still_asks_for_it() {
    assert!(negated("i won't hurt you", "i won't ".len()));
    assert!(!negated("you will not object to turning out your pockets", "you will not object to ".len()));
    assert!(!negated("you won't mind emptying your satchel", "you won't mind ".len()));
}

#[test]
fn a_livelihood_saved_from_a_disaster_is_a_rescue_and_talk_of_one_is_not() {
    let saved = kinds(&[
        (Npc, "When the barn caught I froze, and there you were with the buckets before the roof went."),
        (Player, "It was only the hay loft."),
        (Npc, "Those cows are everything I've got."),
    ]);
    assert!(saved.contains(&"rescue"), "{saved:?}");
    assert!(
        kinds(&[(Npc, "The scholars will teach me everything I have to know."), (Player, "We sat by the fire.")])
            .is_empty()
    );
}

#[test]
fn a_fight_the_npc_gives_up_in_pain_is_combat_against_it() {
    let findings = RulesExtractor::shared().findings(&conversation(&[
        (Npc, "You want the rent? Come and take it."),
        (Player, "Gladly."),
        (Npc, "Argh! My ribs! I yield, I yield."),
    ]));
    assert_eq!(findings.iter().map(|f| f.kind).collect::<Vec<_>>(), [Kind::Combat]);
    assert_eq!(findings[0].target, Some(Party::Npc));
    assert!(kinds(&[(Npc, "Fine, you win the argument."), (Player, "Told you so.")]).is_empty());
}

#[test]
fn help_told_afterwards_by_the_npc_is_help() {
    assert_eq!(
        kinds(&[
            (Npc, "The well hasn't gone dry since you were down there clearing it. You're the best."),
            (Player, "Glad to."),
        ]),
        ["help"]
    );
    assert_eq!(
        kinds(&[
            (Npc, "Heard you kept the stall open for me all Saturday. Bless your heart."),
            (Player, "No trouble.")
        ]),
        ["help"]
    );
}

/// What the patterns alone find, without the learned reader.
fn pattern_kinds(lines: &[(Speaker, &str)]) -> Vec<&'static str> {
    RulesExtractor::with_reader(None).findings(&conversation(lines)).iter().map(|f| f.kind.as_str()).collect()
}

#[test]
fn thanks_that_name_a_labour_and_a_task_reported_done_and_thanked_are_help() {
    assert_eq!(pattern_kinds(&[(Npc, "Cheers for luggin' them sacks up, saved me back.")]), ["help"]);
    assert_eq!(pattern_kinds(&[(Npc, "Thank you for minding the stall while I was ill.")]), ["help"]);
    assert_eq!(pattern_kinds(&[(Npc, "Thanks for looking after the goats.")]), ["help"]);
    assert_eq!(pattern_kinds(&[(Player, "Rope's fixed."), (Npc, "Bless you, that's a day's work saved.")]), ["help"]);
    assert_eq!(pattern_kinds(&[(Player, "Patched the hull. Tarred it."), (Npc, "Thank you kindly.")]), ["help"]);
    // Thanks for company, for watching or for asking are not a task done.
    assert!(pattern_kinds(&[(Npc, "Thanks for taking the time to talk to me!")]).is_empty());
    assert!(pattern_kinds(&[(Npc, "Thanks for watching, see you next week.")]).is_empty());
    assert!(pattern_kinds(&[(Npc, "I won't thank you for carrying tales to the reeve.")]).is_empty());
    // A report with no thanks, or a question, is not help done for the NPC.
    assert!(pattern_kinds(&[(Player, "Rope's fixed."), (Npc, "About time.")]).is_empty());
    assert!(pattern_kinds(&[(Player, "Is the wheel fixed?"), (Npc, "Thanks for asking, it is.")]).is_empty());
}

#[test]
fn the_reader_finds_threats_and_insults_only_where_the_player_speaks_to_the_npc_and_vows_only_its_own() {
    let patterns = events::Patterns::new();
    let read = |line: &str, kind: Kind| {
        let conversation = conversation(&[(Player, line), (Npc, "...")]);
        patterns.event_read(&scene(&conversation), kind, 0).map(|finding| finding.kind)
    };
    assert_eq!(read("The muscular man talked carefully.", Kind::Threat), None);
    assert_eq!(read("The checkered wax cringed gracefully.", Kind::Insult), None);
    assert_eq!(read("The job-less urn slept quickly.", Kind::Secret), None);
    assert_eq!(read("Thy forge would burn so prettily of a night.", Kind::Threat), Some(Kind::Threat));
    assert_eq!(read("Nice work, for a one-armed tinker like ye.", Kind::Insult), Some(Kind::Insult));
    assert_eq!(read("Between us, my father never came back from the war.", Kind::Secret), Some(Kind::Secret));
}

#[test]
fn money_handed_back_after_a_theft_comes_out_repays_it_and_buys_nothing() {
    let lines = [
        (Npc, "Somebody lifted six silver from my strongbox last market day."),
        (Player, "That was me. I took it while you were haggling with the tanner."),
        (Player, "Here's your six silver back."),
    ];
    assert_eq!(kinds(&lines), ["theft"]);
    // Paying for goods with no theft told is still a trade.
    assert_eq!(kinds(&[(Npc, "Six silver for the lantern."), (Player, "Here's your six silver.")]), ["trade"]);
}

#[test]
fn the_reader_keeps_a_trade_only_where_something_is_priced_or_paid() {
    let patterns = events::Patterns::new();
    let handed = conversation(&[(Player, "Cold night."), (Player, "Here."), (Npc, "Your coat? I couldn't.")]);
    assert!(patterns.event_read(&scene(&handed), Kind::Trade, 1).is_none());
    let paid = conversation(&[(Npc, "Two copper a night."), (Player, "Here."), (Npc, "Room's at the top.")]);
    assert!(patterns.event_read(&scene(&paid), Kind::Trade, 1).is_some());
}
