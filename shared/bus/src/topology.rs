//! Every subject, stream and durable name of docs/wire-protocol.md §2, built from the two prefixes, and
//! the idempotent set-up every service runs at start (so start order never matters).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};

use crate::error::BusError;

/// JetStream reserves `max_bytes` up front against the server's storage limit, so the
/// defaults stay modest (6 GiB over six streams); large worlds raise them.
const GIB: i64 = 1024 * 1024 * 1024;
/// JetStream's "no limit" for `max_deliver`; the consumer loop enforces the real one.
pub const UNLIMITED_DELIVERIES: i64 = -1;
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The six streams (docs/wire-protocol.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    Conversations,
    Jobs,
    Events,
    World,
    Signals,
    Dlq,
}

impl StreamKind {
    pub const ALL: [StreamKind; 6] = [
        StreamKind::Conversations,
        StreamKind::Jobs,
        StreamKind::Events,
        StreamKind::World,
        StreamKind::Signals,
        StreamKind::Dlq,
    ];

    fn suffix(self) -> &'static str {
        match self {
            StreamKind::Conversations => "CONVERSATIONS",
            StreamKind::Jobs => "JOBS",
            StreamKind::Events => "EVENTS",
            StreamKind::World => "WORLD",
            StreamKind::Signals => "SIGNALS",
            StreamKind::Dlq => "DLQ",
        }
    }
}

/// Limits and consumer defaults, all configurable.
#[derive(Debug, Clone)]
pub struct TopologySettings {
    pub max_message_bytes: i32,
    /// `max_bytes` of each work-queue stream; with `discard new` publishers get an error
    /// and back off instead of filling the disk.
    pub work_queue_max_bytes: i64,
    /// `max_bytes` of each limits stream (events, world, signals, DLQ).
    pub limits_stream_max_bytes: i64,
    pub duplicate_window: Duration,
    pub replicas: usize,
    pub memory_storage: bool,
    pub ack_wait: Duration,
    pub max_deliver: i64,
    pub max_ack_pending: i64,
}

impl Default for TopologySettings {
    fn default() -> Self {
        Self {
            max_message_bytes: 1024 * 1024,
            work_queue_max_bytes: GIB,
            limits_stream_max_bytes: GIB,
            duplicate_window: Duration::from_secs(120),
            replicas: 1,
            memory_storage: false,
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_ack_pending: 1_000,
        }
    }
}

/// A durable pull consumer a service reads with.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Short name (`ingest`, `extract`, …): the DLQ subject suffix and metric label.
    pub name: String,
    /// Full durable name, stream prefix included.
    pub durable: String,
    pub stream: StreamKind,
    pub filter_subject: String,
    pub ack_wait: Duration,
    pub max_deliver: i64,
    pub max_ack_pending: i64,
}

#[derive(Debug, Clone)]
pub struct Topology {
    subject_prefix: String,
    stream_prefix: String,
    pub settings: TopologySettings,
}

impl Topology {
    pub fn new(subject_prefix: &str, stream_prefix: &str, settings: TopologySettings) -> Self {
        Self { subject_prefix: subject_prefix.to_string(), stream_prefix: stream_prefix.to_string(), settings }
    }

    pub fn subject_prefix(&self) -> &str {
        &self.subject_prefix
    }

    pub fn stream_prefix(&self) -> &str {
        &self.stream_prefix
    }

    /// `P.<suffix>`, e.g. `subject("conversation.ended")`.
    pub fn subject(&self, suffix: &str) -> String {
        format!("{}.{}", self.subject_prefix, suffix)
    }

    pub fn conversation_ended(&self) -> String {
        self.subject("conversation.ended")
    }
    pub fn job_extract(&self) -> String {
        self.subject("job.extract")
    }
    pub fn job_consolidate(&self) -> String {
        self.subject("job.consolidate")
    }
    pub fn world_player_privacy(&self) -> String {
        self.subject("world.player_privacy")
    }
    pub fn event(&self, event: &str) -> String {
        self.subject(&format!("event.{event}"))
    }
    pub fn signal(&self, signal_type: &str) -> String {
        self.subject(&format!("signal.{signal_type}"))
    }
    pub fn dlq(&self, consumer: &str) -> String {
        self.subject(&format!("dlq.{consumer}"))
    }
    pub fn cache_invalidate(&self) -> String {
        self.subject("cache.invalidate")
    }
    pub fn control_changed(&self) -> String {
        self.subject("control.changed")
    }
    pub fn enrich_request(&self) -> String {
        self.subject("enrich.request")
    }

    /// `<STREAM_PREFIX>_<NAME>`, e.g. `NPCMEM_SIGNALS`.
    pub fn stream_name(&self, kind: StreamKind) -> String {
        format!("{}_{}", self.stream_prefix, kind.suffix())
    }

    fn stream_subjects(&self, kind: StreamKind) -> Vec<String> {
        match kind {
            StreamKind::Conversations => vec![self.conversation_ended()],
            StreamKind::Jobs => vec![self.job_extract(), self.job_consolidate()],
            StreamKind::Events => vec![self.subject("event.>")],
            StreamKind::World => vec![self.subject("world.>")],
            StreamKind::Signals => vec![self.subject("signal.>")],
            StreamKind::Dlq => vec![self.subject("dlq.>")],
        }
    }

    pub fn stream_config(&self, kind: StreamKind) -> stream::Config {
        let settings = &self.settings;
        let (retention, discard, max_age, max_bytes) = match kind {
            StreamKind::Conversations | StreamKind::Jobs => (
                stream::RetentionPolicy::WorkQueue,
                stream::DiscardPolicy::New,
                Duration::ZERO,
                settings.work_queue_max_bytes,
            ),
            StreamKind::Events | StreamKind::World | StreamKind::Dlq => {
                (stream::RetentionPolicy::Limits, stream::DiscardPolicy::Old, 7 * DAY, settings.limits_stream_max_bytes)
            }
            StreamKind::Signals => (
                stream::RetentionPolicy::Limits,
                stream::DiscardPolicy::Old,
                30 * DAY,
                settings.limits_stream_max_bytes,
            ),
        };
        stream::Config {
            name: self.stream_name(kind),
            subjects: self.stream_subjects(kind),
            retention,
            discard,
            max_age,
            max_bytes,
            max_message_size: settings.max_message_bytes,
            duplicate_window: settings.duplicate_window,
            num_replicas: settings.replicas,
            storage: if settings.memory_storage { stream::StorageType::Memory } else { stream::StorageType::File },
            ..Default::default()
        }
    }

    /// Creates or updates every stream. Safe to run from every service at once.
    pub async fn ensure(&self, js: &jetstream::Context) -> Result<(), BusError> {
        for kind in StreamKind::ALL {
            ensure_stream(js, self.stream_config(kind)).await?;
        }
        Ok(())
    }

    /// Deletes every stream of this topology (test clean-up; never called by services).
    pub async fn delete_all(&self, js: &jetstream::Context) -> Result<(), BusError> {
        for kind in StreamKind::ALL {
            let name = self.stream_name(kind);
            if let Err(error) = js.delete_stream(&name).await {
                tracing::debug!(stream = %name, %error, "stream delete failed");
            }
        }
        Ok(())
    }

    /// A consumer spec with the topology's defaults; callers may adjust fields.
    pub fn consumer(&self, name: &str, stream: StreamKind, filter_subject: String) -> ConsumerSpec {
        ConsumerSpec {
            name: name.to_string(),
            durable: format!("{}_{}", self.stream_prefix, name.replace(['.', ' ', '*', '>'], "_")),
            stream,
            filter_subject,
            ack_wait: self.settings.ack_wait,
            max_deliver: self.settings.max_deliver,
            max_ack_pending: self.settings.max_ack_pending,
        }
    }

    /// Creates the durable or updates it in place (`create_consumer` does on 2.9.10, see
    /// STACK.md; `get_or_create_consumer` would keep a stale config).
    pub async fn ensure_consumer(
        &self,
        js: &jetstream::Context,
        spec: &ConsumerSpec,
    ) -> Result<consumer::PullConsumer, BusError> {
        let stream_name = self.stream_name(spec.stream);
        let stream = js
            .get_stream(&stream_name)
            .await
            .map_err(|error| BusError::Stream { stream: stream_name.clone(), message: error.to_string() })?;
        let config = consumer::pull::Config {
            durable_name: Some(spec.durable.clone()),
            filter_subject: spec.filter_subject.clone(),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy: consumer::DeliverPolicy::All,
            ack_wait: spec.ack_wait,
            // The loop dead-letters from delivery `max_deliver` on; the server itself never
            // gives up, so a last attempt lost to a crash, an ack timeout or a failed
            // dead-letter publish is delivered again instead of being stranded in a
            // work-queue stream (it stays until it can be dead-lettered).
            max_deliver: UNLIMITED_DELIVERIES,
            max_ack_pending: spec.max_ack_pending,
            ..Default::default()
        };
        stream
            .create_consumer(config)
            .await
            .map_err(|error| BusError::Consumer { consumer: spec.durable.clone(), message: error.to_string() })
    }
}

async fn ensure_stream(js: &jetstream::Context, config: stream::Config) -> Result<(), BusError> {
    let name = config.name.clone();
    let stream_error = |error: String| BusError::Stream { stream: name.clone(), message: error };
    match js.create_stream(config.clone()).await {
        Ok(_) => Ok(()),
        Err(error) => {
            let exists_with_other_config = matches!(
                error.kind(),
                jetstream::context::CreateStreamErrorKind::JetStream(ref js_error)
                    if js_error.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST
            );
            if !exists_with_other_config {
                return Err(stream_error(error.to_string()));
            }
            js.update_stream(config).await.map_err(|error| stream_error(error.to_string()))?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_prefixes() {
        let topology = Topology::new("npcmem", "NPCMEM", TopologySettings::default());
        assert_eq!(topology.conversation_ended(), "npcmem.conversation.ended");
        assert_eq!(topology.stream_name(StreamKind::Signals), "NPCMEM_SIGNALS");
        assert_eq!(topology.dlq("ingest"), "npcmem.dlq.ingest");
        let spec = topology.consumer("gossip-learn", StreamKind::Events, topology.event("memory.stored"));
        assert_eq!(spec.durable, "NPCMEM_gossip-learn");
    }

    #[test]
    fn work_queues_discard_new_and_signals_keep_thirty_days() {
        let topology = Topology::new("p", "P", TopologySettings::default());
        let jobs = topology.stream_config(StreamKind::Jobs);
        assert_eq!(jobs.retention, stream::RetentionPolicy::WorkQueue);
        assert_eq!(jobs.discard, stream::DiscardPolicy::New);
        assert_eq!(jobs.subjects, vec!["p.job.extract", "p.job.consolidate"]);
        let signals = topology.stream_config(StreamKind::Signals);
        assert_eq!(signals.max_age, 30 * DAY);
        assert_eq!(signals.max_message_size, 1024 * 1024);
    }
}
