//! `npcmem`: the operator's command: benchmarks, `factions load`, `consolidate run`; the other admin
//! commands of DESIGN §5 (inspect, audit, dlq, export, demo, …) arrive with their issues.

mod bench;
mod consolidate;
mod factions;
mod sample;

use clap::{Parser, Subcommand};
use npcmem_service::CommonConfig;

#[derive(Debug, Parser)]
#[command(name = "npcmem", version, about = "npcmem admin, demo and benchmark command")]
struct Cli {
    #[command(flatten)]
    common: CommonConfig,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive the running services and report throughput against a raw baseline.
    Bench {
        #[command(subcommand)]
        scenario: bench::Scenario,
    },
    /// Run maintenance jobs (decay, consolidate, reinforce) now.
    Consolidate {
        #[command(subcommand)]
        action: consolidate::ConsolidateCommand,
    },
    /// Manage the factions relate initialises relationships from.
    Factions {
        #[command(subcommand)]
        action: factions::FactionsCommand,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    npcmem_service::telemetry::init(cli.common.log_format);
    let result = match cli.command {
        Command::Bench { scenario } => bench::run(&cli.common, scenario).await,
        Command::Factions { action } => factions::run(&cli.common, action).await,
        Command::Consolidate { action } => consolidate::run(&cli.common, action).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("npcmem: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
