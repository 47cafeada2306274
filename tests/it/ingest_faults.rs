use futures::StreamExt;
use std::time::Duration;

use npcmem_bus::StreamKind;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::process::ServiceProcess;
use npcmem_tests::tcp_proxy::TcpProxy;
use npcmem_tests::{TestEnv, wait_until, with_database};
use uuid::Uuid;

/// Built by cargo for this package's tests, so never stale.
const INGEST_BINARY: &str = env!("CARGO_BIN_EXE_it-npcmem-ingest");

async fn publish_burst(env: &TestEnv, count: usize) -> Vec<Uuid> {
    let subject = env.subject("conversation.ended");
    let pairs: Vec<Pair> = (0..50).map(|_| Pair::new()).collect();
    let mut ids = Vec::with_capacity(count);
    let mut acks = Vec::with_capacity(count);
    for i in 0..count {
        let id = Uuid::new_v4();
        let payload = fixtures::bytes(&fixtures::trade_conversation(id, &pairs[i % pairs.len()]));
        let message =
            async_nats::jetstream::message::PublishMessage::build().payload(payload.into()).message_id(id.to_string());
        acks.push(env.js.send_publish(subject.clone(), message).await.expect("publish"));
        ids.push(id);
    }
    for ack in acks {
        ack.await.expect("pub ack");
    }
    ids
}

async fn assert_all_committed_once(env: &TestEnv, ids: &[Uuid]) {
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM conversations WHERE conversation_id = ANY($1)")
        .bind(ids)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(recorded, ids.len() as i64);
    let jobs = env.stream_messages(StreamKind::Jobs).await;
    let mut job_ids: Vec<String> =
        jobs.iter().filter_map(|m| m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string())).collect();
    job_ids.sort();
    job_ids.dedup();
    assert_eq!(jobs.len(), ids.len(), "exactly one job per conversation");
    assert_eq!(job_ids.len(), ids.len());
    assert_eq!(env.count("SELECT count(*) FROM working_memory").await, 150, "3 per pair for 50 pairs");
    assert!(env.stream_messages(StreamKind::Dlq).await.is_empty(), "nothing dead-lettered");
}

#[tokio::test]
async fn killed_ingest_process_loses_and_doubles_nothing() {
    let env = TestEnv::new().await;
    let args = env.common_args();
    let first = ServiceProcess::spawn(INGEST_BINARY, &args);
    let ids = publish_burst(&env, 2_000).await;
    wait_until(Duration::from_secs(60), "some but not all conversations committed", || async {
        env.count("SELECT count(*) FROM conversations").await > 0
    })
    .await;
    first.kill().await;
    let committed_at_kill = env.count("SELECT count(*) FROM conversations").await;

    let second = ServiceProcess::spawn(INGEST_BINARY, &args);
    wait_until(Duration::from_secs(90), "all 2,000 committed with their jobs", || async {
        env.count("SELECT count(*) FROM conversations").await == 2_000
            && env.stream_messages(StreamKind::Jobs).await.len() >= 2_000
    })
    .await;
    let status = second.terminate().await;
    assert!(status.success(), "SIGTERM exits 0, got {status:?}");
    eprintln!("committed before the kill: {committed_at_kill} of 2000");
    assert_all_committed_once(&env, &ids).await;
    env.cleanup().await;
}

#[tokio::test]
async fn postgres_outage_mid_burst_is_retried_without_loss() {
    let env = TestEnv::new().await;
    let admin_url = npcmem_tests::admin_database_url();
    let authority = admin_url.split('@').nth(1).and_then(|rest| rest.split('/').next()).unwrap_or("127.0.0.1:5432");
    let proxy = TcpProxy::start(authority.to_string()).await;
    let proxied =
        with_database(&admin_url.replace(authority, &format!("127.0.0.1:{}", proxy.port)), &env.database_name);
    let ingest = env.spawn_ingest(&["--database-url", &proxied, "--retry-initial-ms", "300"]);
    wait_until(Duration::from_secs(20), "ingest consumer exists", || async {
        let stream = env.js.get_stream(env.topology.stream_name(StreamKind::Conversations)).await;
        match stream {
            Ok(stream) => stream.consumer_names().count().await > 0,
            Err(_) => false,
        }
    })
    .await;

    let ids = publish_burst(&env, 1_000).await;
    wait_until(Duration::from_secs(60), "part of the burst committed", || async {
        env.count("SELECT count(*) FROM conversations").await > 0
    })
    .await;
    proxy.set_down(true);
    // A bad input arriving during the outage keeps its own reason, not max_deliveries.
    env.publish(&env.subject("conversation.ended"), b"{truncated".to_vec(), None).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.set_down(false);
    wait_until(Duration::from_secs(120), "the whole burst committed after the outage", || async {
        env.count("SELECT count(*) FROM conversations").await == 1_000
            && env.stream_messages(StreamKind::Jobs).await.len() >= 1_000
    })
    .await;
    ingest.stop().await;
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM conversations WHERE conversation_id = ANY($1)")
        .bind(&ids)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 1_000);
    assert_eq!(env.stream_messages(StreamKind::Jobs).await.len(), 1_000);
    let letters = env.stream_messages(StreamKind::Dlq).await;
    assert_eq!(letters.len(), 1, "only the bad input is dead-lettered");
    assert_eq!(letters[0].headers.get("Npcmem-Dlq-Reason").map(|v| v.as_str()), Some("invalid_json"));
    assert_eq!(letters[0].payload.as_ref(), b"{truncated");
    env.cleanup().await;
}

#[tokio::test]
async fn ingest_recreates_its_consumer_after_an_operator_deletes_it() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    let subject = env.subject("conversation.ended");
    let first = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(first, &pair)), None).await;
    wait_until(Duration::from_secs(20), "first conversation recorded", || async {
        env.count("SELECT count(*) FROM conversations").await == 1
    })
    .await;

    let stream = env.js.get_stream(env.topology.stream_name(StreamKind::Conversations)).await.unwrap();
    let durable = format!("{}_ingest", env.topology.stream_prefix());
    stream.delete_consumer(&durable).await.expect("delete the durable as an operator would");

    let second = Uuid::new_v4();
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(second, &pair)), None).await;
    wait_until(Duration::from_secs(60), "second conversation recorded through a re-created durable", || async {
        env.count("SELECT count(*) FROM conversations").await == 2
    })
    .await;
    ingest.stop().await;
    env.cleanup().await;
}
