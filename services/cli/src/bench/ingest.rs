//! `npcmem bench ingest` (target: ≥ 5,000 conversations/s sustained, ingest RSS
//! ≤ 60 MB). Closed loop: the producer keeps at most `--backlog` conversations ahead of
//! what ingest has committed, so the figure is ingest's capacity, not the producer's.

use anyhow::Context as _;
use async_nats::jetstream;
use npcmem_bus::{StreamKind, Topology};
use npcmem_service::CommonConfig;

use super::load::{self, LoadArgs, Milestone};
use super::rss;
use crate::sample;

#[derive(Debug, Clone, clap::Args)]
pub struct IngestBenchArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Offered load of the paced latency phase (conversations/s), well below capacity.
    #[arg(long, default_value_t = 1_000)]
    latency_rate: u64,
    /// pid of npcmem-ingest for RSS (default: found by name).
    #[arg(long)]
    ingest_pid: Option<u32>,
}

pub async fn run(common: &CommonConfig, args: IngestBenchArgs) -> anyhow::Result<()> {
    let (js, pool, topology) = super::connect(common).await?;
    let ingest_pid = args.ingest_pid.or_else(|| rss::find_pid("npcmem-ingest"));
    if ingest_pid.is_none() {
        anyhow::bail!("no npcmem-ingest process found; start it (deploy/local/up) or pass --ingest-pid");
    }
    ensure_no_job_consumer(&js, &topology).await?;
    let load = &args.load;
    let samples = sample::conversations(load.payloads, load.pairs, 0x5eed);
    super::describe(&samples, load);

    let baseline = load::raw_baseline(&js, &topology, &samples, load).await?;
    let result = load::saturate(&js, &pool, &topology, &samples, load, Milestone::JobQueued, ingest_pid).await?;
    let paced = load::paced(&js, &pool, &topology, &samples, load, Milestone::JobQueued, args.latency_rate).await?;

    println!();
    println!("published {} conversations in the saturating run", result.published);
    println!("raw JetStream publish+ack (scratch stream, window {}): {:>9.0} msg/s", load.window, baseline);
    println!(
        "ingest sustained (committed with job queued, {} s):   {:>9.0} conversations/s  ({:.2}× the raw baseline)",
        load.duration_secs,
        result.done_per_sec,
        result.done_per_sec / baseline.max(1.0)
    );
    load::print_latency(
        &format!("publish → ledger insert at saturation (queue ≤ {} deep)", load.backlog),
        &result.latency,
    );
    load::print_latency(&format!("publish → ledger insert at {} conversations/s", args.latency_rate), &paced);
    match result.peak_rss_kib {
        Some(peak) => println!("npcmem-ingest peak RSS: {:.1} MB", peak as f64 / 1024.0),
        None => println!("npcmem-ingest RSS: unavailable (process {ingest_pid:?} not readable)"),
    }
    Ok(())
}

/// Extract must not be draining the jobs, or "job in the stream" stops meaning "committed".
/// A stopped extract leaves its durable behind; only one that is pulling counts.
async fn ensure_no_job_consumer(js: &jetstream::Context, topology: &Topology) -> anyhow::Result<()> {
    use futures::StreamExt;
    let stream = js.get_stream(topology.stream_name(StreamKind::Jobs)).await.context("jobs stream missing")?;
    let names: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
    for name in names {
        let mut consumer = stream
            .get_consumer::<jetstream::consumer::pull::Config>(&name)
            .await
            .map_err(|error| anyhow::anyhow!("consumer {name}: {error}"))?;
        let info = consumer.info().await?;
        if info.num_waiting > 0 || info.num_ack_pending > 0 {
            anyhow::bail!(
                "consumer {name} is pulling from the jobs stream; run the ingest bench with only npcmem-ingest \
                 running (stop npcmem-extract)"
            );
        }
    }
    Ok(())
}
