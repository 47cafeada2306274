//! A burst of conversations through a three-node cluster while one node is SIGKILLed and
//! restarted and every stream's leader is then moved: every conversation is applied
//! exactly once, and no derived message or story signal is announced twice.
//!
//! The services run as processes (ingest, three extract replicas, relate, gossip), each
//! given one node. Before the burst every service is ready and each extract replica has
//! a pull waiting on the shared durable. The burst is published in three stretches by
//! several publishers at a steady pace, so that the faults land while publishes are in
//! flight:
//! 1. the first third, then the test waits until a conversation has gone all the way
//!    through (the pipeline is flowing);
//! 2. the node leading the CONVERSATIONS stream is SIGKILLed a few publishes into the
//!    next stretch; the test waits for a new leader and for publishing to go on through
//!    the two survivors, restarts the node and waits until it has caught up;
//! 3. a few publishes into the last stretch, every stream's leader steps down
//!    (`$JS.API.STREAM.LEADER.STEPDOWN`) and the test waits for each new leader.
//!
//! A publish that fails or times out meanwhile is sent again with the same `Nats-Msg-Id`,
//! so JetStream's duplicate window keeps one copy. `NPCMEM_CLUSTER_CONVERSATIONS` sets the
//! burst (default 300).

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use npcmem_bus::Topology;
use npcmem_bus::topology::StreamKind;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::nats_cluster::NatsCluster;
use npcmem_tests::process::ServiceProcess;
use npcmem_tests::{TestEnv, admin_database_url, free_ports, http_get};
use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

pub(crate) const NODES: usize = 3;
pub(crate) const EXTRACT_REPLICAS: usize = 3;
/// Jobs per pull of each extract replica (two pulls in flight: `--consumer-concurrency 2`).
const EXTRACT_BATCH_SIZE: usize = 4;
const PUBLISHERS: usize = 4;
/// Each publisher's pause between publishes: about 100 conversations/s in all, so each
/// stretch of the burst lasts long enough for a fault to land inside it.
const PUBLISH_PACE: Duration = Duration::from_millis(40);
/// One publish attempt: past this the PubAck is taken as lost and the publish repeated.
const PUBLISH_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// Threats, so that conversations leave memories and relate has stage changes and
/// crossings to announce as signals.
const LINES: &[&str] = &[
    "Hand over your coin or I'll burn this forge to the ground.",
    "Please, I want no trouble.",
    "I will kill you if you speak of this to the guard.",
    "I won't say a word, I swear it.",
];

/// One process of the pipeline: its name, its HTTP port (`/readyz`, `/metrics`), and the
/// process itself.
pub(crate) struct Service {
    name: String,
    http_port: u16,
    process: ServiceProcess,
}

/// Starts the pipeline, each process given one node (it learns the other nodes from that
/// one). Extract replica `i` talks to node `i`, so every node serves clients.
pub(crate) fn start_pipeline(env: &TestEnv, cluster: &NatsCluster) -> Vec<Service> {
    let mut pipeline = vec![("ingest".to_string(), env!("CARGO_BIN_EXE_it-npcmem-ingest"), 0)];
    for replica in 0..EXTRACT_REPLICAS {
        pipeline.push((format!("extract-{}", replica + 1), env!("CARGO_BIN_EXE_it-npcmem-extract"), replica % NODES));
    }
    pipeline.push(("relate".to_string(), env!("CARGO_BIN_EXE_it-npcmem-relate"), 1));
    pipeline.push(("gossip".to_string(), env!("CARGO_BIN_EXE_it-npcmem-gossip"), 2));
    let http_ports = free_ports(pipeline.len());
    pipeline
        .into_iter()
        .zip(http_ports)
        .map(|((name, binary, node), http_port)| {
            let mut args = env.common_args();
            // Later flags win over the common ones.
            args.extend([
                "--nats-url".to_string(),
                cluster.url(node),
                "--stream-replicas".to_string(),
                NODES.to_string(),
                "--http-addr".to_string(),
                format!("127.0.0.1:{http_port}"),
            ]);
            if name.starts_with("extract") {
                args.extend(extract_flags());
            }
            Service { name, http_port, process: ServiceProcess::spawn(binary, &args) }
        })
        .collect()
}

/// Checks that every stream has a replica on every node, and creates the extract durable.
async fn prepare_streams(env: &TestEnv) {
    for kind in StreamKind::ALL {
        let name = env.topology.stream_name(kind);
        let mut stream = env.js.get_stream(&name).await.expect("the stream exists");
        let info = stream.info().await.expect("stream info");
        assert_eq!(info.config.num_replicas, NODES, "{name} has a replica on every node");
    }
    create_extract_durable(env).await;
}

/// Creates the durable the extract replicas share, as they create it, and waits for its
/// leader. Replicas that start together with the durable's creation on a fresh cluster
/// can have their first pull lost (nats-server 2.9.10 keeps one waiting pull of three) and
/// pull again only after two missed heartbeats, 10 s into the burst (see `pulls.rs`).
async fn create_extract_durable(env: &TestEnv) {
    let flags = extract_flags();
    let config = env.extract_config(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let topology =
        Topology::new(&config.common.subject_prefix, &config.common.stream_prefix, config.common.topology_settings());
    let spec = topology.consumer(npcmem_extract::CONSUMER_EXTRACT, StreamKind::Jobs, topology.job_extract());
    topology.ensure_consumer(&env.js, &spec).await.expect("the extract durable can be created");
    wait_for("a leader of the extract durable", Duration::from_secs(30), async || {
        let Ok(stream) = env.js.get_stream(topology.stream_name(StreamKind::Jobs)).await else { return false };
        stream
            .consumer_info(&spec.durable)
            .await
            .is_ok_and(|info| info.cluster.as_ref().is_some_and(|cluster| cluster.leader.is_some()))
    })
    .await;
}

/// Pull requests waiting on the extract durable (its leader's count).
pub(crate) async fn extract_pulls_waiting(env: &TestEnv) -> usize {
    let Ok(stream) = env.js.get_stream(env.topology.stream_name(StreamKind::Jobs)).await else { return 0 };
    let durable = env.topology.consumer(npcmem_extract::CONSUMER_EXTRACT, StreamKind::Jobs, String::new()).durable;
    stream.consumer_info(&durable).await.map_or(0, |info| info.num_waiting)
}

/// Flags of the extract replicas beyond the common ones.
fn extract_flags() -> Vec<String> {
    // A pull asks for batch size × concurrency jobs, and nats-server 2.9 fills one waiting
    // pull before the next: small pulls let the replicas take turns.
    vec!["--stream-replicas".to_string(), NODES.to_string(), "--batch-size".to_string(), EXTRACT_BATCH_SIZE.to_string()]
}

/// SIGTERM to every process that still runs; how each ended (`Err` when it had stopped
/// on its own).
pub(crate) async fn stop_pipeline(
    services: Vec<Service>,
) -> Vec<(String, Result<std::process::ExitStatus, std::process::ExitStatus>)> {
    let mut exits = Vec::new();
    for Service { name, mut process, .. } in services {
        let status = match process.child.try_wait().ok().flatten() {
            Some(status) => Err(status),
            None => Ok(process.terminate().await),
        };
        exits.push((name, status));
    }
    exits
}

/// Messages a process's consumer acknowledged, from its `/metrics`.
async fn acked_by(http_port: u16, consumer: &str) -> u64 {
    let Some((200, metrics)) = http_get(http_port, "/metrics").await else { return 0 };
    let consumer_label = format!("consumer=\"{consumer}\"");
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("npcmem_consumer_messages_total{")
                && line.contains(&consumer_label)
                && line.contains("outcome=\"acked\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[derive(Debug, Default)]
struct PublishStats {
    published: AtomicUsize,
    /// Attempts that failed or timed out and were repeated with the same message id.
    repeated: AtomicUsize,
    /// Repeats JetStream recognised as duplicates (the first attempt had been stored).
    acked_as_duplicate: AtomicUsize,
}

/// Publishes until JetStream acknowledges it, repeating with the same message id.
async fn publish_until_stored(
    js: &jetstream::Context,
    subject: &str,
    conversation_id: Uuid,
    payload: Bytes,
    stats: &PublishStats,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let message = PublishMessage::build().payload(payload.clone()).message_id(conversation_id.to_string());
        let attempt = async {
            let ack = js.send_publish(subject.to_string(), message).await.map_err(|error| error.to_string())?;
            ack.await.map_err(|error| error.to_string())
        };
        let outcome = tokio::time::timeout(PUBLISH_ATTEMPT_TIMEOUT, attempt)
            .await
            .unwrap_or_else(|_| Err("no PubAck in time".to_string()));
        match outcome {
            Ok(ack) => {
                if ack.duplicate {
                    stats.acked_as_duplicate.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Err(error) => {
                stats.repeated.fetch_add(1, Ordering::Relaxed);
                assert!(Instant::now() < deadline, "conversation {conversation_id} never stored: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One publisher: the burst's entries `first, first + PUBLISHERS, …`, each only once the
/// gate lets that far into the burst.
async fn publisher(
    js: jetstream::Context,
    subject: String,
    burst: Arc<Vec<(Uuid, Bytes)>>,
    first: usize,
    mut gate: watch::Receiver<usize>,
    stats: Arc<PublishStats>,
) {
    for index in (first..burst.len()).step_by(PUBLISHERS) {
        gate.wait_for(|limit| index < *limit).await.expect("the gate outlives the publishers");
        let (conversation_id, payload) = &burst[index];
        publish_until_stored(&js, &subject, *conversation_id, payload.clone(), &stats).await;
        stats.published.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(PUBLISH_PACE).await;
    }
}

/// Polls `condition` every 100 ms; panics after `timeout` with `what`.
async fn wait_for(what: &str, timeout: Duration, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server name of the stream's leader, as the cluster reports it now.
async fn stream_leader(env: &TestEnv, stream: &str) -> Option<String> {
    let mut stream = env.js.get_stream(stream).await.ok()?;
    let info = stream.info().await.ok()?;
    info.cluster.as_ref()?.leader.clone()
}

/// Asks the stream's leader to step down and waits until another node leads it.
async fn move_leader(env: &TestEnv, stream: &str) -> (String, String) {
    let mut old_leader = None;
    wait_for(&format!("a leader of {stream}"), Duration::from_secs(15), async || {
        old_leader = stream_leader(env, stream).await;
        old_leader.is_some()
    })
    .await;
    let old_leader = old_leader.expect("waited for a leader");
    let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
    wait_for(&format!("{stream}'s leader to accept the stepdown"), Duration::from_secs(15), async || {
        let reply = tokio::time::timeout(Duration::from_secs(3), env.nats.request(subject.clone(), Bytes::new())).await;
        let Ok(Ok(reply)) = reply else { return false };
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap_or_default();
        // A leader that already changed (an election of its own) counts too.
        reply["success"] == true || stream_leader(env, stream).await.is_some_and(|leader| leader != old_leader)
    })
    .await;
    let mut new_leader = None;
    wait_for(&format!("a new leader of {stream}"), Duration::from_secs(15), async || {
        new_leader = stream_leader(env, stream).await.filter(|leader| *leader != old_leader);
        new_leader.is_some()
    })
    .await;
    (old_leader, new_leader.expect("waited for a new leader"))
}

/// Every durable of every stream has nothing left to deliver and nothing unacknowledged,
/// so no redelivery can still come.
async fn consumers_settled(env: &TestEnv) -> bool {
    for kind in StreamKind::ALL {
        let Ok(stream) = env.js.get_stream(env.topology.stream_name(kind)).await else { return false };
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.next().await {
            let Ok(info) = info else { return false };
            if info.num_pending > 0 || info.num_ack_pending > 0 {
                return false;
            }
        }
    }
    true
}

async fn count_of(env: &TestEnv, sql: &'static str, ids: &[Uuid]) -> i64 {
    sqlx::query_scalar::<_, i64>(sql).bind(ids).fetch_one(&env.pool).await.expect("a count query runs")
}

/// What happened when, in seconds since the test started.
struct Timeline {
    started: Instant,
    marks: Vec<(f64, String)>,
}

impl Timeline {
    fn mark(&mut self, what: impl Into<String>) {
        self.marks.push((self.started.elapsed().as_secs_f64(), what.into()));
    }
}

#[derive(Debug)]
struct Report {
    timeline: Vec<(f64, String)>,
    published: usize,
    repeated_publishes: usize,
    acked_as_duplicate: usize,
    killed: String,
    conversations_leader_after_kill: String,
    leader_moves: Vec<(String, String, String)>,
    /// Jobs each extract replica acknowledged (redeliveries included).
    extract_shares: Vec<(String, u64)>,
    applied: i64,
    lost: i64,
    applied_twice: i64,
    memories: i64,
    memory_events: usize,
    memory_events_twice: i64,
    signals: usize,
    duplicate_signals: i64,
    dead_letters: usize,
}

/// Publishes the burst through the faults, waits for the pipeline to settle and counts.
async fn burst_through_faults(
    cluster: &mut NatsCluster,
    env: &TestEnv,
    services: &[(String, u16)],
    conversations: usize,
    mut timeline: Timeline,
) -> Report {
    for (name, http_port) in services {
        wait_for(&format!("{name} ready"), Duration::from_secs(60), async || {
            matches!(http_get(*http_port, "/readyz").await, Some((200, _)))
        })
        .await;
    }
    wait_for("a pull of every extract replica waiting on the durable", Duration::from_secs(30), async || {
        extract_pulls_waiting(env).await >= EXTRACT_REPLICAS
    })
    .await;
    timeline.mark(format!(
        "every service ready: {}",
        services.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ")
    ));

    let pairs: Vec<Pair> = (0..conversations.div_ceil(4)).map(|_| Pair::new()).collect();
    let burst: Arc<Vec<(Uuid, Bytes)>> = Arc::new(
        (0..conversations)
            .map(|index| {
                let id = Uuid::new_v4();
                (id, Bytes::from(fixtures::bytes(&fixtures::conversation(id, &pairs[index % pairs.len()], LINES))))
            })
            .collect(),
    );
    let ids: Vec<Uuid> = burst.iter().map(|(id, _)| *id).collect();
    let stats = Arc::new(PublishStats::default());
    let published = || stats.published.load(Ordering::Relaxed);
    let (gate, gate_receiver) = watch::channel(conversations / 3);
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|first| {
            tokio::spawn(publisher(
                env.js.clone(),
                env.subject("conversation.ended"),
                burst.clone(),
                first,
                gate_receiver.clone(),
                stats.clone(),
            ))
        })
        .collect();
    timeline.mark("publishing the first third");

    // 1. The first third, and the pipeline flowing end to end.
    wait_for("the first third applied in part", Duration::from_secs(60), async || {
        published() >= conversations / 3
            && count_of(env, "SELECT count(*) FROM applied_conversations WHERE conversation_id = ANY($1)", &ids).await
                > 0
    })
    .await;

    // 2. SIGKILL the CONVERSATIONS leader while publishes are in flight; restart it.
    let conversations_stream = env.topology.stream_name(StreamKind::Conversations);
    let leader = stream_leader(env, &conversations_stream).await.expect("CONVERSATIONS has a leader");
    let killed = cluster.index_of(&leader).expect("the leader is a node of the cluster");
    timeline.mark(format!(
        "first third published, {} applied",
        count_of(env, "SELECT count(*) FROM applied_conversations WHERE conversation_id = ANY($1)", &ids).await
    ));
    gate.send_replace(conversations * 5 / 6);
    let in_flight = conversations / 3 + 2 * PUBLISHERS;
    wait_for("publishing under way again", Duration::from_secs(30), async || published() >= in_flight).await;
    cluster.kill(killed).await;
    timeline.mark(format!("SIGKILL node {leader} (CONVERSATIONS leader) after {} published", published()));
    let mut leader_after_kill = None;
    wait_for("a new CONVERSATIONS leader among the survivors", Duration::from_secs(30), async || {
        leader_after_kill = stream_leader(env, &conversations_stream).await.filter(|l| *l != leader);
        leader_after_kill.is_some()
    })
    .await;
    timeline.mark(format!("CONVERSATIONS led by {}", leader_after_kill.as_deref().unwrap_or_default()));
    wait_for("publishing through the survivors", Duration::from_secs(30), async || published() >= conversations / 2)
        .await;
    timeline.mark(format!("{} published", published()));
    cluster.restart(killed).await;
    timeline.mark(format!("node {leader} restarted"));
    cluster.wait_healthy(Duration::from_secs(30)).await;
    timeline.mark(format!("node {leader} caught up (every node healthy), {} published", published()));

    // 3. Every stream's leader moves while the last stretch is published.
    gate.send_replace(conversations);
    let in_flight = conversations * 5 / 6 + 2 * PUBLISHERS;
    wait_for("the last stretch under way", Duration::from_secs(30), async || published() >= in_flight).await;
    let mut leader_moves = Vec::new();
    for kind in StreamKind::ALL {
        let stream = env.topology.stream_name(kind);
        let (old, new) = move_leader(env, &stream).await;
        timeline.mark(format!("{stream} leader moved from {old} to {new}, {} published", published()));
        leader_moves.push((stream, old, new));
    }
    for publisher in publishers {
        publisher.await.expect("a publisher finished");
    }
    assert_eq!(published(), conversations, "every conversation published");
    timeline.mark("every conversation published");

    let total = conversations as i64;
    wait_for(
        "every conversation applied, the outbox drained, every consumer settled",
        Duration::from_secs(60),
        async || {
            count_of(env, "SELECT count(*) FROM applied_conversations WHERE conversation_id = ANY($1)", &ids).await
                >= total
                && count_of(
                    env,
                    "SELECT count(*) FROM conversations WHERE conversation_id = ANY($1) AND state = 'complete'",
                    &ids,
                )
                .await
                    >= total
                && env.count("SELECT count(*) FROM outbox").await == 0
                && consumers_settled(env).await
        },
    )
    .await;
    timeline.mark("every conversation applied, the pipeline settled");

    let mut report =
        count(env, &ids, &stats, cluster.name(killed).to_string(), leader_after_kill.unwrap_or_default(), leader_moves)
            .await;
    report.timeline = timeline.marks;
    for (name, http_port) in services.iter().filter(|(name, _)| name.starts_with("extract")) {
        report.extract_shares.push((name.clone(), acked_by(*http_port, "extract").await));
    }
    report
}

async fn count(
    env: &TestEnv,
    ids: &[Uuid],
    stats: &PublishStats,
    killed: String,
    conversations_leader_after_kill: String,
    leader_moves: Vec<(String, String, String)>,
) -> Report {
    let applied =
        count_of(env, "SELECT count(*) FROM applied_conversations WHERE conversation_id = ANY($1)", ids).await;
    let complete =
        count_of(env, "SELECT count(*) FROM conversations WHERE conversation_id = ANY($1) AND state = 'complete'", ids)
            .await;
    let dead_letters = env.stream_messages(StreamKind::Dlq).await.len();
    let lost = (ids.len() as i64 - applied.min(complete)) + dead_letters as i64;
    // Applied twice: a memory stored twice, a relationship that counted a different number
    // of interactions than conversations applied to it, a fact learned twice from one memory.
    let memories_twice = count_of(
        env,
        "SELECT count(*) FROM (SELECT 1 FROM memories WHERE source_conversation_id = ANY($1) \
         GROUP BY source_conversation_id, content HAVING count(*) > 1) twice",
        ids,
    )
    .await;
    let relationships_off = count_of(
        env,
        "SELECT coalesce(sum(abs(r.interaction_count - a.applied)), 0)::bigint FROM relationships r \
         JOIN (SELECT npc_id, player_id, count(*) AS applied FROM applied_conversations \
               WHERE conversation_id = ANY($1) GROUP BY 1, 2) a USING (npc_id, player_id)",
        ids,
    )
    .await;
    let facts_twice = count_of(
        env,
        "SELECT count(*) FROM (SELECT 1 FROM knowledge_facts f JOIN memories m ON m.id = f.source_memory_id \
         WHERE m.source_conversation_id = ANY($1) GROUP BY f.npc_id, f.source_memory_id HAVING count(*) > 1) twice",
        ids,
    )
    .await;
    let memories = count_of(env, "SELECT count(*) FROM memories WHERE source_conversation_id = ANY($1)", ids).await;

    // Each conversation's event.memory.stored, announced once (relate applied it from there).
    let memory_stored = env.subject("event.memory.stored");
    let mut events_per_conversation: HashMap<String, i64> = HashMap::new();
    for event in env.stream_messages(StreamKind::Events).await {
        if event.subject.as_str() == memory_stored {
            let event: Value = serde_json::from_slice(&event.payload).expect("events are JSON");
            *events_per_conversation.entry(event["conversation_id"].to_string()).or_default() += 1;
        }
    }
    let memory_events = events_per_conversation.len();
    let memory_events_twice: i64 = events_per_conversation.values().map(|n| n - 1).sum();

    // A signal twice: the same signal_id, or the same happening under two ids.
    let signals = env.stream_messages(StreamKind::Signals).await;
    let mut by_id: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_content: BTreeMap<String, i64> = BTreeMap::new();
    for signal in &signals {
        let mut value: Value = serde_json::from_slice(&signal.payload).expect("signals are JSON");
        *by_id.entry(value["signal_id"].to_string()).or_default() += 1;
        if let Some(object) = value.as_object_mut() {
            object.remove("signal_id");
            object.remove("at");
        }
        *by_content.entry(value.to_string()).or_default() += 1;
    }
    let repeats = |counts: &BTreeMap<String, i64>| counts.values().map(|n| n - 1).sum::<i64>();

    Report {
        timeline: Vec::new(),
        published: stats.published.load(Ordering::Relaxed),
        repeated_publishes: stats.repeated.load(Ordering::Relaxed),
        acked_as_duplicate: stats.acked_as_duplicate.load(Ordering::Relaxed),
        killed,
        conversations_leader_after_kill,
        leader_moves,
        extract_shares: Vec::new(),
        applied,
        lost,
        applied_twice: memories_twice + relationships_off + facts_twice,
        memories,
        memory_events,
        memory_events_twice,
        signals: signals.len(),
        duplicate_signals: repeats(&by_id).max(repeats(&by_content)),
        dead_letters,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_burst_and_moved_leaders_lose_and_double_nothing() {
    let started = Instant::now();
    let conversations: usize =
        std::env::var("NPCMEM_CLUSTER_CONVERSATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(300);
    let mut cluster = NatsCluster::start(NODES).await;
    let env = TestEnv::with_stream_replicas(&cluster.url(0), &admin_database_url(), NODES).await;
    if let Err(panic) = AssertUnwindSafe(prepare_streams(&env)).catch_unwind().await {
        env.cleanup().await;
        std::panic::resume_unwind(panic);
    }
    let services = start_pipeline(&env, &cluster);
    let endpoints: Vec<(String, u16)> =
        services.iter().map(|service| (service.name.clone(), service.http_port)).collect();

    let timeline = Timeline { started, marks: vec![(started.elapsed().as_secs_f64(), "pipeline starting".into())] };
    let outcome = AssertUnwindSafe(burst_through_faults(&mut cluster, &env, &endpoints, conversations, timeline))
        .catch_unwind()
        .await;
    let exits = AssertUnwindSafe(stop_pipeline(services)).catch_unwind().await;
    // Whatever happened: every stream this test created, then its database; the nodes go
    // with `cluster`.
    env.cleanup().await;
    drop(cluster);
    let report = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let exits = exits.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    println!();
    for (at, what) in &report.timeline {
        println!("{at:>6.1} s  {what}");
    }
    println!(
        "cluster failover: {} conversations published ({} publishes repeated, {} of them acked as duplicates); \
         node {} killed and restarted (CONVERSATIONS then led by {}); {} leaders moved; {} applied, {} lost, \
         {} applied twice; {} memories; {} memory events, {} twice; {} signals, {} twice; {} dead letters; {:.1} s",
        report.published,
        report.repeated_publishes,
        report.acked_as_duplicate,
        report.killed,
        report.conversations_leader_after_kill,
        report.leader_moves.len(),
        report.applied,
        report.lost,
        report.applied_twice,
        report.memories,
        report.memory_events,
        report.memory_events_twice,
        report.signals,
        report.duplicate_signals,
        report.dead_letters,
        started.elapsed().as_secs_f64(),
    );
    let shares: Vec<String> = report.extract_shares.iter().map(|(name, acked)| format!("{name} {acked}")).collect();
    println!("jobs acknowledged per extract replica (one durable): {}", shares.join(", "));
    for (name, status) in &exits {
        match status {
            Ok(status) => assert!(status.success(), "{name} exits 0 on SIGTERM, got {status:?}"),
            Err(status) => panic!("{name} stopped on its own during the test: {status:?}"),
        }
    }
    let total = conversations as i64;
    assert_eq!(report.applied, total, "every conversation applied");
    assert_eq!(
        (report.lost, report.applied_twice, report.memory_events_twice, report.duplicate_signals),
        (0, 0, 0, 0),
        "lost, applied twice, memory events twice, duplicate signals"
    );
    assert_eq!(report.memory_events, conversations, "one event.memory.stored per conversation");
    assert!(report.memories > 0 && report.signals > 0, "the burst left memories and announced signals");
    assert_eq!(report.leader_moves.len(), StreamKind::ALL.len(), "every stream's leader moved");
    assert!(
        report.extract_shares.len() == EXTRACT_REPLICAS && report.extract_shares.iter().all(|(_, acked)| *acked > 0),
        "every extract replica took jobs from the shared durable: {shares:?}"
    );
    let extracted: u64 = report.extract_shares.iter().map(|(_, acked)| acked).sum();
    assert!(extracted >= total as u64, "the extract replicas acknowledged every job between them: {shares:?}");
}
