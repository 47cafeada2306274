use std::path::PathBuf;
use std::time::Duration;

use npcmem_tests::nats_server::PrivateNats;

fn nats_conf() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("nats.conf")
}

async fn connect_as(server: &PrivateNats, user: &str, password: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .connect(server.url())
        .await
        .expect("the user can connect")
}

#[tokio::test]
async fn game_user_may_publish_conversations_but_not_jobs_or_events() {
    let envs = vec![
        ("NPCMEM_NATS_GAME_PASSWORD".to_string(), "game-secret".to_string()),
        ("NPCMEM_NATS_SERVICE_PASSWORD".to_string(), "service-secret".to_string()),
        ("NPCMEM_NATS_ADMIN_PASSWORD".to_string(), "admin-secret".to_string()),
    ];
    let server = PrivateNats::start_with(Some(&nats_conf()), envs).await;

    // The service user sets up the default-prefix topology, as a service would at start.
    let service = connect_as(&server, "service", "service-secret").await;
    let service_js = async_nats::jetstream::new(service.clone());
    let topology = npcmem_bus::Topology::new("npcmem", "NPCMEM", npcmem_bus::TopologySettings::default());
    topology.ensure(&service_js).await.expect("the service user may create streams");

    let game = connect_as(&server, "game", "game-secret").await;
    let mut game_js = async_nats::jetstream::new(game.clone());
    game_js.set_timeout(Duration::from_secs(2));

    let allowed = game_js.publish("npcmem.conversation.ended", "{}".into()).await.expect("send").await;
    assert!(allowed.is_ok(), "game may publish conversation.ended: {allowed:?}");
    let world = game_js.publish("npcmem.world.npc_moved", "{}".into()).await.expect("send").await;
    assert!(world.is_ok(), "game may publish world.*: {world:?}");

    for forbidden in ["npcmem.job.extract", "npcmem.event.memory.stored", "npcmem.signal.npc_hostile"] {
        let denied = game_js.publish(forbidden, "{}".into()).await.expect("send").await;
        assert!(denied.is_err(), "game must not publish {forbidden}");
    }
    let mut conversations = service_js.get_stream("NPCMEM_CONVERSATIONS").await.unwrap();
    assert_eq!(conversations.info().await.unwrap().state.messages, 1);
    let mut jobs = service_js.get_stream("NPCMEM_JOBS").await.unwrap();
    assert_eq!(jobs.info().await.unwrap().state.messages, 0, "no job got through");

    // The game may read signals with a consumer of its own.
    service_js.publish("npcmem.signal.npc_hostile", "{\"signal_id\":\"s\"}".into()).await.unwrap().await.unwrap();
    let signals = game_js.get_stream("NPCMEM_SIGNALS").await.expect("game may look up the signals stream");
    let consumer = signals
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("game-server-1".into()),
            ..Default::default()
        })
        .await
        .expect("game may create its own signals consumer");
    let mut batch = consumer.fetch().max_messages(1).messages().await.expect("fetch");
    use futures::StreamExt;
    let signal = tokio::time::timeout(Duration::from_secs(5), batch.next()).await.expect("a signal arrives");
    let signal = signal.expect("stream item").expect("message");
    assert_eq!(signal.subject.as_str(), "npcmem.signal.npc_hostile");
    signal.ack().await.expect("game may ack its signals");

    // …but not delete streams.
    assert!(game_js.delete_stream("NPCMEM_JOBS").await.is_err(), "game must not delete streams");
}
