use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Ingest counters: conversations by result, and PII redactions by kind (seed
/// §Required Metrics `safety_flags_total{flag=redacted}` at its source).
#[derive(Clone, Default)]
pub struct IngestMetrics {
    conversations: Family<Labels, Counter>,
    redactions: Family<Labels, Counter>,
}

impl IngestMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "npcmem_ingest_conversations",
            "conversation.ended messages by result (accepted, duplicate, skipped, rejected)",
            metrics.conversations.clone(),
        );
        registry.register(
            "npcmem_ingest_redactions",
            "PII spans replaced in transcripts, by kind",
            metrics.redactions.clone(),
        );
        metrics
    }

    pub fn count(&self, result: &str, count: u64) {
        if count > 0 {
            self.conversations.get_or_create(&vec![("result".to_string(), result.to_string())]).inc_by(count);
        }
    }

    pub fn count_redactions(&self, kind: &str, count: u32) {
        if count > 0 {
            self.redactions.get_or_create(&vec![("kind".to_string(), kind.to_string())]).inc_by(u64::from(count));
        }
    }
}
