use chrono::{TimeDelta, TimeZone};
use uuid::Uuid;

use super::*;

fn memory(content: &str, tags: &[&str], importance: f64, age_days: i64, now: DateTime<Utc>) -> ContextMemory {
    ContextMemory {
        id: Uuid::new_v4(),
        memory_type: MemoryType::Episodic,
        content: content.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        importance,
        locked: false,
        emotional_intensity: 0.0,
        access_count: 0,
        last_accessed: now - TimeDelta::days(age_days),
        created_at: now - TimeDelta::days(age_days),
    }
}

#[test]
fn a_relevant_memory_outranks_a_more_salient_irrelevant_one() {
    let now = Utc::now();
    let memories = vec![
        memory("Aria saved my daughter from the wolves.", &["heroic"], 0.7, 0, now),
        memory("Aria bought the steel sword for 50 gold.", &["trade"], 0.5, 3, now),
    ];
    assert!(memories[0].salience(now) > memories[1].salience(now));
    let ranked = rank(&memories, Some("Is the steel sword still sharp?"), now);
    assert!(ranked[0].content.contains("steel sword"));
    let unranked = rank(&memories, None, now);
    assert!(unranked[0].content.contains("wolves"), "without a message, salience decides");
}

#[test]
fn locked_memories_rank_first() {
    let now = Utc::now();
    let mut memories = vec![memory("a", &[], 0.7, 0, now), memory("b", &[], 0.1, 90, now)];
    memories[1].locked = true;
    assert_eq!(rank(&memories, None, now)[0].content, "b");
}

#[test]
fn ages_read_naturally() {
    let now = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap();
    let ago = |seconds: i64| format_age(now - TimeDelta::seconds(seconds), now);
    assert_eq!(ago(5), "just now");
    assert_eq!(ago(120), "2 minutes ago");
    assert_eq!(ago(3_600), "1 hour ago");
    assert_eq!(ago(90_000), "yesterday");
    assert_eq!(ago(3 * 86_400), "3 days ago");
    assert_eq!(ago(15 * 86_400), "2 weeks ago");
    assert_eq!(ago(100 * 86_400), "3 months ago");
}

#[test]
fn memory_lines_are_plain_words() {
    let now = Utc.with_ymd_and_hms(2023, 5, 11, 15, 0, 0).unwrap();
    let line = memory_line(&memory("Aria bought a sword.", &[], 0.7, 3, now), now);
    assert_eq!(line, "- Aria bought a sword. (3 days ago, on 8 May 2023, important)");
}

#[test]
fn an_age_of_a_day_or_more_carries_its_date() {
    let now = Utc.with_ymd_and_hms(2023, 5, 29, 9, 30, 0).unwrap();
    assert_eq!(format_when(now - chrono::Duration::hours(3), now), "3 hours ago");
    assert_eq!(format_when(now - chrono::Duration::hours(30), now), "yesterday, on 28 May 2023");
    assert_eq!(format_when(now - chrono::Duration::days(21), now), "3 weeks ago, on 8 May 2023");
}

#[test]
fn the_written_date_is_chronos_for_every_day_of_several_years() {
    let now = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
    for days in 1..(6 * 366) {
        let at = now - chrono::Duration::days(days);
        let written = format_when(at, now);
        let date = written.rsplit_once(", on ").map(|(_, date)| date.to_owned());
        assert_eq!(date, Some(at.format("%-d %B %Y").to_string()), "{at}");
    }
}

#[test]
fn reputation_names_the_stage_or_falls_back_for_strangers() {
    let mut friend = Relationship::initial(0.0);
    friend.stage = Stage::TrustedAlly;
    friend.dims[Dimension::Trust.index()] = 0.85;
    friend.dims[Dimension::Respect.index()] = 0.75;
    assert_eq!(reputation(Some(&friend), &[], &[]), "trusted ally (trustworthy, respectable)");
    assert_eq!(reputation(None, &[], &[]), STRANGER);
    assert_eq!(
        reputation(None, &[("smiths_guild".into(), 0.4)], &["they are generous".into()]),
        "stranger; the smiths guild thinks well of them; heard: they are generous"
    );
    assert!(relationship_summary(&friend).starts_with("Relationship: Trusted Ally."));
}

#[test]
fn budgets_split_max_tokens_and_overrides_are_checked() {
    let manager = BudgetManager::default();
    assert_eq!(manager.allocate("memory", 1000), 250);
    assert_eq!(manager.allocate("relationship", 1000), 100);
    let custom = BudgetManager::with_overrides("memory=0.4, knowledge=0.05").unwrap();
    assert_eq!(custom.allocate("memory", 1000), 400);
    assert!(BudgetManager::with_overrides("memory=1.5").is_err());
    assert!(BudgetManager::with_overrides("gossip=0.1").is_err());
    assert!(BudgetManager::with_overrides("memory=0.9,knowledge=0.9").is_err());
}

#[test]
fn prompts_render_persona_and_placeholders_once() {
    let persona = Persona {
        name: "Brom".into(),
        role: Some("the blacksmith".into()),
        personality: "gruff but fair {memory_context}".into(),
        ..Persona::default()
    };
    let placeholders: BTreeMap<String, String> =
        [("reputation".to_owned(), "friend".to_owned()), ("memory_context".to_owned(), "MEM".to_owned())].into();
    let prompt = render_prompt(None, &persona, &placeholders);
    assert!(prompt.starts_with("You are Brom, the blacksmith. Personality: gruff but fair {memory_context}."));
    assert!(prompt.contains("How you see the player: friend."));
    assert!(prompt.contains("\n\nMEM\n\n"));
    assert_eq!(render_prompt(Some("{reputation} / {unknown} / {"), &persona, &placeholders), "friend / {unknown} / {");
}

#[test]
fn a_persona_with_only_a_name_renders_no_empty_parts() {
    let persona = Persona { name: "Brom".into(), ..Persona::default() };
    let prompt = render_prompt(None, &persona, &BTreeMap::new());
    assert!(prompt.starts_with("You are Brom, a local.\nHow you see the player:"), "{prompt}");
    for empty in ["Personality", "Speaking style", "You know about", ": .", ".."] {
        assert!(!prompt.contains(empty), "{empty:?} in {prompt}");
    }
    let full = Persona {
        personality: "gruff but fair.".into(),
        speaking_style: "short sentences".into(),
        knowledge_domains: vec!["smithing".into()],
        ..persona
    };
    let prompt = render_prompt(None, &full, &BTreeMap::new());
    assert!(
        prompt.starts_with(
            "You are Brom, a local. Personality: gruff but fair. Speaking style: short sentences.\nYou know about: smithing."
        ),
        "{prompt}"
    );
}

#[test]
fn kept_memory_lines_are_the_minutes_lines_and_a_new_minute_formats_them_anew() {
    let now = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 42).unwrap();
    let minute_start = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap();
    let memories = vec![
        memory("Aria bought a sword.", &["trade"], 0.6, 3, now),
        memory("Aria lied to the guard.", &[], 0.9, 40, now),
    ];
    let kept = MemoryLines::default();
    let lines = kept.at(memories.len(), now);
    for (position, memory) in memories.iter().enumerate() {
        let (text, tokens) = lines.line(position, memory);
        let expected = memory_line(memory, minute_start);
        assert_eq!(&*text, expected);
        assert_eq!(tokens, crate::tokens::count_tokens(&expected) + 1);
    }
    let saliences: Vec<f64> = memories.iter().map(|memory| memory.salience(minute_start)).collect();
    assert_eq!(lines.saliences(&memories), saliences.as_slice());
    // The same minute shares the set; the next minute (or other memories) gets its own.
    assert!(Arc::ptr_eq(&lines, &kept.at(memories.len(), now + TimeDelta::seconds(10))));
    assert!(!Arc::ptr_eq(&lines, &kept.at(memories.len(), now + TimeDelta::seconds(30))));
    assert!(!Arc::ptr_eq(
        &kept.at(memories.len(), now + TimeDelta::seconds(30)),
        &kept.at(1, now + TimeDelta::seconds(30))
    ));
}

#[test]
fn ranking_with_kept_saliences_is_ranking_with_computed_ones() {
    let now = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap();
    let memories: Vec<ContextMemory> = (0..40)
        .map(|i| {
            memory(&format!("Aria traded item {i} at the mill"), &["trade"], 0.1 + (i % 7) as f64 / 10.0, i % 9, now)
        })
        .collect();
    let index = RelevanceIndex::build(&memories);
    let saliences: Vec<f64> = memories.iter().map(|memory| memory.salience(now)).collect();
    for message in [None, Some("the mill"), Some("item 7")] {
        let ids = |ranked: Vec<(&ContextMemory, f64, usize)>| {
            ranked.into_iter().map(|(m, _, p)| (m.id, p)).collect::<Vec<_>>()
        };
        assert_eq!(
            ids(rank_with_saliences(&memories, &saliences, &index, message)),
            ids(rank_scored(&memories, &index, message, now))
        );
    }
}
