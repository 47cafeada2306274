use npcmem_service::ErrorBudgets;
use npcmem_service::error_budgets::EXTRACTION_SUCCESS_RATE;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The error budget extract is judged by (automatic degraded mode).
pub const BUDGETS: [npcmem_service::error_budgets::Check; 1] = [EXTRACTION_SUCCESS_RATE];

type Labels = Vec<(String, String)>;

/// `memory_extractions_total{status,extractor}`, `extraction_jobs_total{state}`, the
/// extraction duration and the jobs in progress, `safety_flags_total{flag}`, plus memories
/// stored and evicted by the caps; finished jobs also feed the extraction success budget.
#[derive(Clone)]
pub struct ExtractMetrics {
    budgets: ErrorBudgets,
    jobs: Family<Labels, Counter>,
    active_jobs: Gauge,
    duration: Histogram,
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
    pub fn register(registry: &mut Registry, budgets: ErrorBudgets) -> Self {
        let metrics = Self {
            budgets,
            jobs: Family::default(),
            active_jobs: Gauge::default(),
            duration: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0]),
            extractions: Family::default(),
            safety_flags: Family::default(),
            memories_stored: Family::default(),
            memories_evicted: Counter::default(),
            fallbacks: Family::default(),
            llm_tokens: Counter::default(),
            turns_embedded: Counter::default(),
            embed_failures: Counter::default(),
            embed_skipped: Counter::default(),
        };
        registry.register(
            "npcmem_extraction_jobs",
            "Extraction jobs by state: pending (taken from the queue), complete, failed (out of attempts), \
             retried (a transient error sent the batch back)",
            metrics.jobs.clone(),
        );
        registry.register(
            "npcmem_active_extraction_jobs",
            "Extraction jobs being worked on now",
            metrics.active_jobs.clone(),
        );
        registry.register(
            "npcmem_memory_extraction_duration_seconds",
            "Time to extract and store one batch of conversations",
            metrics.duration.clone(),
        );
        registry.register(
            "npcmem_memory_extractions",
            "Extractions by status (success, failed) and extractor",
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

    /// A batch of `jobs` taken up; [`Self::finished`] closes it.
    pub fn started(&self, jobs: usize) {
        self.job("pending", jobs);
        self.active_jobs.inc_by(jobs as i64);
    }

    /// The batch of [`Self::started`] ended: `failed` of them out of attempts, or all sent
    /// back for a retry when `retried`.
    pub fn finished(&self, jobs: usize, failed: usize, retried: bool, seconds: f64, extractor: &str) {
        self.active_jobs.dec_by(jobs as i64);
        self.duration.observe(seconds);
        if retried {
            // A batch sent back for a retry did not succeed this time: the budget counts it.
            self.budgets.outcomes(&EXTRACTION_SUCCESS_RATE, 0, jobs as u64);
            self.job("retried", jobs);
            return;
        }
        self.budgets.outcomes(&EXTRACTION_SUCCESS_RATE, (jobs - failed) as u64, jobs as u64);
        self.job("complete", jobs - failed);
        self.job("failed", failed);
        if failed > 0 {
            self.extractions
                .get_or_create(&vec![("status".into(), "failed".into()), ("extractor".into(), extractor.into())])
                .inc_by(failed as u64);
        }
    }

    fn job(&self, state: &str, count: usize) {
        self.jobs.get_or_create(&vec![("state".into(), state.into())]).inc_by(count as u64);
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
