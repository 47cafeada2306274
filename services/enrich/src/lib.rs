//! The enrich service: prompt context for an NPC's next line on core NATS
//! request/reply (`P.enrich.request`, queue group `enrich`) and `POST /v1/context`, and
//! the structured query API (`P.query.relationship`, `P.query.memories`,
//! `P.query.knowledge`, `P.query.recall`). Pair data is cached (moka) and dropped on `P.cache.invalidate`.

pub mod access;
pub mod config;
pub mod enricher;
pub mod loader;
pub mod metrics;
pub mod query;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use npcmem_core::relationship::RelateRules;
use npcmem_core::wire::CacheInvalidate;
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

pub use config::EnrichConfig;

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9306";

pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = EnrichConfig::parse();
    npcmem_service::run_main(config.common.telemetry("enrich"), |shutdown| run(config, shutdown))
}

pub async fn run(mut config: EnrichConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    config.validate()?;
    // A cold request loads its five parts at once, each on its own connection.
    config.common.database_max_connections = config.common.database_max_connections.max(24);
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "enrich", &mut registry).await?;
    let budgets = config.common.error_budgets(&metrics::BUDGETS);
    context.health.watch_budgets(budgets.clone());
    let metrics = metrics::EnrichMetrics::register(&mut registry, budgets);
    let embedder = config.embed.embedder()?;
    if let Some(embedder) = &embedder {
        info!(model = embedder.model(), "recall's dense ranking on");
    }
    let switches = npcmem_service::switches::follow(
        context.pool.clone(),
        &context.nats,
        &context.topology,
        npcmem_service::switches::AT_LEAST_EVERY,
    )
    .await?;
    let ttl = ContextTtl { ttl: Duration::from_secs(config.enrich_cache_ttl_secs), switches };
    let cache = pair_cache(config.enrich_cache_max_mb, config.enrich_cache_capacity, ttl);
    let (accessed, accessed_rx) = tokio::sync::mpsc::unbounded_channel();
    let invalidations = Arc::new(loader::Invalidations::default());
    let loader = loader::Loader::new(
        context.pool.clone(),
        cache.clone(),
        config.provider_timeout(),
        config.recall_max_turns_per_pair,
        embedder.as_ref().map(|embedder| embedder.model()),
        metrics.clone(),
        invalidations.clone(),
    );
    let enricher = Arc::new(enricher::Enricher {
        loader,
        budgets: config.budgets()?,
        default_max_tokens: config.enrich_default_max_tokens,
        metrics,
        accessed,
        recall_rules: npcmem_core::recall::PackRules::default(),
        embedder: embedder.map(|embedder| enricher::QueryEmbedder { embedder, timeout: config.embed.query_timeout() }),
    });
    let handlers = Arc::new(server::Handlers { enricher, pool: context.pool.clone(), rules: RelateRules::default() });
    let topology = context.topology.clone();

    // Subscribe to invalidations before answering anything, so no write is missed.
    let subscription =
        context.nats.subscribe(topology.cache_invalidate()).await.map_err(|e| ServiceError::Config(e.to_string()))?;
    let invalidator = tokio::spawn(invalidate(subscription, cache, invalidations, shutdown.subscribe()));
    let writer = tokio::spawn(access::run_writer(
        context.pool.clone(),
        accessed_rx,
        Duration::from_millis(config.enrich_access_flush_ms.max(10)),
        shutdown.subscribe(),
    ));
    let endpoints = [
        (topology.enrich_request(), server::Endpoint::Context),
        (topology.subject("query.relationship"), server::Endpoint::Relationship),
        (topology.subject("query.memories"), server::Endpoint::Memories),
        (topology.subject("query.knowledge"), server::Endpoint::Knowledge),
        (topology.subject("query.recall"), server::Endpoint::Recall),
    ];
    let mut servers = Vec::new();
    for (subject, endpoint) in endpoints {
        servers.push(tokio::spawn(server::serve_subject(
            context.nats.clone(),
            subject,
            endpoint,
            handlers.clone(),
            shutdown.subscribe(),
        )));
    }
    let support = context
        .start_support_with_routes(registry, DEFAULT_HTTP_ADDR, Vec::new(), &shutdown, Some(server::routes(handlers)))
        .await?;
    info!(http = %support.http_addr, "enrich answering");
    let mut stop = shutdown.subscribe();
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    for server in servers {
        if let Ok(Err(error)) = server.await {
            warn!(%error, "a request subscription failed");
        }
    }
    let _ = invalidator.await;
    let _ = writer.await;
    support.stop(&context).await;
    Ok(())
}

/// The cache of pairs' data: at most `max_mb` by their estimated size and `capacity`
/// pairs, each for the TTL.
fn pair_cache(max_mb: u64, capacity: u64, ttl: ContextTtl) -> moka::future::Cache<loader::Pair, Arc<loader::PairData>> {
    moka::future::Cache::builder()
        // Weighed in KiB: whichever of the two limits is reached first evicts.
        .max_capacity(max_mb.saturating_mul(1024))
        .weigher({
            let pairs = capacity.max(1);
            let floor = (max_mb.saturating_mul(1024) / pairs).max(1);
            move |_pair: &loader::Pair, data: &Arc<loader::PairData>| -> u32 {
                let kib = (data.approximate_bytes() / 1024) as u64;
                u32::try_from(kib.max(floor)).unwrap_or(u32::MAX)
            }
        })
        // LRU, not moka's default TinyLFU: a talk is a burst of requests for a pair that
        // was cold until now. TinyLFU refuses a new pair into a full cache while the pairs
        // there have been asked more often, so the talk that starts now missed on every
        // line (`bench enrich` with 10,000 pairs and 1,000 talking: 5 ms at p50, not 0.4).
        .eviction_policy(moka::policy::EvictionPolicy::lru())
        .expire_after(ttl)
        .support_invalidation_closures()
        .build()
}

/// How long a pair's context stays cached: `ttl`, three times that in degraded mode
/// (less load on Postgres). Writers invalidate entries sooner.
struct ContextTtl {
    ttl: Duration,
    switches: tokio::sync::watch::Receiver<npcmem_store::switches::Switches>,
}

impl ContextTtl {
    fn now(&self) -> Duration {
        if self.switches.borrow().degraded { self.ttl * 3 } else { self.ttl }
    }
}

impl moka::Expiry<loader::Pair, Arc<loader::PairData>> for ContextTtl {
    fn expire_after_create(
        &self,
        _pair: &loader::Pair,
        _data: &Arc<loader::PairData>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(self.now())
    }

    fn expire_after_update(
        &self,
        _pair: &loader::Pair,
        _data: &Arc<loader::PairData>,
        _updated_at: std::time::Instant,
        _until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(self.now())
    }
}

/// Applies `P.cache.invalidate`: one pair, every pair of an NPC or a player, or all.
async fn invalidate(
    mut subscription: async_nats::Subscriber,
    cache: moka::future::Cache<loader::Pair, Arc<loader::PairData>>,
    invalidations: Arc<loader::Invalidations>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    // moka drops an NPC's or a player's entries, and the predicate naming them, only when
    // its pending tasks run, which reads and writes do; an idle enrich would keep every
    // predicate it was sent (a soak measured +46 MB/h with no requests).
    let mut housekeeping = tokio::time::interval(Duration::from_secs(1));
    housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            message = subscription.next() => match message { Some(message) => message, None => break },
            _ = housekeeping.tick() => {
                cache.run_pending_tasks().await;
                continue;
            }
            _ = shutdown.changed() => break,
        };
        let Ok(request) = serde_json::from_slice::<CacheInvalidate>(&message.payload) else { continue };
        let scope = match (request.npc_id, request.player_id) {
            (Some(npc_id), Some(player_id)) => loader::Scope::Pair((npc_id, player_id)),
            (Some(npc_id), None) => loader::Scope::Npc(npc_id),
            (None, Some(player_id)) => loader::Scope::Player(player_id),
            (None, None) => loader::Scope::All,
        };
        // Recorded first: a load finishing between the two steps must not cache.
        invalidations.record(scope);
        match scope {
            loader::Scope::Pair(pair) => cache.invalidate(&pair).await,
            loader::Scope::Npc(npc_id) => {
                let _ = cache.invalidate_entries_if(move |key, _| key.0 == npc_id);
            }
            loader::Scope::Player(player_id) => {
                let _ = cache.invalidate_entries_if(move |key, _| key.1 == player_id);
            }
            loader::Scope::All => cache.invalidate_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_talk_that_starts_now_is_cached_in_a_cache_full_of_pairs_asked_more_often() {
        let (_sender, switches) = tokio::sync::watch::channel(npcmem_store::switches::Switches::default());
        // Room for two pairs: each weighs at least max / capacity.
        let cache = pair_cache(1, 2, ContextTtl { ttl: Duration::from_secs(60), switches });
        let pair = |n: u128| (uuid::Uuid::from_u128(n), uuid::Uuid::from_u128(n));
        for n in [1, 2] {
            cache.insert(pair(n), Arc::default()).await;
        }
        for _ in 0..20 {
            for n in [1, 2] {
                assert!(cache.get(&pair(n)).await.is_some());
            }
        }
        cache.run_pending_tasks().await;
        cache.insert(pair(3), Arc::default()).await;
        cache.run_pending_tasks().await;
        assert!(cache.get(&pair(3)).await.is_some(), "the new talk's pair is cached");
        assert!(cache.get(&pair(1)).await.is_none(), "the least recently asked pair made room");
        assert_eq!(cache.entry_count(), 2);
    }
}
