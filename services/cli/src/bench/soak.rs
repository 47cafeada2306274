//! `npcmem bench soak`: a steady rate of conversations through a running deployment (the
//! cluster of `deploy/cluster/up`, or `deploy/local/up`) for a bounded time, sampling
//! every npcmem service process's resident memory and the end-to-end freshness (publish →
//! relationship applied by relate). After the warm-up, each process's RSS must stay within
//! `--rss-tolerance` of its post-warm-up range, and every conversation must be applied.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::Utc;
use hdrhistogram::Histogram;

use super::load::{self, Milestone, Publisher};
use super::rss;
use npcmem_service::CommonConfig;

#[derive(Debug, Clone, clap::Args)]
pub struct SoakBenchArgs {
    /// Length of the soak.
    #[arg(long, default_value_t = 900)]
    duration_secs: u64,
    /// Conversations published per second.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// The first part of the soak, excluded from the RSS trend.
    #[arg(long, default_value_t = 180)]
    warmup_secs: u64,
    /// RSS and freshness are sampled this often.
    #[arg(long, default_value_t = 30)]
    sample_secs: u64,
    /// After the warm-up, a process's largest RSS sample may exceed its smallest by this
    /// fraction at most.
    #[arg(long, default_value_t = 0.10)]
    rss_tolerance: f64,
    /// Distinct payloads generated up front, over this many pairs.
    #[arg(long, default_value_t = 5_000)]
    payloads: usize,
    #[arg(long, default_value_t = 1_000)]
    pairs: usize,
}

/// A running npcmem service process: its executable name and pid.
fn service_processes() -> Vec<(String, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found: Vec<(String, u32)> = entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_owned();
            // The services, not this CLI (`npcmem`).
            name.starts_with("npcmem-").then_some((name, pid))
        })
        .collect();
    found.sort();
    found
}

pub async fn run(common: &CommonConfig, args: SoakBenchArgs) -> anyhow::Result<()> {
    let (js, pool, topology) = super::connect(common).await?;
    let processes = service_processes();
    if processes.is_empty() {
        bail!("no npcmem service process runs on this machine (start one with deploy/cluster/up or deploy/local/up)");
    }
    let samples = crate::sample::conversations(args.payloads, args.pairs, 0x50a4);
    println!(
        "soak: {} conversations/s for {} s ({} s warm-up), sampling every {} s; processes: {}",
        args.rate,
        args.duration_secs,
        args.warmup_secs,
        args.sample_secs,
        processes.iter().map(|(name, pid)| format!("{name}[{pid}]")).collect::<Vec<_>>().join(" ")
    );
    let applied_before = Milestone::EndToEnd.count(&js, &pool, &topology).await?;
    let mut publisher = Publisher::new(&js, Milestone::EndToEnd.subject(&topology), 256);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate.max(1) as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut next_sample = started + Duration::from_secs(args.sample_secs);
    let mut window: Vec<(uuid::Uuid, chrono::DateTime<Utc>)> = Vec::new();
    // Windows are measured one sample late, so their conversations have had time to finish.
    let mut pending_window: Vec<(uuid::Uuid, chrono::DateTime<Utc>)> = Vec::new();
    let mut overall = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut rss_samples: BTreeMap<(String, u32), Vec<(u64, u64)>> = BTreeMap::new();
    let mut published = 0u64;
    let mut table =
        crate::table::Table::new(&["t (s)", "published", "freshness p50 ms", "p99 ms", "RSS MB by process"]);
    while started.elapsed() < Duration::from_secs(args.duration_secs) {
        ticker.tick().await;
        let now = Utc::now();
        window.push((publisher.publish_fresh(&samples).await?, now));
        published += 1;
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(args.sample_secs);
            let at = started.elapsed().as_secs();
            let measured = load::latencies(&pool, Milestone::EndToEnd, &pending_window).await?;
            overall.add(&measured)?;
            pending_window = std::mem::take(&mut window);
            let mut rss_now = Vec::new();
            for (name, pid) in &processes {
                if let Some((current, _)) = rss::rss_kib(*pid) {
                    rss_samples.entry((name.clone(), *pid)).or_default().push((at, current));
                    rss_now.push(format!("{} {:.1}", name.trim_start_matches("npcmem-"), current as f64 / 1024.0));
                }
            }
            table.row(vec![
                at.to_string(),
                published.to_string(),
                quantile_ms(&measured, 0.5),
                quantile_ms(&measured, 0.99),
                rss_now.join(", "),
            ]);
        }
    }
    publisher.finish().await?;
    // Everything published must be applied; the last windows are measured once it is.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Milestone::EndToEnd.count(&js, &pool, &topology).await? < applied_before + published {
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pending_window.extend(window);
    overall.add(&load::latencies(&pool, Milestone::EndToEnd, &pending_window).await?)?;
    let applied = Milestone::EndToEnd.count(&js, &pool, &topology).await? - applied_before;
    table.write(&mut std::io::stdout())?;
    println!();
    load::print_latency("end-to-end freshness (publish → relationship applied), whole soak", &overall);
    println!(
        "published {published}, applied {applied} ({:.1}/s offered)",
        published as f64 / args.duration_secs as f64
    );

    let mut failures = Vec::new();
    if applied < published {
        failures.push(format!("{} conversations were not applied within 120 s of the end", published - applied));
    }
    let mut trend =
        crate::table::Table::new(&["process", "pid", "after warm-up: min MB", "max MB", "spread", "slope MB/h"]);
    for ((name, pid), samples) in &rss_samples {
        let after: Vec<(u64, u64)> = samples.iter().copied().filter(|(at, _)| *at >= args.warmup_secs).collect();
        let (Some(min), Some(max)) = (after.iter().map(|(_, kib)| *kib).min(), after.iter().map(|(_, kib)| *kib).max())
        else {
            continue;
        };
        let spread = (max - min) as f64 / min.max(1) as f64;
        let slope = slope_mb_per_hour(&after);
        if spread > args.rss_tolerance {
            failures.push(format!("{name}[{pid}] RSS spread {:.1} % after the warm-up", spread * 100.0));
        }
        trend.row(vec![
            name.clone(),
            pid.to_string(),
            format!("{:.1}", min as f64 / 1024.0),
            format!("{:.1}", max as f64 / 1024.0),
            format!("{:.1} %", spread * 100.0),
            format!("{slope:+.1}"),
        ]);
    }
    trend.write(&mut std::io::stdout())?;
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    println!("RSS flat within {:.0} % after the warm-up for every process", args.rss_tolerance * 100.0);
    Ok(())
}

fn quantile_ms(histogram: &Histogram<u64>, quantile: f64) -> String {
    if histogram.is_empty() {
        return "-".to_owned();
    }
    format!("{:.1}", histogram.value_at_quantile(quantile) as f64 / 1000.0)
}

/// Least-squares slope of RSS over time, in MB per hour.
fn slope_mb_per_hour(samples: &[(u64, u64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean_t = samples.iter().map(|(t, _)| *t as f64).sum::<f64>() / n;
    let mean_r = samples.iter().map(|(_, r)| *r as f64).sum::<f64>() / n;
    let (mut covariance, mut variance) = (0.0, 0.0);
    for (t, r) in samples {
        covariance += (*t as f64 - mean_t) * (*r as f64 - mean_r);
        variance += (*t as f64 - mean_t).powi(2);
    }
    if variance == 0.0 { 0.0 } else { covariance / variance / 1024.0 * 3600.0 }
}
