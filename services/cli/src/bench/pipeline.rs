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
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use npcmem_bus::StreamKind;
use npcmem_llm::mock::{MockLlmServer, MockReply};
use npcmem_service::CommonConfig;

use super::load::{self, LoadArgs, Milestone};
use super::scratch::{ProcessSpec, Processes, Scratch};
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
    let bin_dir = super::scratch::bin_dir(args.bin_dir.as_ref())?;
    super::scratch::require_binaries(&bin_dir, &["npcmem-ingest", "npcmem-extract"])?;
    let samples = sample::conversations(args.load.payloads, args.load.pairs, 0x5eed);
    super::describe(&samples, &args.load);
    let nats = async_nats::connect(common.nats_servers())
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
        start_services(js, bin_dir, common, scratch, mock.as_ref().map(|m| m.base_url()), args.in_flight).await?;
    let before = Footprint::wal_and_commits(&scratch.pool).await?;
    let result = run_load(js, scratch, args, extractor, samples, baseline, &services, delay).await;
    services.stop().await;
    result?;
    if extractor == ExtractorRun::Rules {
        print_footprint(js, scratch, before).await?;
    }
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
    services: &Processes,
    delay: Duration,
) -> anyhow::Result<()> {
    let mut load = args.load.clone();
    if extractor == ExtractorRun::MockSlow {
        // A queue far beyond K only adds waiting: keep enough to saturate the slots.
        load.backlog = load.backlog.min((args.in_flight as u64 * 8).max(256));
    }
    let (topology, pool) = (&scratch.topology, &scratch.pool);
    let result =
        load::saturate(js, pool, topology, samples, &load, Milestone::MemoriesStored, services.pid("npcmem-extract"))
            .await?;
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

/// WAL written (cluster-wide) and transactions committed (this database) so far.
struct Footprint {
    wal_lsn: String,
    commits: i64,
}

impl Footprint {
    async fn wal_and_commits(pool: &sqlx::PgPool) -> anyhow::Result<Footprint> {
        let (wal_lsn, commits): (String, i64) = sqlx::query_as(
            "SELECT pg_current_wal_lsn()::text, xact_commit FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(pool)
        .await?;
        Ok(Footprint { wal_lsn, commits })
    }
}

/// What the run left behind, per conversation, memory and turn: the figures capacity
/// planning multiplies (docs/operations.md §Capacity planning).
async fn print_footprint(js: &jetstream::Context, scratch: &Scratch, before: Footprint) -> anyhow::Result<()> {
    let pool = &scratch.pool;
    // The statistics collector flushes its counters at most every 500 ms.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = Footprint::wal_and_commits(pool).await?;
    let (wal_bytes,): (f64,) = sqlx::query_as("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8")
        .bind(&after.wal_lsn)
        .bind(&before.wal_lsn)
        .fetch_one(pool)
        .await?;
    let (conversations, turns, memories): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM conversations), (SELECT coalesce(sum(message_count), 0)::bigint FROM conversations),
                (SELECT count(*) FROM memories)",
    )
    .fetch_one(pool)
    .await?;
    // Table, indexes and TOAST; VACUUM first so dead versions of updated rows do not count.
    sqlx::query("VACUUM").execute(pool).await?;
    let size = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>("SELECT pg_total_relation_size($1::regclass)").bind(table).fetch_one(pool).await
    };
    let (conversation_bytes, memory_bytes) = (size("conversations").await?, size("memories").await?);
    let (database_bytes,): (i64,) = sqlx::query_as(
        "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c
                         JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = 'public' AND c.relkind = 'r'",
    )
    .fetch_one(pool)
    .await?;
    let per = |bytes: f64, count: i64| bytes / count.max(1) as f64;
    println!(
        "  footprint of {conversations} conversations ({turns} turns, {memories} memories), for capacity planning:"
    );
    println!(
        "    PostgreSQL: {:.0} bytes/conversation in all tables; conversations and their transcripts {:.0} bytes/turn; \
         memories {:.0} bytes/memory (indexes included)",
        per(database_bytes as f64, conversations),
        per(conversation_bytes as f64, turns),
        per(memory_bytes as f64, memories),
    );
    println!(
        "    writes: {:.1} commits/conversation in this database; {:.0} WAL bytes/conversation (the whole \
         server's WAL over the run: an upper bound on a shared server)",
        per((after.commits - before.commits) as f64, conversations),
        per(wal_bytes, conversations),
    );
    let mut streams = Vec::new();
    for kind in StreamKind::ALL {
        let name = scratch.topology.stream_name(kind);
        let Ok(mut stream) = js.get_stream(&name).await else { continue };
        let state = stream.info().await?.state.clone();
        if state.bytes > 0 {
            streams.push(format!("{kind:?} {:.0}", per(state.bytes as f64, conversations)));
        }
    }
    println!("    NATS, retained at the end (bytes/conversation): {}", streams.join(", "));
    Ok(())
}

/// Ingest, then extract (with the mock LLM when given), each pulling before the run starts.
async fn start_services(
    js: &jetstream::Context,
    bin_dir: &Path,
    common: &CommonConfig,
    scratch: &Scratch,
    llm_base_url: Option<String>,
    in_flight: usize,
) -> anyhow::Result<Processes> {
    let mut extract_env: Vec<(&'static str, String)> = Vec::new();
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
    let specs = [
        ProcessSpec { binary: "npcmem-ingest", env: Vec::new(), pulls: Some((StreamKind::Conversations, "ingest")) },
        ProcessSpec { binary: "npcmem-extract", env: extract_env, pulls: Some((StreamKind::Jobs, "extract")) },
    ];
    Processes::start(js, bin_dir, common, scratch, &specs).await
}
