use std::time::Duration;

use npcmem_bus::StreamKind;
use npcmem_core::memory::MemoryType;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::Value;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// content, tags, importance, memory_type, source_conversation_id
type MemoryRow = (String, Vec<String>, f64, String, Option<Uuid>);

async fn events(env: &TestEnv) -> Vec<Value> {
    env.stream_messages(StreamKind::Events)
        .await
        .iter()
        .filter(|m| m.subject.as_str() == env.subject("event.memory.stored"))
        .map(|m| serde_json::from_slice(&m.payload).expect("events are JSON"))
        .collect()
}

#[tokio::test]
async fn a_trade_becomes_a_memory_and_one_memory_stored_event() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let pair = Pair::new();
    let conversation_id = Uuid::new_v4();
    let document = fixtures::conversation(
        conversation_id,
        &pair,
        &["I need a sword.", "A steel sword, fifty gold.", "Deal, I'll buy the steel sword for 50 gold.", "Pleasure."],
    );
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(&document), None).await;
    wait_until(WAIT, "one event.memory.stored", || async { events(&env).await.len() == 1 }).await;

    let (state, extractor): (String, Option<String>) =
        sqlx::query_as("SELECT state, extractor FROM conversations WHERE conversation_id = $1")
            .bind(conversation_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(state, "complete");
    assert_eq!(extractor.as_deref(), Some("rules"));
    let rows: Vec<MemoryRow> = sqlx::query_as(
        "SELECT content, tags, importance, memory_type, source_conversation_id FROM memories
         WHERE npc_id = $1 AND player_id = $2",
    )
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert!(!rows.is_empty(), "the trade was remembered");
    let trade = rows.iter().find(|r| r.1.contains(&"trade".to_string())).expect("a trade memory");
    assert!(trade.0.contains("Aria"), "content names the player: {}", trade.0);
    assert!(trade.2 <= 0.7, "player-sourced importance is capped");
    assert_eq!(trade.3, MemoryType::Episodic.as_str());
    assert_eq!(trade.4, Some(conversation_id));

    let event = &events(&env).await[0];
    assert_eq!(event["schema_version"], 1);
    assert_eq!(event["conversation_id"], conversation_id.to_string());
    assert_eq!(event["npc_id"], pair.npc_id.to_string());
    assert_eq!(event["extractor"], "rules");
    assert_eq!(event["npc_factions"], serde_json::json!(["smiths_guild"]));
    assert_eq!(event["memories"].as_array().unwrap().len(), rows.len());

    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn small_talk_stores_nothing_but_still_counts_as_an_interaction() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let pair = Pair::new();
    let conversation_id = Uuid::new_v4();
    let document = fixtures::conversation(
        conversation_id,
        &pair,
        &["Hello there.", "Good day to you.", "How are you?", "I am well, thank you."],
    );
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(&document), None).await;
    wait_until(WAIT, "one event.memory.stored", || async { events(&env).await.len() == 1 }).await;
    assert_eq!(events(&env).await[0]["memories"], serde_json::json!([]));
    assert_eq!(env.count("SELECT count(*) FROM memories").await, 0);
    assert_eq!(env.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await, 1);
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_redelivered_job_for_a_complete_conversation_writes_nothing() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let pair = Pair::new();
    let conversation_id = Uuid::new_v4();
    env.publish(
        &env.subject("conversation.ended"),
        fixtures::bytes(&fixtures::trade_conversation(conversation_id, &pair)),
        None,
    )
    .await;
    wait_until(WAIT, "extracted", || async { events(&env).await.len() == 1 }).await;
    let memories_before = env.count("SELECT count(*) FROM memories").await;

    // The same job again, past JetStream's dedup window (another message id).
    let job = serde_json::json!({"schema_version": 1, "conversation_id": conversation_id});
    env.publish(&env.subject("job.extract"), fixtures::bytes(&job), Some("replayed-job")).await;
    wait_until(WAIT, "the replayed job consumed", || async { env.stream_messages(StreamKind::Jobs).await.is_empty() })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(env.count("SELECT count(*) FROM memories").await, memories_before);
    assert_eq!(events(&env).await.len(), 1, "no second event");
    assert_eq!(env.count("SELECT attempts::bigint FROM conversations").await, 1, "not claimed again");
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn growth_caps_keep_200_episodic_memories_and_every_locked_one() {
    let env = TestEnv::new().await;
    let pair = Pair::new();
    // 300 episodic memories with rising salience; the 20 least salient are locked.
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, importance, confidence, salience, locked)
         SELECT gen_random_uuid(), $1, $2, 'episodic', 'memory ' || n, 0.5, 0.9, n / 1000.0, n <= 20
         FROM generate_series(1, 300) AS n",
    )
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .execute(&env.pool)
    .await
    .unwrap();
    let mut transaction = env.pool.begin().await.unwrap();
    let evicted =
        npcmem_store::memories::enforce_cap(&mut transaction, pair.npc_id, pair.player_id, MemoryType::Episodic)
            .await
            .unwrap();
    transaction.commit().await.unwrap();
    assert_eq!(evicted, 100);
    assert_eq!(env.count("SELECT count(*) FROM memories").await, 200);
    assert_eq!(env.count("SELECT count(*) FROM memories WHERE locked").await, 20, "locked memories are exempt");
    // The evicted ones are the least salient unlocked: 21..=120.
    let lowest_unlocked: f64 =
        sqlx::query_scalar("SELECT min(salience) FROM memories WHERE NOT locked").fetch_one(&env.pool).await.unwrap();
    assert!((lowest_unlocked - 0.121).abs() < 1e-9, "{lowest_unlocked}");
    env.cleanup().await;
}
