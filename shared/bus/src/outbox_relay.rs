//! The outbox relay: claims committed outbox rows in id order with
//! `FOR UPDATE SKIP LOCKED`, publishes them with a window of outstanding PubAcks, and
//! deletes the acknowledged ones in the same transaction. Woken by LISTEN/NOTIFY, with a
//! poll as the safety net. A NATS outage leaves the rows in place; they go out once it is
//! back, with the same `Nats-Msg-Id`, so nothing is lost and nothing doubles.

use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use npcmem_store::outbox::{self, OutboxRow};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::metrics::BusMetrics;
use crate::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Rows claimed per transaction; also the window of outstanding PubAcks (STACK.md:
    /// one-at-a-time tops out near 5–11k msg/s here, a window of 256 gives 38–68k).
    pub batch_size: i64,
    pub poll_interval: Duration,
    pub publish_timeout: Duration,
    /// How long shutdown waits for the outbox to drain.
    pub flush_timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch_size: 256,
            poll_interval: Duration::from_millis(500),
            publish_timeout: Duration::from_secs(5),
            flush_timeout: Duration::from_secs(10),
            // Capped low: rows wait in Postgres, so retrying often costs little and the
            // backlog leaves within seconds of NATS or Postgres returning.
            retry: RetryPolicy {
                initial_delay: Duration::from_millis(200),
                max_delay: Duration::from_secs(5),
                ..RetryPolicy::default()
            },
        }
    }
}

pub struct OutboxRelay {
    pub pool: PgPool,
    pub js: jetstream::Context,
    pub settings: RelaySettings,
    pub metrics: BusMetrics,
}

impl OutboxRelay {
    /// Relays until `shutdown` flips, then drains what is left (up to `flush_timeout`).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut listener = self.listen().await;
        let mut consecutive_failures = 0u32;
        loop {
            if *shutdown.borrow() {
                break;
            }
            match self.relay_once().await {
                Ok(published) if published as i64 >= self.settings.batch_size => {
                    consecutive_failures = 0;
                    continue;
                }
                Ok(_) => consecutive_failures = 0,
                Err(error) => {
                    consecutive_failures += 1;
                    let delay = self.settings.retry.delay_after(consecutive_failures);
                    warn!(%error, delay_ms = delay.as_millis() as u64, "outbox relay failed, retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.changed() => break,
                    }
                    continue;
                }
            }
            // Wait for a NOTIFY, the poll timer, or shutdown.
            match listener.as_mut() {
                Some(active) => {
                    tokio::select! {
                        notification = active.recv() => {
                            if let Err(error) = notification {
                                debug!(%error, "outbox listener lost, polling until it reconnects");
                                listener = None;
                            }
                        }
                        _ = tokio::time::sleep(self.settings.poll_interval) => {}
                        _ = shutdown.changed() => break,
                    }
                }
                None => {
                    tokio::select! {
                        _ = tokio::time::sleep(self.settings.poll_interval) => {}
                        _ = shutdown.changed() => break,
                    }
                    listener = self.listen().await;
                }
            }
        }
        self.flush().await;
    }

    async fn listen(&self) -> Option<PgListener> {
        let mut listener = PgListener::connect_with(&self.pool).await.ok()?;
        listener.listen(outbox::NOTIFY_CHANNEL).await.ok()?;
        Some(listener)
    }

    /// Publishes everything left, for graceful shutdown.
    pub async fn flush(&self) {
        let deadline = tokio::time::Instant::now() + self.settings.flush_timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.relay_once()).await {
                Ok(Ok(0)) => {
                    info!("outbox flushed");
                    return;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(error)) => {
                    warn!(%error, "outbox flush failed; rows stay for the next start");
                    return;
                }
                Err(_) => {
                    warn!("outbox flush timed out; rows stay for the next start");
                    return;
                }
            }
        }
    }

    /// One claim → publish → delete → commit cycle. Returns the rows published.
    pub async fn relay_once(&self) -> Result<usize, String> {
        let mut transaction = self.pool.begin().await.map_err(|e| e.to_string())?;
        let rows = outbox::claim(&mut transaction, self.settings.batch_size).await.map_err(|e| e.to_string())?;
        if rows.is_empty() {
            return Ok(0);
        }
        let acknowledged = self.publish_window(&rows).await;
        outbox::delete(&mut transaction, &acknowledged).await.map_err(|e| e.to_string())?;
        transaction.commit().await.map_err(|e| e.to_string())?;
        self.metrics.record_published(acknowledged.len() as u64);
        // A row that keeps failing (say, its subject has no stream) must not stall the
        // rest: the cycle counts as failed only when nothing at all went out.
        if acknowledged.is_empty() {
            return Err(format!("none of {} outbox rows acknowledged", rows.len()));
        }
        if acknowledged.len() < rows.len() {
            warn!(failed = rows.len() - acknowledged.len(), "some outbox rows not acknowledged, retrying them");
        }
        Ok(acknowledged.len())
    }

    /// Sends every row, then awaits all PubAcks; returns the ids JetStream stored
    /// (duplicates included: JetStream already holds them).
    async fn publish_window(&self, rows: &[OutboxRow]) -> Vec<i64> {
        let mut pending = Vec::with_capacity(rows.len());
        for row in rows {
            let mut message =
                PublishMessage::build().payload(Bytes::copy_from_slice(&row.payload)).message_id(row.nats_msg_id());
            for (name, value) in row.headers.0.iter() {
                message = message.header(name.as_str(), value.as_str());
            }
            match self.js.send_publish(row.subject.clone(), message).await {
                Ok(ack) => pending.push((row.id, ack)),
                // Per-row (e.g. payload over the server's limit): the others still go out.
                Err(error) => warn!(id = row.id, subject = %row.subject, %error, "outbox publish failed"),
            }
        }
        let timeout = self.settings.publish_timeout;
        let results = futures::future::join_all(
            pending.into_iter().map(|(id, ack)| async move { (id, tokio::time::timeout(timeout, ack).await) }),
        )
        .await;
        results
            .into_iter()
            .filter_map(|(id, result)| match result {
                Ok(Ok(_)) => Some(id),
                Ok(Err(error)) => {
                    warn!(id, %error, "outbox pub-ack failed");
                    None
                }
                Err(_) => None,
            })
            .collect()
    }
}
