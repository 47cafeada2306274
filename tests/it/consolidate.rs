//! The consolidate service and its jobs against real Postgres (and NATS for the
//! fan-out): decay, caps, consolidation, reinforcement, one run per tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use npcmem_consolidate::{Job, JobContext};
use npcmem_core::memory::{SalienceInputs, compute_salience, round3};
use npcmem_llm::ChatMessage;
use npcmem_llm::mock::{MockLlmServer, MockReply};
use npcmem_tests::fixtures::Pair;
use npcmem_tests::{TestEnv, wait_until};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(40);

/// A memory row to insert; `Default` gives an unlocked episodic memory made now.
struct Row {
    memory_type: &'static str,
    tags: Vec<&'static str>,
    importance: f64,
    confidence: f64,
    intensity: f64,
    access_count: i32,
    reinforcement_count: i32,
    locked: bool,
    age: TimeDelta,
    content: String,
    conversation: Option<Uuid>,
}

impl Default for Row {
    fn default() -> Self {
        Self {
            memory_type: "episodic",
            tags: vec!["trade"],
            importance: 0.5,
            confidence: 0.9,
            intensity: 0.0,
            access_count: 0,
            reinforcement_count: 0,
            locked: false,
            age: TimeDelta::zero(),
            content: "The player bought a sword.".into(),
            conversation: None,
        }
    }
}

async fn insert(env: &TestEnv, pair: &Pair, row: Row, now: DateTime<Utc>) -> Uuid {
    let id = Uuid::new_v4();
    let at = now - row.age;
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                               emotional_intensity, access_count, reinforcement_count, locked, created_at,
                               last_accessed, source_conversation_id, pattern)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0.5, $9, $10, $11, $12, $13, $13, $14, NULL)",
    )
    .bind(id)
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .bind(row.memory_type)
    .bind(&row.content)
    .bind(row.tags.iter().map(|t| t.to_string()).collect::<Vec<_>>())
    .bind(row.importance)
    .bind(row.confidence)
    .bind(row.intensity)
    .bind(row.access_count)
    .bind(row.reinforcement_count)
    .bind(row.locked)
    .bind(at)
    .bind(row.conversation)
    .execute(&env.pool)
    .await
    .expect("the memory inserts");
    id
}

fn jobs(env: &TestEnv) -> JobContext {
    JobContext {
        pool: env.pool.clone(),
        nats: None,
        topology: env.topology.clone(),
        decay_batch_pages: 3,
        slices: 4,
        recall_max_turns: 5_000,
    }
}

#[tokio::test]
async fn decay_gives_the_seed_salience_at_0_7_30_and_90_days() {
    let env = TestEnv::new().await;
    let now = Utc::now();
    let pair = Pair::new();
    let mut cases = Vec::new();
    for days in [0, 7, 30, 90] {
        for (importance, intensity, access_count) in [(0.7, 0.0, 0), (0.5, 1.0, 3), (0.9, 0.4, 40)] {
            let row = Row { importance, intensity, access_count, age: TimeDelta::days(days), ..Row::default() };
            let id = insert(&env, &pair, row, now).await;
            cases.push((id, days, importance, intensity, access_count));
        }
    }
    let locked = insert(&env, &pair, Row { locked: true, age: TimeDelta::days(90), ..Row::default() }, now).await;
    jobs(&env).run(Job::Decay, now).await.expect("decay runs");
    for (id, days, importance, intensity, access_count) in cases {
        let stored: f64 = sqlx::query_scalar("SELECT salience FROM memories WHERE id = $1")
            .bind(id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
        let expected = round3(compute_salience(
            &SalienceInputs {
                importance,
                last_accessed: now - TimeDelta::days(days),
                access_count: access_count.into(),
                locked: false,
                emotional_intensity: intensity,
            },
            now,
        ));
        assert!((stored - expected).abs() < 1e-9, "{days} days, importance {importance}: {stored} vs {expected}");
    }
    let at_30: f64 = round3(0.7 * (-1.0_f64).exp());
    assert!(at_30 > 0.25 && at_30 < 0.26, "the seed formula: 0.7 × e^-1");
    let locked_salience: f64 = sqlx::query_scalar("SELECT salience FROM memories WHERE id = $1")
        .bind(locked)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(locked_salience, 0.5, "locked memories are not decayed");
    env.cleanup().await;
}

#[tokio::test]
async fn caps_hold_after_decay_and_locked_memories_survive_beyond_them() {
    let env = TestEnv::new().await;
    let now = Utc::now();
    let (crowded, small) = (Pair::new(), Pair::new());
    let mut locked = Vec::new();
    for i in 0..250 {
        let row = Row { importance: 0.2 + (i % 50) as f64 / 100.0, locked: i < 210 && i % 21 == 0, ..Row::default() };
        let is_locked = row.locked;
        let id = insert(&env, &crowded, row, now).await;
        if is_locked {
            locked.push(id);
        }
    }
    for i in 0..60 {
        insert(
            &env,
            &crowded,
            Row { memory_type: "semantic", confidence: 0.3 + i as f64 / 100.0, ..Row::default() },
            now,
        )
        .await;
    }
    for i in 0..25 {
        insert(&env, &crowded, Row { memory_type: "procedural", reinforcement_count: i, ..Row::default() }, now).await;
    }
    for _ in 0..5 {
        insert(&env, &small, Row::default(), now).await;
    }
    let outcome = jobs(&env).run(Job::Decay, now).await.expect("decay runs");
    assert_eq!(outcome["pruned"], 50 + 10 + 5);
    let count = |memory_type: &'static str| {
        let pool = env.pool.clone();
        let npc = crowded.npc_id;
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM memories WHERE npc_id = $1 AND memory_type = $2")
                .bind(npc)
                .bind(memory_type)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!((count("episodic").await, count("semantic").await, count("procedural").await), (200, 50, 20));
    let kept_locked: i64 = sqlx::query_scalar("SELECT count(*) FROM memories WHERE id = ANY($1)")
        .bind(&locked)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(kept_locked, locked.len() as i64, "every locked memory survives");
    let lowest_kept: f64 =
        sqlx::query_scalar("SELECT min(confidence) FROM memories WHERE npc_id = $1 AND memory_type = 'semantic'")
            .bind(crowded.npc_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert!((lowest_kept - 0.4).abs() < 1e-9, "the 10 least confident semantic memories went: {lowest_kept}");
    let min_reinforcement: i32 = sqlx::query_scalar(
        "SELECT min(reinforcement_count) FROM memories WHERE npc_id = $1 AND memory_type = 'procedural'",
    )
    .bind(crowded.npc_id)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(min_reinforcement, 5);
    assert_eq!(
        env.count("SELECT count(*) FROM memories WHERE npc_id IN (SELECT npc_id FROM memories GROUP BY npc_id HAVING count(*) = 5)").await,
        5,
        "a pair under its caps is untouched"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn old_trade_memories_become_one_semantic_memory_through_the_service() {
    let env = TestEnv::new().await;
    let now = Utc::now();
    let pair = Pair::new();
    let mut sources = Vec::new();
    for day in [8, 9, 10] {
        sources.push(
            insert(
                &env,
                &pair,
                Row { age: TimeDelta::days(day), importance: 0.4 + day as f64 / 100.0, ..Row::default() },
                now,
            )
            .await,
        );
    }
    let locked = insert(&env, &pair, Row { age: TimeDelta::days(12), locked: true, ..Row::default() }, now).await;
    let young: Vec<Uuid> = {
        let mut ids = Vec::new();
        for day in [1, 2, 3] {
            ids.push(insert(&env, &pair, Row { age: TimeDelta::days(day), ..Row::default() }, now).await);
        }
        ids
    };
    let consolidate = env.spawn_consolidate(&[
        "--consolidate-schedule",
        "every 1s",
        "--decay-schedule",
        "daily 00:00",
        "--reinforce-schedule",
        "daily 00:00",
        "--scheduler-poll-ms",
        "200",
    ]);
    wait_until(WAIT, "a semantic memory", || async {
        env.count("SELECT count(*) FROM memories WHERE memory_type = 'semantic'").await == 1
    })
    .await;
    let (content, importance, source_episodes, extractor): (String, f64, Vec<Uuid>, String) = sqlx::query_as(
        "SELECT content, importance, source_episodes, extractor FROM memories WHERE memory_type = 'semantic'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(content, "The player often trades with me (4 times).");
    assert_eq!(importance, 0.5, "the cluster's highest importance");
    assert_eq!(extractor, "consolidation:rules");
    let mut expected: Vec<Uuid> = sources.iter().copied().chain([locked]).collect();
    expected.sort();
    let mut got = source_episodes.clone();
    got.sort();
    assert_eq!(got, expected);
    let remaining: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM memories WHERE memory_type = 'episodic' ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let mut kept: Vec<Uuid> = young.iter().copied().chain([locked]).collect();
    kept.sort();
    assert_eq!(remaining, kept, "unlocked sources gone; the locked one and the young ones untouched");
    consolidate.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn the_llm_failing_half_way_leaves_no_half_written_state() {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let llm = MockLlmServer::start(
        Arc::new(move |_: &[ChatMessage]| match counter.fetch_add(1, Ordering::SeqCst) {
            0 => MockReply::Content(
                r#"{"content": "The player is a steady customer.", "tags": ["customer"], "confidence": 0.8}"#.into(),
            ),
            _ => MockReply::Status { status: 500, retry_after_secs: None },
        }),
        Duration::ZERO,
        false,
    )
    .await
    .unwrap();
    let env = TestEnv::new().await;
    let now = Utc::now();
    let pair = Pair::new();
    for day in 8..11 {
        insert(&env, &pair, Row { age: TimeDelta::days(day), tags: vec!["trade"], ..Row::default() }, now).await;
        insert(&env, &pair, Row { age: TimeDelta::days(day), tags: vec!["threat"], ..Row::default() }, now).await;
    }
    let config = env.consolidate_config(&[
        "--llm-provider",
        "openai",
        "--llm-base-url",
        &llm.base_url(),
        "--llm-model",
        "mock",
        "--llm-max-attempts",
        "1",
    ]);
    let summariser = npcmem_consolidate::worker::Summariser {
        client: config.llm.client().unwrap().unwrap(),
        breaker: npcmem_llm::CircuitBreaker::new("test", config.llm.breaker_settings()),
        per_minute: 100,
    };
    let worker = npcmem_consolidate::worker::ConsolidateWorker::new(jobs(&env), Some(summariser));
    let created = worker.consolidate_pair(pair.npc_id, pair.player_id).await.expect("consolidation commits");
    assert_eq!(created, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one call per cluster");
    let rows: Vec<(String, Vec<Uuid>)> = sqlx::query_as(
        "SELECT extractor, source_episodes FROM memories WHERE memory_type = 'semantic' ORDER BY extractor",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["consolidation:llm", "consolidation:rules"]);
    for (_, sources) in &rows {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM memories WHERE id = ANY($1)")
            .bind(sources)
            .fetch_one(&env.pool)
            .await
            .unwrap();
        assert_eq!((sources.len(), left), (3, 0), "each summary and the deletion of its sources committed together");
    }
    assert_eq!(env.count("SELECT count(*) FROM memories WHERE memory_type = 'episodic'").await, 0);
    // Again: nothing left to consolidate, nothing changes.
    assert_eq!(worker.consolidate_pair(pair.npc_id, pair.player_id).await.unwrap(), 0);
    env.cleanup().await;
}

#[tokio::test]
async fn repeated_tag_patterns_become_and_reinforce_a_procedural_memory() {
    let env = TestEnv::new().await;
    let now = Utc::now();
    let pair = Pair::new();
    for _ in 0..3 {
        let conversation = Some(Uuid::new_v4());
        insert(&env, &pair, Row { tags: vec!["trade", "haggle"], conversation, ..Row::default() }, now).await;
    }
    insert(&env, &pair, Row { tags: vec!["threat"], conversation: Some(Uuid::new_v4()), ..Row::default() }, now).await;
    let context = jobs(&env);
    context.run(Job::Reinforce, now).await.unwrap();
    let read = || async {
        sqlx::query_as::<_, (String, i32)>(
            "SELECT pattern, reinforcement_count FROM memories WHERE memory_type = 'procedural'",
        )
        .fetch_all(&env.pool)
        .await
        .unwrap()
    };
    assert_eq!(read().await, vec![("haggle+trade".to_owned(), 3)]);
    context.run(Job::Reinforce, now).await.unwrap();
    assert_eq!(read().await, vec![("haggle+trade".to_owned(), 3)], "running again counts nothing twice");
    let later = now + TimeDelta::seconds(5);
    insert(
        &env,
        &pair,
        Row {
            tags: vec!["haggle", "trade"],
            conversation: Some(Uuid::new_v4()),
            age: TimeDelta::seconds(-5),
            ..Row::default()
        },
        now,
    )
    .await;
    context.run(Job::Reinforce, later).await.unwrap();
    assert_eq!(read().await, vec![("haggle+trade".to_owned(), 4)], "a new conversation with the pattern reinforces it");
    env.cleanup().await;
}

#[tokio::test]
async fn two_replicas_run_each_job_once_per_schedule_tick() {
    let env = TestEnv::new().await;
    let args = [
        "--decay-schedule",
        "every 2s",
        "--consolidate-schedule",
        "every 2s",
        "--reinforce-schedule",
        "every 2s",
        "--scheduler-poll-ms",
        "100",
    ];
    let [first, second] = [env.spawn_consolidate(&args), env.spawn_consolidate(&args)];
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    // One replica goes away: the other keeps every later tick.
    first.stop().await;
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    second.stop().await;
    let runs: Vec<(String, DateTime<Utc>, i32, bool)> =
        sqlx::query_as("SELECT job, tick, attempts, finished_at IS NOT NULL FROM job_runs ORDER BY job, tick")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    for job in ["decay", "consolidate", "reinforce"] {
        let ticks: Vec<&(String, DateTime<Utc>, i32, bool)> = runs.iter().filter(|r| r.0 == job).collect();
        assert!(ticks.len() >= 4, "{job} ran on every tick: {runs:?}");
        assert!(ticks.iter().all(|r| r.2 == 1 && r.3), "each tick started once and finished: {ticks:?}");
        for pair in ticks.windows(2) {
            assert_eq!(pair[1].1 - pair[0].1, TimeDelta::seconds(2), "no tick skipped or doubled");
        }
    }
    env.cleanup().await;
}

#[tokio::test]
async fn the_consolidation_switch_pauses_scheduled_jobs_and_owed_ticks_run_when_it_is_back_on() {
    let env = TestEnv::new().await;
    let set = |enabled: bool| {
        let pool = env.pool.clone();
        async move {
            let mut connection = pool.acquire().await.unwrap();
            let value = serde_json::json!(enabled);
            npcmem_store::switches::set(&mut connection, "consolidation_enabled", &value, "test").await.unwrap();
        }
    };
    set(false).await;
    let args = [
        "--decay-schedule",
        "every 1s",
        "--consolidate-schedule",
        "every 1s",
        "--reinforce-schedule",
        "every 1s",
        "--scheduler-poll-ms",
        "100",
    ];
    let consolidate = env.spawn_consolidate(&args);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(env.count("SELECT count(*) FROM job_runs").await, 0, "paused: no scheduled job ran");
    set(true).await;
    wait_until(WAIT, "every job runs again", || async {
        env.count("SELECT count(DISTINCT job) FROM job_runs WHERE finished_at IS NOT NULL").await == 3
    })
    .await;
    consolidate.stop().await;
    env.cleanup().await;
}
