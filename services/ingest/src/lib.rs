//! The ingest service: consumes `conversation.ended`, validates and redacts
//! it, skips players who opted out or were forgotten, records the ledger row and the
//! working-memory summary, and queues `job.extract` through the outbox — one transaction
//! per fetched batch. Also applies `world.player_privacy`, and serves the HTTP front door
//! (`POST /v1/conversations`, `POST /v1/world/{kind}`) for game servers without NATS.

pub mod config;
pub mod conversations;
pub mod front_door;
pub mod metrics;
pub mod privacy;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use prometheus_client::registry::Registry;

pub use config::IngestConfig;

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9301";

/// Durable consumer names.
pub const CONSUMER_CONVERSATIONS: &str = "ingest";
pub const CONSUMER_PRIVACY: &str = "ingest-privacy";

/// The `npcmem-ingest` binary: parse flags and environment, run until SIGTERM/SIGINT.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = IngestConfig::parse();
    npcmem_service::run_main(config.common.telemetry("ingest"), |shutdown| run(config, shutdown))
}

/// Runs ingest until `shutdown` is triggered: stops pulling, finishes the batch in
/// flight, flushes the outbox, returns.
pub async fn run(config: IngestConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "ingest", &mut registry).await?;
    let metrics = metrics::IngestMetrics::register(&mut registry);
    let topology = context.topology.clone();

    let conversations = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_CONVERSATIONS, StreamKind::Conversations, topology.conversation_ended()),
        settings: context.config.consumer_settings(),
        handler: conversations::ConversationHandler::new(
            &config,
            context.pool.clone(),
            topology.clone(),
            metrics.clone(),
        ),
        metrics: context.bus_metrics.clone(),
    };
    let privacy = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_PRIVACY, StreamKind::World, topology.world_player_privacy()),
        settings: context.config.consumer_settings(),
        handler: privacy::PrivacyHandler::new(context.pool.clone(), config.limits().max_payload_bytes),
        metrics: context.bus_metrics.clone(),
    };
    let conversations_consumer = conversations.prepare().await?;
    let privacy_consumer = privacy.prepare().await?;

    let front_door = front_door::routes(context.js.clone(), topology.clone(), config.limits());
    let support = context
        .start_support_with_routes(
            registry,
            DEFAULT_HTTP_ADDR,
            vec![conversations.spec.clone(), privacy.spec.clone()],
            &shutdown,
            Some(front_door),
        )
        .await?;
    tokio::join!(
        conversations.run(conversations_consumer, shutdown.subscribe()),
        privacy.run(privacy_consumer, shutdown.subscribe()),
    );
    support.stop(&context).await;
    Ok(())
}
