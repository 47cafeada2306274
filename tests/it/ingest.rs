use std::time::Duration;

use npcmem_bus::StreamKind;
use npcmem_bus::dlq::{HEADER_CONSUMER, HEADER_REASON, HEADER_SUBJECT};
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::json;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(20);

fn header<'a>(message: &'a async_nats::jetstream::message::StreamMessage, name: &str) -> Option<&'a str> {
    message.headers.get(name).map(|value| value.as_str())
}

async fn jobs(env: &TestEnv) -> Vec<async_nats::jetstream::message::StreamMessage> {
    env.stream_messages(StreamKind::Jobs).await
}

#[tokio::test]
async fn valid_conversation_is_recorded_redacted_and_queued_once() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let conversation_id = Uuid::new_v4();
    let document = fixtures::conversation(
        conversation_id,
        &pair,
        &[
            "I need a sword. Write to aria.smith@example.com or call 555-123-4567.",
            "Fifty gold, and I take cards.",
            "My card is 4111 1111 1111 1111.",
            "We do not take that here.",
        ],
    );
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", traceparent);
    env.publish_with_headers(
        &env.subject("conversation.ended"),
        fixtures::bytes(&document),
        Some(&conversation_id.to_string()),
        Some(headers),
    )
    .await;

    wait_until(WAIT, "one job.extract in the stream", || async { jobs(&env).await.len() == 1 }).await;
    let mut connection = env.pool.acquire().await.unwrap();
    let row = npcmem_store::conversations::get(&mut connection, conversation_id).await.unwrap().expect("ledger row");
    assert_eq!(row.state, "pending");
    assert_eq!(row.npc_id, pair.npc_id);
    assert_eq!(row.player_id, pair.player_id);
    assert_eq!(row.npc_name, "Brom");
    assert_eq!(row.npc_factions, vec!["smiths_guild".to_string()]);
    assert_eq!(row.message_count, 4);
    assert_eq!(row.redactions, 3);
    let transcript = row.transcript.to_string();
    assert!(
        transcript.contains("[EMAIL]") && transcript.contains("[PHONE]") && transcript.contains("[CARD]"),
        "{transcript}"
    );
    assert!(!transcript.contains("example.com") && !transcript.contains("4111"), "{transcript}");

    let summaries = npcmem_store::working_memory::recent(&mut connection, pair.npc_id, pair.player_id).await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert!(summaries[0].summary.contains("Aria") && summaries[0].summary.contains("Brom"), "{}", summaries[0].summary);
    assert!(!summaries[0].summary.contains("example.com"));

    let jobs = jobs(&env).await;
    assert_eq!(jobs[0].subject.as_str(), env.subject("job.extract"));
    assert_eq!(header(&jobs[0], "Nats-Msg-Id"), Some(conversation_id.to_string().as_str()));
    assert_eq!(header(&jobs[0], "traceparent"), Some(traceparent), "trace context travels with the job");
    let job: serde_json::Value = serde_json::from_slice(&jobs[0].payload).unwrap();
    assert_eq!(job, json!({"schema_version": 1, "conversation_id": conversation_id}));
    // The job is in the stream at PubAck; the row goes once the relay commits.
    wait_until(WAIT, "the relay drained the outbox", || async { env.count("SELECT count(*) FROM outbox").await == 0 })
        .await;

    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn duplicate_conversation_is_applied_once() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let conversation_id = Uuid::new_v4();
    let payload = fixtures::bytes(&fixtures::trade_conversation(conversation_id, &pair));
    let subject = env.subject("conversation.ended");
    for _ in 0..3 {
        env.publish(&subject, payload.clone(), Some(&conversation_id.to_string())).await;
    }
    // Past JetStream's dedup: a different message id, so only the ledger can catch it.
    env.publish(&subject, payload.clone(), Some("a-different-message-id")).await;
    let marker = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(marker, &pair)), None).await;

    wait_until(WAIT, "both distinct conversations processed", || async {
        env.count("SELECT count(*) FROM conversations").await == 2 && jobs(&env).await.len() == 2
    })
    .await;
    // Let the late duplicate be consumed, then check nothing doubled.
    wait_until(WAIT, "conversation stream drained", || async {
        env.stream_messages(StreamKind::Conversations).await.is_empty()
    })
    .await;
    let jobs = jobs(&env).await;
    let ids: Vec<&str> = jobs.iter().filter_map(|m| header(m, "Nats-Msg-Id")).collect();
    assert_eq!(ids.iter().filter(|id| **id == conversation_id.to_string()).count(), 1);
    assert_eq!(env.count("SELECT count(*) FROM working_memory").await, 2);
    assert_eq!(env.count("SELECT count(*) FROM conversations").await, 2);

    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn bad_inputs_are_dead_lettered_with_reason_and_original_bytes() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let valid = |id: Uuid| fixtures::trade_conversation(id, &pair);
    let with = |mutate: &dyn Fn(&mut serde_json::Value)| {
        let mut document = valid(Uuid::new_v4());
        mutate(&mut document);
        fixtures::bytes(&document)
    };
    let mut oversized = valid(Uuid::new_v4());
    oversized["messages"] =
        json!((0..20).map(|_| json!({"speaker": "player", "text": "x".repeat(3_900)})).collect::<Vec<_>>());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("invalid_json", b"{not json".to_vec()),
        ("invalid_utf8", b"{\"schema_version\":1,\"x\":\"\xff\xfe\"}".to_vec()),
        ("schema_version", with(&|d| d["schema_version"] = json!(2))),
        (
            "missing_field",
            with(&|d| {
                d.as_object_mut().unwrap().remove("npc_id");
            }),
        ),
        ("invalid_uuid", with(&|d| d["player_id"] = json!("not-a-uuid"))),
        (
            "too_many_messages",
            with(&|d| {
                d["messages"] = json!((0..201).map(|_| json!({"speaker": "npc", "text": "hm"})).collect::<Vec<_>>())
            }),
        ),
        ("text_too_long", with(&|d| d["messages"][0]["text"] = json!("a".repeat(4_001)))),
        ("payload_too_large", fixtures::bytes(&oversized)),
    ];
    let subject = env.subject("conversation.ended");
    for (_, payload) in &cases {
        env.publish(&subject, payload.clone(), None).await;
    }
    let after_bad = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&valid(after_bad)), None).await;

    wait_until(WAIT, "every bad input dead-lettered", || async {
        env.stream_messages(StreamKind::Dlq).await.len() == cases.len()
    })
    .await;
    wait_until(WAIT, "the valid conversation after them recorded", || async {
        env.count("SELECT count(*) FROM conversations").await == 1
    })
    .await;
    let letters = env.stream_messages(StreamKind::Dlq).await;
    // Two batches may be in flight at once, so letters are matched by body, not order.
    for (expected_reason, original) in &cases {
        let letter = letters
            .iter()
            .find(|letter| letter.payload.as_ref() == original.as_slice())
            .unwrap_or_else(|| panic!("no dead letter with the original bytes of the {expected_reason} case"));
        assert_eq!(letter.subject.as_str(), env.subject("dlq.ingest"));
        assert_eq!(header(letter, HEADER_REASON), Some(*expected_reason));
        assert_eq!(header(letter, HEADER_CONSUMER), Some("ingest"));
        assert_eq!(header(letter, HEADER_SUBJECT), Some(subject.as_str()));
    }
    let mut connection = env.pool.acquire().await.unwrap();
    assert!(npcmem_store::conversations::get(&mut connection, after_bad).await.unwrap().is_some());

    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn pii_reaches_neither_postgres_nor_the_dead_letter_stream() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let secrets = ["mallory@example.org", "(555) 867-5309", "4012 8888 8888 1881", "123-45-6789", "10.0.13.37"];
    let lines: Vec<String> = secrets.iter().map(|s| format!("remember this: {s}")).collect();
    let line_refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let good_id = Uuid::new_v4();
    env.publish(
        &env.subject("conversation.ended"),
        fixtures::bytes(&fixtures::conversation(good_id, &pair, &line_refs)),
        None,
    )
    .await;
    // The same PII inside a message that is dead-lettered (text too long).
    let mut bad = fixtures::conversation(Uuid::new_v4(), &pair, &line_refs);
    bad["messages"][1]["text"] = json!(format!("{} {}", secrets.join(" "), "z".repeat(4_100)));
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(&bad), None).await;

    wait_until(WAIT, "one recorded, one dead-lettered", || async {
        env.count("SELECT count(*) FROM conversations").await == 1
            && env.stream_messages(StreamKind::Dlq).await.len() == 1
    })
    .await;
    let stored: String =
        sqlx::query_scalar("SELECT string_agg(transcript::text || summary, ' ') FROM conversations JOIN working_memory USING (conversation_id)")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    let letter = &env.stream_messages(StreamKind::Dlq).await[0];
    let letter_text = String::from_utf8_lossy(&letter.payload).to_string();
    for secret in secrets {
        assert!(!stored.contains(secret), "{secret} reached Postgres: {stored}");
        assert!(!letter_text.contains(secret), "{secret} reached the DLQ");
    }
    assert!(letter_text.contains("[EMAIL]") && letter_text.contains("[CARD]"));

    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn opted_out_player_is_skipped_and_gets_no_job() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let privacy = json!({"schema_version": 1, "player_id": pair.player_id, "allow_memory": false,
                         "at": chrono::Utc::now().to_rfc3339()});
    env.publish(&env.subject("world.player_privacy"), fixtures::bytes(&privacy), None).await;
    wait_until(WAIT, "opt-out applied", || async {
        env.count("SELECT count(*) FROM player_privacy WHERE NOT allow_memory").await == 1
    })
    .await;

    let conversation_id = env.publish_trade(&pair).await;
    wait_until(WAIT, "ledger row written", || async { env.count("SELECT count(*) FROM conversations").await == 1 })
        .await;
    let mut connection = env.pool.acquire().await.unwrap();
    let row = npcmem_store::conversations::get(&mut connection, conversation_id).await.unwrap().unwrap();
    assert_eq!(row.state, "skipped");
    assert_eq!(row.skip_reason.as_deref(), Some("opted_out"));
    assert_eq!(row.transcript, json!([]), "no transcript kept for an opted-out player");
    assert_eq!(env.count("SELECT count(*) FROM working_memory").await, 0);
    // Give the relay time it would need, then check no job appeared.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.count("SELECT count(*) FROM outbox").await, 0);
    assert!(jobs(&env).await.is_empty());

    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn working_memory_keeps_the_three_newest_conversations_per_pair() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let mut ids = Vec::new();
    for minutes_ago in [50, 40, 30, 20, 10] {
        let id = Uuid::new_v4();
        let mut document = fixtures::trade_conversation(id, &pair);
        let ended = chrono::Utc::now() - chrono::Duration::minutes(minutes_ago);
        document["ended_at"] = json!(ended.to_rfc3339());
        document["started_at"] = json!((ended - chrono::Duration::minutes(1)).to_rfc3339());
        env.publish(&env.subject("conversation.ended"), fixtures::bytes(&document), None).await;
        ids.push(id);
    }
    wait_until(WAIT, "five conversations recorded", || async {
        env.count("SELECT count(*) FROM conversations").await == 5
    })
    .await;
    let mut connection = env.pool.acquire().await.unwrap();
    let kept = npcmem_store::working_memory::recent(&mut connection, pair.npc_id, pair.player_id).await.unwrap();
    let kept_ids: Vec<Uuid> = kept.iter().map(|s| s.conversation_id).collect();
    assert_eq!(kept_ids, vec![ids[4], ids[3], ids[2]]);

    ingest.stop().await;
    env.cleanup().await;
}
