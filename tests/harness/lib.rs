//! The test harness (STYLE §Tests): each test gets its own database and its own subject and
//! stream prefix on the shared NATS and Postgres, so tests run in parallel; services run
//! in-process (or as real binaries for crash tests); waits poll a condition with a deadline.

pub mod fixtures;
pub mod nats_cluster;
pub mod nats_server;
pub mod postgres_server;
pub mod process;
pub mod tcp_proxy;

use std::future::Future;
use std::sync::Once;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use clap::Parser;
use npcmem_bus::{StreamKind, Topology, TopologySettings};
use npcmem_extract::ExtractConfig;
use npcmem_ingest::IngestConfig;
use npcmem_service::Shutdown;
use sqlx::PgPool;
use uuid::Uuid;

/// The shared servers; `deploy/local/test` exports these (defaults: the machine's own).
pub fn nats_url() -> String {
    std::env::var("NPCMEM_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}
pub fn admin_database_url() -> String {
    std::env::var("NPCMEM_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// JetStream reserves each stream's max_bytes on the shared server: keep test streams small.
const TEST_STREAM_MAX_BYTES: i64 = 32 * 1024 * 1024;
const TEST_STREAM_MAX_BYTES_ARG: &str = "33554432";
/// Test streams older than this are leftovers of a crashed run.
const STALE_TEST_STREAM_AGE: Duration = Duration::from_secs(15 * 60);

static TRACING: Once = Once::new();

/// Deletes test streams (`T<12 hex>_*`) that a panicking or killed run left behind, so
/// their reserved storage does not pile up on the shared server.
async fn sweep_stale_test_streams(js: &jetstream::Context) {
    use futures::StreamExt;
    let mut streams = js.streams();
    let now = chrono::Utc::now();
    let mut stale = Vec::new();
    while let Some(Ok(info)) = streams.next().await {
        let name = &info.config.name;
        let bytes = name.as_bytes();
        let looks_like_test =
            bytes.len() > 14 && bytes[0] == b'T' && bytes[1..13].iter().all(u8::is_ascii_hexdigit) && bytes[13] == b'_';
        let age = now - info.created;
        if looks_like_test && age.to_std().is_ok_and(|age| age > STALE_TEST_STREAM_AGE) {
            stale.push(name.clone());
        }
    }
    for name in stale {
        let _ = js.delete_stream(&name).await;
    }
}

fn init_tracing() {
    TRACING.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("NPCMEM_TEST_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    });
}

/// Replaces the database name of a postgres URL.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let (server, _) = base.rsplit_once('/').expect("a postgres URL has a path");
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

pub struct TestEnv {
    pub id: String,
    /// The server's admin URL the test database was created from (and is dropped through).
    pub admin_url: String,
    pub database_name: String,
    pub database_url: String,
    pub nats_url: String,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub pool: PgPool,
    pub topology: Topology,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self::with_nats(&nats_url()).await
    }

    /// A test environment on the given NATS server (fault tests bring their own).
    pub async fn with_nats(nats_url: &str) -> Self {
        Self::with_servers(nats_url, &admin_database_url()).await
    }

    /// A test environment on the given NATS server and PostgreSQL (admin URL).
    pub async fn with_servers(nats_url: &str, admin_url: &str) -> Self {
        Self::with_stream_replicas(nats_url, admin_url, 1).await
    }

    /// A test environment whose streams have `replicas` replicas (a JetStream cluster of
    /// at least that many nodes); the services must be given the same `--stream-replicas`.
    pub async fn with_stream_replicas(nats_url: &str, admin_url: &str, replicas: usize) -> Self {
        init_tracing();
        let id = Uuid::new_v4().simple().to_string()[..12].to_string();
        let database_name = format!("npcmem_test_{id}");
        npcmem_store::ensure_database(admin_url, &database_name)
            .await
            .expect("the test Postgres accepts CREATE DATABASE");
        let database_url = with_database(admin_url, &database_name);
        let pool = npcmem_store::connect(&database_url, &npcmem_store::PoolOptions::default())
            .await
            .expect("the test database accepts connections");
        npcmem_store::migrate(&pool).await.expect("migrations apply to a fresh database");
        let nats = async_nats::connect(nats_url).await.expect("the test NATS server accepts connections");
        let js = jetstream::new(nats.clone());
        sweep_stale_test_streams(&js).await;
        let settings = TopologySettings {
            work_queue_max_bytes: TEST_STREAM_MAX_BYTES,
            limits_stream_max_bytes: TEST_STREAM_MAX_BYTES,
            replicas,
            ..TopologySettings::default()
        };
        let topology = Topology::new(&format!("t{id}"), &format!("T{id}"), settings);
        topology.ensure(&js).await.expect("the topology can be created");
        Self {
            id,
            admin_url: admin_url.to_string(),
            database_name,
            database_url,
            nats_url: nats_url.to_string(),
            nats,
            js,
            pool,
            topology,
        }
    }

    /// Arguments every service gets: this test's servers, prefixes, and fast retries.
    pub fn common_args(&self) -> Vec<String> {
        [
            "--nats-url",
            &self.nats_url,
            "--database-url",
            &self.database_url,
            "--subject-prefix",
            self.topology.subject_prefix(),
            "--stream-prefix",
            self.topology.stream_prefix(),
            "--http-addr",
            "127.0.0.1:0",
            "--retry-initial-ms",
            "200",
            "--ack-wait-secs",
            "5",
            "--outbox-poll-ms",
            "100",
            "--startup-timeout-secs",
            "20",
            "--work-queue-max-bytes",
            TEST_STREAM_MAX_BYTES_ARG,
            "--limits-stream-max-bytes",
            TEST_STREAM_MAX_BYTES_ARG,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// A service's configuration from this test's common arguments plus `extra_args`
    /// (later flags win).
    fn config<C: Parser>(&self, binary: &str, extra_args: &[&str]) -> C {
        let mut args = vec![binary.to_string()];
        args.extend(self.common_args());
        args.extend(extra_args.iter().map(|s| s.to_string()));
        C::try_parse_from(args).expect("test arguments parse")
    }

    /// Runs a service's `run` in-process until the returned handle is stopped.
    fn spawn_service<F>(run: impl FnOnce(Shutdown) -> F) -> InProcessService
    where
        F: Future<Output = Result<(), npcmem_service::ServiceError>> + Send + 'static,
    {
        let shutdown = Shutdown::new();
        let task = tokio::spawn(run(shutdown.clone()));
        InProcessService { shutdown, task }
    }

    pub fn ingest_config(&self, extra_args: &[&str]) -> IngestConfig {
        self.config("npcmem-ingest", extra_args)
    }

    pub fn spawn_ingest(&self, extra_args: &[&str]) -> InProcessService {
        let config = self.ingest_config(extra_args);
        Self::spawn_service(|shutdown| npcmem_ingest::run(config, shutdown))
    }

    pub fn extract_config(&self, extra_args: &[&str]) -> ExtractConfig {
        self.config("npcmem-extract", extra_args)
    }

    pub fn spawn_extract(&self, extra_args: &[&str]) -> InProcessService {
        let config = self.extract_config(extra_args);
        Self::spawn_service(|shutdown| npcmem_extract::run(config, shutdown))
    }

    pub fn relate_config(&self, extra_args: &[&str]) -> npcmem_relate::RelateConfig {
        self.config("npcmem-relate", extra_args)
    }

    pub fn spawn_relate(&self, extra_args: &[&str]) -> InProcessService {
        let config = self.relate_config(extra_args);
        Self::spawn_service(|shutdown| npcmem_relate::run(config, shutdown))
    }

    pub fn consolidate_config(&self, extra_args: &[&str]) -> npcmem_consolidate::ConsolidateConfig {
        self.config("npcmem-consolidate", extra_args)
    }

    pub fn spawn_consolidate(&self, extra_args: &[&str]) -> InProcessService {
        let config = self.consolidate_config(extra_args);
        Self::spawn_service(|shutdown| npcmem_consolidate::run(config, shutdown))
    }

    pub fn enrich_config(&self, extra_args: &[&str]) -> npcmem_enrich::EnrichConfig {
        self.config("npcmem-enrich", extra_args)
    }

    pub fn spawn_enrich(&self, extra_args: &[&str]) -> InProcessService {
        let config = self.enrich_config(extra_args);
        Self::spawn_service(|shutdown| npcmem_enrich::run(config, shutdown))
    }

    pub fn spawn_gossip(&self, extra_args: &[&str]) -> InProcessService {
        let config: npcmem_gossip::GossipConfig = self.config("npcmem-gossip", extra_args);
        Self::spawn_service(|shutdown| npcmem_gossip::run(config, shutdown))
    }

    /// A core NATS request on `P.<suffix>`, answered as JSON; waits for a responder.
    pub async fn request_json(&self, suffix: &str, body: &serde_json::Value) -> serde_json::Value {
        let subject = self.subject(suffix);
        let payload = serde_json::to_vec(body).expect("json serialises");
        self.request_raw(&subject, payload).await
    }

    /// `P.enrich.request`, asked until the pair's data has loaded: a fresh enrich on a busy
    /// machine may answer its first requests without a part that missed the provider
    /// timeout (it caches the part when the load completes). Parts in `may_stay_degraded`
    /// (an embedder a test takes down) do not count.
    pub async fn enrich_loaded(&self, body: &serde_json::Value, may_stay_degraded: &[&str]) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.request_json("enrich.request", body).await;
            assert!(reply.get("code").is_none() && reply.get("error").is_none(), "no error: {reply}");
            let late = reply["degraded"]
                .as_array()
                .is_some_and(|parts| parts.iter().any(|part| !may_stay_degraded.iter().any(|ok| part == ok)));
            if !late {
                return reply;
            }
            assert!(tokio::time::Instant::now() < deadline, "the pair's data never loaded: {reply}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn request_raw(&self, subject: &str, payload: Vec<u8>) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match tokio::time::timeout(
                Duration::from_secs(2),
                self.nats.request(subject.to_owned(), payload.clone().into()),
            )
            .await
            {
                Ok(Ok(reply)) => return serde_json::from_slice(&reply.payload).expect("replies are JSON"),
                // No responder yet (the service is starting): try again.
                _ if tokio::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
                other => panic!("no reply on {subject}: {other:?}"),
            }
        }
    }

    pub fn subject(&self, suffix: &str) -> String {
        self.topology.subject(suffix)
    }

    /// Publishes a trade conversation of `pair` on `P.conversation.ended`; returns its id.
    pub async fn publish_trade(&self, pair: &fixtures::Pair) -> Uuid {
        let conversation_id = Uuid::new_v4();
        let document = fixtures::trade_conversation(conversation_id, pair);
        self.publish(&self.subject("conversation.ended"), fixtures::bytes(&document), None).await;
        conversation_id
    }

    /// Publishes to JetStream with an optional `Nats-Msg-Id`, waiting for the PubAck.
    pub async fn publish(&self, subject: &str, payload: Vec<u8>, msg_id: Option<&str>) {
        self.publish_with_headers(subject, payload, msg_id, None).await;
    }

    pub async fn publish_with_headers(
        &self,
        subject: &str,
        payload: Vec<u8>,
        msg_id: Option<&str>,
        headers: Option<async_nats::HeaderMap>,
    ) {
        let message_id = msg_id.map(str::to_string).unwrap_or_else(|| Uuid::new_v4().to_string());
        npcmem_bus::publish::publish_with_id(&self.js, subject, &message_id, headers, payload.into())
            .await
            .expect("publish to the test stream");
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql).fetch_one(&self.pool).await.expect("count query runs")
    }

    /// Every message currently in a stream (non-destructive direct reads by sequence).
    pub async fn stream_messages(&self, kind: StreamKind) -> Vec<jetstream::message::StreamMessage> {
        let mut stream = self.js.get_stream(self.topology.stream_name(kind)).await.expect("stream exists");
        let state = stream.info().await.expect("stream info").state.clone();
        let mut messages = Vec::new();
        if state.messages == 0 {
            return messages;
        }
        for sequence in state.first_sequence..=state.last_sequence {
            // A deleted sequence is a gap; any other error (a timeout on a busy machine) is
            // retried, so a message that exists is never silently left out.
            let mut attempt = 0;
            loop {
                match stream.get_raw_message(sequence).await {
                    Ok(message) => {
                        messages.push(message);
                        break;
                    }
                    Err(error)
                        if matches!(error.kind(), jetstream::stream::LastRawMessageErrorKind::NoMessageFound) =>
                    {
                        break;
                    }
                    Err(error) => {
                        attempt += 1;
                        assert!(attempt < 10, "cannot read message {sequence}: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
        messages
    }

    /// Deletes the streams and drops the database (`WITH (FORCE)` ends the sessions a
    /// test still holds, so this never waits on a connection the test kept).
    pub async fn cleanup(self) {
        let _ = self.topology.delete_all(&self.js).await;
        let _ = npcmem_store::pool::drop_database(&self.admin_url, &self.database_name).await;
    }
}

pub struct InProcessService {
    pub shutdown: Shutdown,
    pub task: tokio::task::JoinHandle<Result<(), npcmem_service::ServiceError>>,
}

impl InProcessService {
    pub async fn stop(self) {
        self.shutdown.trigger();
        let result = tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("service stops within 30 s of shutdown");
        result.expect("service task did not panic").expect("service exited cleanly");
    }
}

/// Polls `condition` until it returns true or `timeout` passes; panics with `what` then.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free loopback port (bound then released; good enough for a test's own listener).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("bound").port()
}

/// `count` distinct free loopback ports (all bound at once, then released).
pub fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<_> =
        (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port")).collect();
    listeners.iter().map(|listener| listener.local_addr().expect("bound").port()).collect()
}

/// Flags for extract against an OpenAI-compatible endpoint at `base_url`, with budgets and
/// rates generous enough that no test meets them by accident.
pub fn llm_args(base_url: &str, timeout_ms: u32) -> Vec<String> {
    let timeout = timeout_ms.to_string();
    [
        "--llm-provider",
        "openai",
        "--llm-base-url",
        base_url,
        "--llm-model",
        "mock-model",
        "--llm-timeout-ms",
        &timeout,
        "--memory-extraction-rpm",
        "100000",
        "--memory-daily-token-budget",
        "100000000",
        "--memory-per-npc-daily-budget",
        "1000000",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A minimal HTTP/1.0 request with any method and body. Returns status and body.
pub async fn http_request(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    // A server may answer (413) and close before the whole body is sent.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A minimal HTTP/1.0 GET, so the tests need no HTTP client crate. Returns status and body.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
