//! The runtime switches (DESIGN §3) as a long-running service follows them: read at start,
//! again whenever `P.control.changed` says one changed, and at least every `every` (the
//! announcement is best effort).

use std::time::Duration;

use futures::StreamExt as _;
use npcmem_bus::Topology;
use npcmem_store::PgPool;
use npcmem_store::switches::{self, Switches};
use tokio::sync::watch;
use tracing::warn;

use crate::ServiceError;

/// Follows the switches in a background task until `shutdown`; the receiver always holds
/// the last values read (the defaults until the first read succeeds).
pub async fn follow(
    pool: PgPool,
    nats: &async_nats::Client,
    topology: &Topology,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Result<watch::Receiver<Switches>, ServiceError> {
    let subject = topology.control_changed();
    let mut announcements = nats
        .subscribe(subject.clone())
        .await
        .map_err(|error| npcmem_bus::BusError::Subscribe { subject, message: error.to_string() })?;
    let (sender, receiver) = watch::channel(Switches::default());
    tokio::spawn(async move {
        loop {
            let read = async { switches::read(&mut *pool.acquire().await?).await };
            match read.await {
                Ok(values) => {
                    sender.send_if_modified(|current| std::mem::replace(current, values) != values);
                }
                Err(error) => warn!(%error, "cannot read the runtime switches; keeping the last values"),
            }
            tokio::select! {
                announced = announcements.next() => if announced.is_none() { break },
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => break,
            }
        }
    });
    Ok(receiver)
}
