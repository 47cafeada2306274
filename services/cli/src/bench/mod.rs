//! `npcmem bench`: scenarios that drive the real, running services over NATS and report
//! throughput and latency next to a raw baseline measured in the same run (docs/benchmarks.md).

mod chitchat;
mod decay;
mod enrich;
mod extract;
mod gossip;
mod ingest;
mod load;
mod pii;
mod pipeline;
mod recall;
mod relate;
mod rss;
mod scratch;
mod soak;

pub(crate) use chitchat::everyday_chats;

use anyhow::Context as _;
use async_nats::jetstream;
use clap::Subcommand;
use npcmem_bus::Topology;
use npcmem_service::CommonConfig;

use crate::sample::SampleConversation;

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Conversations/s persisted and queued by a running npcmem-ingest (with no extract
    /// consuming jobs), vs raw JetStream publish+ack of the same payloads.
    Ingest(ingest::IngestBenchArgs),
    /// Conversations/s from publish to memories committed through ingest and extract,
    /// and freshness at half that rate.
    Pipeline(pipeline::PipelineBenchArgs),
    /// Relationship updates/s by a scratch npcmem-relate, spread over 10,000 pairs and on
    /// one hot pair.
    Relate(relate::RelateBenchArgs),
    /// Seconds for the decay job over 1,000,000 memories in 4,000 pairs (caps prune
    /// 200,000), on a scratch database.
    Decay(decay::DecayBenchArgs),
    /// Enrich latency and requests/s (warm and cold cache) over 1,000 pairs × 200
    /// memories and 1,000 verbatim turns, beside a direct SQL read of the same rows.
    Enrich(enrich::EnrichBenchArgs),
    /// Gossip tick duration and exchanges/s over 100,000 NPCs in 10,000 rooms, and the
    /// pair-queue rebuild after 1,000 moves.
    Gossip(gossip::GossipBenchArgs),
    /// Precision and recall per kind of the rules extractor on the labelled set in
    /// data/extraction, and false event memories per 500 real everyday chats, beside a
    /// keyword baseline.
    Extract(extract::ExtractBenchArgs),
    /// Evidence and answer recall of enrich's context on LoCoMo conversations (real chats
    /// over months, questions written by people), beside plain BM25, standard BM25 with
    /// the next turn, and the most recent turns, at the same token budgets.
    Recall(recall::RecallBenchArgs),
    /// Precision and recall per PII kind of the redactor on generated chat lines, and its
    /// MB/s on ordinary game text, beside the US-formats redactor before issue 20.
    Pii(pii::PiiBenchArgs),
    /// A steady rate through a running deployment (e.g. deploy/cluster) for a bounded
    /// time: every service process's RSS trend after warm-up and end-to-end freshness.
    Soak(soak::SoakBenchArgs),
}

pub async fn run(common: &CommonConfig, scenario: Scenario) -> anyhow::Result<()> {
    match scenario {
        Scenario::Ingest(args) => ingest::run(common, args).await,
        Scenario::Pipeline(args) => pipeline::run(common, args).await,
        Scenario::Relate(args) => relate::run(common, args).await,
        Scenario::Decay(args) => decay::run(common, args).await,
        Scenario::Enrich(args) => enrich::run(common, args).await,
        Scenario::Gossip(args) => gossip::run(common, args).await,
        Scenario::Recall(args) => recall::run(common, args).await,
        Scenario::Extract(args) => extract::run(args).await,
        Scenario::Pii(args) => pii::run(args).await,
        Scenario::Soak(args) => soak::run(common, args).await,
    }
}

async fn connect(common: &CommonConfig) -> anyhow::Result<(jetstream::Context, sqlx::PgPool, Topology)> {
    let nats = async_nats::connect(common.nats_servers())
        .await
        .with_context(|| format!("cannot reach NATS at {}", common.nats_url))?;
    let pool = npcmem_store::connect(&common.database_url, &common.pool_options())
        .await
        .with_context(|| "cannot reach Postgres (NPCMEM_DATABASE_URL)")?;
    let topology = Topology::new(&common.subject_prefix, &common.stream_prefix, common.topology_settings());
    Ok((jetstream::new(nats), pool, topology))
}

fn describe(samples: &[SampleConversation], load: &load::LoadArgs) {
    let mean_bytes = samples.iter().map(|s| s.payload.len()).sum::<usize>() / samples.len().max(1);
    println!("payloads: {} distinct, mean {} bytes, over {} pairs", samples.len(), mean_bytes, load.pairs);
}
