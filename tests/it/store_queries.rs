//! Store queries that no service path runs yet (admin and future callers): each runs here
//! against a real database, so a broken statement fails a test, not an operator.

use std::time::Duration;

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
    assert_eq!(switches.get("degraded"), Some(&json!(false)));
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
