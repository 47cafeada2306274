//! The enrich service and the query API against real NATS and Postgres.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use futures::StreamExt;
use npcmem_core::tokens::count_tokens;
use npcmem_tests::fixtures::Pair;
use npcmem_tests::{TestEnv, free_port, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

async fn insert_memory(
    env: &TestEnv,
    pair: &Pair,
    content: &str,
    tags: &[&str],
    importance: f64,
    age_days: i64,
) -> Uuid {
    let id = Uuid::new_v4();
    let at = Utc::now() - TimeDelta::days(age_days);
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                               created_at, last_accessed)
         VALUES ($1, $2, $3, 'episodic', $4, $5, $6, 0.9, $6, $7, $7)",
    )
    .bind(id)
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .bind(content)
    .bind(tags.iter().map(|t| t.to_string()).collect::<Vec<_>>())
    .bind(importance)
    .bind(at)
    .execute(&env.pool)
    .await
    .expect("the memory inserts");
    id
}

fn context_request(pair: &Pair, message: Option<&str>, max_tokens: u32) -> Value {
    json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "message": message, "max_tokens": max_tokens,
           "npc": {"name": "Brom", "role": "the blacksmith", "personality": "gruff but fair",
                   "speaking_style": "short sentences", "knowledge_domains": ["smithing"]}})
}

fn section<'a>(reply: &'a Value, provider: &str) -> Option<&'a str> {
    reply["sections"].as_array()?.iter().find(|s| s["provider"] == provider)?["content"].as_str()
}

#[tokio::test]
async fn a_stranger_gets_the_stranger_reputation_and_no_memory_section() {
    let env = TestEnv::new().await;
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    let reply = env.request_json("enrich.request", &context_request(&pair, Some("Hello?"), 1024)).await;
    assert_eq!(reply["placeholders"]["reputation"], "stranger (no prior interaction)", "{reply}");
    assert!(section(&reply, "memory").is_none(), "{reply}");
    let prompt = reply["system_prompt"].as_str().expect("a persona gives a system prompt");
    assert!(prompt.contains("You are Brom, the blacksmith.") && prompt.contains("stranger (no prior interaction)"));
    assert_eq!(reply["token_count"].as_u64().unwrap() as usize, count_tokens(prompt));
    assert_eq!(reply["degraded"], json!([]));
    enrich.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn working_memory_shows_at_once_and_a_new_memory_within_100_ms_of_its_invalidation() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let enrich = env.spawn_enrich(&["--enrich-cache-ttl-secs", "3600"]);
    let pair = Pair::new();
    env.publish_trade(&pair).await;
    wait_until(WAIT, "the summary recorded", || async { env.count("SELECT count(*) FROM working_memory").await == 1 })
        .await;
    let before = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    let summary = section(&before, "working_memory").expect("the summary is in the context before extraction");
    assert!(summary.contains("Your recent conversations with this player:"), "{summary}");
    assert!(section(&before, "memory").is_none(), "nothing extracted yet");

    let mut invalidations = env.nats.subscribe(env.subject("cache.invalidate")).await.unwrap();
    let extract = env.spawn_extract(&[]);
    let invalidated = tokio::time::timeout(WAIT, invalidations.next()).await.expect("extract invalidates the pair");
    let invalidated_at = Instant::now();
    assert!(invalidated.is_some());
    loop {
        let reply = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
        if section(&reply, "memory").is_some_and(|m| m.contains("Your memories of this player:")) {
            break;
        }
        assert!(
            invalidated_at.elapsed() < Duration::from_millis(100),
            "memory not visible 100 ms after invalidation: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("visible {:?} after cache.invalidate", invalidated_at.elapsed());
    extract.stop().await;
    enrich.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_hundred_important_memories_fit_max_tokens_keeping_the_best() {
    let env = TestEnv::new().await;
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    for i in 0..100 {
        let importance = 0.6 + (i % 10) as f64 / 100.0;
        insert_memory(
            &env,
            &pair,
            &format!("Memory {i}: the player helped me with task number {i} at the forge."),
            &["helpful"],
            importance,
            i % 20,
        )
        .await;
    }
    let reply = env.request_json("enrich.request", &context_request(&pair, None, 1000)).await;
    let prompt = reply["system_prompt"].as_str().unwrap();
    let token_count = reply["token_count"].as_u64().unwrap() as usize;
    assert_eq!(token_count, count_tokens(prompt), "token_count is the prompt's, by the same tokenizer");
    assert!(token_count <= 1000, "{token_count}");
    for s in reply["sections"].as_array().unwrap() {
        assert_eq!(s["token_count"].as_u64().unwrap() as usize, count_tokens(s["content"].as_str().unwrap()));
    }
    let memory = section(&reply, "memory").expect("a memory section");
    // The other sections are empty: their shares flow to the memories.
    assert!(count_tokens(memory) > 250, "beyond the memory's own 25 % share: {}", count_tokens(memory));
    let kept = memory.lines().count() - 1;
    assert!((3..100).contains(&kept), "some memories kept, not all: {kept}");
    // The best-scoring memories are the ones kept: importance 0.69, newest first.
    let rows: Vec<(String, f64, chrono::DateTime<Utc>)> =
        sqlx::query_as("SELECT content, importance, last_accessed FROM memories").fetch_all(&env.pool).await.unwrap();
    let now = Utc::now();
    let mut scored: Vec<(f64, &str)> = rows
        .iter()
        .map(|(content, importance, at)| {
            let inputs = npcmem_core::memory::SalienceInputs {
                importance: *importance,
                last_accessed: *at,
                access_count: 0,
                locked: false,
                emotional_intensity: 0.0,
            };
            (npcmem_core::memory::compute_salience(&inputs, now), content.as_str())
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, content) in scored.iter().take(kept) {
        assert!(memory.contains(content), "a top memory is missing: {content}");
    }
    enrich.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_stalled_provider_is_left_out_and_named_in_degraded() {
    let env = TestEnv::new().await;
    let enrich = env.spawn_enrich(&["--enrich-provider-timeout-ms", "40"]);
    let pair = Pair::new();
    insert_memory(&env, &pair, "The player bought a steel sword.", &["trade"], 0.5, 1).await;
    let mut blocker = env.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE knowledge_facts IN ACCESS EXCLUSIVE MODE").execute(&mut *blocker).await.unwrap();
    let started = Instant::now();
    let reply = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    let elapsed = started.elapsed();
    assert_eq!(reply["degraded"], json!(["knowledge"]), "{reply}");
    assert!(section(&reply, "memory").is_some(), "the other providers still answer");
    assert!(elapsed < Duration::from_millis(500), "answered inside the timeout: {elapsed:?}");
    blocker.rollback().await.unwrap();
    let healthy = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    assert_eq!(healthy["degraded"], json!([]), "a degraded reply is not cached");
    enrich.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_relevant_memory_outranks_a_more_salient_irrelevant_one() {
    let env = TestEnv::new().await;
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    insert_memory(&env, &pair, "The player saved my daughter from the wolves.", &["heroic"], 0.7, 0).await;
    insert_memory(&env, &pair, "The player bought the steel sword for 50 gold.", &["trade"], 0.5, 3).await;
    let reply = env
        .request_json("enrich.request", &context_request(&pair, Some("Is the steel sword still sharp?"), 1024))
        .await;
    let memory = section(&reply, "memory").unwrap();
    let lines: Vec<&str> = memory.lines().collect();
    assert!(lines[1].contains("steel sword"), "{memory}");
    let plain = env.request_json("enrich.request", &context_request(&pair, Some("How are you today?"), 1024)).await;
    assert!(section(&plain, "memory").unwrap().lines().nth(1).unwrap().contains("wolves"));
    enrich.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn what_the_npc_heard_of_this_player_comes_before_more_important_news_of_others() {
    let env = TestEnv::new().await;
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    // Twelve weighty facts about other players, then a slight one about this player.
    let facts = (0..12).map(|n| (Some(Uuid::new_v4()), format!("stranger {n} robbed the mill"), 0.9)).chain([(
        Some(pair.player_id),
        "they are generous".to_owned(),
        0.3,
    )]);
    for (subject, content, importance) in facts {
        sqlx::query(
            "INSERT INTO knowledge_facts (id, npc_id, category, subject_id, content, confidence, importance, source, origin_fact_id)
             VALUES ($1, $2, 'player_trait', $3, $4, 0.8, $5, 'gossip', $1)",
        )
        .bind(Uuid::new_v4())
        .bind(pair.npc_id)
        .bind(subject)
        .bind(&content)
        .bind(importance)
        .execute(&env.pool)
        .await
        .unwrap();
    }
    let reply = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    let knowledge = section(&reply, "knowledge").expect("a knowledge section");
    assert_eq!(knowledge.lines().nth(1), Some("- they are generous"), "{knowledge}");
    assert!(knowledge.contains("robbed the mill"), "news of others still follows: {knowledge}");
    assert!(reply["placeholders"]["reputation"].as_str().is_some_and(|r| r.contains("heard: they are generous")));
    enrich.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn the_query_api_answers_from_postgres_and_bad_requests_get_the_error_object() {
    let env = TestEnv::new().await;
    let port = free_port();
    let http_addr = format!("127.0.0.1:{port}");
    let enrich = env.spawn_enrich(&["--http-addr", &http_addr]);
    let pair = Pair::new();
    insert_memory(&env, &pair, "The player bought the steel sword.", &["trade", "weapon"], 0.6, 1).await;
    insert_memory(&env, &pair, "The player insulted my work.", &["insult"], 0.3, 2).await;
    sqlx::query(
        "INSERT INTO relationships (npc_id, player_id, trust, fear, respect, loyalty, friendliness, romantic_interest,
                                    disposition, stage, interaction_count, version)
         VALUES ($1, $2, 0.66, 0.0, 0.52, 0.5, 0.68, 0.0, 0.31, 'friend', 6, 6)",
    )
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .execute(&env.pool)
    .await
    .unwrap();
    let relationship =
        env.request_json("query.relationship", &json!({"npc_id": pair.npc_id, "player_id": pair.player_id})).await;
    assert_eq!(relationship["has_met"], true);
    assert_eq!(relationship["stage"], "friend");
    assert_eq!(relationship["trust"], 0.66);
    assert_eq!(relationship["interaction_count"], 6);
    let stranger =
        env.request_json("query.relationship", &json!({"npc_id": Uuid::new_v4(), "player_id": pair.player_id})).await;
    assert_eq!(
        (stranger["has_met"].clone(), stranger["trust"].clone(), stranger["stage"].clone()),
        (json!(false), json!(0.5), json!("stranger"))
    );
    let trades = env
        .request_json(
            "query.memories",
            &json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "tags": ["trade"], "min_importance": 0.5}),
        )
        .await;
    assert_eq!((trades["count"].clone(), trades["has_memory_matching"].clone()), (json!(1), json!(true)));
    assert_eq!(trades["memories"][0]["content"], "The player bought the steel sword.");
    let none = env
        .request_json(
            "query.memories",
            &json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "tags": ["insult"], "min_importance": 0.5}),
        )
        .await;
    assert_eq!(none["has_memory_matching"], false);
    let knowledge = env.request_json("query.knowledge", &json!({"npc_id": pair.npc_id, "tag": "cave"})).await;
    assert_eq!(knowledge["knows_fact"], false);

    let context = env.subject("enrich.request");
    let bad: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "invalid_json"),
        (
            format!(r#"{{"npc_id":"{}","player_id":"{}","max_tokens":"lots"}}"#, pair.npc_id, pair.player_id)
                .into_bytes(),
            "invalid_field",
        ),
        (format!(r#"{{"npc_id":7,"player_id":"{}"}}"#, pair.player_id).into_bytes(), "invalid_uuid"),
        (format!(r#"{{"npc_id":"nope","player_id":"{}"}}"#, pair.player_id).into_bytes(), "invalid_uuid"),
        (
            format!(r#"{{"npc_id":"{}","player_id":"{}","max_tokens":5}}"#, pair.npc_id, pair.player_id).into_bytes(),
            "invalid_field",
        ),
        (format!(r#"{{"player_id":"{}"}}"#, pair.player_id).into_bytes(), "missing_field"),
    ];
    for (payload, code) in &bad {
        let reply = env.request_raw(&context, payload.clone()).await;
        assert_eq!(reply["error"]["code"], *code, "{}: {reply}", String::from_utf8_lossy(payload));
        assert!(reply["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Unknown fields are ignored and schema_version defaults to 1.
    let newer = env
        .request_raw(
            &context,
            format!(r#"{{"npc_id":"{}","player_id":"{}","future_field":{{"x":1}}}}"#, pair.npc_id, pair.player_id)
                .into_bytes(),
        )
        .await;
    assert!(newer["sections"].is_array(), "{newer}");

    // The same handler over HTTP.
    let body = serde_json::to_string(&context_request(&pair, None, 512)).unwrap();
    let (status, text) = http_post(port, "/v1/context", &body).await;
    assert_eq!(status, 200, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap()["system_prompt"].is_string());
    let (status, text) = http_post(port, "/v1/context", "{oops").await;
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["error"]["code"], "invalid_json");
    enrich.stop().await;
    env.cleanup().await;
}

async fn http_post(port: u16, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stream = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(error) => panic!("enrich http not listening: {error}"),
        }
    };
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn strangers_are_described_by_faction_standing_and_gossip_and_replicas_share_requests() {
    let env = TestEnv::new().await;
    let (port_a, port_b) = (free_port(), free_port());
    let (addr_a, addr_b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    // Generous provider timeouts: this test is about what the sections say, and a first
    // request on a loaded CI machine once took longer than the default 40 ms.
    let timeout = ["--enrich-provider-timeout-ms", "2000"];
    let replicas = [
        env.spawn_enrich(&["--http-addr", &addr_a, "--enrich-access-flush-ms", "100", timeout[0], timeout[1]]),
        env.spawn_enrich(&["--http-addr", &addr_b, "--enrich-access-flush-ms", "100", timeout[0], timeout[1]]),
    ];
    let pair = Pair::new();
    sqlx::query("INSERT INTO npc_factions (npc_id, factions, as_of) VALUES ($1, ARRAY['smiths_guild'], now())")
        .bind(pair.npc_id)
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO faction_reputation (faction, player_id, reputation, npcs_known) VALUES ('smiths_guild', $1, 0.4, 3)")
        .bind(pair.player_id)
        .execute(&env.pool)
        .await
        .unwrap();
    let fact = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, category, subject_id, content, confidence, importance, source, origin_fact_id)
         VALUES ($1, $2, 'player_trait', $3, 'they are generous', 0.8, 0.6, 'gossip', $1)",
    )
    .bind(fact)
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .execute(&env.pool)
    .await
    .unwrap();
    let reply = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    assert_eq!(
        reply["placeholders"]["reputation"], "stranger; the smiths guild thinks well of them; heard: they are generous",
        "{reply}"
    );
    assert!(section(&reply, "knowledge").is_some_and(|k| k.contains("they are generous")));

    // Both replicas of the queue group answer some of 60 requests.
    for _ in 0..60 {
        env.request_json("enrich.request", &context_request(&Pair::new(), None, 256)).await;
    }
    for port in [port_a, port_b] {
        let (_, metrics) = npcmem_tests::http_get(port, "/metrics").await.expect("metrics");
        let misses: f64 = metrics
            .lines()
            .find(|line| line.starts_with("npcmem_enrich_cache_total{result=\"miss\"}"))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0);
        assert!(misses >= 5.0, "replica on {port} answered {misses} cold requests");
        for name in [
            "npcmem_memory_retrieval_duration_seconds_count",
            "npcmem_memory_count_per_npc_player_count{memory_type=\"episodic\"}",
            "npcmem_working_memory_buffer_size_count",
            "npcmem_memory_cache_size",
        ] {
            let value: f64 = metrics
                .lines()
                .find(|line| line.starts_with(&format!("{name} ")))
                .and_then(|line| line.rsplit(' ').next())
                .and_then(|value| value.parse().ok())
                .unwrap_or(0.0);
            assert!(value >= 1.0, "{name} on {port}: {value}\n{metrics}");
        }
    }

    // Memories that reached a prompt get their access counted, off the request path.
    let memory = insert_memory(&env, &pair, "The player bought the steel sword.", &["trade"], 0.6, 1).await;
    env.nats
        .publish(
            env.subject("cache.invalidate"),
            serde_json::to_vec(&json!({"npc_id": pair.npc_id, "player_id": pair.player_id})).unwrap().into(),
        )
        .await
        .unwrap();
    env.nats.flush().await.unwrap();
    wait_until(WAIT, "the new memory in the context", || async {
        section(&env.request_json("enrich.request", &context_request(&pair, None, 1024)).await, "memory").is_some()
    })
    .await;
    wait_until(WAIT, "the access written back", || async {
        sqlx::query_scalar::<_, i32>("SELECT access_count FROM memories WHERE id = $1")
            .bind(memory)
            .fetch_one(&env.pool)
            .await
            .unwrap()
            > 0
    })
    .await;
    for replica in replicas {
        replica.stop().await;
    }
    env.cleanup().await;
}

/// Degraded mode keeps cached contexts three times as long.
#[tokio::test]
async fn degraded_mode_keeps_cached_contexts_three_times_as_long() {
    let env = TestEnv::new().await;
    let mut connection = env.pool.acquire().await.unwrap();
    npcmem_store::switches::set(&mut connection, "degraded", &json!(true), "test").await.unwrap();
    drop(connection);
    let enrich = env.spawn_enrich(&["--enrich-cache-ttl-secs", "1"]);
    let pair = Pair::new();
    insert_memory(&env, &pair, "The player bought a lantern.", &["trade"], 0.6, 1).await;
    let memory = |reply: &Value| section(reply, "memory").unwrap_or_default().to_owned();
    let cached_at = Instant::now();
    let first = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    assert!(memory(&first).contains("lantern"), "{first}");
    // Written without an invalidation: only the cache's expiry lets it show.
    insert_memory(&env, &pair, "The player sold a rusty sword.", &["trade"], 0.6, 1).await;
    tokio::time::sleep(Duration::from_millis(1_600).saturating_sub(cached_at.elapsed())).await;
    let later = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    assert!(cached_at.elapsed() < Duration::from_millis(2_800), "the check ran late: {:?}", cached_at.elapsed());
    assert!(!memory(&later).contains("rusty sword"), "degraded: still cached after 1.6 s of a 1 s TTL: {later}");
    tokio::time::sleep(Duration::from_millis(3_300).saturating_sub(cached_at.elapsed())).await;
    let expired = env.request_json("enrich.request", &context_request(&pair, None, 1024)).await;
    assert!(memory(&expired).contains("rusty sword"), "expired after three TTLs: {expired}");
    enrich.stop().await;
    env.cleanup().await;
}
