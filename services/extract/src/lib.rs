//! The extract service (DESIGN §5): consumes `job.extract`, claims the conversation on
//! its ledger row, extracts memories (this build: the offline rules extractor), passes
//! them through the content-safety filter, and stores them within the growth caps
//! together with the outbox `event.memory.stored` — once per conversation, also when
//! nothing was extracted — then publishes `cache.invalidate`.

pub mod config;
pub mod handler;
pub mod metrics;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use prometheus_client::registry::Registry;

pub use config::ExtractConfig;

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9302";
/// Durable consumer name (DESIGN §3); replicas share it.
pub const CONSUMER_EXTRACT: &str = "extract";

/// The `npcmem-extract` binary: parse flags and environment, run until SIGTERM/SIGINT.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = ExtractConfig::parse();
    npcmem_service::run_main(config.common.log_format, |shutdown| run(config, shutdown))
}

/// Runs extract until `shutdown` is triggered: stops pulling, finishes the batches in
/// flight, flushes the outbox, returns.
pub async fn run(config: ExtractConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "extract", &mut registry).await?;
    let metrics = metrics::ExtractMetrics::register(&mut registry);
    let topology = context.topology.clone();
    let jobs = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_EXTRACT, StreamKind::Jobs, topology.job_extract()),
        settings: context.config.consumer_settings(),
        handler: handler::ExtractHandler::new(context.pool.clone(), context.nats.clone(), topology.clone(), metrics),
        metrics: context.bus_metrics.clone(),
    };
    let consumer = jobs.prepare().await?;
    let support = context.start_support(registry, DEFAULT_HTTP_ADDR, vec![jobs.spec.clone()], &shutdown).await?;
    jobs.run(consumer, shutdown.subscribe()).await;
    support.stop(&context).await;
    Ok(())
}
