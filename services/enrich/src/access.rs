//! Access counts of memories that went into prompts, written back in batches off the
//! request path (only memories that reached a prompt count as accessed).

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use npcmem_store::PgPool;
use tokio::sync::{mpsc, watch};
use tracing::warn;
use uuid::Uuid;

pub async fn run_writer(
    pool: PgPool,
    mut accessed: mpsc::UnboundedReceiver<Vec<Uuid>>,
    flush_every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut pending: HashMap<Uuid, i32> = HashMap::new();
    let mut ticker = tokio::time::interval(flush_every);
    loop {
        tokio::select! {
            ids = accessed.recv() => match ids {
                Some(ids) => for id in ids { *pending.entry(id).or_default() += 1; },
                None => break,
            },
            _ = ticker.tick() => flush(&pool, &mut pending).await,
            _ = shutdown.changed() => break,
        }
    }
    while let Ok(ids) = accessed.try_recv() {
        for id in ids {
            *pending.entry(id).or_default() += 1;
        }
    }
    flush(&pool, &mut pending).await;
}

/// Rows per statement, and the pause between statements: a flush of many memories is
/// spread out instead of landing on Postgres at once, where it would slow the reads of
/// requests in flight.
const CHUNK: usize = 500;
const PAUSE: Duration = Duration::from_millis(10);

async fn flush(pool: &PgPool, pending: &mut HashMap<Uuid, i32>) {
    if pending.is_empty() {
        return;
    }
    let batch: Vec<(Uuid, i32)> = pending.drain().collect();
    let at = Utc::now();
    for (index, chunk) in batch.chunks(CHUNK).enumerate() {
        if index > 0 {
            tokio::time::sleep(PAUSE).await;
        }
        let written = async {
            let mut connection = pool.acquire().await?;
            npcmem_store::context::record_access(&mut connection, chunk, at).await
        }
        .await;
        if let Err(error) = written {
            // Access counts only tune salience; losing a chunk is better than piling up.
            warn!(%error, memories = chunk.len(), "writing back access counts failed; these are dropped");
        }
    }
}
