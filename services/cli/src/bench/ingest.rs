//! `npcmem bench ingest` (issue 2 target: ≥ 5,000 conversations/s sustained, ingest RSS
//! ≤ 60 MB). Closed loop: the producer keeps at most `--backlog` conversations ahead of
//! what ingest has committed, so the figure is ingest's capacity, not the producer's.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use npcmem_bus::{StreamKind, Topology};
use npcmem_service::CommonConfig;
use uuid::Uuid;

use super::rss;
use crate::sample;

#[derive(Debug, Clone, clap::Args)]
pub struct IngestBenchArgs {
    /// Length of the measured ingest run.
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    /// Warm-up before measuring (excluded from the figures).
    #[arg(long, default_value_t = 5)]
    warmup_secs: u64,
    /// Most conversations published but not yet committed.
    #[arg(long, default_value_t = 20_000)]
    backlog: u64,
    /// Distinct payloads generated up front (reused with fresh ids beyond that).
    #[arg(long, default_value_t = 20_000)]
    payloads: usize,
    /// NPC–player pairs the conversations spread over.
    #[arg(long, default_value_t = 2_000)]
    pairs: usize,
    /// Outstanding PubAcks while publishing.
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Seconds of raw JetStream baseline.
    #[arg(long, default_value_t = 10)]
    baseline_secs: u64,
    /// Offered load of the paced latency phase (conversations/s), well below capacity.
    #[arg(long, default_value_t = 1_000)]
    latency_rate: u64,
    /// Length of the paced latency phase.
    #[arg(long, default_value_t = 15)]
    latency_secs: u64,
    /// pid of npcmem-ingest for RSS (default: found by name).
    #[arg(long)]
    ingest_pid: Option<u32>,
}

pub async fn run(common: &CommonConfig, args: IngestBenchArgs) -> anyhow::Result<()> {
    let nats = async_nats::connect(common.nats_url.as_str())
        .await
        .with_context(|| format!("cannot reach NATS at {}", common.nats_url))?;
    let js = jetstream::new(nats.clone());
    let pool = npcmem_store::connect(&common.database_url, &common.pool_options())
        .await
        .with_context(|| "cannot reach Postgres (NPCMEM_DATABASE_URL)")?;
    let topology = Topology::new(&common.subject_prefix, &common.stream_prefix, common.topology_settings());
    let ingest_pid = args.ingest_pid.or_else(|| rss::find_pid("npcmem-ingest"));
    if ingest_pid.is_none() {
        anyhow::bail!("no npcmem-ingest process found; start it (deploy/local/up) or pass --ingest-pid");
    }
    ensure_no_job_consumer(&js, &topology).await?;

    let samples = sample::conversations(args.payloads, args.pairs, 0x5eed);
    let mean_bytes = samples.iter().map(|s| s.payload.len()).sum::<usize>() / samples.len().max(1);
    println!("payloads: {} distinct, mean {} bytes, over {} pairs", samples.len(), mean_bytes, args.pairs);

    let baseline = raw_baseline(&js, &topology, &samples, &args).await?;
    let result = drive_ingest(&js, &pool, &topology, &samples, &args, ingest_pid).await?;
    let paced = paced_latency(&js, &pool, &topology, &samples, &args).await?;

    let ratio = result.committed_per_sec / baseline.max(1.0);
    println!();
    println!("raw JetStream publish+ack (scratch stream, window {}): {:>9.0} msg/s", args.window, baseline);
    println!(
        "ingest sustained (committed with job queued, {} s):   {:>9.0} conversations/s  ({:.2}× the raw baseline)",
        args.duration_secs, result.committed_per_sec, ratio
    );
    print_latency(&format!("publish → ledger insert at saturation (queue ≤ {} deep)", args.backlog), &result.latency);
    print_latency(&format!("publish → ledger insert at {} conversations/s", args.latency_rate), &paced);
    match result.rss_kib {
        Some((current, peak)) => println!(
            "npcmem-ingest RSS: peak during run {:.1} MB, at end {:.1} MB",
            peak as f64 / 1024.0,
            current as f64 / 1024.0
        ),
        None => println!("npcmem-ingest RSS: unavailable (process {ingest_pid:?} not readable at the end)"),
    }
    Ok(())
}

/// Extract must not be draining the jobs, or "job in the stream" stops meaning "committed".
async fn ensure_no_job_consumer(js: &jetstream::Context, topology: &Topology) -> anyhow::Result<()> {
    use futures::StreamExt;
    let stream = js.get_stream(topology.stream_name(StreamKind::Jobs)).await.context("jobs stream missing")?;
    let consumers: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
    if !consumers.is_empty() {
        anyhow::bail!(
            "the jobs stream has consumers {consumers:?}; run the ingest bench with only npcmem-ingest running"
        );
    }
    Ok(())
}

/// Raw JetStream publish + ack of the same payloads to a scratch stream configured like
/// CONVERSATIONS (file storage, work queue, same limits).
async fn raw_baseline(
    js: &jetstream::Context,
    topology: &Topology,
    samples: &[sample::SampleConversation],
    args: &IngestBenchArgs,
) -> anyhow::Result<f64> {
    let name = format!("{}_BENCH_SCRATCH", topology.stream_prefix());
    let subject = topology.subject("bench.scratch");
    let mut config = topology.stream_config(StreamKind::Conversations);
    config.name = name.clone();
    config.subjects = vec![subject.clone()];
    // Limits + discard old: a fast baseline must not stop at the size cap.
    config.retention = stream::RetentionPolicy::Limits;
    config.discard = stream::DiscardPolicy::Old;
    let _ = js.delete_stream(&name).await;
    js.create_stream(config).await.context("create the scratch stream")?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.baseline_secs);
    let mut published = 0u64;
    let mut outstanding = std::collections::VecDeque::with_capacity(args.window);
    while Instant::now() < deadline {
        let sample = &samples[published as usize % samples.len()];
        let message =
            PublishMessage::build().payload(sample.payload.clone().into()).message_id(Uuid::new_v4().to_string());
        outstanding.push_back(js.send_publish(subject.clone(), message).await?);
        if outstanding.len() >= args.window {
            outstanding.pop_front().expect("window is non-empty").await?;
        }
        published += 1;
    }
    for ack in outstanding {
        ack.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    js.delete_stream(&name).await.ok();
    Ok(published as f64 / elapsed)
}

struct IngestRun {
    committed_per_sec: f64,
    latency: Histogram<u64>,
    rss_kib: Option<(u64, u64)>,
}

async fn jobs_in_stream(js: &jetstream::Context, topology: &Topology) -> anyhow::Result<u64> {
    let mut stream = js.get_stream(topology.stream_name(StreamKind::Jobs)).await?;
    Ok(stream.info().await?.state.messages)
}

async fn drive_ingest(
    js: &jetstream::Context,
    pool: &sqlx::PgPool,
    topology: &Topology,
    samples: &[sample::SampleConversation],
    args: &IngestBenchArgs,
    ingest_pid: Option<u32>,
) -> anyhow::Result<IngestRun> {
    let subject = topology.conversation_ended();
    let jobs_before = jobs_in_stream(js, topology).await?;
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup_secs);
    let measure_until = measure_from + Duration::from_secs(args.duration_secs);
    let mut published = 0u64;
    let mut committed = 0u64;
    let mut committed_at_measure_start: Option<(u64, Instant)> = None;
    let mut last_progress_check = Instant::now();
    let mut peak_rss: u64 = 0;
    let mut latency_samples: Vec<(Uuid, DateTime<Utc>)> = Vec::new();
    let mut outstanding = std::collections::VecDeque::with_capacity(args.window);
    let payload_template_count = samples.len();
    while Instant::now() < measure_until {
        if published.saturating_sub(committed) >= args.backlog
            || last_progress_check.elapsed() > Duration::from_millis(250)
        {
            committed = jobs_in_stream(js, topology).await?.saturating_sub(jobs_before);
            last_progress_check = Instant::now();
            if let Some((_, peak)) = ingest_pid.and_then(rss::rss_kib) {
                peak_rss = peak_rss.max(peak);
            }
            if committed_at_measure_start.is_none() && Instant::now() >= measure_from {
                committed_at_measure_start = Some((committed, Instant::now()));
            }
            if published.saturating_sub(committed) >= args.backlog {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        // Reuse the generated payloads under fresh conversation ids.
        let index = published as usize % payload_template_count;
        let (conversation_id, payload) = if published < payload_template_count as u64 {
            (samples[index].conversation_id, samples[index].payload.clone())
        } else {
            let conversation_id = Uuid::new_v4();
            let text = String::from_utf8_lossy(&samples[index].payload)
                .replace(&samples[index].conversation_id.to_string(), &conversation_id.to_string());
            (conversation_id, text.into_bytes())
        };
        if published.is_multiple_of(100) {
            latency_samples.push((conversation_id, Utc::now()));
        }
        let message = PublishMessage::build().payload(payload.into()).message_id(conversation_id.to_string());
        outstanding.push_back(js.send_publish(subject.clone(), message).await?);
        if outstanding.len() >= args.window {
            outstanding.pop_front().expect("window is non-empty").await?;
        }
        published += 1;
    }
    let measured_end = Instant::now();
    let committed_end = jobs_in_stream(js, topology).await?.saturating_sub(jobs_before);
    let (committed_start, start_instant) = committed_at_measure_start.unwrap_or((0, started));
    let committed_per_sec =
        (committed_end - committed_start) as f64 / measured_end.duration_since(start_instant).as_secs_f64();
    for ack in outstanding {
        ack.await?;
    }
    // Let ingest drain what is left so latency samples are all committed.
    let drain_deadline = Instant::now() + Duration::from_secs(120);
    while jobs_in_stream(js, topology).await?.saturating_sub(jobs_before) < published && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let latency = commit_latencies(pool, &latency_samples).await?;
    let rss_kib = ingest_pid.and_then(rss::rss_kib).map(|(current, peak)| (current, peak.max(peak_rss)));
    println!(
        "published {} conversations in {:.1} s, {} committed with jobs",
        published,
        measured_end.duration_since(started).as_secs_f64(),
        jobs_in_stream(js, topology).await?.saturating_sub(jobs_before)
    );
    Ok(IngestRun { committed_per_sec, latency, rss_kib })
}

fn print_latency(label: &str, histogram: &Histogram<u64>) {
    println!(
        "{label}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
        histogram.value_at_quantile(0.5) as f64 / 1000.0,
        histogram.value_at_quantile(0.99) as f64 / 1000.0,
        histogram.max() as f64 / 1000.0,
        histogram.len()
    );
}

/// Publish-to-insert latency of sampled conversations: the ledger's `received_at` (set by
/// Postgres in the inserting transaction) minus the local publish time, same machine.
async fn commit_latencies(pool: &sqlx::PgPool, samples: &[(Uuid, DateTime<Utc>)]) -> anyhow::Result<Histogram<u64>> {
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let ids: Vec<Uuid> = samples.iter().map(|(id, _)| *id).collect();
    let received: Vec<(Uuid, DateTime<Utc>)> =
        sqlx::query_as("SELECT conversation_id, received_at FROM conversations WHERE conversation_id = ANY($1)")
            .bind(&ids)
            .fetch_all(pool)
            .await?;
    let received: std::collections::HashMap<Uuid, DateTime<Utc>> = received.into_iter().collect();
    for (id, published_at) in samples {
        if let Some(received_at) = received.get(id) {
            let micros = (*received_at - *published_at).num_microseconds().unwrap_or(0).max(1) as u64;
            latency.record(micros.min(600_000_000))?;
        }
    }
    Ok(latency)
}

/// Latency below saturation: publishes at a fixed rate, one at a time with its PubAck
/// awaited in the background, and measures every conversation.
async fn paced_latency(
    js: &jetstream::Context,
    pool: &sqlx::PgPool,
    topology: &Topology,
    samples: &[sample::SampleConversation],
    args: &IngestBenchArgs,
) -> anyhow::Result<Histogram<u64>> {
    let subject = topology.conversation_ended();
    let jobs_before = jobs_in_stream(js, topology).await?;
    let total = args.latency_rate * args.latency_secs;
    let interval = Duration::from_secs_f64(1.0 / args.latency_rate.max(1) as f64);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut published: Vec<(Uuid, DateTime<Utc>)> = Vec::with_capacity(total as usize);
    let mut outstanding = std::collections::VecDeque::new();
    for n in 0..total {
        ticker.tick().await;
        let template = &samples[n as usize % samples.len()];
        let conversation_id = Uuid::new_v4();
        let payload = String::from_utf8_lossy(&template.payload)
            .replace(&template.conversation_id.to_string(), &conversation_id.to_string());
        let message =
            PublishMessage::build().payload(payload.into_bytes().into()).message_id(conversation_id.to_string());
        published.push((conversation_id, Utc::now()));
        outstanding.push_back(js.send_publish(subject.clone(), message).await?);
        if outstanding.len() >= args.window {
            outstanding.pop_front().expect("window is non-empty").await?;
        }
    }
    for ack in outstanding {
        ack.await?;
    }
    let drain_deadline = Instant::now() + Duration::from_secs(60);
    while jobs_in_stream(js, topology).await?.saturating_sub(jobs_before) < total && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    commit_latencies(pool, &published).await
}
