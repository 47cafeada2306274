use chrono::{TimeDelta, TimeZone};
use proptest::prelude::*;

use super::*;
use crate::recall::LineCosts;
use crate::wire::Speaker;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap()
}

fn turns(count: usize, text: &str) -> Vec<Turn> {
    (0..count)
        .map(|index| Turn {
            conversation_id: Uuid::from_u128(index as u128 / 4),
            turn: (index % 4) as u32,
            speaker: if index % 2 == 0 { Speaker::Player } else { Speaker::Npc },
            speaker_name: None,
            text: format!("{text} number {index}"),
            said_at: now() - TimeDelta::days(40 - (index as i64 / 4)),
        })
        .collect()
}

fn memories(count: usize, matches: bool) -> Vec<MemoryLine> {
    (0..count)
        .map(|index| MemoryLine {
            id: Uuid::from_u128(1_000 + index as u128),
            line: Line::new(
                format!("- Aria traded some ordinary goods with you at the market stall {index} (3 days ago, minor)"),
                matches,
            ),
        })
        .collect()
}

fn tokens_of(packed: &Packed, provider: &str) -> usize {
    packed.sections.iter().filter(|s| s.provider == provider).map(|s| s.token_count as usize).sum()
}

#[test]
fn recalled_turns_that_match_are_not_starved_by_memories_that_do_not() {
    let history = turns(60, "We talked about the missing brother near the old mill");
    let candidates = Candidates {
        memory: memories(40, false),
        recall: Some(RecallCandidates {
            turns: &history,
            costs: &LineCosts::new(history.len()),
            ranked: (0..60).collect(),
        }),
        ..Candidates::default()
    };
    let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), 600, now());
    let recall = tokens_of(&packed, "recall");
    let memory = tokens_of(&packed, "memory");
    // With fixed shares, memory and recall would split the pool evenly.
    assert!(recall >= 500, "recall got {recall} of 600, memory {memory}");
    assert!(memory <= 60, "memory got {memory}");
    // The strongest memory stays in view, whatever the message.
    assert_eq!(packed.memory_ids, vec![candidates.memory[0].id]);
}

#[test]
fn matching_memories_keep_their_share_beside_matching_turns() {
    let history = turns(60, "We talked about the missing brother near the old mill");
    let candidates = Candidates {
        memory: memories(40, true),
        recall: Some(RecallCandidates {
            turns: &history,
            costs: &LineCosts::new(history.len()),
            ranked: (0..60).collect(),
        }),
        ..Candidates::default()
    };
    let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), 600, now());
    let memory = tokens_of(&packed, "memory");
    let recall = tokens_of(&packed, "recall");
    // Equal shares of 25 % each: both matching, they split the pool.
    assert!((250..=320).contains(&memory), "memory {memory}, recall {recall}");
    assert!((250..=320).contains(&recall), "memory {memory}, recall {recall}");
}

#[test]
fn without_a_match_the_configured_shares_hold() {
    let wm: Vec<Line> = (0..10)
        .map(|i| Line::new(format!("- Aria asked about the weather and the roads, day {i} (2 hours ago)"), false))
        .collect();
    let candidates = Candidates { working_memory: wm, memory: memories(40, false), ..Candidates::default() };
    let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), 200, now());
    let memory = tokens_of(&packed, "memory");
    let working = tokens_of(&packed, "working_memory");
    // memory 25 % : working memory 10 %.
    assert!(memory > 2 * working, "memory {memory}, working memory {working}");
    assert!(working > 0);
}

#[test]
fn matching_lines_come_first_within_a_section_and_shown_memory_ids_follow_them() {
    let mut lines = memories(6, false);
    lines[4].line.matches = true;
    let candidates = Candidates { memory: lines.clone(), ..Candidates::default() };
    let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), 60, now());
    assert_eq!(packed.memory_ids.first(), Some(&lines[4].id), "{:?}", packed.sections);
    let memory = &packed.sections[0].content;
    assert!(memory.lines().nth(1).unwrap().contains("stall 4"), "{memory}");
}

#[test]
fn a_fact_whose_memory_is_shown_is_left_out() {
    let lines = memories(1, true);
    let fact = FactLine { source_memory_id: Some(lines[0].id), line: Line::new("- Aria traded with you".into(), true) };
    let other = FactLine { source_memory_id: None, line: Line::new("- The mill burned".into(), false) };
    let candidates = Candidates { memory: lines, knowledge: vec![fact, other], ..Candidates::default() };
    let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), 500, now());
    let knowledge = packed.sections.iter().find(|s| s.provider == "knowledge").expect("a knowledge section");
    assert_eq!(knowledge.content, format!("{KNOWLEDGE_HEADER}\n- The mill burned"));
}

#[test]
fn message_terms_match_other_word_forms_but_not_stop_words() {
    let terms = message_terms("Do you remember the painting?");
    assert!(shares_a_term("- Aria painted the fence", &terms));
    assert!(!shares_a_term("- Do you have it?", &terms));
    assert!(!shares_a_term("anything", &HashSet::new()));
}

proptest! {
    #[test]
    fn packing_never_exceeds_the_pool(
        pool in 0usize..1500,
        memory_count in 0usize..30,
        memory_matches in any::<bool>(),
        turn_count in 0usize..80,
        with_relationship in any::<bool>(),
    ) {
        let history = turns(turn_count, "Some words of a long and winding talk about the harvest");
        let candidates = Candidates {
            relationship: with_relationship.then(|| "Relationship: Friend. You like them.".to_owned()),
            memory: memories(memory_count, memory_matches),
            recall: Some(RecallCandidates { turns: &history, costs: &LineCosts::new(history.len()), ranked: (0..turn_count).rev().collect() }),
            knowledge: vec![FactLine {
                source_memory_id: None,
                line: Line::new("- The harvest failed".into(), true),
            }],
            mood: Some("You are feeling quite anxious.".into()),
            ..Candidates::default()
        };
        let packed = pack(&candidates, &BudgetManager::default(), &PackRules::default(), pool, now());
        let joined = packed.sections.iter().map(|s| s.content.as_str()).collect::<Vec<_>>().join("\n\n");
        prop_assert!(count_tokens(&joined) <= pool, "{} > {pool}", count_tokens(&joined));
        for section in &packed.sections {
            prop_assert_eq!(section.token_count as usize, count_tokens(&section.content));
        }
    }
}
