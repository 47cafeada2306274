//! Loads one pair's data from Postgres. Every part loads at once in a task of its own;
//! a request waits for them up to the provider timeout and answers with what arrived,
//! while the load runs on to completion and fills the cache, so a slow Postgres costs
//! one degraded reply per pair rather than a reload (and a timeout) per request. A
//! request for a pair already loading joins that load instead of starting another.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use npcmem_core::context::{self, ContextMemory};
use npcmem_core::memory::MemoryType;
use npcmem_core::recall::{LineCosts, Turn, TurnIndex, TurnVectors};
use npcmem_core::relationship::Relationship;
use npcmem_store::context::{self as reads, Fact};
use npcmem_store::recall::TurnFilter;
use npcmem_store::{PgPool, StoreError, relationships, working_memory};
use tokio::sync::watch;

use crate::metrics::EnrichMetrics;

pub type Pair = (uuid::Uuid, uuid::Uuid);

/// What one pair's context is built from; each part is None when its load failed or
/// has not finished (the entry is then not cached). Parts are shared: a load still
/// running when its first request gave up hands the same parts to the cache.
#[derive(Debug, Clone, Default)]
pub struct PairData {
    pub relationship: Option<Arc<RelationshipPart>>,
    pub working_memory: Option<Arc<Summaries>>,
    pub memories: Option<Arc<MemoriesPart>>,
    pub knowledge: Option<Arc<Vec<Fact>>>,
    pub mood: Option<Arc<Option<reads::CurrentMood>>>,
    pub recall: Option<Arc<RecallPart>>,
}

/// The newest conversations' summaries and when each ended.
pub type Summaries = Vec<(String, DateTime<Utc>)>;

/// The pair's prompt memories, their relevance index and their formatted lines.
#[derive(Debug, Default)]
pub struct MemoriesPart {
    pub memories: Vec<ContextMemory>,
    pub index: context::RelevanceIndex,
    pub lines: context::MemoryLines,
}

/// The pair's verbatim turns (oldest first), their index, and their vectors of the
/// configured embedding model (None without an embedder).
#[derive(Debug, Clone, Default)]
pub struct RecallPart {
    pub turns: Vec<Turn>,
    pub index: TurnIndex,
    pub costs: LineCosts,
    pub vectors: Option<TurnVectors>,
}

/// Reads the pair's turns (and, with `model`, their vectors) and indexes them off the
/// runtime's threads (indexing a thousand turns takes a few milliseconds).
pub async fn load_recall(
    pool: &PgPool,
    pair: Pair,
    max_turns: i64,
    filter: &TurnFilter,
    model: Option<&str>,
) -> Result<RecallPart, StoreError> {
    let mut connection = pool.acquire().await?;
    let turns = npcmem_store::recall::pair_turns(&mut connection, pair.0, pair.1, max_turns, filter).await?;
    let stored = match model {
        Some(model) => {
            let mut ids: Vec<uuid::Uuid> = turns.iter().map(|turn| turn.conversation_id).collect();
            ids.dedup();
            Some(npcmem_store::recall::conversation_vectors(&mut connection, model, &ids).await?)
        }
        None => None,
    };
    drop(connection);
    tokio::task::spawn_blocking(move || {
        let vectors = stored.map(|stored| {
            let dims = stored.values().map(|(dims, _)| *dims).max().unwrap_or(0);
            let mut vectors = TurnVectors::new(dims);
            for turn in &turns {
                let vector = stored.get(&turn.conversation_id).and_then(|(width, values)| {
                    let start = turn.turn as usize * width;
                    values.get(start..start + width)
                });
                vectors.push(vector);
            }
            vectors
        });
        let index = TurnIndex::build(&turns);
        let costs = LineCosts::new(turns.len());
        RecallPart { turns, index, costs, vectors }
    })
    .await
    .map_err(|error| match error.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        // Cancelled: the runtime is shutting down.
        Err(_) => StoreError::Unavailable(sqlx::Error::WorkerCrashed),
    })
}

#[derive(Debug, Clone, Default)]
pub struct RelationshipPart {
    pub relationship: Option<Relationship>,
    pub faction_standing: Vec<(String, f64)>,
}

impl PairData {
    /// What the entry holds in memory, roughly: text, indexes and per-row overhead.
    pub fn approximate_bytes(&self) -> usize {
        use npcmem_core::heap_bytes;
        use std::mem::size_of;
        let memories = self.memories.as_ref().map_or(0, |part| {
            let rows: usize = part
                .memories
                .iter()
                .map(|m| {
                    size_of::<ContextMemory>()
                        + heap_bytes(m.content.len())
                        + heap_bytes(m.tags.capacity() * size_of::<String>())
                        + m.tags.iter().map(|t| heap_bytes(t.len())).sum::<usize>()
                        // Its formatted line, kept a minute ([`context::MemoryLines`]).
                        + heap_bytes(m.content.len() + 56)
                        + 40
                })
                .sum();
            rows + part.index.approximate_bytes()
        });
        let summaries = self.working_memory.as_ref().map_or(0, |rows| {
            rows.iter().map(|(text, _)| heap_bytes(text.len()) + size_of::<(String, DateTime<Utc>)>()).sum::<usize>()
        });
        // A fact's content and its `told` line, and the row's ids, times and numbers.
        let knowledge = self
            .knowledge
            .as_ref()
            .map_or(0, |facts| facts.iter().map(|f| 2 * heap_bytes(f.content.len()) + 240).sum::<usize>());
        let recall = self.recall.as_ref().map_or(0, |part| {
            part.turns.capacity() * size_of::<Turn>()
                + part
                    .turns
                    .iter()
                    .map(|t| {
                        heap_bytes(t.text.len()) + t.speaker_name.as_ref().map_or(0, |name| heap_bytes(name.len()))
                    })
                    .sum::<usize>()
                + part.index.approximate_bytes()
                // Each turn's kept line cost (a `OnceLock` cell).
                + part.turns.len() * 16
                + part.vectors.as_ref().map_or(0, TurnVectors::approximate_bytes)
        });
        1024 + memories + summaries + knowledge + recall
    }

    /// Which parts are here, in the order of PARTS.
    fn present(&self) -> [bool; PARTS.len()] {
        [
            self.relationship.is_some(),
            self.working_memory.is_some(),
            self.memories.is_some(),
            self.knowledge.is_some(),
            self.mood.is_some(),
            self.recall.is_some(),
        ]
    }
}

/// The names `degraded` gives the parts, in PairData's order.
const PARTS: [&str; 6] = ["relationship", "working_memory", "memory", "knowledge", "mood", "recall"];

/// The longest a part may load after its request gave up; beyond it the load fails and
/// the next request tries again.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(10);

/// A load in flight: its progress, and the invalidation mark it started from.
type InflightLoad = (watch::Receiver<Loading>, u64);

/// A load's progress: the parts so far and how many have settled (arrived or failed).
#[derive(Debug, Clone, Default)]
struct Loading {
    data: PairData,
    settled: usize,
}

/// Starts and joins pair loads, and caches what they complete.
#[derive(Clone)]
pub struct Loader {
    pub pool: PgPool,
    pub cache: moka::future::Cache<Pair, Arc<PairData>>,
    /// How long a request waits for a part.
    pub timeout: Duration,
    /// The newest turns of a pair that recall reads, at most.
    pub recall_max_turns: i64,
    /// The embedding model whose vectors recall reads (None: no embedder).
    pub model: Option<Arc<str>>,
    pub metrics: EnrichMetrics,
    pub invalidations: Arc<Invalidations>,
    /// Each pair's load in flight, and the invalidation mark it started from.
    inflight: Arc<Mutex<HashMap<Pair, InflightLoad>>>,
}

impl Loader {
    pub fn new(
        pool: PgPool,
        cache: moka::future::Cache<Pair, Arc<PairData>>,
        timeout: Duration,
        recall_max_turns: i64,
        model: Option<&str>,
        metrics: EnrichMetrics,
        invalidations: Arc<Invalidations>,
    ) -> Self {
        Self {
            pool,
            cache,
            timeout,
            recall_max_turns,
            model: model.map(Arc::from),
            metrics,
            invalidations,
            inflight: Arc::default(),
        }
    }

    /// The pair's data from the cache, else what a load (its own or one already running)
    /// has within the timeout; the parts still missing are pushed to `degraded`.
    pub async fn get(&self, pair: Pair, now: DateTime<Utc>, degraded: &mut Vec<String>) -> Arc<PairData> {
        if let Some(data) = self.cache.get(&pair).await {
            self.metrics.cache("hit");
            return data;
        }
        self.metrics.cache("miss");
        let mut progress = self.join_or_start(pair, now);
        // A timeout leaves the load running: what arrived so far is answered.
        let _ = tokio::time::timeout(self.timeout, progress.wait_for(|loading| loading.settled == PARTS.len())).await;
        let data = progress.borrow().data.clone();
        for (name, present) in PARTS.into_iter().zip(data.present()) {
            if !present {
                self.metrics.degraded(name);
                degraded.push(name.to_owned());
            }
        }
        Arc::new(data)
    }

    fn join_or_start(&self, pair: Pair, now: DateTime<Utc>) -> watch::Receiver<Loading> {
        let mut inflight = self.inflight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Not joined: a load whose task is gone (it panicked), and one that began before
        // a write to the pair (it may miss the write; this request starts anew).
        if let Some((progress, since)) = inflight.get(&pair)
            && progress.has_changed().is_ok()
            && !self.invalidations.touched_since(*since, pair)
        {
            return progress.clone();
        }
        let since = self.invalidations.now();
        let (sender, progress) = watch::channel(Loading::default());
        inflight.insert(pair, (progress.clone(), since));
        drop(inflight);
        let loader = self.clone();
        tokio::spawn(async move {
            // Dropped last, even on a panic: the pair's entry goes with the load.
            let _entry = InflightEntry { loader: &loader, pair, sender: &sender };
            let started = std::time::Instant::now();
            loader.load(pair, now, &sender).await;
            let data = sender.borrow().data.clone();
            loader.observe_load(&data, started.elapsed().as_secs_f64());
            // A write during the load may be missing from it: the next request reloads.
            if data.present().into_iter().all(|present| present) && !loader.invalidations.touched_since(since, pair) {
                loader.cache.insert(pair, Arc::new(data)).await;
                // An invalidation recorded between the check and the insert may have run
                // before the entry existed: look again (one recorded later removes it).
                if loader.invalidations.touched_since(since, pair) {
                    loader.cache.invalidate(&pair).await;
                }
                // moka counts entries lazily: settle its bookkeeping (a miss only) first.
                loader.cache.run_pending_tasks().await;
                loader.metrics.cache_size(loader.cache.entry_count(), loader.cache.weighted_size());
            }
        });
        progress
    }

    /// The retrieval time and what the pair holds.
    fn observe_load(&self, data: &PairData, seconds: f64) {
        let mut per_type: Vec<(&str, usize)> =
            MemoryType::ALL.iter().map(|memory_type| (memory_type.as_str(), 0)).collect();
        if let Some(part) = &data.memories {
            for memory in &part.memories {
                if let Some(slot) = per_type.iter_mut().find(|(name, _)| *name == memory.memory_type.as_str()) {
                    slot.1 += 1;
                }
            }
        }
        self.metrics.retrieved(seconds, &per_type, data.working_memory.as_ref().map(|rows| rows.len()));
    }

    /// Loads every part at once, publishing each to `sender` as it settles.
    async fn load(&self, pair: Pair, now: DateTime<Utc>, sender: &watch::Sender<Loading>) {
        let (npc_id, player_id) = pair;
        let pool = &self.pool;
        let relationship = async {
            let mut connection = pool.acquire().await?;
            let relationship = relationships::load(&mut connection, &[pair]).await?.pop().map(|(_, r)| r);
            let faction_standing = reads::faction_standing(&mut connection, npc_id, player_id).await?;
            Ok::<_, StoreError>(RelationshipPart { relationship, faction_standing })
        };
        let summaries = async {
            let mut connection = pool.acquire().await?;
            let rows = working_memory::recent(&mut connection, npc_id, player_id).await?;
            Ok::<_, StoreError>(rows.into_iter().map(|row| (row.summary, row.ended_at)).collect::<Vec<_>>())
        };
        let memories = async {
            let mut connection = pool.acquire().await?;
            let memories = reads::prompt_memories(&mut connection, npc_id, player_id).await?;
            let index = context::RelevanceIndex::build(&memories);
            Ok::<_, StoreError>(MemoriesPart { memories, index, lines: Default::default() })
        };
        let knowledge = async {
            let mut connection = pool.acquire().await?;
            reads::knowledge(&mut connection, npc_id, now, None, None, Some(player_id), 10).await
        };
        let mood = async {
            let mut connection = pool.acquire().await?;
            reads::mood(&mut connection, npc_id, now).await
        };
        let all_turns = TurnFilter::default();
        let recall = load_recall(pool, pair, self.recall_max_turns, &all_turns, self.model.as_deref());
        tokio::join!(
            settle(sender, relationship, |data, part| data.relationship = Some(part)),
            settle(sender, summaries, |data, part| data.working_memory = Some(part)),
            settle(sender, memories, |data, part| data.memories = Some(part)),
            settle(sender, knowledge, |data, part| data.knowledge = Some(part)),
            settle(sender, mood, |data, part| data.mood = Some(part)),
            settle(sender, recall, |data, part| data.recall = Some(part)),
        );
    }
}

/// Removes a finished load's entry from the in-flight map, unless a newer load of the
/// pair has replaced it.
struct InflightEntry<'a> {
    loader: &'a Loader,
    pair: Pair,
    sender: &'a watch::Sender<Loading>,
}

impl Drop for InflightEntry<'_> {
    fn drop(&mut self) {
        let mut inflight = self.loader.inflight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if inflight.get(&self.pair).is_some_and(|(current, _)| current.same_channel(&self.sender.subscribe())) {
            inflight.remove(&self.pair);
        }
    }
}

/// Runs one part's load (at most BACKGROUND_LIMIT) and publishes what it gave.
async fn settle<T>(
    sender: &watch::Sender<Loading>,
    work: impl Future<Output = Result<T, StoreError>>,
    put: impl FnOnce(&mut PairData, Arc<T>),
) {
    let part = match tokio::time::timeout(BACKGROUND_LIMIT, work).await {
        Ok(Ok(part)) => Some(Arc::new(part)),
        Ok(Err(error)) => {
            tracing::warn!(%error, "context provider failed");
            None
        }
        Err(_) => {
            tracing::warn!(limit_s = BACKGROUND_LIMIT.as_secs(), "context provider gave no answer");
            None
        }
    };
    sender.send_modify(|loading| {
        if let Some(part) = part {
            put(&mut loading.data, part);
        }
        loading.settled += 1;
    });
}

/// Which cache entries writers invalidated lately, so a load that ran across an
/// invalidation of its pair does not cache what it read before the write.
#[derive(Debug, Default)]
pub struct Invalidations {
    log: Mutex<InvalidationLog>,
}

/// The newest invalidations, numbered; those before `floor` were dropped.
#[derive(Debug, Default)]
struct InvalidationLog {
    next: u64,
    floor: u64,
    recent: VecDeque<(u64, Scope)>,
}

/// What one invalidation covered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scope {
    Pair(Pair),
    Npc(uuid::Uuid),
    Player(uuid::Uuid),
    All,
}

impl Scope {
    fn covers(self, pair: Pair) -> bool {
        match self {
            Scope::Pair(scoped) => scoped == pair,
            Scope::Npc(npc_id) => npc_id == pair.0,
            Scope::Player(player_id) => player_id == pair.1,
            Scope::All => true,
        }
    }
}

/// Invalidations remembered; a load older than the oldest is never cached.
const REMEMBERED_INVALIDATIONS: usize = 4096;

impl Invalidations {
    pub fn record(&self, scope: Scope) {
        let mut log = self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let number = log.next;
        log.next += 1;
        log.recent.push_back((number, scope));
        if log.recent.len() > REMEMBERED_INVALIDATIONS
            && let Some((dropped, _)) = log.recent.pop_front()
        {
            log.floor = dropped + 1;
        }
    }

    /// A mark to pass to `touched_since`.
    pub fn now(&self) -> u64 {
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).next
    }

    /// Whether an invalidation since `mark` covered `pair` (or might have: forgotten).
    pub fn touched_since(&self, mark: u64, pair: Pair) -> bool {
        let log = self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        mark < log.floor
            || log.recent.iter().rev().take_while(|(number, _)| *number >= mark).any(|(_, scope)| scope.covers(pair))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalidation_during_a_load_covers_only_its_pairs() {
        let invalidations = Invalidations::default();
        let (npc, player, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        invalidations.record(Scope::Pair((npc, player)));
        let mark = invalidations.now();
        assert!(!invalidations.touched_since(mark, (npc, player)), "before the load: not counted");
        invalidations.record(Scope::Npc(other));
        invalidations.record(Scope::Pair((other, player)));
        assert!(!invalidations.touched_since(mark, (npc, player)));
        invalidations.record(Scope::Player(player));
        assert!(invalidations.touched_since(mark, (npc, player)));
        let later = invalidations.now();
        invalidations.record(Scope::All);
        assert!(invalidations.touched_since(later, (other, other)));
    }

    #[test]
    fn a_load_older_than_the_remembered_invalidations_counts_as_touched() {
        let invalidations = Invalidations::default();
        let mark = invalidations.now();
        let pair = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        for _ in 0..=REMEMBERED_INVALIDATIONS {
            invalidations.record(Scope::Npc(uuid::Uuid::new_v4()));
        }
        assert!(invalidations.touched_since(mark, pair));
        assert!(!invalidations.touched_since(invalidations.now(), pair));
    }
}
