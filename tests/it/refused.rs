//! A row the database permanently refuses: in every service, the message that asks for it
//! is dead-lettered at its first delivery with reason `refused` and the database's own
//! message, and the other messages of its batch are applied. The refusal comes from a
//! trigger installed in the test's database that raises `check_violation` (SQLSTATE
//! 23514) for one id.

use std::time::Duration;

use async_nats::jetstream::message::StreamMessage;
use chrono::{TimeDelta, Utc};
use npcmem_bus::StreamKind;
use npcmem_bus::dlq::{HEADER_DELIVERIES, HEADER_MESSAGE, HEADER_REASON};
use npcmem_tests::fixtures::{self, EventMemory, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);
/// What the trigger says; the dead letter must carry it.
const REFUSAL: &str = "the test trigger refuses this row";

/// Makes `table` refuse (SQLSTATE 23514) every row written with `column` = `id` and, when
/// given, matching `also` (a condition on `NEW`).
async fn refuse(env: &TestEnv, table: &str, column: &str, id: Uuid, also: Option<&str>) {
    let condition = match also {
        Some(extra) => format!("NEW.{column} = '{id}'::uuid AND {extra}"),
        None => format!("NEW.{column} = '{id}'::uuid"),
    };
    // Built only from this file's table and column names and a UUID.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse_one_row() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF {condition} THEN
                 RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = 'check_violation';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_one_row BEFORE INSERT OR UPDATE ON {table}
             FOR EACH ROW EXECUTE FUNCTION refuse_one_row();"
    )))
    .execute(&env.pool)
    .await
    .expect("the trigger installs");
}

fn header(letter: &StreamMessage, name: &str) -> String {
    letter.headers.get(name).map(|value| value.as_str().to_owned()).unwrap_or_default()
}

/// Waits for the dead letters of `consumer`, then checks each one: refused at delivery 1
/// with the database's message. Returns their bodies.
async fn refused_letters(env: &TestEnv, consumer: &str, expected: usize) -> Vec<Value> {
    let subject = env.topology.dlq(consumer);
    wait_until(WAIT, &format!("{expected} dead letter(s) of {consumer}"), || async {
        env.stream_messages(StreamKind::Dlq).await.len() >= expected
    })
    .await;
    let letters = env.stream_messages(StreamKind::Dlq).await;
    let mut bodies = Vec::new();
    for letter in &letters {
        assert_eq!(letter.subject.as_str(), subject);
        assert_eq!(header(letter, HEADER_REASON), "refused", "{:?}", letter.headers);
        assert_eq!(header(letter, HEADER_DELIVERIES), "1", "dead-lettered at the first delivery");
        let message = header(letter, HEADER_MESSAGE);
        assert!(message.contains(REFUSAL) && message.contains("SQLSTATE 23514"), "{message}");
        bodies.push(serde_json::from_slice(&letter.payload).expect("the original JSON"));
    }
    bodies
}

#[tokio::test]
async fn ingest_dead_letters_a_refused_conversation_at_once_and_writes_the_rest() {
    let env = TestEnv::new().await;
    let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    refuse(&env, "conversations", "conversation_id", ids[1], None).await;
    // Published before the service starts, so one batch holds all three.
    for id in &ids {
        env.publish(
            &env.subject("conversation.ended"),
            fixtures::bytes(&fixtures::trade_conversation(*id, &Pair::new())),
            None,
        )
        .await;
    }
    let ingest = env.spawn_ingest(&[]);
    let bodies = refused_letters(&env, "ingest", 1).await;
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["conversation_id"], ids[1].to_string());
    wait_until(WAIT, "the other two recorded", || async { env.count("SELECT count(*) FROM conversations").await == 2 })
        .await;
    let recorded: Vec<Uuid> = sqlx::query_scalar("SELECT conversation_id FROM conversations ORDER BY conversation_id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let mut expected = vec![ids[0], ids[2]];
    expected.sort();
    assert_eq!(recorded, expected);
    assert_eq!(env.stream_messages(StreamKind::Dlq).await.len(), 1, "the others are not dead-lettered");
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn extract_dead_letters_a_refused_job_at_once_and_completes_the_rest() {
    let env = TestEnv::new().await;
    let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    // Completing the middle conversation is refused; recording and claiming it are not.
    refuse(&env, "conversations", "conversation_id", ids[1], Some("NEW.state = 'complete'")).await;
    let ingest = env.spawn_ingest(&[]);
    for id in &ids {
        env.publish(
            &env.subject("conversation.ended"),
            fixtures::bytes(&fixtures::trade_conversation(*id, &Pair::new())),
            None,
        )
        .await;
    }
    // All three jobs wait in their stream before extract starts: one batch.
    wait_until(WAIT, "three jobs", || async { env.stream_messages(StreamKind::Jobs).await.len() == 3 }).await;
    let extract = env.spawn_extract(&[]);
    let bodies = refused_letters(&env, "extract", 1).await;
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["conversation_id"], ids[1].to_string());
    wait_until(WAIT, "the other two complete", || async {
        env.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await == 2
    })
    .await;
    let state: String = sqlx::query_scalar("SELECT state FROM conversations WHERE conversation_id = $1")
        .bind(ids[1])
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_ne!(state, "complete");
    let without_memories: i64 = sqlx::query_scalar("SELECT count(*) FROM memories WHERE source_conversation_id = $1")
        .bind(ids[1])
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(without_memories, 0, "nothing of the refused conversation is stored");
    assert_eq!(env.stream_messages(StreamKind::Dlq).await.len(), 1, "the others are not dead-lettered");
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn relate_dead_letters_a_refused_event_at_once_and_applies_the_rest() {
    let env = TestEnv::new().await;
    let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    refuse(&env, "applied_conversations", "conversation_id", ids[1], None).await;
    let helpful = EventMemory { tags: &["helpful"], importance: 0.7, valence: "positive", intensity: 0.8 };
    for id in &ids {
        let event = fixtures::memory_stored(*id, &Pair::new(), &[helpful], Utc::now(), &[], &[]);
        env.publish(&env.subject("event.memory.stored"), fixtures::bytes(&event), None).await;
    }
    let relate = env.spawn_relate(&[]);
    let bodies = refused_letters(&env, "relate", 1).await;
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["conversation_id"], ids[1].to_string());
    wait_until(WAIT, "the other two applied", || async {
        env.count("SELECT count(*) FROM applied_conversations").await == 2
    })
    .await;
    assert_eq!(env.count("SELECT count(*) FROM relationships").await, 2, "no relationship for the refused one");
    assert_eq!(env.stream_messages(StreamKind::Dlq).await.len(), 1, "the others are not dead-lettered");
    relate.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn consolidate_dead_letters_a_refused_pair_at_once_and_consolidates_the_rest() {
    let env = TestEnv::new().await;
    let (good, bad) = (Pair::new(), Pair::new());
    refuse(&env, "memories", "npc_id", bad.npc_id, Some("NEW.memory_type = 'semantic'")).await;
    let now = Utc::now();
    for pair in [&good, &bad] {
        for day in [8, 9, 10] {
            sqlx::query(
                "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence,
                                       salience, created_at, last_accessed)
                 VALUES ($1, $2, $3, 'episodic', 'The player bought a sword.', '{trade}', 0.5, 0.9, 0.5, $4, $4)",
            )
            .bind(Uuid::new_v4())
            .bind(pair.npc_id)
            .bind(pair.player_id)
            .bind(now - TimeDelta::days(day))
            .execute(&env.pool)
            .await
            .expect("an old episode inserts");
        }
    }
    // The consolidation tick owed at start fans out one job per pair.
    let consolidate = env.spawn_consolidate(&[
        "--consolidate-schedule",
        "daily 00:00",
        "--decay-schedule",
        "daily 00:00",
        "--reinforce-schedule",
        "daily 00:00",
        "--scheduler-poll-ms",
        "200",
    ]);
    let bodies = refused_letters(&env, "consolidate", 1).await;
    assert!(bodies.iter().all(|body| body["npc_id"] == bad.npc_id.to_string()), "{bodies:?}");
    wait_until(WAIT, "the good pair consolidated", || async {
        env.count("SELECT count(*) FROM memories WHERE memory_type = 'semantic'").await == 1
    })
    .await;
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM memories WHERE npc_id = $1 AND memory_type = 'episodic'")
        .bind(bad.npc_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(kept, 3, "the refused pair's episodes stay");
    let letters = refused_letters(&env, "consolidate", 1).await;
    assert!(letters.iter().all(|body| body["npc_id"] == bad.npc_id.to_string()), "only the refused pair: {letters:?}");
    consolidate.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn gossip_dead_letters_a_refused_world_fact_at_once_and_learns_the_rest() {
    let env = TestEnv::new().await;
    let npc = Uuid::new_v4();
    let facts: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    refuse(&env, "knowledge_facts", "origin_fact_id", facts[1], None).await;
    for (fact_id, content) in facts.iter().zip(["The mill burned down", "The bridge is out", "A fair comes to town"]) {
        let fact = json!({"fact_id": fact_id, "npc_ids": [npc], "category": "world_event", "content": content,
                          "importance": 0.8, "confidence": 1.0});
        env.publish(&env.subject("world.fact"), serde_json::to_vec(&fact).unwrap(), None).await;
    }
    let gossip = env.spawn_gossip(&["--gossip-tick-ms", "3600000"]);
    let bodies = refused_letters(&env, npcmem_gossip::CONSUMER_WORLD, 1).await;
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["fact_id"], facts[1].to_string());
    wait_until(WAIT, "the other two facts learned", || async {
        env.count("SELECT count(*) FROM knowledge_facts").await == 2
    })
    .await;
    let learned: Vec<Uuid> = sqlx::query_scalar("SELECT origin_fact_id FROM knowledge_facts ORDER BY origin_fact_id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let mut expected = vec![facts[0], facts[2]];
    expected.sort();
    assert_eq!(learned, expected);
    assert_eq!(env.stream_messages(StreamKind::Dlq).await.len(), 1, "the others are not dead-lettered");
    gossip.stop().await;
    env.cleanup().await;
}
