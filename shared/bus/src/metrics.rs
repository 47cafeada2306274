//! Bus metrics: per-consumer outcomes and pending counts, outbox depth and the
//! age of its oldest row, and DLQ depth. Gauges that need a round trip are refreshed by
//! [`sample_loop`] on a timer rather than on every scrape.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use async_nats::jetstream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::topology::{ConsumerSpec, StreamKind, Topology};

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[derive(Clone)]
pub struct BusMetrics {
    consumer_messages: Family<Labels, Counter>,
    dead_letters: Family<Labels, Counter>,
    batch_duration: Family<Labels, Histogram>,
    consumer_pending: Family<Labels, Gauge>,
    outbox_published: Counter,
    outbox_depth: Gauge,
    outbox_oldest_age_seconds: Gauge<f64, AtomicU64>,
    dlq_depth: Gauge,
}

impl std::fmt::Debug for BusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusMetrics").finish_non_exhaustive()
    }
}

impl Default for BusMetrics {
    fn default() -> Self {
        Self {
            consumer_messages: Family::default(),
            dead_letters: Family::default(),
            batch_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
            consumer_pending: Family::default(),
            outbox_published: Counter::default(),
            outbox_depth: Gauge::default(),
            outbox_oldest_age_seconds: Gauge::default(),
            dlq_depth: Gauge::default(),
        }
    }
}

impl BusMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "npcmem_consumer_messages",
            "Messages handled per consumer by outcome (acked, retried, dead_lettered)",
            metrics.consumer_messages.clone(),
        );
        registry.register(
            "npcmem_dead_letters",
            "Messages sent to the dead-letter stream per consumer and reason",
            metrics.dead_letters.clone(),
        );
        registry.register(
            "npcmem_consumer_batch_duration_seconds",
            "Time to handle one fetched batch, commit included",
            metrics.batch_duration.clone(),
        );
        registry.register(
            "npcmem_consumer_pending",
            "Messages waiting for a consumer (not yet delivered plus unacknowledged)",
            metrics.consumer_pending.clone(),
        );
        registry.register(
            "npcmem_outbox_published",
            "Outbox rows published and acknowledged by JetStream",
            metrics.outbox_published.clone(),
        );
        registry.register("npcmem_outbox_depth", "Outbox rows waiting to be published", metrics.outbox_depth.clone());
        registry.register(
            "npcmem_outbox_oldest_age_seconds",
            "Age of the oldest unpublished outbox row",
            metrics.outbox_oldest_age_seconds.clone(),
        );
        registry.register("npcmem_dlq_depth", "Messages in the dead-letter stream", metrics.dlq_depth.clone());
        metrics
    }

    pub fn record_outcome(&self, consumer: &str, outcome: &str, count: u64) {
        if count > 0 {
            self.consumer_messages
                .get_or_create(&labels(&[("consumer", consumer), ("outcome", outcome)]))
                .inc_by(count);
        }
    }

    pub fn record_dead_letter(&self, consumer: &str, reason: &str) {
        self.dead_letters.get_or_create(&labels(&[("consumer", consumer), ("reason", reason)])).inc();
    }

    pub fn observe_batch(&self, consumer: &str, elapsed: Duration) {
        self.batch_duration.get_or_create(&labels(&[("consumer", consumer)])).observe(elapsed.as_secs_f64());
    }

    pub fn record_published(&self, count: u64) {
        self.outbox_published.inc_by(count);
    }

    pub fn outbox_depth(&self) -> i64 {
        self.outbox_depth.get()
    }
}

/// Refreshes the sampled gauges every `interval` until `shutdown` flips.
pub async fn sample_loop(
    metrics: BusMetrics,
    pool: PgPool,
    js: jetstream::Context,
    topology: Topology,
    consumers: Vec<ConsumerSpec>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        if let Ok(mut connection) = pool.acquire().await
            && let Ok((depth, oldest_age)) = npcmem_store::outbox::depth(&mut connection).await
        {
            metrics.outbox_depth.set(depth);
            metrics.outbox_oldest_age_seconds.set(oldest_age);
        }
        if let Ok(mut dlq) = js.get_stream(topology.stream_name(StreamKind::Dlq)).await
            && let Ok(info) = dlq.info().await
        {
            metrics.dlq_depth.set(info.state.messages as i64);
        }
        for spec in &consumers {
            let Ok(stream) = js.get_stream_no_info(topology.stream_name(spec.stream)).await else { continue };
            let Ok(mut consumer) =
                stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>(&spec.durable).await
            else {
                continue;
            };
            if let Ok(info) = consumer.info().await {
                let pending = info.num_pending as i64 + info.num_ack_pending as i64;
                metrics.consumer_pending.get_or_create(&labels(&[("consumer", &spec.name)])).set(pending);
            }
        }
    }
}
