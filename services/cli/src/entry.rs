//! The `npcmem` binary's entry point: reads the env file, parses the command line, sets up
//! logging, runs the command and exits with its code (docs/cli.md, Exit codes). In the
//! library so the tests can build the same binary under their own name.

use crate::{Cli, CliError};

pub fn main() -> std::process::ExitCode {
    // Before any thread exists: the endpoints deploy/local/up chose, where no flag or
    // variable says otherwise.
    for (key, value) in crate::env_file::endpoints() {
        // SAFETY: single-threaded here; the runtime is built below.
        unsafe { std::env::set_var(key, value) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run())
}

async fn run() -> std::process::ExitCode {
    let cli = crate::command()
        .try_get_matches()
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches))
        .unwrap_or_else(|error| error.exit());
    init_logging(cli.log_format());
    let mut stdout = std::io::stdout().lock();
    match crate::execute(cli, &mut stdout).await {
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

/// Logs go to stderr (stdout carries the command's output, e.g. `--json` documents) and
/// only warnings by default; `RUST_LOG` raises it.
fn init_logging(format: npcmem_service::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        npcmem_service::LogFormat::Pretty => builder.try_init(),
        npcmem_service::LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
