use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Seed §Required Metrics for the read side: cache hits and misses, degraded providers,
/// request latency.
#[derive(Clone)]
pub struct EnrichMetrics {
    cache: Family<Labels, Counter>,
    degraded: Family<Labels, Counter>,
    latency: Histogram,
}

impl EnrichMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            cache: Family::default(),
            degraded: Family::default(),
            latency: Histogram::new([0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.1, 0.25]),
        };
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
    }

    pub fn degraded(&self, provider: &str) {
        self.degraded.get_or_create(&vec![("provider".into(), provider.into())]).inc();
    }

    pub fn request(&self, elapsed_us: u64) {
        self.latency.observe(elapsed_us as f64 / 1e6);
    }
}
