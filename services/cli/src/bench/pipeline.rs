//! `npcmem bench pipeline`: conversations/s from publish to memories committed (ingest +
//! extract), and freshness (publish → memories committed) at half the measured maximum.
//! This build measures the rules extractor; the mock-LLM runs of issue 3 come with the
//! LLM providers.

use anyhow::Context as _;
use async_nats::jetstream;
use futures::StreamExt;
use npcmem_bus::{StreamKind, Topology};
use npcmem_service::CommonConfig;

use super::load::{self, LoadArgs, Milestone};
use crate::sample;

#[derive(Debug, Clone, clap::Args)]
pub struct PipelineBenchArgs {
    #[command(flatten)]
    load: LoadArgs,
}

pub async fn run(common: &CommonConfig, args: PipelineBenchArgs) -> anyhow::Result<()> {
    let (js, pool, topology) = super::connect(common).await?;
    ensure_extract_consumer(&js, &topology).await?;
    let load = &args.load;
    let samples = sample::conversations(load.payloads, load.pairs, 0x5eed);
    super::describe(&samples, load);

    let baseline = load::raw_baseline(&js, &topology, &samples, load).await?;
    let result = load::saturate(&js, &pool, &topology, &samples, load, Milestone::MemoriesStored, None).await?;
    let half_rate = (result.done_per_sec / 2.0).max(1.0) as u64;
    let paced = load::paced(&js, &pool, &topology, &samples, load, Milestone::MemoriesStored, half_rate).await?;
    let by_extractor: Vec<(Option<String>, i64)> =
        sqlx::query_as("SELECT extractor, count(*) FROM conversations WHERE state = 'complete' GROUP BY 1 ORDER BY 1")
            .fetch_all(&pool)
            .await?;

    println!();
    println!("published {} conversations in the saturating run", result.published);
    println!("raw JetStream publish+ack (scratch stream, window {}): {:>9.0} msg/s", load.window, baseline);
    println!(
        "pipeline sustained (memories committed, rules extractor, {} s): {:>7.0} conversations/s  ({:.3}× the raw baseline)",
        load.duration_secs,
        result.done_per_sec,
        result.done_per_sec / baseline.max(1.0)
    );
    println!("ceiling: none computed for rules (CPU-bound; no per-call latency)");
    load::print_latency(
        &format!("publish → memories committed at saturation (queue ≤ {} deep)", load.backlog),
        &result.latency,
    );
    load::print_latency(
        &format!("freshness: publish → memories committed at {half_rate} conversations/s (half the maximum)"),
        &paced,
    );
    for (extractor, count) in by_extractor {
        println!("completed by extractor {}: {count}", extractor.as_deref().unwrap_or("none"));
    }
    Ok(())
}

async fn ensure_extract_consumer(js: &jetstream::Context, topology: &Topology) -> anyhow::Result<()> {
    let stream = js.get_stream(topology.stream_name(StreamKind::Jobs)).await.context("jobs stream missing")?;
    let consumers: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
    let durable = format!("{}_extract", topology.stream_prefix());
    if !consumers.contains(&durable) {
        anyhow::bail!("no {durable} consumer on the jobs stream; start npcmem-extract (deploy/local/up)");
    }
    Ok(())
}
