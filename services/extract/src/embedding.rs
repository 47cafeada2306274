//! Recall's embedding beside extraction. The handler hands each committed batch's
//! conversation ids to one task that embeds them and goes on with the next batch, so
//! memories, relationships and signals never wait for the embedder. When the embedder
//! falls more than `NPCMEM_EMBED_QUEUE_BATCHES` batches behind, a batch is left for
//! `npcmem recall backfill` (counted in `npcmem_recall_embed_skipped`): its turns stay
//! findable lexically meanwhile.

use std::collections::BTreeSet;
use std::time::Duration;

use npcmem_bus::{Topology, publish};
use npcmem_core::wire::CacheInvalidate;
use npcmem_llm::Embedder;
use npcmem_service::embed::{EmbedFailure, embed_conversations};
use npcmem_store::{PgPool, StoreError};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tracing::warn;
use uuid::Uuid;

use crate::metrics::ExtractMetrics;

/// How long shutdown waits for the queue to empty before leaving the rest to the backfill.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The handler's end of the queue.
pub struct EmbedQueue {
    sender: mpsc::Sender<Vec<Uuid>>,
    metrics: ExtractMetrics,
}

/// What the embedding task needs.
pub struct EmbedWorker {
    pub pool: PgPool,
    pub nats: async_nats::Client,
    pub topology: Topology,
    pub metrics: ExtractMetrics,
    pub embedder: Embedder,
    /// Texts per call to an endpoint.
    pub batch: usize,
}

/// The running task; `finish` waits for it after the queue's sender is gone.
pub struct EmbedTask(JoinHandle<()>);

impl EmbedQueue {
    /// Starts the task, holding at most `depth` batches waiting.
    pub fn start(worker: EmbedWorker, depth: usize) -> (Self, EmbedTask) {
        let (sender, receiver) = mpsc::channel(depth.max(1));
        let metrics = worker.metrics.clone();
        (Self { sender, metrics }, EmbedTask(tokio::spawn(worker.run(receiver))))
    }

    /// Queues a committed batch's conversations, or leaves them to the backfill when the
    /// queue is full.
    pub fn offer(&self, conversation_ids: Vec<Uuid>) {
        match self.sender.try_send(conversation_ids) {
            Ok(()) => {}
            Err(TrySendError::Full(skipped)) => {
                self.metrics.embed_skipped(skipped.len());
                warn!(
                    conversations = skipped.len(),
                    "the embedder is behind; these conversations wait for `npcmem recall backfill`"
                );
            }
            // Only when the task has died (it panicked): nothing is embedded any more.
            Err(TrySendError::Closed(skipped)) => {
                self.metrics.embed_skipped(skipped.len());
                tracing::error!(
                    conversations = skipped.len(),
                    "the embedding task has stopped; `npcmem recall backfill` embeds what extract leaves"
                );
            }
        }
    }
}

impl EmbedTask {
    /// Waits (at most DRAIN_LIMIT) for the queued batches once the queue is dropped.
    pub async fn finish(self) {
        let mut handle = self.0;
        match tokio::time::timeout(DRAIN_LIMIT, &mut handle).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "the embedding task failed"),
            Err(_) => {
                handle.abort();
                warn!("embedding stopped with batches queued; `npcmem recall backfill` embeds them");
            }
        }
    }
}

impl EmbedWorker {
    async fn run(self, mut receiver: mpsc::Receiver<Vec<Uuid>>) {
        while let Some(conversation_ids) = receiver.recv().await {
            // A batch that panics must not end embedding for the rest of the process.
            let embedding = std::panic::AssertUnwindSafe(self.embed(&conversation_ids));
            if futures::FutureExt::catch_unwind(embedding).await.is_err() {
                self.metrics.embed_failed();
                tracing::error!(
                    conversations = conversation_ids.len(),
                    "embedding a batch panicked; the backfill embeds it"
                );
            }
        }
    }

    /// Gives the conversations that lack them vectors for recall (a redelivered job's
    /// conversation already embedded is skipped). A failure fails nothing else: recall
    /// stays lexical for those turns until `npcmem recall backfill`.
    async fn embed(&self, conversation_ids: &[Uuid]) {
        let work = async {
            let mut connection = self.pool.acquire().await.map_err(StoreError::from)?;
            let pending =
                npcmem_store::recall::unembedded_of(&mut connection, self.embedder.model(), conversation_ids).await?;
            drop(connection);
            let pairs: BTreeSet<(Uuid, Uuid)> = pending.iter().map(|c| (c.npc_id, c.player_id)).collect();
            let turns = embed_conversations(&self.pool, &self.embedder, pending, self.batch).await?;
            Ok::<_, EmbedFailure>((turns, pairs))
        };
        match work.await {
            Ok((turns, pairs)) => {
                self.metrics.embedded(turns);
                // enrich may have cached these pairs between extraction's commit and now.
                let messages: Vec<CacheInvalidate> = pairs
                    .into_iter()
                    .map(|(npc_id, player_id)| CacheInvalidate { npc_id: Some(npc_id), player_id: Some(player_id) })
                    .collect();
                if !messages.is_empty() {
                    publish::invalidate_caches(&self.nats, &self.topology, &messages).await;
                }
            }
            Err(error) => {
                self.metrics.embed_failed();
                warn!(%error, conversations = conversation_ids.len(), "embedding for recall failed; recall stays lexical for them");
            }
        }
    }
}
