use npcmem_service::ErrorBudgets;
use npcmem_service::error_budgets::{CACHE_HIT_RATE, CONTEXT_P99, RETRIEVAL_P99};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The error budgets enrich is judged by (automatic degraded mode).
pub const BUDGETS: [npcmem_service::error_budgets::Check; 3] = [RETRIEVAL_P99, CONTEXT_P99, CACHE_HIT_RATE];

type Labels = Vec<(String, String)>;

/// The read side: cache hits and misses, degraded providers, the context build time, the
/// retrieval time of a pair's data, the cache's size, and what a loaded pair holds; the
/// same observations feed the service's error budgets.
#[derive(Clone)]
pub struct EnrichMetrics {
    budgets: ErrorBudgets,
    cache: Family<Labels, Counter>,
    degraded: Family<Labels, Counter>,
    latency: Histogram,
    retrieval: Histogram,
    cache_entries: Gauge,
    cache_bytes: Gauge,
    pair_memories: Family<Labels, Histogram, fn() -> Histogram>,
    working_memory: Histogram,
}

fn count_buckets() -> Histogram {
    Histogram::new([0.0, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0])
}

impl EnrichMetrics {
    pub fn register(registry: &mut Registry, budgets: ErrorBudgets) -> Self {
        let metrics = Self {
            budgets,
            cache: Family::default(),
            degraded: Family::default(),
            latency: Histogram::new([0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.1, 0.25]),
            retrieval: Histogram::new([0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0]),
            cache_entries: Gauge::default(),
            cache_bytes: Gauge::default(),
            pair_memories: Family::new_with_constructor(count_buckets),
            working_memory: count_buckets(),
        };
        registry.register(
            "npcmem_memory_retrieval_duration_seconds",
            "Time to load one pair's data from the database (every part, in parallel)",
            metrics.retrieval.clone(),
        );
        registry.register(
            "npcmem_memory_cache_size",
            "Pairs in the enrich cache, as of the last load",
            metrics.cache_entries.clone(),
        );
        registry.register(
            "npcmem_memory_cache_bytes",
            "Approximate bytes the enrich cache holds, as of the last load",
            metrics.cache_bytes.clone(),
        );
        registry.register(
            "npcmem_memory_count_per_npc_player",
            "Memories of each loaded pair, by memory_type",
            metrics.pair_memories.clone(),
        );
        registry.register(
            "npcmem_working_memory_buffer_size",
            "Working-memory summaries of each loaded pair",
            metrics.working_memory.clone(),
        );
        registry.register("npcmem_enrich_cache", "Pair cache lookups by result (hit, miss)", metrics.cache.clone());
        registry.register(
            "npcmem_enrich_degraded",
            "Providers left out of a reply because they failed or timed out",
            metrics.degraded.clone(),
        );
        registry.register("npcmem_enrich_seconds", "Time to build a context reply", metrics.latency.clone());
        metrics
    }

    pub fn cache(&self, result: &str) {
        self.cache.get_or_create(&vec![("result".into(), result.into())]).inc();
        self.budgets.outcome(&CACHE_HIT_RATE, result == "hit");
    }

    pub fn degraded(&self, provider: &str) {
        self.degraded.get_or_create(&vec![("provider".into(), provider.into())]).inc();
    }

    /// One pair loaded in `seconds`, holding `memories` (count per type) and `summaries`.
    pub fn retrieved(&self, seconds: f64, memories: &[(&str, usize)], summaries: Option<usize>) {
        self.retrieval.observe(seconds);
        self.budgets.duration(&RETRIEVAL_P99, seconds);
        for (memory_type, count) in memories {
            self.pair_memories
                .get_or_create(&vec![("memory_type".into(), (*memory_type).into())])
                .observe(*count as f64);
        }
        if let Some(summaries) = summaries {
            self.working_memory.observe(summaries as f64);
        }
    }

    pub fn cache_size(&self, entries: u64, bytes: u64) {
        self.cache_entries.set(entries as i64);
        self.cache_bytes.set(bytes as i64);
    }

    pub fn request(&self, elapsed_us: u64) {
        self.latency.observe(elapsed_us as f64 / 1e6);
        self.budgets.duration(&CONTEXT_P99, elapsed_us as f64 / 1e6);
    }
}
