//! The counted fault matrix: the whole write path (ingest, extract, relate, gossip,
//! consolidate) as real processes on a private NATS server, one fault per cell, and for
//! each cell the conversations lost, the conversations applied twice and the signals
//! announced twice, printed as one table; every count must be zero.
//!
//! Each cell publishes half of its burst, waits until the stage under test has made
//! progress, injects the fault, publishes the other half while the fault holds, lifts
//! it, and waits for the pipeline to settle. Enrich is left out: it writes nothing, so a
//! fault in it cannot lose or double anything. `NPCMEM_FAULTS_CONVERSATIONS` sets the
//! burst (default 200, what CI runs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use npcmem_bus::topology::StreamKind;
use npcmem_llm::mock::{MockLlmServer, MockReply, Responder, SAMPLE_EXTRACTION};
use npcmem_tests::TestEnv;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::nats_server::PrivateNats;
use npcmem_tests::postgres_server::PrivatePostgres;
use npcmem_tests::process::ServiceProcess;
use serde_json::Value;
use uuid::Uuid;

const SERVICES: [&str; 5] = ["ingest", "extract", "relate", "gossip", "consolidate"];

fn binary(service: &str) -> &'static str {
    match service {
        "ingest" => env!("CARGO_BIN_EXE_it-npcmem-ingest"),
        "extract" => env!("CARGO_BIN_EXE_it-npcmem-extract"),
        "relate" => env!("CARGO_BIN_EXE_it-npcmem-relate"),
        "gossip" => env!("CARGO_BIN_EXE_it-npcmem-gossip"),
        "consolidate" => env!("CARGO_BIN_EXE_it-npcmem-consolidate"),
        other => panic!("no binary for {other}"),
    }
}

/// Threats, so that every conversation leaves a memory and relate has crossings, stage
/// changes and faction shifts to announce.
const LINES: &[&str] = &[
    "Hand over your coin or I'll burn this forge to the ground.",
    "Please, I want no trouble.",
    "I will kill you if you speak of this to the guard.",
    "I won't say a word, I swear it.",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LlmFault {
    TooManyRequests,
    ServerError,
    Garbage,
    Timeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Kill(&'static str),
    NatsRestart,
    PostgresRestart,
    PublishedThrice,
    Llm(LlmFault),
}

impl Fault {
    fn label(self) -> String {
        match self {
            Fault::None => "no fault (baseline)".into(),
            Fault::Kill(service) => format!("kill -9 {service} mid-burst, restart"),
            Fault::NatsRestart => "NATS killed and restarted".into(),
            Fault::PostgresRestart => "Postgres stopped (fast), down 3 s, restarted".into(),
            Fault::PublishedThrice => "every message published 3×".into(),
            Fault::Llm(LlmFault::TooManyRequests) => "LLM answers 429 to every other call".into(),
            Fault::Llm(LlmFault::ServerError) => "LLM answers 500 to every other call".into(),
            Fault::Llm(LlmFault::Garbage) => "LLM answers garbage to every other call".into(),
            Fault::Llm(LlmFault::Timeout) => "LLM times out on every other call".into(),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    published: usize,
    lost: i64,
    applied_twice: i64,
    duplicate_signals: i64,
    signals: usize,
}

/// The running system of one cell.
struct System {
    env: TestEnv,
    nats: PrivateNats,
    /// The cell's own PostgreSQL when the cell restarts it; else the shared one.
    postgres: Option<PrivatePostgres>,
    llm: Option<MockLlmServer>,
    processes: HashMap<&'static str, ServiceProcess>,
}

impl System {
    async fn start(fault: Fault) -> Self {
        let nats = PrivateNats::start().await;
        let postgres = (fault == Fault::PostgresRestart).then(PrivatePostgres::start);
        let env = match &postgres {
            Some(postgres) => TestEnv::with_servers(&nats.url(), &postgres.admin_url()).await,
            None => TestEnv::with_nats(&nats.url()).await,
        };
        let llm = match fault {
            Fault::Llm(mode) => Some(
                MockLlmServer::start(every_other_call_fails(mode), Duration::ZERO, false)
                    .await
                    .expect("the mock binds"),
            ),
            _ => None,
        };
        let mut system = Self { env, nats, postgres, llm, processes: HashMap::new() };
        for service in SERVICES {
            system.spawn(service);
        }
        system
    }

    fn args(&self, service: &str) -> Vec<String> {
        let mut args = self.env.common_args();
        if service == "extract"
            && let Some(llm) = &self.llm
        {
            args.extend(npcmem_tests::llm_args(&llm.base_url(), 500));
        }
        args
    }

    fn spawn(&mut self, service: &'static str) {
        let process = ServiceProcess::spawn(binary(service), &self.args(service));
        self.processes.insert(service, process);
    }

    async fn kill(&mut self, service: &'static str) {
        if let Some(process) = self.processes.remove(service) {
            process.kill().await;
        }
    }

    async fn count(&self, sql: &'static str) -> i64 {
        self.env.count(sql).await
    }

    /// How far the stage a fault hits has come: the fault waits for some progress there.
    async fn progress(&self, fault: Fault) -> i64 {
        match fault {
            Fault::Kill("ingest") => self.count("SELECT count(*) FROM conversations").await,
            Fault::Kill("extract") | Fault::Llm(_) => {
                self.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await
            }
            Fault::Kill("gossip") => self.count("SELECT count(*) FROM knowledge_facts").await,
            _ => self.count("SELECT count(*) FROM applied_conversations").await,
        }
    }

    async fn stop(mut self) {
        for service in SERVICES {
            if let Some(process) = self.processes.remove(service) {
                let status = process.terminate().await;
                assert!(status.success(), "{service} exits 0 on SIGTERM, got {status:?}");
            }
        }
        self.env.cleanup().await;
        self.nats.kill().await;
    }
}

/// Every other call fails the given way; the rest get a valid extraction.
fn every_other_call_fails(mode: LlmFault) -> Responder {
    let calls = Arc::new(AtomicU64::new(0));
    Arc::new(move |_| {
        if calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            return MockReply::Content(SAMPLE_EXTRACTION.to_string());
        }
        match mode {
            LlmFault::TooManyRequests => MockReply::Status { status: 429, retry_after_secs: Some(1) },
            LlmFault::ServerError => MockReply::Status { status: 500, retry_after_secs: None },
            LlmFault::Garbage => MockReply::Content("Sure! Here are the memories: {{not json]".to_string()),
            LlmFault::Timeout => MockReply::Hang,
        }
    })
}

/// Publishes `conversations` (each `copies` times under distinct message ids, so
/// JetStream's own dedup window cannot hide a second application).
async fn publish(env: &TestEnv, conversations: &[(Uuid, Vec<u8>)], copies: usize) {
    let subject = env.subject("conversation.ended");
    let mut acks = Vec::new();
    for copy in 0..copies {
        for (id, payload) in conversations {
            let message = async_nats::jetstream::message::PublishMessage::build()
                .payload(payload.clone().into())
                .message_id(format!("{id}-{copy}"));
            acks.push(env.js.send_publish(subject.clone(), message).await.expect("publish"));
        }
    }
    for ack in acks {
        ack.await.expect("pub ack");
    }
}

async fn wait_for(what: &str, timeout: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("gave up waiting: {what}");
    false
}

async fn run_cell(fault: Fault, conversations: usize) -> Counts {
    let mut system = System::start(fault).await;
    let pairs: Vec<Pair> = (0..conversations.div_ceil(4)).map(|_| Pair::new()).collect();
    let burst: Vec<(Uuid, Vec<u8>)> = (0..conversations)
        .map(|index| {
            let id = Uuid::new_v4();
            (id, fixtures::bytes(&fixtures::conversation(id, &pairs[index % pairs.len()], LINES)))
        })
        .collect();
    let ids: Vec<Uuid> = burst.iter().map(|(id, _)| *id).collect();
    let copies = if fault == Fault::PublishedThrice { 3 } else { 1 };
    let (first, second) = burst.split_at(burst.len() / 2);
    publish(&system.env, first, copies).await;
    wait_for("progress before the fault", Duration::from_secs(60), async || system.progress(fault).await > 0).await;
    match fault {
        Fault::Kill(service) => system.kill(service).await,
        Fault::NatsRestart => system.nats.kill().await,
        Fault::PostgresRestart => system.postgres.as_ref().expect("a private Postgres").stop_server(),
        Fault::None | Fault::PublishedThrice | Fault::Llm(_) => {}
    }
    if fault == Fault::NatsRestart {
        // Nothing can be published while the server is down: bring it back first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        system.nats.restart().await;
        publish(&system.env, second, copies).await;
    } else {
        publish(&system.env, second, copies).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    match fault {
        Fault::Kill(service) => system.spawn(service),
        Fault::PostgresRestart => system.postgres.as_ref().expect("a private Postgres").start_server(),
        _ => {}
    }
    let total = conversations as i64;
    wait_for("every conversation applied and the outbox drained", Duration::from_secs(180), async || {
        system.count("SELECT count(*) FROM applied_conversations").await >= total
            && system.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;
    // Late duplicates (a redelivery after a restart) get a moment to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let counts = count(&system.env, &ids, copies).await;
    if fault == Fault::None {
        plant_one_of_each(&system.env, &ids, &counts).await;
    }
    system.stop().await;
    counts
}

/// The counters see what they count: after the baseline is counted, one conversation's
/// application is erased (lost, and its relationship now counts one interaction more than
/// it was applied), one memory is stored again and one signal is announced again under a
/// new id.
async fn plant_one_of_each(env: &TestEnv, ids: &[Uuid], baseline: &Counts) {
    sqlx::query("DELETE FROM applied_conversations WHERE conversation_id = $1")
        .bind(ids[0])
        .execute(&env.pool)
        .await
        .expect("erase one application");
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, importance, confidence, \
         source_conversation_id, extractor) SELECT $2, npc_id, player_id, memory_type, content, importance, \
         confidence, source_conversation_id, extractor FROM memories WHERE source_conversation_id = $1 LIMIT 1",
    )
    .bind(ids[1])
    .bind(Uuid::new_v4())
    .execute(&env.pool)
    .await
    .expect("store one memory again");
    let signal = env.stream_messages(StreamKind::Signals).await.into_iter().next().expect("a signal");
    let mut again: Value = serde_json::from_slice(&signal.payload).expect("signals are JSON");
    again["signal_id"] = Value::String(Uuid::new_v4().to_string());
    env.publish(signal.subject.as_str(), serde_json::to_vec(&again).expect("JSON"), None).await;
    let planted = count(env, ids, 1).await;
    assert_eq!(
        (planted.lost, planted.applied_twice, planted.duplicate_signals),
        (baseline.lost + 1, baseline.applied_twice + 2, baseline.duplicate_signals + 1),
        "the counters see one planted loss, two planted doubles and one planted repeat"
    );
}

async fn count(env: &TestEnv, ids: &[Uuid], copies: usize) -> Counts {
    let scalar = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql).bind(ids).fetch_one(&env.pool).await.expect("a count query runs")
    };
    let applied = scalar("SELECT count(*) FROM applied_conversations WHERE conversation_id = ANY($1)").await;
    let complete =
        scalar("SELECT count(*) FROM conversations WHERE conversation_id = ANY($1) AND state = 'complete'").await;
    let dead_letters = env.stream_messages(StreamKind::Dlq).await.len() as i64;
    let lost = (ids.len() as i64 - applied.min(complete)) + dead_letters;
    // A conversation applied twice shows as a memory stored twice, a relationship that
    // counted more interactions than conversations applied to it, a fact learned twice
    // from one memory, or a consolidation written twice.
    let memories_twice = scalar(
        "SELECT count(*) FROM (SELECT 1 FROM memories WHERE source_conversation_id = ANY($1) \
         GROUP BY source_conversation_id, content HAVING count(*) > 1) twice",
    )
    .await;
    let relationships_over = scalar(
        "SELECT coalesce(sum(r.interaction_count - a.applied), 0)::bigint FROM relationships r \
         JOIN (SELECT npc_id, player_id, count(*) AS applied FROM applied_conversations \
               WHERE conversation_id = ANY($1) GROUP BY 1, 2) a USING (npc_id, player_id) \
         WHERE r.interaction_count > a.applied",
    )
    .await;
    let facts_twice = scalar(
        "SELECT count(*) FROM (SELECT 1 FROM knowledge_facts f JOIN memories m ON m.id = f.source_memory_id \
         WHERE m.source_conversation_id = ANY($1) GROUP BY f.npc_id, f.source_memory_id HAVING count(*) > 1) twice",
    )
    .await;
    let consolidations_twice = env
        .count(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE extractor = 'consolidation' \
             GROUP BY npc_id, player_id, content HAVING count(*) > 1) twice",
        )
        .await;
    let signals = env.stream_messages(StreamKind::Signals).await;
    let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_content: BTreeMap<String, usize> = BTreeMap::new();
    for signal in &signals {
        let mut value: Value = serde_json::from_slice(&signal.payload).expect("signals are JSON");
        *by_id.entry(value["signal_id"].to_string()).or_default() += 1;
        // The same happening announced twice under two ids is a duplicate too.
        if let Some(object) = value.as_object_mut() {
            object.remove("signal_id");
            object.remove("at");
        }
        *by_content.entry(value.to_string()).or_default() += 1;
    }
    let repeats = |counts: &BTreeMap<String, usize>| counts.values().map(|n| n - 1).sum::<usize>() as i64;
    Counts {
        published: ids.len() * copies,
        lost,
        applied_twice: memories_twice + relationships_over + facts_twice + consolidations_twice,
        duplicate_signals: repeats(&by_id).max(repeats(&by_content)),
        signals: signals.len(),
    }
}

#[tokio::test]
async fn every_cell_of_the_fault_matrix_loses_doubles_and_repeats_nothing() {
    let conversations: usize =
        std::env::var("NPCMEM_FAULTS_CONVERSATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    let mut cells = vec![Fault::None];
    cells.extend(SERVICES.iter().map(|service| Fault::Kill(service)));
    cells.extend([Fault::NatsRestart, Fault::PostgresRestart, Fault::PublishedThrice]);
    cells.extend(
        [LlmFault::TooManyRequests, LlmFault::ServerError, LlmFault::Garbage, LlmFault::Timeout].map(Fault::Llm),
    );
    let mut table = Vec::new();
    for fault in cells {
        let counts = run_cell(fault, conversations).await;
        eprintln!("{}: {counts:?}", fault.label());
        table.push((fault, counts));
    }
    println!(
        "\n{:<44} {:>9} {:>5} {:>13} {:>17} {:>8}",
        "cell", "published", "lost", "applied twice", "duplicate signals", "signals"
    );
    for (fault, counts) in &table {
        println!(
            "{:<44} {:>9} {:>5} {:>13} {:>17} {:>8}",
            fault.label(),
            counts.published,
            counts.lost,
            counts.applied_twice,
            counts.duplicate_signals,
            counts.signals
        );
    }
    for (fault, counts) in &table {
        assert_eq!(
            (counts.lost, counts.applied_twice, counts.duplicate_signals),
            (0, 0, 0),
            "{}: lost, applied twice, duplicate signals",
            fault.label()
        );
        assert!(counts.signals > 0, "{}: the burst announced something", fault.label());
    }
}
