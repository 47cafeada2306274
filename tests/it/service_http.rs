use std::time::Duration;

use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, free_port, http_get, wait_until};
use uuid::Uuid;

#[tokio::test]
async fn health_readiness_and_metrics_report_what_ingest_did() {
    let env = TestEnv::new().await;
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let ingest = env.spawn_ingest(&["--http-addr", &address]);
    wait_until(Duration::from_secs(20), "readyz answers 200", || async {
        matches!(http_get(port, "/readyz").await, Some((200, _)))
    })
    .await;
    // The server never stops redelivering; the loop dead-letters from delivery 5 on (a
    // crash on the last attempt must still end in the DLQ, not strand the message).
    let stream = env.js.get_stream(env.topology.stream_name(npcmem_bus::StreamKind::Conversations)).await.unwrap();
    let mut consumer = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&format!(
            "{}_ingest",
            env.topology.stream_prefix()
        ))
        .await
        .unwrap();
    let config = consumer.info().await.unwrap().config.clone();
    assert_eq!(config.max_deliver, npcmem_bus::topology::UNLIMITED_DELIVERIES);
    assert_eq!(config.ack_wait, Duration::from_secs(5), "ack_wait set explicitly from config");
    assert_eq!(config.max_ack_pending, 1_000);

    let (status, health) = http_get(port, "/healthz").await.expect("healthz answers");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&health).expect("healthz is JSON");
    assert_eq!(health["status"], "healthy");
    assert_eq!(health["checks"]["store_available"], true);
    assert_eq!(health["checks"]["nats_connected"], true);

    let pair = Pair::new();
    let subject = env.subject("conversation.ended");
    env.publish(&subject, fixtures::bytes(&fixtures::trade_conversation(Uuid::new_v4(), &pair)), None).await;
    env.publish(&subject, b"not json".to_vec(), None).await;
    wait_until(Duration::from_secs(20), "both messages counted in /metrics", || async {
        let Some((200, metrics)) = http_get(port, "/metrics").await else { return false };
        metrics.contains(r#"npcmem_ingest_conversations_total{result="accepted"} 1"#)
            && metrics.contains(r#"npcmem_dead_letters_total{consumer="ingest",reason="invalid_json"} 1"#)
    })
    .await;
    // The sampled gauges refresh every 5 s.
    wait_until(Duration::from_secs(20), "sampled gauges exported", || async {
        let Some((200, metrics)) = http_get(port, "/metrics").await else { return false };
        metrics.contains("npcmem_dlq_depth 1")
            && metrics.contains("npcmem_outbox_depth 0")
            && metrics.contains(r#"npcmem_consumer_pending{consumer="ingest"} 0"#)
    })
    .await;
    let (_, metrics) = http_get(port, "/metrics").await.unwrap();
    assert!(metrics.contains(r#"npcmem_consumer_messages_total{consumer="ingest",outcome="acked"} 1"#), "{metrics}");
    assert!(metrics.contains("npcmem_outbox_published_total 1"), "{metrics}");
    assert!(metrics.contains("npcmem_consumer_batch_duration_seconds_bucket"), "{metrics}");

    ingest.stop().await;
    assert!(http_get(port, "/healthz").await.is_none(), "the listener is closed after shutdown");
    env.cleanup().await;
}
