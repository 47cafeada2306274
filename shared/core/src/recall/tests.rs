use chrono::{TimeDelta, TimeZone};

use super::*;
use crate::context::BudgetManager;

fn at(days_ago: i64, now: DateTime<Utc>) -> DateTime<Utc> {
    now - TimeDelta::days(days_ago)
}

fn turn(conversation: u128, index: u32, speaker: Speaker, text: &str, said_at: DateTime<Utc>) -> Turn {
    Turn {
        conversation_id: Uuid::from_u128(conversation),
        turn: index,
        speaker,
        speaker_name: Some(match speaker {
            Speaker::Player => "Aria".to_owned(),
            Speaker::Npc => "Brom".to_owned(),
        }),
        text: text.to_owned(),
        said_at,
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap()
}

/// A pair's history: small talk, with one telling exchange in the middle.
fn history() -> Vec<Turn> {
    let now = now();
    let mut turns = Vec::new();
    for conversation in 0..30u32 {
        let when = at(i64::from(60 - conversation), now);
        let id = u128::from(conversation);
        if conversation == 5 {
            turns.push(turn(id, 0, Speaker::Player, "My brother Tomas went missing near the old mill.", when));
            turns.push(turn(id, 1, Speaker::Npc, "I will keep my ears open for news of him.", when));
        } else {
            turns.push(turn(id, 0, Speaker::Player, "Good morning, how is the forge today?", when));
            turns.push(turn(id, 1, Speaker::Npc, "Hot as ever. Buying or browsing?", when));
        }
    }
    turns
}

#[test]
fn terms_drop_stop_words_and_share_stems_across_word_forms() {
    assert_eq!(terms("The painted paintings"), vec!["paint", "paint"]);
    assert_eq!(terms("I was painting"), vec!["paint"]);
    assert!(terms("what is it that you are").is_empty());
    assert_eq!(terms("Amulets!"), terms("amulet"));
}

#[test]
fn a_hyphenated_word_meets_its_joined_form() {
    assert_eq!(terms("I run to de-stress"), vec!["run", "de", "stress", "destress"]);
    let now = now();
    let turns = vec![
        turn(1, 0, Speaker::Player, "Running helps me de-stress after work.", at(9, now)),
        turn(1, 1, Speaker::Npc, "Stress is everywhere these days.", at(9, now)),
    ];
    let ranked = TurnIndex::build(&turns).search("How do they destress?");
    assert_eq!(ranked.len(), 1, "{ranked:?}");
    assert_eq!(ranked[0].0, 0);
}

#[test]
fn a_turn_said_long_ago_in_other_word_forms_ranks_first() {
    let turns = history();
    let index = TurnIndex::build(&turns);
    let ranked = index.search("Any news about the brother who disappeared by the mills?");
    let best = &turns[ranked[0].0];
    assert!(best.text.contains("Tomas"), "best hit was {best:?}");
}

#[test]
fn the_speakers_name_prefers_their_own_turns() {
    let now = now();
    let turns = vec![
        turn(1, 0, Speaker::Player, "I painted a sunset last week.", now),
        turn(1, 1, Speaker::Npc, "I painted a sunrise once.", now),
    ];
    let ranked = TurnIndex::build(&turns).search("What did Aria paint?");
    assert_eq!(ranked[0].0, 0);
    let ranked = TurnIndex::build(&turns).search("What did Brom paint?");
    assert_eq!(ranked[0].0, 1);
}

#[test]
fn a_query_without_shared_terms_finds_nothing() {
    let index = TurnIndex::build(&history());
    assert!(index.search("dragons").is_empty());
    assert!(index.search("").is_empty());
    assert!(TurnIndex::build(&[]).search("brother").is_empty());
}

#[test]
fn fusion_rewards_agreement_between_rankings() {
    let lexical = [3, 1, 2];
    let dense = [1, 4, 3];
    let fused = fuse(&[(&lexical, 1.0), (&dense, 1.0)], 60.0);
    assert_eq!(fused[0].0, 1, "in both lists near the top");
    assert_eq!(fused.len(), 4);
    assert!(fused.windows(2).all(|pair| pair[0].1 >= pair[1].1));
}

#[test]
fn dense_ranking_orders_by_cosine_and_skips_missing_vectors() {
    let mut vectors = TurnVectors::new(2);
    for vector in [Some(&[1.0, 0.0][..]), None, Some(&[0.6, 0.8]), Some(&[0.0, 1.0, 0.0])] {
        vectors.push(vector);
    }
    assert_eq!(vectors.len(), 4);
    assert_eq!(vectors.get(3), None, "a vector of another length counts as none");
    assert_eq!(dense_ranking(&[0.0, 1.0], &vectors, 10), vec![2, 0]);
    assert_eq!(dense_ranking(&[0.0, 1.0], &vectors, 1), vec![2]);
    assert!(dense_ranking(&[0.0, 0.0], &vectors, 10).is_empty());
    assert!(dense_ranking(&[0.0, 1.0, 0.0], &vectors, 10).is_empty(), "a query of another model ranks nothing");
}

#[test]
fn hybrid_ranking_is_lexical_without_dense_and_fused_with_it() {
    assert_eq!(hybrid_ranking(&[3, 1, 2], None, 2), vec![3, 1]);
    assert_eq!(hybrid_ranking(&[3, 1, 2], Some(&[]), 10), vec![3, 1, 2]);
    let fused = hybrid_ranking(&[1, 3, 2], Some(&[4, 1, 3]), 10);
    assert_eq!(fused.len(), 4);
    assert_eq!(fused[0], 1, "high in both rankings");
    assert!(fused.contains(&4), "found by meaning alone");
    assert_eq!(hybrid_ranking(&[3], Some(&[4]), 10), vec![3, 4], "a word match outranks a near meaning alone");
}

#[test]
fn turn_times_spread_over_the_conversation() {
    let start = now();
    let end = start + TimeDelta::minutes(10);
    assert_eq!(turn_time(start, end, 0, 3), start);
    assert_eq!(turn_time(start, end, 1, 3), start + TimeDelta::minutes(5));
    assert_eq!(turn_time(start, end, 2, 3), end);
    assert_eq!(turn_time(start, end, 0, 1), end);
    assert_eq!(turn_time(end, start, 1, 3), end, "a clock running backwards gives the later time");
}

#[test]
fn packing_stays_within_budget_and_shows_hits_with_their_reply_dated_oldest_first() {
    let now = now();
    let turns = history();
    let index = TurnIndex::build(&turns);
    let ranked: Vec<usize> = index.search("brother missing mill").into_iter().map(|(p, _)| p).collect();
    let packed = pack(&turns, &LineCosts::new(turns.len()), &ranked, 200, &[], &PackRules::default(), now)
        .expect("something fits");
    assert!(packed.token_count <= 200);
    assert_eq!(packed.token_count, count_tokens_cached(&packed.content));
    assert!(packed.content.starts_with(RECALL_HEADER));
    assert!(packed.content.contains("\n- Aria: My brother Tomas went missing near the old mill.\n"));
    assert!(packed.content.contains("\n- You: I will keep my ears open for news of him."), "the reply follows");
    assert!(packed.content.contains("\n7 weeks ago, on 9 October 2026:\n"), "dated both ways: {}", packed.content);
    let said: Vec<DateTime<Utc>> = packed.turns.iter().map(|&p| turns[p].said_at).collect();
    assert!(said.windows(2).all(|pair| pair[0] <= pair[1]), "oldest first");
}

#[test]
fn packing_never_exceeds_the_budget_whatever_its_size() {
    let now = now();
    let turns = history();
    let ranked: Vec<usize> = (0..turns.len()).rev().collect();
    for budget in 0..300 {
        if let Some(packed) =
            pack(&turns, &LineCosts::new(turns.len()), &ranked, budget, &[], &PackRules::default(), now)
        {
            assert!(packed.token_count <= budget, "budget {budget}: {}", packed.token_count);
            assert_eq!(packed.token_count, count_tokens_cached(&packed.content));
        } else {
            assert!(budget < 40, "budget {budget} fitted nothing");
        }
    }
}

#[test]
fn a_line_another_section_shows_is_not_repeated() {
    let now = now();
    let turns = history();
    let shown = "Aria spoke with Brom (2 messages). Aria: \"My brother Tomas went missing near the old mill.\"";
    let packed = pack(&turns, &LineCosts::new(turns.len()), &[10, 11], 500, &[shown], &PackRules::default(), now)
        .expect("the reply fits");
    assert!(!packed.content.contains("Tomas"));
    assert!(packed.content.contains("ears open"));
    assert!(
        pack(
            &turns,
            &LineCosts::new(turns.len()),
            &[10],
            500,
            &[shown],
            &PackRules { neighbours_of_top: 0, ..Default::default() },
            now
        )
        .is_none()
    );
}

#[test]
fn unused_shares_flow_to_sections_with_content() {
    let budgets = BudgetManager::default();
    // Everything fits: everyone gets what they need.
    let all = budgets.distribute(1000, &[("relationship", 20), ("memory", 100), ("recall", 300)]);
    assert_eq!((all["relationship"], all["memory"], all["recall"]), (20, 100, 300));
    // Recall wants far more than its share: it gets what the others leave.
    let flowed = budgets.distribute(1000, &[("relationship", 20), ("memory", 100), ("recall", 5000)]);
    assert_eq!(flowed["recall"], 880);
    // Two hungry sections split the pool by their shares (0.25 each here).
    let split = budgets.distribute(1000, &[("memory", 5000), ("recall", 5000), ("mood", 10)]);
    assert_eq!(split["mood"], 10);
    assert!(split["memory"].abs_diff(split["recall"]) <= 1);
    assert_eq!(split.values().sum::<usize>(), 1000);
    // A zero share gets nothing.
    let zero = BudgetManager::with_overrides("recall=0").unwrap().distribute(100, &[("recall", 50), ("memory", 500)]);
    assert_eq!((zero["recall"], zero["memory"]), (0, 100));
    assert!(budgets.distribute(0, &[("memory", 10)])["memory"] == 0);
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn distribution_never_exceeds_the_pool_or_a_need(
            pool in 0usize..5000,
            needs in proptest::collection::vec(0usize..3000, 6),
        ) {
            let names = ["memory", "relationship", "knowledge", "working_memory", "mood", "recall"];
            let asked: Vec<(&str, usize)> = names.iter().copied().zip(needs.iter().copied()).collect();
            let granted = BudgetManager::default().distribute(pool, &asked);
            prop_assert!(granted.values().sum::<usize>() <= pool);
            for (name, need) in &asked {
                prop_assert!(granted[*name] <= *need);
            }
            // Nothing is left over while someone still wants more.
            let total_need: usize = needs.iter().sum();
            prop_assert_eq!(granted.values().sum::<usize>(), pool.min(total_need));
        }
    }
}

#[test]
fn whitespace_collapses_and_tidy_text_is_borrowed() {
    for (text, collapsed) in [
        ("a b", "a b"),
        ("", ""),
        (" ", ""),
        ("a  b", "a b"),
        (" a b", "a b"),
        ("a b ", "a b"),
        ("a\nb", "a b"),
        ("a\tb\r\n", "a b"),
        ("é\u{a0}ü", "é ü"),
    ] {
        assert_eq!(collapse_whitespace(text), collapsed, "{text:?}");
    }
    assert!(matches!(collapse_whitespace("already tidy"), std::borrow::Cow::Borrowed(_)));
}

#[test]
fn names_and_words_in_most_turns_are_not_informative() {
    let turns = history();
    let index = TurnIndex::build(&turns);
    // "Aria" is indexed with each of her turns; "forge" is in 29 of 60 turns.
    let informative = index.informative_terms("Aria, did Tomas ever come back to the forge?");
    let expected: HashSet<String> = ["toma", "come", "back"].into_iter().map(str::to_owned).collect();
    assert_eq!(informative, expected, "neither aria nor forg: {informative:?}");
    assert!(index.informative_terms("a word never said: zeppelin").contains("zeppelin"));
}

#[test]
fn the_npc_s_own_line_is_found_and_shown_as_its_own() {
    let now = now();
    let mut turns = history();
    turns.push(turn(99, 0, Speaker::Player, "Where should I look for work?", at(3, now)));
    turns.push(turn(99, 1, Speaker::Npc, "The mines at Karst take anyone who can swing a pick.", at(3, now)));
    let ranked: Vec<usize> =
        TurnIndex::build(&turns).search("What did you tell me about the mines?").into_iter().map(|(p, _)| p).collect();
    let packed = pack(&turns, &LineCosts::new(turns.len()), &ranked, 300, &[], &PackRules::default(), now)
        .expect("something fits");
    assert!(
        packed.content.contains("\n- You: The mines at Karst take anyone who can swing a pick."),
        "{}",
        packed.content
    );
    let unnamed = Turn { speaker_name: None, ..turns[turns.len() - 2].clone() };
    assert_eq!(turn_line(&unnamed), "- They: Where should I look for work?");
}

#[test]
fn a_kept_heading_count_is_the_count_of_the_heading_it_stands_for() {
    for now in
        [Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 3, 1, 0, 0, 59).unwrap()]
    {
        for minutes in (0..3 * 365 * 24 * 60).step_by(97) {
            let said_at = now - TimeDelta::minutes(minutes) - TimeDelta::seconds(minutes % 60);
            let heading = format!("{}\n", conversation_heading(said_at, now));
            assert_eq!(heading_cost(said_at, now), count_tokens(&heading), "{heading}");
        }
    }
}
