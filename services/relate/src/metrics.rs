use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Relationship updates, optimistic-concurrency conflicts and signals emitted.
#[derive(Clone, Default)]
pub struct RelateMetrics {
    updates: Counter,
    conflicts: Counter,
    signals: Family<Labels, Counter>,
}

impl RelateMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "npcmem_relationship_updates",
            "Conversations applied to relationships",
            metrics.updates.clone(),
        );
        registry.register(
            "npcmem_relationship_conflicts",
            "Batches retried because another writer changed a relationship first",
            metrics.conflicts.clone(),
        );
        registry.register("npcmem_signals", "Story signals emitted, by signal and event type", metrics.signals.clone());
        metrics
    }

    pub fn updates(&self, count: u64) {
        self.updates.inc_by(count);
    }

    pub fn conflict(&self) {
        self.conflicts.inc();
    }

    pub fn signal(&self, signal_type: &str, event_type: &str) {
        self.signals
            .get_or_create(&vec![("signal_type".into(), signal_type.into()), ("event_type".into(), event_type.into())])
            .inc();
    }
}
