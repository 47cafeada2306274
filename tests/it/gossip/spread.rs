//! How facts travel: the original design's selection and propagation rules from room to room, a
//! restart and a second replica carrying on.

use super::*;

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
    let known =
        npcmem_store::context::knowledge(&mut connection, guard, Utc::now(), None, None, None, 50).await.unwrap();
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
