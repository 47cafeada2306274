use std::time::Duration;

use npcmem_bus::{BusMetrics, OutboxRelay, RelaySettings, StreamKind};
use npcmem_service::Shutdown;
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_tests::nats_server::PrivateNats;
use npcmem_tests::{TestEnv, wait_until};

fn job(env: &TestEnv, n: usize) -> OutboxMessage {
    OutboxMessage {
        subject: env.topology.job_extract(),
        msg_id: Some(format!("job-{n}")),
        payload: format!("{{\"n\":{n}}}").into_bytes(),
        headers: Default::default(),
    }
}

async fn enqueue(env: &TestEnv, range: std::ops::Range<usize>) {
    let messages: Vec<OutboxMessage> = range.map(|n| job(env, n)).collect();
    let mut transaction = env.pool.begin().await.unwrap();
    outbox::enqueue(&mut transaction, &messages).await.unwrap();
    transaction.commit().await.unwrap();
}

#[tokio::test]
async fn relay_survives_nats_being_down_and_publishes_each_row_once() {
    let mut server = PrivateNats::start().await;
    let env = TestEnv::with_nats(&server.url()).await;
    let shutdown = Shutdown::new();
    let relay = OutboxRelay {
        pool: env.pool.clone(),
        js: env.js.clone(),
        settings: RelaySettings {
            poll_interval: Duration::from_millis(100),
            publish_timeout: Duration::from_secs(1),
            ..RelaySettings::default()
        },
        metrics: BusMetrics::default(),
    };
    let relay_task = tokio::spawn(relay.run(shutdown.subscribe()));

    enqueue(&env, 0..500).await;
    wait_until(Duration::from_secs(20), "first 500 published", || async {
        env.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;

    server.kill().await;
    enqueue(&env, 500..1_500).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(env.count("SELECT count(*) FROM outbox").await, 1_000, "rows wait while NATS is down");
    server.restart().await;

    wait_until(Duration::from_secs(60), "backlog published after NATS returns", || async {
        env.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;
    let jobs = env.stream_messages(StreamKind::Jobs).await;
    let mut ids: Vec<String> =
        jobs.iter().filter_map(|m| m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string())).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1_500);
    assert_eq!(jobs.len(), 1_500, "no duplicates in the stream");

    shutdown.trigger();
    relay_task.await.unwrap();
    env.cleanup().await;
}

#[tokio::test]
async fn graceful_shutdown_flushes_the_outbox() {
    let env = TestEnv::new().await;
    let shutdown = Shutdown::new();
    let relay = OutboxRelay {
        pool: env.pool.clone(),
        js: env.js.clone(),
        // A poll interval longer than the test: only NOTIFY or the final flush can publish.
        settings: RelaySettings { poll_interval: Duration::from_secs(600), ..RelaySettings::default() },
        metrics: BusMetrics::default(),
    };
    shutdown.trigger();
    enqueue(&env, 0..300).await;
    relay.run(shutdown.subscribe()).await;
    assert_eq!(env.count("SELECT count(*) FROM outbox").await, 0);
    assert_eq!(env.stream_messages(StreamKind::Jobs).await.len(), 300);
    env.cleanup().await;
}
