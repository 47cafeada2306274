//! The leader's memory against Postgres: what it plans from memory that lags a tick is
//! checked where it is written, and what it learns back keeps memory and rows in step;
//! the runtime switches it ticks by.

use super::*;

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
    let world = ticker.tick().await.unwrap().world;
    assert!(world.holders >= 1 && world.known >= 2, "the teller and the listener know the news: {world:?}");

    npcmem(&env, &["switch", "set", "gossip_enabled", "false"]).await.assert_ok();
    let set_at = std::time::Instant::now();
    while !ticker.tick().await.unwrap().skipped {
        assert!(set_at.elapsed() < Duration::from_secs(3), "control.changed did not reach the leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = npcmem(&env, &["switch", "list"]).await.assert_ok().stdout.clone();
    let row_of =
        |listed: &str, name: &str| listed.lines().find(|line| line.starts_with(name)).unwrap_or_default().to_owned();
    let row = |name: &str| row_of(&listed, name);
    assert!(row("gossip_enabled").contains("false") && row("degraded").contains("false"), "{listed}");
    assert!(listed.contains("error budgets (0 breached"), "the checks follow the switches: {listed}");
    let refused = npcmem(&env, &["switch", "set", "gossip", "false"]).await;
    assert_eq!(refused.code, npcmem_cli::exit_code::BAD_INPUT, "{}", refused.error);
    let refused = npcmem(&env, &["switch", "set", "degraded", "maybe"]).await;
    assert_eq!(refused.code, npcmem_cli::exit_code::BAD_INPUT, "{}", refused.error);
    let refused = npcmem(&env, &["switch", "set", "gossip_enabled", "auto"]).await;
    assert_eq!(refused.code, npcmem_cli::exit_code::BAD_INPUT, "only degraded follows the budgets: {}", refused.error);
    npcmem(&env, &["switch", "set", "degraded", "auto"]).await.assert_ok();
    let listed = npcmem(&env, &["switch", "list"]).await.assert_ok().stdout.clone();
    assert!(row_of(&listed, "degraded").contains("\"auto\""), "{listed}");
    let logged: i64 = env.count("SELECT count(*) FROM admin_actions WHERE action = 'switch.set'").await;
    assert_eq!(logged, 4, "every change is in the admin log");
    gossip.stop().await;
    env.cleanup().await;
}

/// A session that LISTENs is idle, yet for the moment it reads a notification Postgres
/// shows it in a transaction that started with its last statement, maybe an hour ago.
/// The leader's visibility horizon must not fall back to that time: its next load would
/// read every fact and deletion since (in a soak, 40,000 facts and 130,000 deletions at
/// once, and gossip's heap grew by 30 MB for it).
#[tokio::test]
async fn notifications_to_idle_listeners_do_not_hold_the_leaders_horizon_back() {
    use futures::StreamExt as _;
    const CHANNEL: &str = "npcmem_test_horizon";
    let env = TestEnv::new().await;
    let mut drains = Vec::new();
    for _ in 0..4 {
        let mut listener = sqlx::postgres::PgListener::connect(&env.database_url).await.unwrap();
        listener.listen(CHANNEL).await.unwrap();
        let mut notifications = listener.into_stream();
        drains.push(tokio::spawn(async move { while notifications.next().await.is_some() {} }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut loader = env.pool.acquire().await.unwrap();
    let since: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&mut *loader).await.unwrap();
    let notifier = {
        let pool = env.pool.clone();
        tokio::spawn(async move {
            loop {
                sqlx::query("SELECT pg_notify($1, g::text) FROM generate_series(1, 50) AS g")
                    .bind(CHANNEL)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        })
    };
    let started = std::time::Instant::now();
    let mut loads = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let loaded = npcmem_store::knowledge::load_world_changes(&mut loader, Some(since)).await.unwrap();
        loads += 1;
        assert!(
            loaded.horizon >= since,
            "load {loads}: the horizon {} fell back before {since}, to an idle listener's last statement",
            loaded.horizon
        );
    }
    notifier.abort();
    for drain in drains {
        drain.abort();
    }
    drop(loader);
    env.cleanup().await;
}
