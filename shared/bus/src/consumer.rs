//! The one batch consumer loop every service runs: pull up
//! to N messages, hand the batch to the service, ack after its commit, nak with a delay
//! on transient failure, dead-letter permanent failures and the last allowed delivery.

use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{PullConsumer, pull::MessagesErrorKind};
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use npcmem_core::validate::ReasonCode;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::dlq::{self, DeadLetterCause, DeadLetterInput};
use crate::metrics::BusMetrics;
use crate::publish::publish_with_id;
use crate::retry::RetryPolicy;
use crate::topology::{ConsumerSpec, Topology};

/// One delivered message.
pub struct Delivery {
    message: jetstream::Message,
    pub delivered: i64,
    pub stream_sequence: u64,
    /// When JetStream stored the message: the same on every redelivery.
    pub published: chrono::DateTime<chrono::Utc>,
}

impl Delivery {
    pub fn payload(&self) -> &[u8] {
        &self.message.payload
    }
    pub fn subject(&self) -> &str {
        self.message.subject.as_str()
    }
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.message.headers.as_ref()
    }
    /// Resets `ack_wait` during a long handler (an LLM call).
    pub async fn in_progress(&self) {
        if let Err(error) = self.message.ack_with(AckKind::Progress).await {
            debug!(%error, "in-progress ack failed");
        }
    }
}

/// What the handler decided for one message of the batch.
#[derive(Debug, Clone)]
pub enum Disposition {
    /// Applied (or recognised as a duplicate) and committed: ack.
    Done,
    /// Permanently bad: dead-letter with this reason, then ack.
    Reject(DeadLetterCause),
    /// Failed for a reason that may pass: nak with a delay; dead-lettered as
    /// `max_deliveries` once delivery `max_deliver` (or a later one) fails too.
    Retry(String),
}

/// A service's batch logic: one disposition per delivery, in order; services implement
/// it with [`crate::run_batch`] over their [`crate::BatchWork`]. Inputs that are bad
/// stay `Reject` even when the commit of the good ones failed, so an outage never turns
/// a bad message's reason into `max_deliveries`. A batch with retries and nothing done
/// counts as failed: the loop pauses before pulling again, so an outage does not burn the
/// delivery attempts of the whole backlog.
pub trait BatchHandler: Send + Sync + 'static {
    fn handle(&self, batch: &[Delivery]) -> impl Future<Output = Vec<Disposition>> + Send;
}

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub batch_size: usize,
    pub retry: RetryPolicy,
    /// Idle heartbeat of the pull request; after two missed, the loop pulls again.
    pub heartbeat: Duration,
    /// Longest pause after a failed batch: short, so that work resumes within seconds of
    /// a dependency coming back (each retry costs one batch, not the backlog).
    pub max_pause: Duration,
    /// Batches handled at once (each in its own transaction).
    pub concurrency: usize,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            batch_size: 64,
            retry: RetryPolicy::default(),
            heartbeat: Duration::from_secs(5),
            max_pause: Duration::from_secs(5),
            concurrency: 1,
        }
    }
}

pub struct ConsumerLoop<H> {
    pub js: jetstream::Context,
    pub topology: Topology,
    pub spec: ConsumerSpec,
    pub settings: ConsumerSettings,
    pub handler: H,
    pub metrics: BusMetrics,
}

impl<H: BatchHandler> ConsumerLoop<H> {
    /// Creates or updates the durable consumer; call before [`ConsumerLoop::run`] so a
    /// service reports ready only once its consumers exist.
    pub async fn prepare(&self) -> Result<PullConsumer, crate::BusError> {
        self.topology.ensure_consumer(&self.js, &self.spec).await
    }

    /// Runs until `shutdown` flips to true; the batch in flight is finished first.
    pub async fn run(self, mut consumer: PullConsumer, mut shutdown: watch::Receiver<bool>) {
        info!(consumer = %self.spec.name, durable = %self.spec.durable, "consumer started");
        let concurrency = self.settings.concurrency.max(1);
        // Batches being handled; each commits and acks on its own, so a slow commit does
        // not hold the next batch back (ordering across batches is not guaranteed).
        let mut in_flight = FuturesUnordered::new();
        let mut consecutive_batch_failures: u32 = 0;
        let mut paused_until: Option<tokio::time::Instant> = None;
        let mut reopen_attempts: u32 = 0;
        'reconnect: loop {
            if *shutdown.borrow() {
                break;
            }
            let Some(messages) = self.open_stream(&consumer, &mut shutdown).await else { break };
            let mut chunks = messages.ready_chunks(self.settings.batch_size);
            loop {
                let can_pull = in_flight.len() < concurrency && paused_until.is_none();
                tokio::select! {
                    biased;
                    _ = shutdown.changed() => break 'reconnect,
                    Some(batch_ok) = in_flight.next(), if !in_flight.is_empty() => {
                        if batch_ok {
                            consecutive_batch_failures = 0;
                        } else {
                            consecutive_batch_failures += 1;
                            let pause = self.settings.retry.delay_after(consecutive_batch_failures)
                                .min(self.settings.max_pause);
                            warn!(consumer = %self.spec.name, pause_ms = pause.as_millis() as u64, "batch failed, pausing");
                            paused_until = Some(tokio::time::Instant::now() + pause);
                        }
                    }
                    _ = sleep_until_optional(paused_until), if paused_until.is_some() => paused_until = None,
                    next = chunks.next(), if can_pull => {
                        let Some(results) = next else {
                            // The durable may have been deleted (an operator, a recreated
                            // stream): finish what is in flight, wait, and set it up again.
                            warn!(consumer = %self.spec.name, "message stream ended, reopening");
                            while in_flight.next().await.is_some() {}
                            reopen_attempts += 1;
                            let delay = self.settings.retry.delay_after(reopen_attempts).min(self.settings.max_pause);
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {}
                                _ = shutdown.changed() => break 'reconnect,
                            }
                            match self.prepare().await {
                                Ok(recreated) => consumer = recreated,
                                Err(error) => warn!(consumer = %self.spec.name, %error, "consumer set-up failed, retrying"),
                            }
                            continue 'reconnect;
                        };
                        reopen_attempts = 0;
                        let (batch, heartbeat_missed) = self.collect_batch(results);
                        if !batch.is_empty() {
                            in_flight.push(self.process_batch(batch));
                        }
                        if heartbeat_missed {
                            // The server no longer holds this pull (nats-server 2.9.10 kept
                            // one of three when replicas created a durable together): pull
                            // anew rather than sit idle until the lost pull would expire.
                            continue 'reconnect;
                        }
                    }
                }
            }
        }
        // Shutdown: nothing new is pulled, but batches already taken are finished.
        while in_flight.next().await.is_some() {}
        info!(consumer = %self.spec.name, "consumer stopped");
    }

    fn collect_batch(
        &self,
        results: Vec<Result<jetstream::Message, jetstream::consumer::pull::MessagesError>>,
    ) -> (Vec<Delivery>, bool) {
        let mut batch = Vec::with_capacity(results.len());
        let mut heartbeat_missed = false;
        for result in results {
            match result {
                Ok(message) => match message.info() {
                    Ok(info) => {
                        let delivered = info.delivered;
                        let stream_sequence = info.stream_sequence;
                        let published = info.published.with_timezone(&chrono::Utc);
                        batch.push(Delivery { message, delivered, stream_sequence, published });
                    }
                    Err(error) => warn!(%error, "message without jetstream metadata ignored"),
                },
                Err(error) if error.kind() == MessagesErrorKind::MissingHeartbeat => {
                    warn!(consumer = %self.spec.name, "missed idle heartbeat; pulling again");
                    heartbeat_missed = true;
                }
                Err(error) => warn!(consumer = %self.spec.name, %error, "message stream error"),
            }
        }
        (batch, heartbeat_missed)
    }

    async fn open_stream(
        &self,
        consumer: &PullConsumer,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<jetstream::consumer::pull::Stream> {
        let mut attempt = 0;
        loop {
            let opened = consumer
                .stream()
                .max_messages_per_batch(self.settings.batch_size * self.settings.concurrency.max(1))
                .heartbeat(self.settings.heartbeat)
                .expires(self.settings.heartbeat * 6)
                .messages()
                .await;
            match opened {
                Ok(stream) => return Some(stream),
                Err(error) => {
                    attempt += 1;
                    let delay = self.settings.retry.delay_after(attempt);
                    warn!(consumer = %self.spec.name, %error, "cannot open message stream, retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => return None,
                    }
                }
            }
        }
    }

    /// Handles one batch; false when the handler failed it as a whole.
    async fn process_batch(&self, batch: Vec<Delivery>) -> bool {
        let started = Instant::now();
        let consumer = self.spec.name.as_str();
        let mut dispositions = self.handler.handle(&batch).await;
        debug_assert_eq!(dispositions.len(), batch.len(), "one disposition per delivery");
        // A handler breaking that contract must not lose messages: retry what it left out.
        dispositions.resize(batch.len(), Disposition::Retry("handler returned no disposition".into()));
        let batch_failed = dispositions.iter().any(|d| matches!(d, Disposition::Retry(_)))
            && !dispositions.iter().any(|d| matches!(d, Disposition::Done));
        let (mut acked, mut retried, mut dead_lettered) = (0u64, 0u64, 0u64);
        let mut acks = Vec::with_capacity(batch.len());
        let mut naks = Vec::new();
        let mut to_dead_letter = Vec::new();
        for (delivery, disposition) in batch.iter().zip(dispositions) {
            match disposition {
                Disposition::Done => {
                    acked += 1;
                    acks.push(delivery);
                }
                Disposition::Reject(cause) => to_dead_letter.push((delivery, cause)),
                Disposition::Retry(reason) if delivery.delivered < self.spec.max_deliver => {
                    retried += 1;
                    debug!(consumer, seq = delivery.stream_sequence, %reason, "retrying later");
                    naks.push(delivery);
                }
                Disposition::Retry(reason) => to_dead_letter.push((
                    delivery,
                    DeadLetterCause {
                        code: ReasonCode::MaxDeliveries,
                        message: format!("gave up after {} deliveries: {reason}", delivery.delivered),
                    },
                )),
            }
        }
        // All dead letters go out together and their PubAcks are awaited together, so a
        // slow NATS costs one timeout per batch, not one per rejected message.
        let outcomes =
            futures::future::join_all(to_dead_letter.iter().map(|(delivery, cause)| self.dead_letter(delivery, cause)))
                .await;
        for ((delivery, _), stored) in to_dead_letter.iter().zip(outcomes) {
            if stored {
                dead_lettered += 1;
                acks.push(delivery);
            } else {
                // Never ack what could not be dead-lettered: it stays in its stream.
                retried += 1;
                naks.push(delivery);
            }
        }
        let nak_results = futures::future::join_all(naks.iter().map(|delivery| {
            let delay = self.settings.retry.delay_after(delivery.delivered.max(1) as u32);
            delivery.message.ack_with(AckKind::Nak(Some(delay)))
        }))
        .await;
        for result in nak_results {
            if let Err(error) = result {
                warn!(consumer, %error, "nak failed; ack_wait will redeliver");
            }
        }
        let ack_results = futures::future::join_all(acks.iter().map(|d| d.message.ack())).await;
        for result in ack_results {
            if let Err(error) = result {
                // The work is committed; a redelivery will be recognised as a duplicate.
                warn!(consumer, %error, "ack failed");
            }
        }
        self.metrics.record_outcome(consumer, "acked", acked);
        self.metrics.record_outcome(consumer, "retried", retried);
        self.metrics.record_outcome(consumer, "dead_lettered", dead_lettered);
        self.metrics.observe_batch(consumer, started.elapsed());
        !batch_failed
    }

    async fn dead_letter(&self, delivery: &Delivery, cause: &DeadLetterCause) -> bool {
        let letter = dlq::build(DeadLetterInput {
            consumer: &self.spec.name,
            original_subject: delivery.subject(),
            original_headers: delivery.headers(),
            payload: delivery.payload(),
            deliveries: delivery.delivered,
            stream_sequence: delivery.stream_sequence,
            cause,
            max_message_bytes: self.topology.settings.max_message_bytes as usize,
        });
        let subject = self.topology.dlq(&self.spec.name);
        match publish_with_id(&self.js, &subject, &letter.msg_id, Some(letter.headers), letter.body).await {
            Ok(_) => {
                warn!(consumer = %self.spec.name, seq = delivery.stream_sequence, reason = cause.code.as_str(),
                      message = %cause.message, "dead-lettered");
                self.metrics.record_dead_letter(&self.spec.name, cause.code.as_str());
                true
            }
            Err(error) => {
                error!(consumer = %self.spec.name, %error, "dead-letter publish failed, will retry");
                false
            }
        }
    }
}

async fn sleep_until_optional(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
