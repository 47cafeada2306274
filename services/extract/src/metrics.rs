use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Seed §Required Metrics: `memory_extractions_total{status}` and
/// `safety_flags_total{flag}`, plus memories stored and evicted by the caps.
#[derive(Clone, Default)]
pub struct ExtractMetrics {
    extractions: Family<Labels, Counter>,
    safety_flags: Family<Labels, Counter>,
    memories_stored: Family<Labels, Counter>,
    memories_evicted: Counter,
    fallbacks: Family<Labels, Counter>,
    llm_tokens: Counter,
    turns_embedded: Counter,
    embed_failures: Counter,
    embed_skipped: Counter,
}

impl ExtractMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "npcmem_memory_extractions",
            "Extractions by status (success, skipped) and extractor",
            metrics.extractions.clone(),
        );
        registry.register("npcmem_safety_flags", "Memories flagged by the safety filter", metrics.safety_flags.clone());
        registry.register("npcmem_memories_stored", "Memories stored, by type", metrics.memories_stored.clone());
        registry.register(
            "npcmem_memories_evicted",
            "Memories evicted by the growth caps",
            metrics.memories_evicted.clone(),
        );
        registry.register(
            "npcmem_extraction_fallbacks",
            "Conversations the rules extractor took over from the LLM, by reason",
            metrics.fallbacks.clone(),
        );
        registry.register(
            "npcmem_llm_extraction_tokens",
            "Tokens charged to the budgets for LLM extraction calls",
            metrics.llm_tokens.clone(),
        );
        registry.register(
            "npcmem_recall_turns_embedded",
            "Turns given vectors for recall's dense ranking",
            metrics.turns_embedded.clone(),
        );
        registry.register(
            "npcmem_recall_embed_failures",
            "Batches whose embedding failed (recall stays lexical for them until `npcmem recall backfill`)",
            metrics.embed_failures.clone(),
        );
        registry.register(
            "npcmem_recall_embed_skipped",
            "Conversations left unembedded because the embedder was behind (`npcmem recall backfill` embeds them)",
            metrics.embed_skipped.clone(),
        );
        metrics
    }

    pub fn embedded(&self, turns: usize) {
        self.turns_embedded.inc_by(turns as u64);
    }

    pub fn embed_failed(&self) {
        self.embed_failures.inc();
    }

    pub fn embed_skipped(&self, conversations: usize) {
        self.embed_skipped.inc_by(conversations as u64);
    }

    pub fn fallback(&self, reason: &str) {
        self.fallbacks.get_or_create(&vec![("reason".into(), reason.into())]).inc();
    }

    pub fn llm_tokens(&self, tokens: i64) {
        self.llm_tokens.inc_by(tokens.max(0) as u64);
    }

    pub fn extraction(&self, status: &str, extractor: &str) {
        self.extractions
            .get_or_create(&vec![("status".into(), status.into()), ("extractor".into(), extractor.into())])
            .inc();
    }

    pub fn safety_flag(&self, flag: &str) {
        self.safety_flags.get_or_create(&vec![("flag".into(), flag.into())]).inc();
    }

    pub fn stored(&self, memory_type: &str) {
        self.memories_stored.get_or_create(&vec![("memory_type".into(), memory_type.into())]).inc();
    }

    pub fn evicted(&self, count: u64) {
        self.memories_evicted.inc_by(count);
    }
}
