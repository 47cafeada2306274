use clap::Parser;
use npcmem_ingest::IngestConfig;
use npcmem_service::{Shutdown, telemetry, wait_for_signal};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = IngestConfig::parse();
    telemetry::init(config.common.log_format);
    let shutdown = Shutdown::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        on_signal.trigger();
    });
    npcmem_ingest::run(config, shutdown).await?;
    Ok(())
}
