//! Gossip against real NATS and Postgres: the service learns from world messages; the
//! tests drive ticks through the same `Ticker` the leader runs, so every exchange is
//! counted exactly. A tick plans on what the previous tick loaded, so a change made
//! between ticks shows in the second tick after it. This module holds the shared
//! helpers; the tests are in its submodules.

mod inputs;
mod leader;
mod perspective;
mod revisions;
mod spread;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use npcmem_bus::StreamKind;
use npcmem_gossip::tick::Ticker;
use npcmem_tests::{InProcessService, TestEnv, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// Gossip consumers without ticks of their own (the first would come after an hour).
fn spawn(env: &TestEnv) -> InProcessService {
    env.spawn_gossip(&["--gossip-tick-ms", "3600000"])
}

async fn world(env: &TestEnv, suffix: &str, body: Value) {
    env.publish(&env.subject(suffix), serde_json::to_vec(&body).unwrap(), None).await;
}

async fn move_npc(env: &TestEnv, npc: Uuid, room: &str) {
    world(env, "world.npc_moved", json!({"npc_id": npc, "room_id": room, "at": Utc::now()})).await;
}

async fn author(env: &TestEnv, npcs: &[Uuid], content: &str, importance: f64, confidence: f64, tags: &[&str]) -> Uuid {
    let fact_id = Uuid::new_v4();
    world(
        env,
        "world.fact",
        json!({"fact_id": fact_id, "npc_ids": npcs, "category": "world_event", "content": content,
        "tags": tags, "importance": importance, "confidence": confidence}),
    )
    .await;
    fact_id
}

async fn confidence_of(env: &TestEnv, npc: Uuid, origin: Uuid) -> Option<f64> {
    sqlx::query_scalar("SELECT confidence FROM knowledge_facts WHERE npc_id = $1 AND origin_fact_id = $2")
        .bind(npc)
        .bind(origin)
        .fetch_optional(&env.pool)
        .await
        .unwrap()
}

/// Every `event.knowledge.learned` published, once the outbox is empty.
async fn learned_events(env: &TestEnv) -> Vec<Value> {
    wait_until(WAIT, "events published", || async { env.count("SELECT count(*) FROM outbox").await == 0 }).await;
    let events = env.stream_messages(StreamKind::Events).await;
    let learned = events.iter().filter(|m| m.subject.as_str() == env.subject("event.knowledge.learned"));
    learned.map(|m| serde_json::from_slice(&m.payload).expect("events are JSON")).collect()
}

async fn wait_rows(env: &TestEnv, what: &str, sql: &'static str, expected: i64) {
    wait_until(WAIT, what, || async { env.count(sql).await == expected }).await;
}

/// A leader as the service runs it: listening for world changes.
async fn ticker(env: &TestEnv, budget: usize) -> Ticker {
    let mut ticker = Ticker::new(env.pool.clone(), env.topology.clone(), None, budget);
    ticker.watch_changes().await.expect("the leader listens for world changes");
    ticker
}

/// Ticks paced like the service's (far shorter than its one second): a change's
/// notification reaches the leader's listener between two ticks.
async fn ticks(ticker: &mut Ticker, count: usize) -> usize {
    let mut exchanges = 0;
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(50)).await;
        exchanges += ticker.tick().await.expect("the tick commits").exchanges;
    }
    exchanges
}

/// A teller in `rooms.0` who holds `news` (importance, certain) and a listener in
/// `rooms.1`, both recorded: (teller, listener, the news' fact id).
async fn teller_and_listener(env: &TestEnv, rooms: (&str, &str), news: (&str, f64)) -> (Uuid, Uuid, Uuid) {
    let (teller, listener) = (Uuid::new_v4(), Uuid::new_v4());
    move_and_wait(env, &[(teller, rooms.0), (listener, rooms.1)]).await;
    let fact = author(env, &[teller], news.0, news.1, 1.0, &[]).await;
    wait_rows(env, "the teller's fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    (teller, listener, fact)
}

/// A teller holding news and a listener in the tavern, and a leader (budget 0) that has
/// loaded them: (teller, listener, the news' fact id, leader).
async fn news_told_in_the_tavern(env: &TestEnv) -> (Uuid, Uuid, Uuid, Ticker) {
    let (teller, listener, news) = teller_and_listener(env, ("tavern", "tavern"), ("The bridge is out", 0.9)).await;
    (teller, listener, news, loaded_leader(env).await)
}

/// A leader (budget 0) that has loaded the world and told nobody anything yet.
async fn loaded_leader(env: &TestEnv) -> Ticker {
    let mut leader = ticker(env, 0).await;
    assert_eq!(ticks(&mut leader, 1).await, 0, "budget 0: the leader only loads the world");
    leader
}

async fn observe(env: &TestEnv, witness: Uuid, subject: Uuid, content: &str, tags: &[&str]) -> Uuid {
    let observation_id = Uuid::new_v4();
    world(
        env,
        "world.observation",
        json!({"observation_id": observation_id, "witness_ids": [witness], "subject_id": subject,
        "category": "player_trait", "content": content, "tags": tags, "importance": 0.7, "at": Utc::now()}),
    )
    .await;
    observation_id
}

/// (id, confidence, superseded_by, tags) of what `npc` holds of `origin`.
async fn held(env: &TestEnv, npc: Uuid, origin: Uuid) -> Option<(Uuid, f64, Option<Uuid>, Vec<String>)> {
    sqlx::query_as(
        "SELECT id, confidence, superseded_by, tags FROM knowledge_facts WHERE npc_id = $1 AND origin_fact_id = $2",
    )
    .bind(npc)
    .bind(origin)
    .fetch_optional(&env.pool)
    .await
    .unwrap()
}

async fn move_and_wait(env: &TestEnv, moves: &[(Uuid, &str)]) {
    for (npc, room) in moves {
        move_npc(env, *npc, room).await;
    }
    wait_until(WAIT, "moves recorded", || async {
        let mut all_there = true;
        for (npc, room) in moves {
            let at: Option<String> = sqlx::query_scalar("SELECT room_id FROM npc_locations WHERE npc_id = $1")
                .bind(npc)
                .fetch_optional(&env.pool)
                .await
                .unwrap();
            all_there &= at.as_deref() == Some(*room);
        }
        all_there
    })
    .await;
}

/// Gives `npc` 500 facts more important than any test's own (0.9) but too uncertain to
/// spread: the cap ranks by importance alone.
async fn fill_to_the_cap(env: &TestEnv, npc: Uuid) {
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, category, content, confidence, importance, source, origin_fact_id)
         SELECT id, $1, 'world_event', 'filler ' || n, 0.1, 0.9, 'authored', id
         FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, 500) AS n) AS filler",
    )
    .bind(npc)
    .execute(&env.pool)
    .await
    .unwrap();
}
