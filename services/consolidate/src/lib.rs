//! The consolidate service: scheduled decay (salience and growth caps),
//! consolidation of old episodic clusters into semantic memories (fanned out on
//! `P.job.consolidate` and worked by every replica) and procedural reinforcement, each
//! job run by one replica per schedule tick.

pub mod config;
pub mod jobs;
pub mod scheduler;
pub mod worker;

use std::time::Duration;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_llm::{BreakerMetrics, CircuitBreaker, LlmProvider};
use npcmem_service::{ServiceContext, ServiceError, Shutdown};
use prometheus_client::registry::Registry;

pub use config::ConsolidateConfig;
pub use jobs::{Job, JobContext};

/// Used when `NPCMEM_HTTP_ADDR` is not set.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9305";
/// Durable consumer of `P.job.consolidate`; replicas share it.
pub const CONSUMER_CONSOLIDATE: &str = "consolidate";

pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = ConsolidateConfig::parse();
    npcmem_service::run_main(config.common.telemetry("consolidate"), |shutdown| run(config, shutdown))
}

pub async fn run(config: ConsolidateConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    config.validate()?;
    let [decay, consolidate, reinforce] = config.jobs.schedules()?;
    let client = config.llm.client()?;
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "consolidate", &mut registry).await?;
    let jobs = JobContext {
        pool: context.pool.clone(),
        nats: Some(context.nats.clone()),
        topology: context.topology.clone(),
        decay_batch_pages: config.jobs.decay_batch_pages,
        recall_max_turns: config.jobs.recall_max_turns_per_pair,
        slices: config.jobs.maintenance_slices,
    };
    let summariser = client.map(|client| {
        let breaker = CircuitBreaker::new(format!("consolidation:{}", client.name()), config.llm.breaker_settings())
            .with_metrics(BreakerMetrics::register(&mut registry));
        worker::Summariser { client, breaker, per_minute: config.jobs.memory_consolidation_rpm }
    });
    let topology = context.topology.clone();
    let consumer_loop = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_CONSOLIDATE, StreamKind::Jobs, topology.job_consolidate()),
        settings: context.config.consumer_settings(),
        handler: worker::ConsolidateWorker::new(jobs.clone(), summariser),
        metrics: context.bus_metrics.clone(),
    };
    let consumer = consumer_loop.prepare().await?;
    let support =
        context.start_support(registry, DEFAULT_HTTP_ADDR, vec![consumer_loop.spec.clone()], &shutdown).await?;
    let scheduler = scheduler::Scheduler {
        jobs,
        database_url: config.common.database_url.clone(),
        schedules: vec![(Job::Decay, decay), (Job::Consolidate, consolidate), (Job::Reinforce, reinforce)],
        poll: Duration::from_millis(config.jobs.scheduler_poll_ms.max(100)),
        runner: format!("{}-{}", hostname(), std::process::id()),
    };
    let scheduled = tokio::spawn(scheduler.run(shutdown.subscribe()));
    consumer_loop.run(consumer, shutdown.subscribe()).await;
    let _ = scheduled.await;
    support.stop(&context).await;
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}
