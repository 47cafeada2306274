//! Store queries that no service path runs yet (admin and future callers): each runs here
//! against a real database, so a broken statement fails a test, not an operator.

use std::time::Duration;

use chrono::DurationRound;

use npcmem_store::factions::{self, Side};
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::json;
use uuid::Uuid;

#[tokio::test]
async fn runtime_switches_load_seeded_defaults_and_update() {
    let env = TestEnv::new().await;
    let mut connection = env.pool.acquire().await.unwrap();
    let switches = npcmem_store::switches::load_all(&mut connection).await.unwrap();
    assert_eq!(switches.get("degraded"), Some(&json!("auto")), "degraded mode follows the error budgets");
    assert_eq!(switches.get("gossip_enabled"), Some(&json!(true)));
    npcmem_store::switches::set(&mut connection, "degraded", &json!(true), "test").await.unwrap();
    let switches = npcmem_store::switches::load_all(&mut connection).await.unwrap();
    assert_eq!(switches.get("degraded"), Some(&json!(true)));
    drop(connection);
    env.cleanup().await;
}

#[tokio::test]
async fn a_forgotten_players_older_conversation_is_refused_and_factions_are_recorded() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let subject = env.subject("conversation.ended");
    let remembered = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(remembered, &pair)), None).await;
    wait_until(Duration::from_secs(20), "first conversation recorded", || async {
        env.count("SELECT count(*) FROM conversations").await == 1
    })
    .await;

    let mut connection = env.pool.acquire().await.unwrap();
    assert_eq!(
        factions::get(&mut connection, Side::Player, pair.player_id).await.unwrap(),
        Some(vec!["thieves_guild".to_string()])
    );
    assert_eq!(
        factions::get(&mut connection, Side::Npc, pair.npc_id).await.unwrap(),
        Some(vec!["smiths_guild".to_string()])
    );
    // Forgotten now: a (late) conversation that started before this moment is refused.
    npcmem_store::privacy::mark_forgotten(&mut connection, pair.player_id, chrono::Utc::now()).await.unwrap();
    let late = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(late, &pair)), None).await;
    wait_until(Duration::from_secs(20), "late conversation handled", || async {
        env.count("SELECT count(*) FROM conversations").await == 2
    })
    .await;
    let row = npcmem_store::conversations::get(&mut connection, late).await.unwrap().unwrap();
    assert_eq!(row.state, "skipped");
    assert_eq!(row.skip_reason.as_deref(), Some("forgotten"));
    let states = npcmem_store::conversations::count_by_state(&mut connection).await.unwrap();
    assert_eq!(states, vec![("pending".to_string(), 1), ("skipped".to_string(), 1)]);
    drop(connection);
    ingest.stop().await;
    env.cleanup().await;
}

/// 40 leases of 700 racing over 10,000 tokens on 40 connections: the grants never add up
/// to more than the limit, and the last ones get what is left (if it covers `need`).
#[tokio::test]
async fn racing_global_leases_never_pass_the_daily_limit() {
    use npcmem_store::budgets;
    let env = TestEnv::new().await;
    let day = chrono::Utc::now().date_naive();
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let pool = env.pool.clone();
            tokio::spawn(async move {
                let mut connection = pool.acquire().await.expect("a connection");
                budgets::lease_global(&mut connection, day, 700, 300, 10_000).await.expect("lease runs")
            })
        })
        .collect();
    let mut granted = Vec::new();
    for task in tasks {
        granted.push(task.await.expect("the task finishes"));
    }
    let total: i64 = granted.iter().sum();
    assert!(total <= 10_000, "granted {total}");
    assert!(total > 10_000 - 300, "only less than `need` stays unleased: {total}");
    assert!(granted.iter().all(|g| *g == 0 || *g >= 300), "{granted:?}");
    let mut connection = env.pool.acquire().await.expect("a connection");
    budgets::release_global(&mut connection, day, 1_000, 5_000, 7).await.expect("release runs");
    let rows = budgets::usage(&mut connection, day).await.expect("usage reads");
    assert_eq!(
        (rows[0].scope.as_str(), rows[0].reserved, rows[0].spent, rows[0].calls),
        ("global", total - 1_000, 5_000, 7)
    );
    drop(connection);
    env.cleanup().await;
}

#[tokio::test]
async fn npc_reservations_are_all_or_nothing_per_npc_and_settle_to_the_real_cost() {
    use npcmem_store::budgets::{self, NpcSettlement};
    let env = TestEnv::new().await;
    let day = chrono::Utc::now().date_naive();
    let (rich, poor) = (Uuid::new_v4(), Uuid::new_v4());
    let mut connection = env.pool.acquire().await.expect("a connection");
    let granted = budgets::reserve_npcs(&mut connection, day, &[(rich, 600), (poor, 900)], 1_000).await.unwrap();
    assert_eq!(granted.len(), 2);
    let granted = budgets::reserve_npcs(&mut connection, day, &[(rich, 300), (poor, 300)], 1_000).await.unwrap();
    assert_eq!(granted, vec![rich], "poor has 100 left, not 300");
    budgets::settle_npcs(
        &mut connection,
        day,
        &[NpcSettlement { npc_id: rich, reserved: 900, charged: 400, calls: 2 }],
    )
    .await
    .unwrap();
    let rows = budgets::usage(&mut connection, day).await.unwrap();
    let rich_row = rows.iter().find(|row| row.npc_id == rich).expect("rich's row");
    assert_eq!((rich_row.reserved, rich_row.spent, rich_row.calls), (400, 400, 2));
    let granted = budgets::reserve_npcs(&mut connection, day, &[(rich, 600)], 1_000).await.unwrap();
    assert_eq!(granted, vec![rich], "settling below the reservation freed tokens");
    drop(connection);
    env.cleanup().await;
}

#[tokio::test]
async fn the_request_rate_is_a_sliding_minute_shared_by_every_caller() {
    use npcmem_store::budgets::{self, EXTRACTION_RATE};
    let env = TestEnv::new().await;
    let mut connection = env.pool.acquire().await.expect("a connection");
    let minute = chrono::Utc::now().duration_trunc(chrono::TimeDelta::minutes(1)).unwrap();
    let at = |seconds: i64| minute + chrono::TimeDelta::seconds(seconds);
    // 10 per minute: 6 then 6 in the same window → 6 and 4.
    assert_eq!(budgets::grant_requests(&mut connection, EXTRACTION_RATE, at(10), 6, 10).await.unwrap(), 6);
    assert_eq!(budgets::grant_requests(&mut connection, EXTRACTION_RATE, at(20), 6, 10).await.unwrap(), 4);
    assert_eq!(budgets::grant_requests(&mut connection, EXTRACTION_RATE, at(30), 1, 10).await.unwrap(), 0);
    // 15 s into the next window, 75 % of the previous 10 still count: 2 fit.
    assert_eq!(budgets::grant_requests(&mut connection, EXTRACTION_RATE, at(75), 5, 10).await.unwrap(), 2);
    // Two windows later the old ones no longer count.
    assert_eq!(budgets::grant_requests(&mut connection, EXTRACTION_RATE, at(185), 20, 10).await.unwrap(), 10);
    drop(connection);
    env.cleanup().await;
}

#[tokio::test]
async fn facts_with_awkward_tags_and_provenance_round_trip_exactly() {
    use npcmem_core::gossip::HeldFact;
    use npcmem_core::wire::KnowledgeCategory;
    use npcmem_store::knowledge::{Known, NewFact, Source};
    let env = TestEnv::new().await;
    let tags: Vec<String> = ["quote \"x\"", "back\\slash", "comma,brace}{", "NULL", "", "ünïcødé ✓", " spaced "]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let id = Uuid::now_v7();
    let provenance = vec![Uuid::new_v4(), Uuid::new_v4()];
    let fact = HeldFact {
        id,
        origin_fact_id: id,
        holder: Uuid::new_v4(),
        category: KnowledgeCategory::NpcGossip,
        subject_id: None,
        content: "It's \"odd\"".into(),
        tags: tags.clone(),
        confidence: 0.7,
        importance: 0.6,
        hop_count: 2,
        provenance: provenance.clone(),
        expires_at: None,
        perspective: None,
    };
    // The speaker holds the fact it tells (a copy is stored only then).
    let told = HeldFact {
        id: Uuid::now_v7(),
        holder: provenance[1],
        hop_count: 1,
        provenance: vec![provenance[0]],
        ..fact.clone()
    };
    let told = NewFact { fact: told, source: Source::Authored, source_memory_id: None, speaker_id: None };
    let new = NewFact { fact, source: Source::Gossip, source_memory_id: None, speaker_id: Some(provenance[1]) };
    let mut connection = env.pool.acquire().await.unwrap();
    npcmem_store::knowledge::insert_facts(&mut connection, &[told], &[], Known::Possible).await.unwrap();
    let inserted =
        npcmem_store::knowledge::insert_facts(&mut connection, std::slice::from_ref(&new), &[], Known::Possible)
            .await
            .unwrap();
    assert_eq!(inserted, vec![id]);
    let again =
        npcmem_store::knowledge::insert_facts(&mut connection, std::slice::from_ref(&new), &[], Known::Possible)
            .await
            .unwrap();
    assert!(again.is_empty(), "a duplicate (holder, origin) is not stored twice");
    let (stored_tags, stored_provenance, content): (Vec<String>, Vec<Uuid>, String) =
        sqlx::query_as("SELECT tags, provenance, content FROM knowledge_facts WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *connection)
            .await
            .unwrap();
    assert_eq!((stored_tags, stored_provenance, content), (tags, provenance, "It's \"odd\"".to_owned()));
    drop(connection);
    env.cleanup().await;
}

/// The gossip leader inserts a tick's facts without per-row conflict checks; a fact its
/// listener knew after all (the leader's memory lagged) is skipped on the careful retry,
/// with its outbox message, and the others are stored once with theirs.
#[tokio::test]
async fn facts_thought_new_skip_the_one_already_known() {
    use npcmem_store::knowledge::{Known, NewFact, insert_facts};
    use npcmem_store::outbox::OutboxMessage;
    let env = TestEnv::new().await;
    let new_fact = |holder: Uuid, origin: Uuid| world_event(holder, origin, None);
    let message = |new: &NewFact| {
        let message = OutboxMessage {
            subject: "test.learned".into(),
            msg_id: Some(format!("learned-{}", new.fact.id)),
            payload: b"{}".to_vec(),
            headers: Default::default(),
        };
        (new.fact.id, message)
    };
    let origin = Uuid::new_v4();
    let (known_holder, other) = (Uuid::new_v4(), Uuid::new_v4());
    let mut connection = env.pool.acquire().await.unwrap();
    let first = [new_fact(known_holder, origin)];
    let stored = insert_facts(
        &mut connection,
        &first,
        &[message(&first[0])],
        Known::Unlikely { loaded_since: chrono::Utc::now() },
    )
    .await
    .unwrap();
    assert_eq!(stored, vec![first[0].fact.id], "a batch without duplicates goes in as is");

    let batch = [new_fact(known_holder, origin), new_fact(other, origin)];
    let messages: Vec<_> = batch.iter().map(message).collect();
    let stored = insert_facts(&mut connection, &batch, &messages, Known::Unlikely { loaded_since: chrono::Utc::now() })
        .await
        .unwrap();
    assert_eq!(stored, vec![batch[1].fact.id], "the known one is skipped, the new one stored");
    let facts: i64 = sqlx::query_scalar("SELECT count(*) FROM knowledge_facts WHERE origin_fact_id = $1")
        .bind(origin)
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    let mut queued: Vec<String> = sqlx::query_scalar("SELECT msg_id FROM outbox WHERE subject = 'test.learned'")
        .fetch_all(&mut *connection)
        .await
        .unwrap();
    queued.sort();
    let mut expected = vec![format!("learned-{}", first[0].fact.id), format!("learned-{}", batch[1].fact.id)];
    expected.sort();
    assert_eq!((facts, queued), (2, expected), "one row and one message per fact stored, none for the duplicate");
    drop(connection);
    env.cleanup().await;
}

/// A gossip copy is stored only while its speaker holds the origin fact: the leader plans
/// from memory, which hears of a deletion late.
#[tokio::test]
async fn a_copy_whose_speaker_no_longer_holds_the_fact_is_not_stored() {
    use npcmem_store::knowledge::{Known, NewFact, insert_facts};
    use npcmem_store::outbox::OutboxMessage;
    let env = TestEnv::new().await;
    let fact = world_event;
    let message = |new: &NewFact| {
        let payload = b"{}".to_vec();
        let message = OutboxMessage {
            subject: "test.learned".into(),
            msg_id: Some(new.fact.id.to_string()),
            payload,
            headers: Default::default(),
        };
        (new.fact.id, message)
    };
    let (teller, quiet, first, second, third) =
        (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (flood, fire) = (Uuid::new_v4(), Uuid::new_v4());
    let mut connection = env.pool.acquire().await.unwrap();
    let originals = [fact(teller, flood, None), fact(quiet, fire, None)];
    insert_facts(&mut connection, &originals, &[], Known::Possible).await.unwrap();
    let told = [fact(first, flood, Some(teller))];
    let stored = insert_facts(
        &mut connection,
        &told,
        &[message(&told[0])],
        Known::Unlikely { loaded_since: chrono::Utc::now() },
    )
    .await
    .unwrap();
    assert_eq!(stored, vec![told[0].fact.id], "the teller holds it: stored");

    sqlx::query("DELETE FROM knowledge_facts WHERE npc_id = $1").bind(teller).execute(&mut *connection).await.unwrap();
    let logged: Vec<(Uuid, Uuid)> = sqlx::query_as("SELECT npc_id, origin_fact_id FROM knowledge_forgotten")
        .fetch_all(&mut *connection)
        .await
        .unwrap();
    assert_eq!(logged, vec![(teller, flood)], "the deletion is logged for the leader");
    for known in [Known::Unlikely { loaded_since: chrono::Utc::now() }, Known::Possible] {
        let batch = [fact(second, flood, Some(teller)), fact(third, fire, Some(quiet))];
        let messages: Vec<_> = batch.iter().map(message).collect();
        let stored = insert_facts(&mut connection, &batch, &messages, known).await.unwrap();
        assert_eq!(stored, vec![batch[1].fact.id], "{known:?}: only the copy whose speaker holds it");
        let queued: Vec<String> = sqlx::query_scalar("SELECT msg_id FROM outbox WHERE msg_id = ANY($1)")
            .bind(messages.iter().map(|(_, m)| m.msg_id.clone().unwrap()).collect::<Vec<_>>())
            .fetch_all(&mut *connection)
            .await
            .unwrap();
        assert_eq!(queued, vec![batch[1].fact.id.to_string()], "{known:?}: only its message");
        sqlx::query("DELETE FROM knowledge_facts WHERE npc_id = $1")
            .bind(third)
            .execute(&mut *connection)
            .await
            .unwrap();
    }
    let second_holds: i64 = sqlx::query_scalar("SELECT count(*) FROM knowledge_facts WHERE npc_id = $1")
        .bind(second)
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    assert_eq!(second_holds, 0);
    drop(connection);
    env.cleanup().await;
}

/// A world event `holder` learned: told by `speaker` (a gossip copy, one hop on) or, without
/// one, authored.
fn world_event(holder: Uuid, origin: Uuid, speaker: Option<Uuid>) -> npcmem_store::knowledge::NewFact {
    use npcmem_core::gossip::HeldFact;
    use npcmem_core::wire::KnowledgeCategory;
    use npcmem_store::knowledge::{NewFact, Source};
    NewFact {
        fact: HeldFact {
            id: Uuid::now_v7(),
            origin_fact_id: origin,
            holder,
            category: KnowledgeCategory::WorldEvent,
            subject_id: None,
            content: "Bandits on the north road".into(),
            tags: vec!["bandits".into()],
            confidence: 0.8,
            importance: 0.7,
            hop_count: speaker.map_or(0, |_| 1),
            provenance: speaker.into_iter().collect(),
            expires_at: None,
            perspective: None,
        },
        source: if speaker.is_some() { Source::Gossip } else { Source::Authored },
        source_memory_id: None,
        speaker_id: speaker,
    }
}

/// Deleting facts logs them for the gossip leader and wakes it; a delete that removes
/// nothing (the cap's, on most batches) does neither.
#[tokio::test]
async fn only_a_delete_that_removes_facts_is_logged_and_wakes_the_gossip_leader() {
    use npcmem_store::knowledge::{Known, WORLD_CHANGED_CHANNEL, insert_facts};
    let env = TestEnv::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&env.pool).await.unwrap();
    listener.listen(WORLD_CHANGED_CHANNEL).await.unwrap();
    let holder = Uuid::new_v4();
    let mut connection = env.pool.acquire().await.unwrap();
    insert_facts(&mut connection, &[world_event(holder, Uuid::new_v4(), None)], &[], Known::Possible).await.unwrap();
    let learned = tokio::time::timeout(std::time::Duration::from_secs(5), listener.recv()).await;
    assert!(learned.is_ok_and(|n| n.is_ok()), "learning notifies");

    sqlx::query("DELETE FROM knowledge_facts WHERE npc_id = $1")
        .bind(Uuid::new_v4())
        .execute(&mut *connection)
        .await
        .unwrap();
    let woken = tokio::time::timeout(std::time::Duration::from_millis(300), listener.recv()).await;
    assert!(woken.is_err(), "a delete of nothing wakes nobody: {woken:?}");
    assert_eq!(env.count("SELECT count(*) FROM knowledge_forgotten").await, 0);

    sqlx::query("DELETE FROM knowledge_facts WHERE npc_id = $1").bind(holder).execute(&mut *connection).await.unwrap();
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), listener.recv()).await;
    assert!(woken.is_ok_and(|n| n.is_ok()), "a deletion notifies");
    assert_eq!(env.count("SELECT count(*) FROM knowledge_forgotten").await, 1);
    drop(connection);
    env.cleanup().await;
}
