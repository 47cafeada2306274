//! `npcmem bench pipeline`: conversations/s from publish to memories committed (ingest +
//! extract), and freshness (publish → memories committed), for each extractor: the rules
//! extractor, an OpenAI-compatible mock answering at once, and one answering after a
//! delay (500 ms by default) with K calls in flight, printed beside its ceiling
//! (K ÷ latency).
//!
//! Self-contained: every run gets its own scratch database and subject/stream prefix and
//! starts its own `npcmem-ingest` and `npcmem-extract` processes (found next to this
//! binary), so the figures do not depend on what else is deployed. Budgets and rates
//! are raised for the run, and a mock run fails if any conversation fell back to rules.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use npcmem_bus::{StreamKind, Topology};
use npcmem_llm::mock::{MockLlmServer, MockReply};
use npcmem_service::CommonConfig;
use tokio::process::{Child, Command};

use super::load::{self, LoadArgs, Milestone};
use crate::sample::{self, SampleConversation};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtractorRun {
    /// The offline rules extractor.
    Rules,
    /// An OpenAI-compatible mock answering at once.
    MockInstant,
    /// The mock answering after `--mock-delay-ms`.
    MockSlow,
}

impl ExtractorRun {
    fn label(&self) -> &'static str {
        match self {
            ExtractorRun::Rules => "rules",
            ExtractorRun::MockInstant => "mock LLM, instant",
            ExtractorRun::MockSlow => "mock LLM, delayed",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct PipelineBenchArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Extractors to measure, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rules,mock-instant,mock-slow")]
    extractors: Vec<ExtractorRun>,
    /// Latency of the delayed mock.
    #[arg(long, default_value_t = 500)]
    mock_delay_ms: u64,
    /// LLM calls in flight per extract replica (NPCMEM_EXTRACT_IN_FLIGHT) in mock runs.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Directory holding npcmem-ingest and npcmem-extract (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// Example memory the mock returns: small, valid, and tagged like a trade.
const MOCK_REPLY: &str = r#"[{"memory_type":"episodic","content":"The player traded with me.","importance":0.5,"emotional_valence":"positive","emotional_intensity":0.3,"tags":["trade"]}]"#;

pub async fn run(common: &CommonConfig, args: PipelineBenchArgs) -> anyhow::Result<()> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?.parent().context("this binary has no directory")?.to_path_buf(),
    };
    for binary in ["npcmem-ingest", "npcmem-extract"] {
        if !bin_dir.join(binary).is_file() {
            bail!("{binary} not found in {} (build with cargo build --release, or pass --bin-dir)", bin_dir.display());
        }
    }
    let samples = sample::conversations(args.load.payloads, args.load.pairs, 0x5eed);
    super::describe(&samples, &args.load);
    let nats = async_nats::connect(common.nats_url.as_str())
        .await
        .with_context(|| format!("cannot reach NATS at {}", common.nats_url))?;
    let js = jetstream::new(nats);
    let run_id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);

    let mut baseline = None;
    let mut failures = Vec::new();
    for (index, extractor) in args.extractors.iter().enumerate() {
        let scratch = Scratch::create(common, &js, &format!("{run_id}x{index}")).await?;
        if baseline.is_none() {
            let rate = load::raw_baseline(&js, &scratch.topology, &samples, &args.load).await?;
            println!("raw JetStream publish+ack (scratch stream, window {}): {rate:.0} msg/s", args.load.window);
            baseline = Some(rate);
        }
        let outcome =
            measure(&js, &scratch, &bin_dir, common, &args, *extractor, &samples, baseline.unwrap_or(1.0)).await;
        scratch.remove(&js).await;
        match outcome {
            Ok(None) => {}
            Ok(Some(failure)) => failures.push(failure),
            Err(error) => failures.push(format!("{}: {error:#}", extractor.label())),
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// One extractor's runs; Some(reason) when a mock run fell back to rules.
#[allow(clippy::too_many_arguments)]
async fn measure(
    js: &jetstream::Context,
    scratch: &Scratch,
    bin_dir: &Path,
    common: &CommonConfig,
    args: &PipelineBenchArgs,
    extractor: ExtractorRun,
    samples: &[SampleConversation],
    baseline: f64,
) -> anyhow::Result<Option<String>> {
    let delay = match extractor {
        ExtractorRun::MockSlow => Duration::from_millis(args.mock_delay_ms),
        _ => Duration::ZERO,
    };
    let mock = match extractor {
        ExtractorRun::Rules => None,
        _ => Some(
            MockLlmServer::start(
                Arc::new(|_: &[npcmem_llm::ChatMessage]| MockReply::Content(MOCK_REPLY.into())),
                delay,
                false,
            )
            .await?,
        ),
    };
    let services =
        Services::start(js, bin_dir, common, scratch, mock.as_ref().map(|m| m.base_url()), args.in_flight).await?;
    let result = run_load(js, scratch, args, extractor, samples, baseline, &services, delay).await;
    services.stop().await;
    result?;
    let by_extractor: Vec<(Option<String>, i64)> =
        sqlx::query_as("SELECT extractor, count(*) FROM conversations WHERE state = 'complete' GROUP BY 1 ORDER BY 1")
            .fetch_all(&scratch.pool)
            .await?;
    for (name, count) in &by_extractor {
        println!("  completed by extractor {}: {count}", name.as_deref().unwrap_or("none"));
    }
    if let Some(mock) = &mock {
        println!("  requests the mock answered: {}", mock.requests());
    }
    let fell_back: i64 =
        by_extractor.iter().filter(|(name, _)| name.as_deref() == Some("rules")).map(|(_, count)| count).sum();
    if extractor != ExtractorRun::Rules && fell_back > 0 {
        return Ok(Some(format!("{}: {fell_back} conversations fell back to rules", extractor.label())));
    }
    Ok(None)
}

#[allow(clippy::too_many_arguments)]
async fn run_load(
    js: &jetstream::Context,
    scratch: &Scratch,
    args: &PipelineBenchArgs,
    extractor: ExtractorRun,
    samples: &[SampleConversation],
    baseline: f64,
    services: &Services,
    delay: Duration,
) -> anyhow::Result<()> {
    let mut load = args.load.clone();
    if extractor == ExtractorRun::MockSlow {
        // A queue far beyond K only adds waiting: keep enough to saturate the slots.
        load.backlog = load.backlog.min((args.in_flight as u64 * 8).max(256));
    }
    let (topology, pool) = (&scratch.topology, &scratch.pool);
    let result =
        load::saturate(js, pool, topology, samples, &load, Milestone::MemoriesStored, services.extract_pid()).await?;
    println!();
    println!("extractor: {}", extractor.label());
    println!(
        "  sustained (memories committed, {} s): {:>7.0} conversations/s  ({:.3}× the raw baseline of {baseline:.0} msg/s)",
        load.duration_secs,
        result.done_per_sec,
        result.done_per_sec / baseline.max(1.0)
    );
    match extractor {
        ExtractorRun::Rules | ExtractorRun::MockInstant => {
            println!("  ceiling: none from latency (CPU-bound)");
        }
        ExtractorRun::MockSlow => {
            let ceiling = args.in_flight as f64 / delay.as_secs_f64();
            println!(
                "  ceiling: {} in flight ÷ {} ms = {ceiling:.0}/s; measured {:.0}% of it",
                args.in_flight,
                delay.as_millis(),
                100.0 * result.done_per_sec / ceiling
            );
        }
    }
    load::print_latency(
        &format!("  publish → memories committed at saturation (queue ≤ {} deep)", load.backlog),
        &result.latency,
    );
    if let Some(peak) = result.peak_rss_kib {
        println!("  npcmem-extract peak RSS: {:.1} MB", peak as f64 / 1024.0);
    }
    if extractor == ExtractorRun::Rules {
        let half_rate = (result.done_per_sec / 2.0).max(1.0) as u64;
        let paced = load::paced(js, pool, topology, samples, &load, Milestone::MemoriesStored, half_rate).await?;
        load::print_latency(&format!("  freshness at {half_rate} conversations/s (half the maximum)"), &paced);
    }
    Ok(())
}

/// A scratch database and prefix for one run.
struct Scratch {
    admin_url: String,
    database_name: String,
    database_url: String,
    pool: sqlx::PgPool,
    topology: Topology,
}

impl Scratch {
    async fn create(common: &CommonConfig, js: &jetstream::Context, id: &str) -> anyhow::Result<Self> {
        let database_name = format!("npcmem_bench_{id}");
        let admin_url = with_database(&common.database_url, "postgres");
        npcmem_store::ensure_database(&admin_url, &database_name)
            .await
            .with_context(|| "cannot create the scratch database (NPCMEM_DATABASE_URL)")?;
        let database_url = with_database(&common.database_url, &database_name);
        let pool = npcmem_store::connect(&database_url, &common.pool_options()).await?;
        npcmem_store::migrate(&pool).await?;
        let topology =
            Topology::new(&format!("bench{id}"), &format!("BENCH{}", id.to_uppercase()), common.topology_settings());
        topology.ensure(js).await?;
        Ok(Self { admin_url, database_name, database_url, pool, topology })
    }

    fn log_path(&self, binary: &str) -> PathBuf {
        std::env::temp_dir().join(format!("{}-{binary}.log", self.database_name))
    }

    async fn remove(self, js: &jetstream::Context) {
        self.pool.close().await;
        if let Err(error) = self.topology.delete_all(js).await {
            eprintln!("could not delete the scratch streams: {error}");
        }
        if let Err(error) = npcmem_store::pool::drop_database(&self.admin_url, &self.database_name).await {
            eprintln!("could not drop scratch database {}: {error}", self.database_name);
        }
    }
}

/// `url` with its database path replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// The ingest and extract processes of one run.
struct Services {
    ingest: Child,
    extract: Child,
}

impl Services {
    async fn start(
        js: &jetstream::Context,
        bin_dir: &Path,
        common: &CommonConfig,
        scratch: &Scratch,
        llm_base_url: Option<String>,
        in_flight: usize,
    ) -> anyhow::Result<Self> {
        let ingest = spawn(bin_dir, "npcmem-ingest", common, scratch, &[])?;
        let mut extract_env: Vec<(&str, String)> = Vec::new();
        if let Some(base_url) = llm_base_url {
            extract_env.extend([
                ("NPCMEM_LLM_PROVIDER", "openai".to_owned()),
                ("NPCMEM_LLM_BASE_URL", base_url),
                ("NPCMEM_LLM_MODEL", "bench-mock".to_owned()),
                ("NPCMEM_EXTRACT_IN_FLIGHT", in_flight.to_string()),
                // The bench measures the pipeline, not the budgets: raise them for the run.
                ("NPCMEM_MEMORY_DAILY_TOKEN_BUDGET", "1000000000000".to_owned()),
                ("NPCMEM_MEMORY_PER_NPC_DAILY_BUDGET", "1000000000000".to_owned()),
                ("NPCMEM_MEMORY_EXTRACTION_RPM", "1000000000".to_owned()),
                ("NPCMEM_BUDGET_LEASE_TOKENS", "1000000".to_owned()),
            ]);
        }
        let extract = spawn(bin_dir, "npcmem-extract", common, scratch, &extract_env)?;
        let mut services = Self { ingest, extract };
        services.wait_ready(js, scratch).await?;
        Ok(services)
    }

    fn extract_pid(&self) -> Option<u32> {
        self.extract.id()
    }

    /// Ready once each service's durable has a pull request waiting (it creates the
    /// durable, then pulls); fails early if a process exits.
    async fn wait_ready(&mut self, js: &jetstream::Context, scratch: &Scratch) -> anyhow::Result<()> {
        let prefix = scratch.topology.stream_prefix();
        let durables =
            [(StreamKind::Conversations, format!("{prefix}_ingest")), (StreamKind::Jobs, format!("{prefix}_extract"))];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for (name, child) in [("npcmem-ingest", &mut self.ingest), ("npcmem-extract", &mut self.extract)] {
                if let Some(status) = child.try_wait()? {
                    bail!("{name} exited with {status}; see {}", scratch.log_path(name).display());
                }
            }
            let mut ready = true;
            for (kind, durable) in &durables {
                ready &= pulling(js, &scratch.topology, *kind, durable).await;
            }
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("services did not start pulling within 60 s; see the logs in {}", std::env::temp_dir().display());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn stop(mut self) {
        for child in [&mut self.extract, &mut self.ingest] {
            if let Some(pid) = child.id() {
                let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
            }
            if tokio::time::timeout(Duration::from_secs(30), child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}

async fn pulling(js: &jetstream::Context, topology: &Topology, kind: StreamKind, durable: &str) -> bool {
    let Ok(stream) = js.get_stream(topology.stream_name(kind)).await else { return false };
    let Ok(mut consumer) = stream.get_consumer::<jetstream::consumer::pull::Config>(durable).await else {
        return false;
    };
    consumer.info().await.is_ok_and(|info| info.num_waiting > 0)
}

fn spawn(
    bin_dir: &Path,
    binary: &str,
    common: &CommonConfig,
    scratch: &Scratch,
    extra_env: &[(&str, String)],
) -> anyhow::Result<Child> {
    let log_path = scratch.log_path(binary);
    let log = std::fs::File::create(&log_path).with_context(|| format!("cannot write {}", log_path.display()))?;
    let mut command = Command::new(bin_dir.join(binary));
    command
        .env("NPCMEM_NATS_URL", &common.nats_url)
        .env("NPCMEM_DATABASE_URL", &scratch.database_url)
        .env("NPCMEM_SUBJECT_PREFIX", scratch.topology.subject_prefix())
        .env("NPCMEM_STREAM_PREFIX", scratch.topology.stream_prefix())
        .env("NPCMEM_HTTP_ADDR", "127.0.0.1:0")
        .env("NPCMEM_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    if let Some(user) = &common.nats_user {
        command.env("NPCMEM_NATS_USER", user);
    }
    if let Some(password) = &common.nats_password {
        command.env("NPCMEM_NATS_PASSWORD", password);
    }
    for (name, value) in extra_env {
        command.env(name, value);
    }
    command.spawn().with_context(|| format!("cannot start {binary}"))
}
