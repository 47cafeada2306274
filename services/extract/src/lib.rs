//! The extract service: consumes `job.extract`, claims the conversation on
//! its ledger row, extracts memories (an LLM within the shared budgets, or the offline
//! rules extractor), passes
//! them through the content-safety filter, and stores them within the growth caps
//! together with the outbox `event.memory.stored` — once per conversation, also when
//! nothing was extracted — then publishes `cache.invalidate`.

pub mod budget;
pub mod config;
pub mod embedding;
pub mod handler;
pub mod llm;
pub mod metrics;

use std::sync::Arc;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_llm::{BreakerMetrics, CircuitBreaker, LlmProvider};
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

pub use config::ExtractConfig;

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9302";
/// Durable consumer name; replicas share it.
pub const CONSUMER_EXTRACT: &str = "extract";

/// The `npcmem-extract` binary: parse flags and environment, run until SIGTERM/SIGINT.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = ExtractConfig::parse();
    npcmem_service::run_main(config.common.telemetry("extract"), |shutdown| run(config, shutdown))
}

/// Runs extract until `shutdown` is triggered: stops pulling, finishes the batches in
/// flight, flushes the outbox, returns.
pub async fn run(mut config: ExtractConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    config.validate()?;
    let settings = config.consumer_settings();
    // Each batch in flight holds one connection at a time; budget leases and the
    // service's own tasks need a few more.
    let needed = settings.concurrency as u32 + 4;
    config.common.database_max_connections = config.common.database_max_connections.max(needed);
    let client = config.llm.client()?;
    let embedder = config.embed.embedder()?;
    if let Some(embedder) = &embedder {
        info!(model = embedder.model(), "recall embedding on");
    }
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "extract", &mut registry).await?;
    let budgets = config.common.error_budgets(&metrics::BUDGETS);
    context.health.watch_budgets(budgets.clone());
    let metrics = metrics::ExtractMetrics::register(&mut registry, budgets);
    let budget = budget::Budget::new(context.pool.clone(), config.budget_settings());
    let llm = client.map(|client| {
        info!(
            provider = client.name(),
            model = client.model(),
            in_flight = config.extract_in_flight,
            "llm extraction on"
        );
        let breaker = CircuitBreaker::new(client.name().to_owned(), config.llm.breaker_settings())
            .with_metrics(BreakerMetrics::register(&mut registry));
        Arc::new(llm::LlmExtractor::new(
            client,
            breaker,
            budget.clone(),
            config.extract_in_flight,
            config.llm.llm_json_mode,
        ))
    });
    let topology = context.topology.clone();
    let spec = topology.consumer(CONSUMER_EXTRACT, StreamKind::Jobs, topology.job_extract());
    let (embedding, embed_task) = match embedder {
        Some(embedder) => {
            let worker = embedding::EmbedWorker {
                pool: context.pool.clone(),
                nats: context.nats.clone(),
                topology: topology.clone(),
                metrics: metrics.clone(),
                embedder,
                batch: config.embed.embed_batch,
            };
            let (queue, task) = embedding::EmbedQueue::start(worker, config.embed.embed_queue_batches);
            (Some(queue), Some(task))
        }
        None => (None, None),
    };
    let handler = handler::ExtractHandler::new(
        context.pool.clone(),
        context.nats.clone(),
        topology.clone(),
        metrics,
        llm.clone(),
        spec.ack_wait,
    )
    .with_embedding(embedding);
    let jobs = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec,
        settings,
        handler,
        metrics: context.bus_metrics.clone(),
    };
    let consumer = jobs.prepare().await?;
    let support = context.start_support(registry, DEFAULT_HTTP_ADDR, vec![jobs.spec.clone()], &shutdown).await?;
    let lease_returns = llm.is_some().then(|| tokio::spawn(budget.clone().run_returns(shutdown.subscribe())));
    jobs.run(consumer, shutdown.subscribe()).await;
    // The handler, and with it the queue's sender, is gone: what is queued gets embedded.
    if let Some(task) = embed_task {
        task.finish().await;
    }
    if let Some(task) = lease_returns {
        let _finished = task.await;
        // Every batch has settled: what is left of the lease goes back for other replicas.
        if let Err(error) = budget.return_unused().await {
            warn!(%error, "returning the token lease failed; its tokens stay reserved for today");
        }
    }
    support.stop(&context).await;
    Ok(())
}
