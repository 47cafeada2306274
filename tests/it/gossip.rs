//! Gossip against real NATS and Postgres: the service learns from world messages; the
//! tests drive ticks through the same `Ticker` the leader runs, so every exchange is
//! counted exactly. A tick plans on what the previous tick loaded, so a change made
//! between ticks shows in the second tick after it.

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

#[tokio::test]
async fn a_fact_spreads_along_a_chain_of_rooms_and_stops_below_the_confidence_floor() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let npcs: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    move_npc(&env, npcs[0], "mill").await;
    move_npc(&env, npcs[1], "mill").await;
    let bandits = author(&env, &npcs[..1], "Bandits raided the mill", 0.8, 0.9, &["bandits"]).await;
    let rumour = author(&env, &npcs[..1], "The miller hides gold", 0.8, 0.3, &[]).await;
    wait_rows(&env, "facts and locations recorded", "SELECT count(*) FROM knowledge_facts", 2).await;
    wait_rows(&env, "locations", "SELECT count(*) FROM npc_locations", 2).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 2).await;
    assert_eq!(confidence_of(&env, npcs[1], bandits).await, Some(0.8));
    assert_eq!(confidence_of(&env, npcs[1], rumour).await, Some(0.2), "0.3 − 0.1");
    // The second NPC walks on to the bridge, where the third waits, and so on.
    for (index, room) in [(1, "bridge"), (2, "bridge")] {
        move_npc(&env, npcs[index], room).await;
    }
    wait_until(WAIT, "moves recorded", || async {
        env.count("SELECT count(*) FROM npc_locations WHERE room_id = 'bridge'").await == 2
    })
    .await;
    ticks(&mut ticker, 3).await;
    assert_eq!(confidence_of(&env, npcs[2], bandits).await, Some(0.7));
    assert_eq!(confidence_of(&env, npcs[2], rumour).await, Some(0.1), "0.2 still spreads once");
    move_npc(&env, npcs[1], "mill").await;
    move_npc(&env, npcs[3], "bridge").await;
    wait_until(WAIT, "moves recorded", || async {
        env.count("SELECT count(*) FROM npc_locations WHERE room_id = 'bridge'").await == 2
            && env.count("SELECT count(*) FROM npc_locations WHERE room_id = 'mill'").await == 2
    })
    .await;
    ticks(&mut ticker, 3).await;
    assert_eq!(confidence_of(&env, npcs[3], bandits).await, Some(0.6));
    assert_eq!(confidence_of(&env, npcs[3], rumour).await, None, "0.1 is below the floor");
    let hops: Vec<i32> =
        sqlx::query_scalar("SELECT hop_count FROM knowledge_facts WHERE origin_fact_id = $1 ORDER BY hop_count")
            .bind(bandits)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(hops, vec![0, 1, 2, 3]);
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_triangle_never_loops_nobody_learns_twice_trivia_stays_and_the_budget_holds() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let npcs: Vec<Uuid> = (0..12).map(|_| Uuid::new_v4()).collect();
    for npc in &npcs {
        move_npc(&env, *npc, "tavern").await;
    }
    let news = author(&env, &npcs[..1], "The king is dead", 0.9, 1.0, &[]).await;
    let trivia = author(&env, &npcs[..1], "The ale is watery", 0.4, 1.0, &[]).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    wait_rows(&env, "locations", "SELECT count(*) FROM npc_locations", 12).await;
    let mut ticker = ticker(&env, 2).await;
    let mut before = env.count("SELECT count(*) FROM knowledge_facts").await;
    for _ in 0..20 {
        let report = ticker.tick().await.unwrap();
        let after = env.count("SELECT count(*) FROM knowledge_facts").await;
        assert!(report.exchanges <= 2 && after - before <= 2, "budget 2 per tick: {report:?}");
        before = after;
    }
    let holders: i64 = sqlx::query_scalar("SELECT count(*) FROM knowledge_facts WHERE origin_fact_id = $1")
        .bind(news)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(holders, 12, "everyone in the tavern knows, each once");
    let distinct: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT npc_id) FROM knowledge_facts WHERE origin_fact_id = $1")
            .bind(news)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(distinct, 12);
    let looped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM knowledge_facts WHERE origin_fact_id = $1 AND npc_id = ANY(provenance)",
    )
    .bind(news)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(looped, 0, "no fact came back through its own holder");
    assert_eq!(confidence_of(&env, npcs[5], trivia).await, None, "importance 0.4 never spreads");
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_fearful_speaker_warns_first_a_secret_signals_once_and_expired_facts_stop() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (guard, merchant, farmer) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    world(
        &env,
        "world.npc_profile",
        json!({"npc_id": guard, "name": "Hale", "factions": ["city_guard"],
        "drives": {"social": 0.1, "safety": 0.95, "loyalty": 0.2, "curiosity": 0.1}}),
    )
    .await;
    for npc in [guard, merchant] {
        move_npc(&env, npc, "gate").await;
    }
    let player = Uuid::new_v4();
    let danger_id = Uuid::new_v4();
    world(
        &env,
        "world.observation",
        json!({"observation_id": danger_id, "witness_ids": [guard], "subject_id": player,
        "category": "player_trait", "content": "The player threatened the gatekeeper", "tags": ["threat"],
        "importance": 0.6, "at": Utc::now()}),
    )
    .await;
    let trivia = author(&env, &[guard], "The harvest was good this year", 0.8, 1.0, &["harvest"]).await;
    let secret = author(&env, &[guard], "The captain takes bribes", 0.7, 0.9, &["secret"]).await;
    let short_lived = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": short_lived, "npc_ids": [guard], "category": "location_info",
        "content": "The east road is closed today", "importance": 0.9, "confidence": 1.0,
        "expires_at": Utc::now() + TimeDelta::milliseconds(1500)}),
    )
    .await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 4).await;
    wait_rows(&env, "profile", "SELECT count(*) FROM npc_profiles", 1).await;
    wait_rows(&env, "locations", "SELECT count(*) FROM npc_locations", 2).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let mut ticker = ticker(&env, 1).await;
    ticker.tick().await.unwrap();
    let first: String = sqlx::query_scalar("SELECT content FROM knowledge_facts WHERE npc_id = $1")
        .bind(merchant)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(first, "The player threatened the gatekeeper", "safety drive: the dangerous player first");
    ticks(&mut ticker, 6).await;
    assert!(confidence_of(&env, merchant, trivia).await.is_some());
    assert!(confidence_of(&env, merchant, secret).await.is_some());
    assert_eq!(confidence_of(&env, merchant, short_lived).await, None, "an expired fact does not spread");
    // The merchant meets the farmer; the secret travels on, and each new holder is one signal.
    move_npc(&env, merchant, "market").await;
    move_npc(&env, farmer, "market").await;
    wait_until(WAIT, "moves", || async {
        env.count("SELECT count(*) FROM npc_locations WHERE room_id = 'market'").await == 2
    })
    .await;
    ticks(&mut ticker, 8).await;
    assert!(confidence_of(&env, farmer, secret).await.is_some());
    wait_until(WAIT, "signals published", || async {
        env.stream_messages(StreamKind::Signals).await.len() >= 2 && env.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;
    let signals: Vec<Value> = env
        .stream_messages(StreamKind::Signals)
        .await
        .iter()
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    let mut secret_holders: Vec<String> = signals
        .iter()
        .filter(|s| s["signal_type"] == "secret_learned")
        .map(|s| s["npc_id"].as_str().unwrap().to_owned())
        .collect();
    secret_holders.sort();
    let mut expected = vec![merchant.to_string(), farmer.to_string()];
    expected.sort();
    assert_eq!(secret_holders, expected, "exactly one secret_learned per new holder");
    // Expired facts leave the read side too.
    let mut connection = env.pool.acquire().await.unwrap();
    let known = npcmem_store::context::knowledge(&mut connection, guard, Utc::now(), None, None, 50).await.unwrap();
    assert!(known.iter().all(|f| f.content != "The east road is closed today"), "{known:?}");
    drop(connection);
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_restart_mid_spread_loses_and_duplicates_nothing() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let npcs: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    for (index, npc) in npcs.iter().enumerate() {
        move_npc(&env, *npc, &format!("hall-{}", index / 10)).await;
    }
    let firsts: Vec<Uuid> = vec![npcs[0], npcs[10], npcs[20]];
    let news = author(&env, &firsts, "The dragon woke", 0.9, 1.0, &[]).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 3).await;
    wait_rows(&env, "locations", "SELECT count(*) FROM npc_locations", 30).await;
    let mut first = ticker(&env, 4).await;
    ticks(&mut first, 3).await;
    let midway = env.count("SELECT count(*) FROM knowledge_facts").await;
    assert!(midway > 3 && midway < 30, "under way: {midway}");
    drop(first);
    // A new leader loads the world from Postgres and carries on.
    let mut second = ticker(&env, 4).await;
    ticks(&mut second, 20).await;
    let holders: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT npc_id) FROM knowledge_facts WHERE origin_fact_id = $1")
            .bind(news)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(holders, 30, "every NPC learned it");
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 30, "nobody twice");
    let learned = learned_events(&env).await.len();
    assert_eq!(learned, 30, "one event.knowledge.learned per fact stored");
    gossip.stop().await;
    env.cleanup().await;
}

/// The leader plans on what it last loaded: a listener that learned the same fact
/// directly in the meantime is told nothing twice, and nothing is announced for it.
#[tokio::test]
async fn a_leader_whose_memory_lags_tells_nobody_what_they_learned_meanwhile() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let stranger = Uuid::new_v4();
    let (teller, listener, news, mut leader) = news_told_in_the_tavern(&env).await;
    // The listener hears the same news first hand, as a minor matter it does not pass on;
    // the leader has not loaded it yet.
    world(
        &env,
        "world.fact",
        json!({"fact_id": news, "npc_ids": [listener], "category": "world_event",
        "content": "The bridge is out", "importance": 0.3, "confidence": 1.0}),
    )
    .await;
    wait_rows(&env, "the listener's own copy", "SELECT count(*) FROM knowledge_facts", 2).await;
    wait_rows(&env, "announcements published", "SELECT count(*) FROM outbox", 0).await;
    leader.budget = 5;
    let report = leader.tick().await.expect("the tick commits");
    assert_eq!(report.exchanges, 0, "the planned exchange did not happen: the listener knew");
    assert_eq!(ticks(&mut leader, 2).await, 0, "once loaded, nothing is planned for it either");
    let sources: Vec<String> =
        sqlx::query_scalar("SELECT source FROM knowledge_facts WHERE npc_id = $1 AND origin_fact_id = $2")
            .bind(listener)
            .bind(news)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(sources, vec!["authored".to_owned()], "only the first-hand copy");
    assert_eq!(env.count("SELECT count(*) FROM outbox").await, 0, "no gossip copy announced");
    // The copy the leader planned is not what the listener holds: alone with a stranger,
    // the listener has nothing worth telling.
    move_and_wait(&env, &[(teller, "road"), (stranger, "tavern")]).await;
    assert_eq!(ticks(&mut leader, 3).await, 0, "the listener tells the stranger nothing");
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_tick_whose_commit_fails_unsure_loads_the_world_afresh() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (_, listener, news, mut leader) = news_told_in_the_tavern(&env).await;
    // Postgres ends every other session of this database, the leader's writer among them.
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        .execute(&env.pool)
        .await
        .unwrap();
    leader.budget = 5;
    assert!(leader.tick().await.is_err(), "the exchange's insert fails with its connection");
    // The leader took the exchange in while it was being written; it cannot know whether it
    // was stored, so it loads the world again and finds the listener does not know.
    assert_eq!(ticks(&mut leader, 2).await, 1, "the exchange happens after all");
    assert!(held(&env, listener, news).await.is_some(), "the listener heard the news");
    gossip.stop().await;
    env.cleanup().await;
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

#[tokio::test]
async fn contradicting_facts_supersede_or_doubt_keep_both_and_superseded_ones_stop_spreading() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (anna, bram, cole, dora) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let aria = Uuid::new_v4();
    // Anna saw Aria pay honestly (an observation: confidence 1.0); Bram was told she lies (0.8).
    let honest = observe(&env, anna, aria, "Aria is honest, she paid in full", &["trade"]).await;
    let liar = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": liar, "npc_ids": [bram], "subject_id": aria, "category": "player_trait",
        "content": "Aria is a liar", "tags": [], "importance": 0.7, "confidence": 0.8}),
    )
    .await;
    move_and_wait(&env, &[(anna, "inn"), (bram, "inn"), (cole, "square"), (dora, "well")]).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 2).await;

    // Bram hears the honest account at 0.9 ≥ his 0.8: his belief is superseded, kept.
    let (bram_honest, confidence, _, _) = held(&env, bram, honest).await.expect("Bram heard it");
    assert_eq!(confidence, 0.9);
    let (bram_liar, confidence, superseded_by, _) = held(&env, bram, liar).await.unwrap();
    assert_eq!((confidence, superseded_by), (0.8, Some(bram_honest)), "superseded, kept with its confidence");
    // Anna hears the rumour at 0.7 < her 1.0: she doubts both (1.0 − 0.7/2; the rumour at 0.3).
    let (_, confidence, superseded_by, _) = held(&env, anna, honest).await.unwrap();
    assert_eq!((confidence, superseded_by), (0.65, None));
    let (_, confidence, _, tags) = held(&env, anna, liar).await.expect("Anna heard it");
    assert_eq!(confidence, 0.3);
    assert!(tags.contains(&"uncertain".to_owned()), "{tags:?}");
    let mut connection = env.pool.acquire().await.unwrap();
    let read_side = npcmem_store::context::knowledge(&mut connection, bram, Utc::now(), None, None, 50).await.unwrap();
    let contents: Vec<&str> = read_side.iter().map(|fact| fact.content.as_str()).collect();
    assert_eq!(contents, vec!["Aria is honest, she paid in full"], "a superseded fact leaves prompts");
    drop(connection);

    // Bram walks to the square: Cole hears the honest account from him, never the superseded rumour.
    move_and_wait(&env, &[(bram, "square")]).await;
    ticks(&mut ticker, 4).await;
    assert_eq!(held(&env, cole, honest).await.map(|h| h.1), Some(0.8));
    assert!(held(&env, cole, liar).await.is_none(), "a superseded fact does not spread");

    // Anna then sees Aria steal (learned by the world consumer, not the leader): her doubted
    // honest belief is superseded, and the leader stops spreading it after its next refresh.
    let theft = observe(&env, anna, aria, "Aria stole a purse at the market", &["theft"]).await;
    wait_until(WAIT, "the observation supersedes Anna's belief", || async {
        held(&env, anna, honest).await.is_some_and(|h| h.2.is_some())
    })
    .await;
    move_and_wait(&env, &[(anna, "well")]).await;
    ticks(&mut ticker, 4).await;
    assert_eq!(held(&env, dora, theft).await.map(|h| h.1), Some(0.9));
    assert!(held(&env, dora, honest).await.is_none(), "the superseded belief stays with Anna");

    let learned = learned_events(&env).await;
    let bram_event = learned.iter().find(|event| event["fact"]["id"] == json!(bram_honest)).expect("Bram's event");
    assert_eq!(
        bram_event["fact"]["contradicted"],
        json!([{"fact_id": bram_liar, "outcome": "superseded", "confidence": null}])
    );
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_second_replica_takes_over_the_ticks_when_the_leader_stops() {
    let env = TestEnv::new().await;
    let fast = ["--gossip-tick-ms", "250", "--gossip-budget", "1"];
    let first = env.spawn_gossip(&fast);
    let npcs: Vec<Uuid> = (0..16).map(|_| Uuid::new_v4()).collect();
    for npc in &npcs {
        move_npc(&env, *npc, "hall").await;
    }
    let news = author(&env, &npcs[..1], "The bridge collapsed", 0.9, 1.0, &[]).await;
    wait_until(WAIT, "the first replica spreads the news", || async {
        env.count("SELECT count(*) FROM knowledge_facts").await >= 4
    })
    .await;
    let second = env.spawn_gossip(&fast);
    first.stop().await;
    let after_stop = env.count("SELECT count(*) FROM knowledge_facts").await;
    assert!(after_stop < 16, "still spreading when the leader stopped: {after_stop}");
    wait_until(WAIT, "the second replica finishes the spread", || async {
        env.count("SELECT count(*) FROM knowledge_facts").await == 16
    })
    .await;
    let holders: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT npc_id) FROM knowledge_facts WHERE origin_fact_id = $1")
            .bind(news)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(holders, 16, "everyone once");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 16, "nothing more, nothing twice");
    second.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn the_leader_misses_neither_a_late_commit_nor_a_move_stamped_long_ago() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (teller, listener, latecomer) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    move_and_wait(&env, &[(teller, "barn"), (listener, "barn")]).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!ticker.tick().await.unwrap().reloaded, "nothing changed: the tick reads nothing");
    // A writer whose transaction started before the leader's next refresh and commits after it.
    let late = Uuid::new_v4();
    let mut transaction = env.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, category, content, confidence, importance, source, origin_fact_id)
         VALUES ($1, $2, 'world_event', 'The barn roof leaks', 1.0, 0.8, 'authored', $1)",
    )
    .bind(late)
    .bind(teller)
    .execute(&mut *transaction)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!ticker.tick().await.unwrap().reloaded, "an uncommitted fact notifies nobody yet");
    ticks(&mut ticker, 1).await;
    transaction.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(ticker.tick().await.unwrap().reloaded, "the commit's notification makes the next tick reload");
    ticks(&mut ticker, 1).await;
    assert_eq!(confidence_of(&env, listener, late).await, Some(0.9), "the late commit was loaded and spread");
    // A move the game stamped an hour ago, recorded only now (a consumer catching up).
    world(
        &env,
        "world.npc_moved",
        json!({"npc_id": latecomer, "room_id": "barn", "at": Utc::now() - TimeDelta::hours(1)}),
    )
    .await;
    wait_rows(&env, "the move", "SELECT count(*) FROM npc_locations", 3).await;
    ticks(&mut ticker, 2).await;
    assert!(confidence_of(&env, latecomer, late).await.is_some(), "the old-stamped move was loaded");
    gossip.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_bad_world_message_is_dead_lettered_alone_and_its_batch_is_applied() {
    let env = TestEnv::new().await;
    let (npc, witness) = (Uuid::new_v4(), Uuid::new_v4());
    let blank = json!({"observation_id": Uuid::new_v4(), "witness_ids": [witness], "category": "world_event",
                       "content": "  ", "importance": 0.8, "at": Utc::now()});
    let long = json!({"fact_id": Uuid::new_v4(), "npc_ids": [witness], "category": "world_event",
                      "content": "x".repeat(2001), "importance": 0.8});
    // Published before the service starts, so one batch holds the good and the bad.
    move_npc(&env, npc, "mill").await;
    world(&env, "world.observation", blank).await;
    let news = author(&env, &[witness], "The mill burned down", 0.8, 1.0, &[]).await;
    world(&env, "world.fact", long).await;
    world(&env, "world.npc_moved", json!({"npc_id": witness, "room_id": "r".repeat(201), "at": Utc::now()})).await;
    let gossip = spawn(&env);

    wait_until(WAIT, "three dead letters", || async { env.stream_messages(StreamKind::Dlq).await.len() == 3 }).await;
    let letters = env.stream_messages(StreamKind::Dlq).await;
    let reasons: Vec<(String, String)> = letters
        .iter()
        .map(|letter| {
            let header = |name: &str| letter.headers.get(name).map(|v| v.as_str().to_owned()).unwrap_or_default();
            (header(npcmem_bus::dlq::HEADER_REASON), header(npcmem_bus::dlq::HEADER_MESSAGE))
        })
        .collect();
    assert_eq!(
        reasons.iter().map(|(code, _)| code.as_str()).collect::<Vec<_>>(),
        vec!["invalid_field", "text_too_long", "invalid_field"],
        "{reasons:?}"
    );
    assert!(reasons[0].1.contains("content is blank"), "{reasons:?}");
    assert!(reasons[2].1.contains("room_id has 201 chars"), "{reasons:?}");
    assert!(letters.iter().all(|letter| letter.subject.as_str() == env.topology.dlq(npcmem_gossip::CONSUMER_WORLD)));
    // The good messages of the same batch are applied, each once.
    wait_rows(&env, "the good fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    assert_eq!(confidence_of(&env, witness, news).await, Some(1.0));
    wait_rows(&env, "the good move", "SELECT count(*) FROM npc_locations", 1).await;
    gossip.stop().await;
    env.cleanup().await;
}

/// The right to be forgotten against a leader whose memory lags: a tick planned on the
/// player's facts after they were deleted stores nothing about them.
#[tokio::test]
async fn a_forgotten_player_is_not_gossiped_back_by_a_leader_that_has_not_heard() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let npcs: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let player = Uuid::new_v4();
    let other = author(&env, &npcs[..1], "The well ran dry", 0.9, 1.0, &[]).await;
    let rumour = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": rumour, "npc_ids": [npcs[0]], "subject_id": player, "category": "player_trait",
        "content": "The stranger cheats at dice", "importance": 0.95, "confidence": 1.0}),
    )
    .await;
    let placed: Vec<(Uuid, &str)> = npcs.iter().map(|npc| (*npc, "tavern")).collect();
    move_and_wait(&env, &placed).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    let mut ticker = ticker(&env, 1).await;
    ticks(&mut ticker, 1).await;
    let about_player = "SELECT count(*) FROM knowledge_facts WHERE subject_id = $1";
    let count_about = |sql: &'static str| {
        let pool = env.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).bind(player).fetch_one(&pool).await.unwrap() }
    };
    assert_eq!(count_about(about_player).await, 2, "the rumour went first (importance 0.95)");

    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, player, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    // The next tick plans on memory that still holds the rumour twice; its write skips it.
    let report = ticker.tick().await.unwrap();
    assert_eq!(count_about(about_player).await, 0, "nothing about the player came back: {report:?}");
    ticks(&mut ticker, 6).await;
    assert_eq!(count_about(about_player).await, 0);
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM knowledge_facts WHERE origin_fact_id = $1")
            .bind(other)
            .fetch_one(&env.pool)
            .await
            .unwrap(),
        4,
        "the rest of the news still spreads"
    );
    assert_eq!(ticker.world.size().spreadable_facts, 4, "the leader forgot both copies of the rumour");
    let named =
        learned_events(&env).await.iter().filter(|event| event.to_string().contains(&player.to_string())).count();
    assert_eq!(named, 2, "only the two events from before the forget name the player");
    gossip.stop().await;
    env.cleanup().await;
}

/// Facts the per-NPC cap evicts leave the leader's memory, and a new fact evicted at once
/// is not announced.
#[tokio::test]
async fn facts_the_cap_evicts_stop_spreading_and_one_evicted_at_once_is_never_announced() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (teller, listener, fading) =
        teller_and_listener(&env, ("loft", "cellar"), ("The miller owes the baker", 0.6)).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 1).await;
    assert_eq!(ticker.world.size().spreadable_facts, 1);
    fill_to_the_cap(&env, teller).await;
    // Learning one more makes 502: the cap drops the two least important, the new one too.
    let evicted_at_once = author(&env, &[teller], "The baker owes the miller", 0.55, 1.0, &[]).await;
    wait_until(WAIT, "the cap held", || async { env.count("SELECT count(*) FROM knowledge_forgotten").await == 2 })
        .await;
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 500);
    assert_eq!(confidence_of(&env, teller, fading).await, None);
    assert_eq!(confidence_of(&env, teller, evicted_at_once).await, None);
    ticks(&mut ticker, 2).await;
    assert_eq!(ticker.world.size().spreadable_facts, 0, "the leader forgot the evicted fact");
    move_and_wait(&env, &[(listener, "loft")]).await;
    assert_eq!(ticks(&mut ticker, 3).await, 0, "nothing left to tell");
    assert_eq!(confidence_of(&env, listener, fading).await, None);

    let learned = learned_events(&env).await;
    let origins: Vec<&Value> = learned.iter().map(|event| &event["fact"]["origin_fact_id"]).collect();
    assert_eq!(origins, vec![&json!(fading)], "the fact evicted at once was never announced");
    gossip.stop().await;
    env.cleanup().await;
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

/// A copy its listener's cap drops at once is told once: the leader counts it known, so
/// it does not insert, drop and log it again every tick.
#[tokio::test]
async fn a_copy_the_listeners_cap_drops_at_once_is_told_once() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (_, listener, news) = teller_and_listener(&env, ("loft", "cellar"), ("The miller owes the baker", 0.6)).await;
    fill_to_the_cap(&env, listener).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 1).await;
    move_and_wait(&env, &[(listener, "loft")]).await;
    assert_eq!(ticks(&mut ticker, 8).await, 0, "told, then dropped at once: no exchange counts");
    assert_eq!(confidence_of(&env, listener, news).await, None);
    let dropped: i64 = sqlx::query_scalar("SELECT count(*) FROM knowledge_forgotten WHERE npc_id = $1")
        .bind(listener)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(dropped, 1, "told once, not every tick");
    assert!(learned_events(&env).await.iter().all(|event| event["npc_id"] != json!(listener)), "never announced");
    gossip.stop().await;
    env.cleanup().await;
}

/// A copy skipped because its speaker no longer held the fact is given back: its listener
/// still hears the fact from someone else.
#[tokio::test]
async fn a_listener_skipped_because_the_speaker_forgot_still_hears_it_from_another() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (first, second, listener) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    move_and_wait(&env, &[(first, "mill"), (listener, "mill"), (second, "forge")]).await;
    let news = author(&env, &[first, second], "The river is rising", 0.8, 1.0, &[]).await;
    wait_rows(&env, "both tellers' facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    let mut leader = loaded_leader(&env).await;
    sqlx::query("DELETE FROM knowledge_facts WHERE npc_id = $1").bind(first).execute(&env.pool).await.unwrap();
    // The next tick plans on memory where the first teller still holds it.
    leader.budget = 10;
    assert_eq!(leader.tick().await.unwrap().exchanges, 0, "the speaker forgot: skipped");
    move_and_wait(&env, &[(listener, "forge")]).await;
    ticks(&mut leader, 3).await;
    let (_, confidence, _, _) = held(&env, listener, news).await.expect("heard from the second teller");
    assert_eq!(confidence, 0.9);
    gossip.stop().await;
    env.cleanup().await;
}

/// A world fact about a player sent before the player was forgotten (a late or replayed
/// message) is dropped; one sent after is learned.
#[tokio::test]
async fn a_world_fact_sent_before_its_player_was_forgotten_is_not_learned() {
    let env = TestEnv::new().await;
    let (npc, player) = (Uuid::new_v4(), Uuid::new_v4());
    let about = |content: &str| {
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "subject_id": player, "category": "player_trait",
               "content": content, "importance": 0.8})
    };
    world(&env, "world.fact", about("The stranger cheats at dice")).await;
    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, player, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    world(&env, "world.fact", about("The stranger paid for a round")).await;
    let gossip = spawn(&env);
    wait_rows(&env, "the later fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let contents: Vec<String> =
        sqlx::query_scalar("SELECT content FROM knowledge_facts").fetch_all(&env.pool).await.unwrap();
    assert_eq!(contents, vec!["The stranger paid for a round"]);
    gossip.stop().await;
    env.cleanup().await;
}

fn knowledge_section(reply: &Value) -> String {
    let sections = reply["sections"].as_array().cloned().unwrap_or_default();
    let knowledge = sections.iter().find(|s| s["provider"] == "knowledge");
    knowledge.and_then(|s| s["content"].as_str()).unwrap_or_default().to_owned()
}

fn mood_section(reply: &Value) -> Option<String> {
    let sections = reply["sections"].as_array()?;
    sections.iter().find(|s| s["provider"] == "mood")?["content"].as_str().map(str::to_owned)
}

/// What gossip learns reaches prompts at once (it invalidates the enrichers' caches), and
/// what expires leaves them even from a cached context.
#[tokio::test]
async fn learned_facts_and_moods_reach_a_cached_context_and_expired_ones_leave_it() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let enrich = env.spawn_enrich(&[]);
    let (npc, player) = (Uuid::new_v4(), Uuid::new_v4());
    let request = json!({"npc_id": npc, "player_id": player, "max_tokens": 1024});
    let expires = Utc::now() + TimeDelta::seconds(3);
    world(
        &env,
        "world.fact",
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "category": "location_info",
        "content": "The ferry runs until dusk", "importance": 0.6, "expires_at": expires}),
    )
    .await;
    world(
        &env,
        "world.npc_profile",
        json!({"npc_id": npc, "name": "Orla", "mood": {"mood": "anxious", "intensity": 0.9, "expires_at": expires}}),
    )
    .await;
    wait_until(WAIT, "the fact and the mood in the context", || async {
        let reply = env.request_json("enrich.request", &request).await;
        knowledge_section(&reply).contains("The ferry runs until dusk") && mood_section(&reply).is_some()
    })
    .await;
    // The context is cached now (TTL 300 s); a fact learned later shows anyway.
    world(
        &env,
        "world.fact",
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "category": "world_event",
        "content": "The toll bridge burned", "importance": 0.7}),
    )
    .await;
    wait_until(WAIT, "the new fact in the cached context", || async {
        knowledge_section(&env.request_json("enrich.request", &request).await).contains("The toll bridge burned")
    })
    .await;
    tokio::time::sleep((expires - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(100)).await;
    let reply = env.request_json("enrich.request", &request).await;
    let knowledge = knowledge_section(&reply);
    assert!(knowledge.contains("The toll bridge burned") && !knowledge.contains("ferry"), "{reply}");
    assert_eq!(mood_section(&reply), None, "the mood expired: {reply}");
    enrich.stop().await;
    gossip.stop().await;
    env.cleanup().await;
}

/// A secret told in a conversation is learned as gossip and signalled once, however
/// often its event is delivered.
#[tokio::test]
async fn a_secret_told_in_conversation_signals_once() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let pair = npcmem_tests::fixtures::Pair::new();
    let secret =
        npcmem_tests::fixtures::EventMemory { tags: &["secret"], importance: 0.8, valence: "neutral", intensity: 0.3 };
    let event = npcmem_tests::fixtures::memory_stored(Uuid::new_v4(), &pair, &[secret], Utc::now(), &[], &[]);
    let payload = serde_json::to_vec(&event).unwrap();
    env.publish(&env.subject("event.memory.stored"), payload.clone(), None).await;
    wait_rows(&env, "the secret learned", "SELECT count(*) FROM knowledge_facts WHERE category = 'npc_gossip'", 1)
        .await;
    // The same event again (a redelivery past the dedup window).
    env.publish(&env.subject("event.memory.stored"), payload, None).await;
    wait_until(WAIT, "the signal published", || async {
        !env.stream_messages(StreamKind::Signals).await.is_empty()
            && env.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signals: Vec<Value> = env
        .stream_messages(StreamKind::Signals)
        .await
        .iter()
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(
        (&signals[0]["signal_type"], &signals[0]["npc_id"], &signals[0]["player_id"], &signals[0]["source"]),
        (&json!("secret_learned"), &json!(pair.npc_id), &json!(pair.player_id), &json!("conversation"))
    );
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 1);
    gossip.stop().await;
    env.cleanup().await;
}

/// The runtime switches: degraded mode and `gossip_enabled` stop ticks; `npcmem switch set`
/// reaches the leader's next tick through `control.changed`, well before its timed re-read.
#[tokio::test]
async fn degraded_mode_and_the_gossip_switch_stop_ticks_and_a_switch_set_reaches_the_next_tick() {
    use crate::cli::npcmem;
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (_, listener, news) = teller_and_listener(&env, ("hall", "hall"), ("The mill burned", 0.9)).await;
    let mut ticker = Ticker::new(env.pool.clone(), env.topology.clone(), Some(env.nats.clone()), 10);
    ticker.watch_changes().await.unwrap();
    ticker.watch_switches().await.unwrap();

    npcmem(&env, &["switch", "set", "degraded", "true"]).await.assert_ok();
    for _ in 0..3 {
        assert!(ticker.tick().await.unwrap().skipped, "degraded: no ticks");
    }
    assert_eq!(confidence_of(&env, listener, news).await, None);
    npcmem(&env, &["switch", "set", "degraded", "false"]).await.assert_ok();
    let set_at = std::time::Instant::now();
    // The leader read the switches just now; only control.changed makes it read them again
    // before 5 s have passed.
    while ticker.tick().await.unwrap().skipped {
        assert!(set_at.elapsed() < Duration::from_secs(3), "control.changed did not reach the leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ticks(&mut ticker, 1).await;
    assert_eq!(confidence_of(&env, listener, news).await, Some(0.9), "gossip resumed");

    npcmem(&env, &["switch", "set", "gossip_enabled", "false"]).await.assert_ok();
    let set_at = std::time::Instant::now();
    while !ticker.tick().await.unwrap().skipped {
        assert!(set_at.elapsed() < Duration::from_secs(3), "control.changed did not reach the leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = npcmem(&env, &["switch", "list"]).await.assert_ok().stdout.clone();
    let row = |name: &str| listed.lines().find(|line| line.starts_with(name)).unwrap_or_default().to_owned();
    assert!(row("gossip_enabled").contains("false") && row("degraded").contains("false"), "{listed}");
    let refused = npcmem(&env, &["switch", "set", "gossip", "false"]).await;
    assert_eq!(refused.code, npcmem_cli::exit_code::BAD_INPUT, "{}", refused.error);
    let refused = npcmem(&env, &["switch", "set", "degraded", "maybe"]).await;
    assert_eq!(refused.code, npcmem_cli::exit_code::BAD_INPUT, "{}", refused.error);
    let logged: i64 = env.count("SELECT count(*) FROM admin_actions WHERE action = 'switch.set'").await;
    assert_eq!(logged, 3, "every change is in the admin log");
    gossip.stop().await;
    env.cleanup().await;
}

/// A listener that learned a contradicting fact after the leader's last load (from the
/// world, not from gossip): the copy the leader planned without knowing is still checked
/// against it, and supersedes it.
#[tokio::test]
async fn a_copy_contradicting_what_its_listener_just_learned_is_checked_though_the_leader_had_not_loaded_it() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (teller, listener, aria) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    move_and_wait(&env, &[(teller, "inn"), (listener, "inn")]).await;
    let honest = observe(&env, teller, aria, "Aria is honest, she paid in full", &["trade"]).await;
    wait_rows(&env, "the teller's fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    let mut leader = loaded_leader(&env).await;
    let liar = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": liar, "npc_ids": [listener], "subject_id": aria, "category": "player_trait",
        "content": "Aria is a liar", "importance": 0.7, "confidence": 0.8}),
    )
    .await;
    wait_rows(&env, "the listener's fact", "SELECT count(*) FROM knowledge_facts", 2).await;
    // The next tick plans on memory without the listener's new fact.
    leader.budget = 10;
    let report = leader.tick().await.unwrap();
    assert_eq!(report.exchanges, 1, "{report:?}");
    let (told, confidence, _, _) = held(&env, listener, honest).await.expect("the listener heard it");
    assert_eq!(confidence, 0.9);
    let (_, confidence, superseded_by, _) = held(&env, listener, liar).await.unwrap();
    assert_eq!((confidence, superseded_by), (0.8, Some(told)), "checked: 0.9 ≥ 0.8 supersedes, kept");
    let learned = learned_events(&env).await;
    let event = learned.iter().find(|event| event["fact"]["id"] == json!(told)).expect("the copy's event");
    assert_eq!(
        event["fact"]["contradicted"],
        json!([{"fact_id": held(&env, listener, liar).await.unwrap().0,
        "outcome": "superseded", "confidence": null}])
    );
    gossip.stop().await;
    env.cleanup().await;
}
