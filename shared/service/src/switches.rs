//! The runtime switches as a long-running service follows them: read at start,
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

/// Without `P.control.changed`, a service re-reads the switches this often.
pub const AT_LEAST_EVERY: Duration = Duration::from_secs(5);

/// Reads the switches once, then follows them in a background task that ends when every
/// receiver is gone. The receiver holds the last values read (the defaults if the first
/// read failed).
pub async fn follow(
    pool: PgPool,
    nats: &async_nats::Client,
    topology: &Topology,
    every: Duration,
) -> Result<watch::Receiver<Switches>, ServiceError> {
    let subject = topology.control_changed();
    let mut announcements = nats
        .subscribe(subject.clone())
        .await
        .map_err(|error| npcmem_bus::BusError::Subscribe { subject, message: error.to_string() })?;
    let first = read(&pool).await.unwrap_or_else(|error| {
        warn!(%error, "cannot read the runtime switches; starting from the defaults");
        Switches::default()
    });
    let (sender, receiver) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                announced = announcements.next() => if announced.is_none() { break },
                _ = tokio::time::sleep(every) => {}
                _ = sender.closed() => break,
            }
            match read(&pool).await {
                Ok(values) => {
                    sender.send_if_modified(|current| std::mem::replace(current, values) != values);
                }
                Err(error) => warn!(%error, "cannot read the runtime switches; keeping the last values"),
            }
        }
    });
    Ok(receiver)
}

async fn read(pool: &PgPool) -> Result<Switches, npcmem_store::StoreError> {
    switches::read(&mut *pool.acquire().await?).await
}
