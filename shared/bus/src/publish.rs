//! Publishing to JetStream with a dedup id, awaiting the PubAck.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;

use crate::error::BusError;

/// Publishes one message with `Nats-Msg-Id` and waits for the stream to store it.
/// Returns true when JetStream reported it as a duplicate inside its window.
pub async fn publish_with_id(
    js: &jetstream::Context,
    subject: &str,
    msg_id: &str,
    headers: Option<HeaderMap>,
    payload: Bytes,
) -> Result<bool, BusError> {
    let publish_error = |message: String| BusError::Publish { subject: subject.to_string(), message };
    let mut message = PublishMessage::build().payload(payload).message_id(msg_id);
    if let Some(headers) = headers {
        for (name, values) in headers.iter() {
            for value in values {
                message = message.header(name.clone(), value.clone());
            }
        }
    }
    let ack_future =
        js.send_publish(subject.to_string(), message).await.map_err(|error| publish_error(error.to_string()))?;
    let ack = ack_future.await.map_err(|error| publish_error(error.to_string()))?;
    Ok(ack.duplicate)
}

/// `cache.invalidate` is core NATS, published after the commit that made the
/// change, best effort — the enricher's cache TTL is the safety net, so a failed publish
/// is only logged.
pub async fn invalidate_caches(
    nats: &async_nats::Client,
    topology: &crate::Topology,
    messages: &[npcmem_core::wire::CacheInvalidate],
) {
    let subject = topology.cache_invalidate();
    for message in messages {
        let payload = serde_json::to_vec(message).expect("cache.invalidate always serialises");
        if let Err(error) = nats.publish(subject.clone(), payload.into()).await {
            tracing::debug!(%error, "cache.invalidate publish failed; the cache TTL will expire the entry");
        }
    }
}
