//! The relate service: consumes `event.memory.stored`, creates missing
//! relationships from the initial values and faction attitudes, applies each
//! conversation's deltas exactly once with optimistic concurrency, recomputes stage,
//! disposition and faction reputation, and emits `signal.relationship_changed`,
//! `signal.memory_milestone`, `signal.faction_reputation_shift` and
//! `event.relationship.changed` through the outbox, then `cache.invalidate`.

pub mod config;
pub mod handler;
pub mod metrics;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use npcmem_store::relationships;
use prometheus_client::registry::Registry;
use tracing::info;

pub use config::RelateConfig;

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9303";
/// Durable consumer name; replicas share it.
pub const CONSUMER_RELATE: &str = "relate";

/// The `npcmem-relate` binary: parse flags and environment, run until SIGTERM/SIGINT.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = RelateConfig::parse();
    npcmem_service::run_main(config.common.telemetry("relate"), |shutdown| run(config, shutdown))
}

/// Runs relate until `shutdown`: a bad rules or factions file stops it before it
/// connects, with the reason.
pub async fn run(config: RelateConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    let rules = config.rules()?;
    let factions_file = config.factions()?;
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "relate", &mut registry).await?;
    if let Some(file) = &factions_file {
        let mut transaction = context.pool.begin().await.map_err(npcmem_store::StoreError::from)?;
        let loaded = relationships::load_factions_file(&mut transaction, file).await?;
        transaction.commit().await.map_err(npcmem_store::StoreError::from)?;
        info!(factions = loaded.factions, attitudes = loaded.attitudes, npcs = loaded.npcs, "factions file loaded");
    }
    let metrics = metrics::RelateMetrics::register(&mut registry);
    let topology = context.topology.clone();
    let events = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_RELATE, StreamKind::Events, topology.event("memory.stored")),
        settings: context.config.consumer_settings(),
        handler: handler::RelateHandler::new(
            context.pool.clone(),
            context.nats.clone(),
            topology.clone(),
            rules,
            metrics,
            config.relate_max_retries,
        ),
        metrics: context.bus_metrics.clone(),
    };
    let consumer = events.prepare().await?;
    let support = context.start_support(registry, DEFAULT_HTTP_ADDR, vec![events.spec.clone()], &shutdown).await?;
    events.run(consumer, shutdown.subscribe()).await;
    support.stop(&context).await;
    Ok(())
}
