//! `npcmem bench`: scenarios that drive the real, running services over NATS and report
//! throughput and latency next to a raw baseline measured in the same run (DESIGN §7).

mod ingest;
mod rss;

use clap::Subcommand;
use npcmem_service::CommonConfig;

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Conversations/s persisted and queued by a running npcmem-ingest (with no extract
    /// consuming jobs), vs raw JetStream publish+ack of the same payloads.
    Ingest(ingest::IngestBenchArgs),
}

pub async fn run(common: &CommonConfig, scenario: Scenario) -> anyhow::Result<()> {
    match scenario {
        Scenario::Ingest(args) => ingest::run(common, args).await,
    }
}
