//! `npcmem bench relate`: relationship updates/s (events applied, ledger row and
//! relationship committed, signals in the outbox) spread over many pairs and on one hot
//! pair, beside the raw JetStream baseline of the same payloads. Self-contained like
//! `bench pipeline`: a scratch database and prefix per run and its own `npcmem-relate`.

use std::path::PathBuf;

use async_nats::jetstream;
use npcmem_service::CommonConfig;

use super::load::{self, LoadArgs, Milestone};
use super::scratch::{self, ProcessSpec, Processes, Scratch};
use crate::sample;
use npcmem_bus::StreamKind;

#[derive(Debug, Clone, clap::Args)]
pub struct RelateBenchArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Pairs the spread run's events are spread over.
    #[arg(long, default_value_t = 10_000)]
    spread_pairs: usize,
    /// Directory holding npcmem-relate (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

pub async fn run(common: &CommonConfig, args: RelateBenchArgs) -> anyhow::Result<()> {
    let bin_dir = scratch::bin_dir(args.bin_dir.as_ref())?;
    scratch::require_binaries(&bin_dir, &["npcmem-relate"])?;
    let nats = async_nats::connect(common.nats_servers()).await?;
    let js = jetstream::new(nats);
    let run_id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let runs =
        [(format!("spread over {} pairs", args.spread_pairs), args.spread_pairs), ("one hot pair".to_owned(), 1)];
    let mut baseline = None;
    for (index, (label, pairs)) in runs.iter().enumerate() {
        let samples = sample::memory_events(args.load.payloads, *pairs, 0x5eed + index as u64);
        let scratch = Scratch::create(common, &js, &format!("{run_id}r{index}")).await?;
        let outcome = async {
            if baseline.is_none() {
                let rate = load::raw_baseline(&js, &scratch.topology, &samples, &args.load).await?;
                println!("raw JetStream publish+ack (scratch stream, window {}): {rate:.0} msg/s", args.load.window);
                baseline = Some(rate);
            }
            let spec =
                ProcessSpec { binary: "npcmem-relate", env: Vec::new(), pulls: Some((StreamKind::Events, "relate")) };
            let processes = Processes::start(&js, &bin_dir, common, &scratch, &[spec]).await?;
            let result = load::saturate(
                &js,
                &scratch.pool,
                &scratch.topology,
                &samples,
                &args.load,
                Milestone::RelationshipApplied,
                processes.pid("npcmem-relate"),
            )
            .await;
            processes.stop().await;
            let result = result?;
            let baseline = baseline.unwrap_or(1.0);
            println!();
            println!("relate, {label}:");
            println!(
                "  sustained ({} s): {:>7.0} relationship updates/s  ({:.3}× the raw baseline of {baseline:.0} msg/s)",
                args.load.duration_secs,
                result.done_per_sec,
                result.done_per_sec / baseline.max(1.0)
            );
            load::print_latency(
                &format!("  publish → relationship committed at saturation (queue ≤ {} deep)", args.load.backlog),
                &result.latency,
            );
            if let Some(peak) = result.peak_rss_kib {
                println!("  npcmem-relate peak RSS: {:.1} MB", peak as f64 / 1024.0);
            }
            let applied: i64 =
                sqlx::query_scalar("SELECT count(*) FROM applied_conversations").fetch_one(&scratch.pool).await?;
            println!("  conversations applied: {applied}");
            anyhow::Ok(())
        }
        .await;
        scratch.remove(&js).await;
        outcome?;
    }
    Ok(())
}
