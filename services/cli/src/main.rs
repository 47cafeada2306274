//! `npcmem`: parses the command line, sets up logging, runs the command from the library,
//! and exits with its code (docs/cli.md §Exit codes).

use clap::Parser;
use npcmem_cli::{Cli, CliError};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    npcmem_service::telemetry::init(cli.log_format());
    let mut stdout = std::io::stdout().lock();
    match npcmem_cli::execute(cli, &mut stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            match &error {
                CliError::Usage(message) => eprint!("{message}"),
                other => eprintln!("npcmem: {other}"),
            }
            std::process::ExitCode::from(error.exit_code())
        }
    }
}
