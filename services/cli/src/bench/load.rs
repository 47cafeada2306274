//! The load generator the bench scenarios share: a raw JetStream baseline, a closed-loop
//! saturating run, and a paced run for latency, all measuring one "done" counter and
//! one per-conversation "done at" timestamp in the ledger.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use npcmem_bus::{StreamKind, Topology};
use uuid::Uuid;

use super::rss;
use crate::sample::SampleConversation;

#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Length of the measured saturating run.
    #[arg(long, default_value_t = 60)]
    pub duration_secs: u64,
    /// Warm-up before measuring (excluded from the figures).
    #[arg(long, default_value_t = 5)]
    pub warmup_secs: u64,
    /// Most conversations published but not yet done.
    #[arg(long, default_value_t = 20_000)]
    pub backlog: u64,
    /// Distinct payloads generated up front (reused with fresh ids beyond that).
    #[arg(long, default_value_t = 20_000)]
    pub payloads: usize,
    /// NPC–player pairs the conversations spread over.
    #[arg(long, default_value_t = 2_000)]
    pub pairs: usize,
    /// Outstanding PubAcks while publishing.
    #[arg(long, default_value_t = 256)]
    pub window: usize,
    /// Seconds of raw JetStream baseline.
    #[arg(long, default_value_t = 10)]
    pub baseline_secs: u64,
    /// Length of the paced latency phase.
    #[arg(long, default_value_t = 15)]
    pub latency_secs: u64,
}

/// What counts as "done" for a conversation in a scenario.
#[derive(Debug, Clone, Copy)]
pub enum Milestone {
    /// Ledger row committed and `job.extract` in the JOBS stream (ingest alone).
    JobQueued,
    /// Memories committed and `event.memory.stored` in the EVENTS stream.
    MemoriesStored,
    /// An `event.memory.stored` applied to its relationship (a ledger row committed).
    RelationshipApplied,
    /// A `conversation.ended` through ingest and extract, applied by relate.
    EndToEnd,
}

impl Milestone {
    /// Where the scenario publishes its payloads.
    pub(super) fn subject(self, topology: &Topology) -> String {
        match self {
            Milestone::JobQueued | Milestone::MemoriesStored | Milestone::EndToEnd => topology.conversation_ended(),
            Milestone::RelationshipApplied => topology.event("memory.stored"),
        }
    }

    pub(super) async fn count(
        self,
        js: &jetstream::Context,
        pool: &sqlx::PgPool,
        topology: &Topology,
    ) -> anyhow::Result<u64> {
        match self {
            Milestone::RelationshipApplied | Milestone::EndToEnd => {
                let applied: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM applied_conversations").fetch_one(pool).await?;
                Ok(applied as u64)
            }
            Milestone::JobQueued => {
                let mut jobs = js.get_stream(topology.stream_name(StreamKind::Jobs)).await?;
                Ok(jobs.info().await?.state.messages)
            }
            Milestone::MemoriesStored => {
                let subject = topology.event("memory.stored");
                let events = js.get_stream(topology.stream_name(StreamKind::Events)).await?;
                let mut info = events.info_with_subjects(subject.clone()).await?;
                use futures::TryStreamExt;
                let mut total = 0u64;
                while let Some((_, count)) = info.try_next().await? {
                    total += count as u64;
                }
                Ok(total)
            }
        }
    }

    /// The ledger timestamp at which a conversation reached the milestone.
    fn done_at_sql(self) -> &'static str {
        match self {
            // received_at is set in ingest's inserting transaction.
            Milestone::JobQueued => {
                "SELECT conversation_id, received_at FROM conversations WHERE conversation_id = ANY($1)"
            }
            // updated_at is set in extract's completing transaction.
            Milestone::MemoriesStored => {
                "SELECT conversation_id, updated_at FROM conversations
                 WHERE conversation_id = ANY($1) AND state = 'complete'"
            }
            // applied_at is set in relate's applying transaction.
            Milestone::RelationshipApplied | Milestone::EndToEnd => {
                "SELECT conversation_id, applied_at FROM applied_conversations WHERE conversation_id = ANY($1)"
            }
        }
    }
}

pub struct Saturation {
    pub published: u64,
    pub done_per_sec: f64,
    pub latency: Histogram<u64>,
    pub peak_rss_kib: Option<u64>,
}

/// Raw JetStream publish + ack of the same payloads to a scratch stream configured like
/// CONVERSATIONS (file storage, same limits), in msg/s.
pub async fn raw_baseline(
    js: &jetstream::Context,
    topology: &Topology,
    samples: &[SampleConversation],
    args: &LoadArgs,
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
    let mut publisher = Publisher::new(js, subject, args.window);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.baseline_secs);
    while Instant::now() < deadline {
        publisher.publish_fresh(samples).await?;
    }
    let published = publisher.finish().await?;
    let elapsed = started.elapsed().as_secs_f64();
    js.delete_stream(&name).await.ok();
    Ok(published as f64 / elapsed)
}

/// Publishes conversations as fast as the pipeline completes them, keeping at most
/// `backlog` outstanding, and measures the completion rate after the warm-up.
pub async fn saturate(
    js: &jetstream::Context,
    pool: &sqlx::PgPool,
    topology: &Topology,
    samples: &[SampleConversation],
    args: &LoadArgs,
    milestone: Milestone,
    watched_pid: Option<u32>,
) -> anyhow::Result<Saturation> {
    let done_before = milestone.count(js, pool, topology).await?;
    let mut publisher = Publisher::new(js, milestone.subject(topology), args.window);
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup_secs);
    let measure_until = measure_from + Duration::from_secs(args.duration_secs);
    let mut done = 0u64;
    let mut done_at_measure_start: Option<(u64, Instant)> = None;
    let mut last_check = Instant::now();
    let mut peak_rss: Option<u64> = None;
    let mut latency_samples: Vec<(Uuid, DateTime<Utc>)> = Vec::new();
    while Instant::now() < measure_until {
        let backlog_full = publisher.published.saturating_sub(done) >= args.backlog;
        if backlog_full || last_check.elapsed() > Duration::from_millis(250) {
            done = milestone.count(js, pool, topology).await?.saturating_sub(done_before);
            last_check = Instant::now();
            if let Some((_, peak)) = watched_pid.and_then(rss::rss_kib) {
                peak_rss = Some(peak_rss.unwrap_or(0).max(peak));
            }
            if done_at_measure_start.is_none() && Instant::now() >= measure_from {
                done_at_measure_start = Some((done, Instant::now()));
            }
            if backlog_full {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        let sample_this = publisher.published.is_multiple_of(100);
        let conversation_id = publisher.publish_fresh(samples).await?;
        if sample_this {
            latency_samples.push((conversation_id, Utc::now()));
        }
    }
    let measured_end = Instant::now();
    let done_end = milestone.count(js, pool, topology).await?.saturating_sub(done_before);
    let (done_start, start_instant) = done_at_measure_start.unwrap_or((0, started));
    let done_per_sec =
        done_end.saturating_sub(done_start) as f64 / measured_end.duration_since(start_instant).as_secs_f64();
    let published = publisher.finish().await?;
    wait_for(js, pool, topology, milestone, done_before + published).await?;
    let latency = latencies(pool, milestone, &latency_samples).await?;
    if let Some(peak) = watched_pid.and_then(rss::rss_kib).map(|(_, peak)| peak) {
        peak_rss = Some(peak_rss.unwrap_or(0).max(peak));
    }
    Ok(Saturation { published, done_per_sec, latency, peak_rss_kib: peak_rss })
}

/// Latency below saturation: a fixed offered rate for `args.latency_secs`, every
/// conversation measured.
pub async fn paced(
    js: &jetstream::Context,
    pool: &sqlx::PgPool,
    topology: &Topology,
    samples: &[SampleConversation],
    args: &LoadArgs,
    milestone: Milestone,
    rate: u64,
) -> anyhow::Result<Histogram<u64>> {
    let done_before = milestone.count(js, pool, topology).await?;
    let total = rate.max(1) * args.latency_secs;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut publisher = Publisher::new(js, milestone.subject(topology), args.window);
    let mut published_at = Vec::with_capacity(total as usize);
    for _ in 0..total {
        ticker.tick().await;
        let now = Utc::now();
        let conversation_id = publisher.publish_fresh(samples).await?;
        published_at.push((conversation_id, now));
    }
    publisher.finish().await?;
    wait_for(js, pool, topology, milestone, done_before + total).await?;
    latencies(pool, milestone, &published_at).await
}

async fn wait_for(
    js: &jetstream::Context,
    pool: &sqlx::PgPool,
    topology: &Topology,
    milestone: Milestone,
    target: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while milestone.count(js, pool, topology).await? < target && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Publish-to-milestone latency of the sampled conversations (ledger timestamp minus the
/// local publish time; same machine, same clock).
pub(super) async fn latencies(
    pool: &sqlx::PgPool,
    milestone: Milestone,
    samples: &[(Uuid, DateTime<Utc>)],
) -> anyhow::Result<Histogram<u64>> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let ids: Vec<Uuid> = samples.iter().map(|(id, _)| *id).collect();
    let done: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(milestone.done_at_sql()).bind(&ids).fetch_all(pool).await?;
    let done: std::collections::HashMap<Uuid, DateTime<Utc>> = done.into_iter().collect();
    for (id, published_at) in samples {
        if let Some(done_at) = done.get(id) {
            let micros = (*done_at - *published_at).num_microseconds().unwrap_or(0).max(1) as u64;
            histogram.record(micros.min(600_000_000))?;
        }
    }
    Ok(histogram)
}

pub fn print_latency(label: &str, histogram: &Histogram<u64>) {
    println!(
        "{label}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
        histogram.value_at_quantile(0.5) as f64 / 1000.0,
        histogram.value_at_quantile(0.99) as f64 / 1000.0,
        histogram.max() as f64 / 1000.0,
        histogram.len()
    );
}

/// Publishes sample payloads under fresh conversation ids with a window of PubAcks.
pub(super) struct Publisher<'a> {
    js: &'a jetstream::Context,
    subject: String,
    window: usize,
    outstanding: VecDeque<jetstream::context::PublishAckFuture>,
    published: u64,
}

impl<'a> Publisher<'a> {
    pub(super) fn new(js: &'a jetstream::Context, subject: String, window: usize) -> Self {
        Self { js, subject, window: window.max(1), outstanding: VecDeque::with_capacity(window), published: 0 }
    }

    pub(super) async fn publish_fresh(&mut self, samples: &[SampleConversation]) -> anyhow::Result<Uuid> {
        let template = &samples[self.published as usize % samples.len()];
        let conversation_id = Uuid::new_v4();
        let payload = String::from_utf8_lossy(&template.payload)
            .replace(&template.conversation_id.to_string(), &conversation_id.to_string());
        let message =
            PublishMessage::build().payload(payload.into_bytes().into()).message_id(conversation_id.to_string());
        self.outstanding.push_back(self.js.send_publish(self.subject.clone(), message).await?);
        if self.outstanding.len() >= self.window
            && let Some(oldest) = self.outstanding.pop_front()
        {
            oldest.await?;
        }
        self.published += 1;
        Ok(conversation_id)
    }

    pub(super) async fn finish(mut self) -> anyhow::Result<u64> {
        while let Some(ack) = self.outstanding.pop_front() {
            ack.await?;
        }
        Ok(self.published)
    }
}
