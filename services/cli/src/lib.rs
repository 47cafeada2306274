//! `npcmem`: the operator's command (docs/cli.md): inspect, clear, inject,
//! audit, stats, lock/unlock, privacy (opt-out, forget-player), export/import, dead
//! letters, factions, maintenance jobs, the demo and benchmarks.
//!
//! A library with a thin `main.rs`, so tests run commands in-process through [`run`] and
//! read what an operator would see. Every command that changes data records itself in
//! `admin_actions` in the same transaction as the change. SQL lives in `npcmem-store`;
//! this crate parses, validates, orchestrates and formats. Of the services it uses only
//! consolidate's jobs (`consolidate run`) and, for benchmarks, gossip's rules.

mod audit;
mod bench;
mod connect;
mod consolidate;
mod demo;
mod dlq;
mod entry;
pub mod env_file;
mod error;
pub mod extraction_set;
mod factions;
mod inspect;
mod memory_admin;
mod privacy;
mod recall;
mod sample;
mod stats;
mod stream_erase;
mod switches;
mod table;
mod train;
mod transfer;

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use npcmem_bus::Topology;
use npcmem_service::CommonConfig;
use uuid::Uuid;

pub use entry::main;
pub use error::{CliError, exit_code};

#[derive(Debug, Parser)]
#[command(
    name = "npcmem",
    version,
    about = "npcmem admin, demo and benchmark command",
    after_help = "Exit codes: 0 done, 1 failed, 2 usage or bad input, 3 not found, \
                  4 NATS or PostgreSQL unreachable. See docs/cli.md."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonConfig,
    #[command(flatten)]
    pub options: CliOptions,
    #[command(subcommand)]
    command: Command,
}

/// Settings of the command itself (not shared with the services).
#[derive(Debug, Clone, clap::Args)]
pub struct CliOptions {
    /// Who is acting, recorded in admin_actions (default: $USER).
    #[arg(long, global = true, env = "NPCMEM_ADMIN_ACTOR")]
    pub actor: Option<String>,
    /// How long to wait for NATS or Postgres before giving up (exit code 4).
    #[arg(long, env = "NPCMEM_CONNECT_TIMEOUT_SECS", default_value_t = 5)]
    pub connect_timeout_secs: u64,
}

impl CliOptions {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs.max(1))
    }

    /// `--actor`, else `NPCMEM_ADMIN_ACTOR` (both through clap), else the OS user.
    pub fn actor(&self) -> Result<String, CliError> {
        let actor = match &self.actor {
            Some(actor) => actor.trim().to_string(),
            None => std::env::var("USER").or_else(|_| std::env::var("USERNAME")).unwrap_or_else(|_| "unknown".into()),
        };
        if actor.is_empty() || actor.chars().count() > 200 {
            return Err(CliError::BadInput("--actor must be 1 to 200 characters".into()));
        }
        Ok(actor)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show an NPC's memories, relationships, working memory and knowledge (of one player
    /// when PLAYER is given).
    Inspect(inspect::InspectArgs),
    /// Delete the memories and working memory of a pair (or of every pair of an NPC).
    Clear(memory_admin::ClearArgs),
    /// Store a memory written by hand (locked, importance up to 1.0).
    Inject(memory_admin::InjectArgs),
    /// Lock a memory: it never decays and is never evicted.
    Lock {
        /// The memory's id (see `inspect`).
        memory_id: Uuid,
    },
    /// Unlock a memory so decay and the growth caps apply to it again.
    Unlock {
        /// The memory's id (see `inspect`).
        memory_id: Uuid,
    },
    /// List flagged memories with their reasons, or mark one reviewed.
    Audit(audit::AuditArgs),
    /// Counts of what is stored, extractions, LLM tokens per day and dead letters.
    Stats(stats::StatsArgs),
    /// The admin_actions log, newest first.
    History(memory_admin::HistoryArgs),
    /// Dead letters on P.dlq.>: list, show, replay, purge.
    Dlq {
        #[command(subcommand)]
        action: dlq::DlqCommand,
    },
    /// Stop recording a player's conversations.
    OptOut {
        /// The player's id.
        player_id: Uuid,
    },
    /// Record a player's conversations again after an opt-out.
    OptIn {
        /// The player's id.
        player_id: Uuid,
    },
    /// Remove every row about a player (the right to be forgotten); needs --yes.
    ForgetPlayer(privacy::ForgetArgs),
    /// Write whole NPCs or the world as JSON lines.
    Export(transfer::ExportArgs),
    /// Load a file written by `export` (idempotent: the same file twice changes nothing).
    Import(transfer::ImportArgs),
    /// Play a scripted scene through the running system and show the NPC remember.
    Demo(demo::DemoArgs),
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
    /// Recall's vectors: embed history with the configured embedder.
    Recall {
        #[command(subcommand)]
        action: recall::RecallCommand,
    },
    /// Train the rules extractor's learned reader on data/extraction/tuning and everyday
    /// chats, writing data/extraction/reader.bin (needs deploy/local/fetch-corpus).
    TrainExtractor(train::TrainArgs),
    /// Runtime switches (degraded mode, gossip, consolidation): list or set.
    Switch {
        #[command(subcommand)]
        action: switches::SwitchCommand,
    },
}

/// Settings of the shared service configuration that only the services use: accepted
/// (one environment serves both) but left out of the CLI's help.
const SERVICE_ONLY: &[&str] = &[
    "http_addr",
    "batch_size",
    "consumer_concurrency",
    "ack_wait_secs",
    "max_deliver",
    "max_ack_pending",
    "retry_initial_ms",
    "duplicate_window_secs",
    "max_message_bytes",
    "work_queue_max_bytes",
    "limits_stream_max_bytes",
    "stream_replicas",
    "outbox_batch_size",
    "outbox_poll_ms",
    "startup_timeout_secs",
    "database_max_connections",
];

/// The CLI's command line: [`Cli`] with the service-only settings hidden from `--help`.
pub fn command() -> clap::Command {
    SERVICE_ONLY.iter().fold(Cli::command(), |command, id| command.mut_arg(*id, |arg| arg.hide(true)))
}

/// Parses `args` (the program name first) and runs the command, writing its output to
/// `out`. `--help` and `--version` are written to `out` and succeed.
pub async fn run<I, T>(args: I, out: &mut dyn Write) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = command().try_get_matches_from(args).and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                write!(out, "{}", error.render())?;
                return Ok(());
            }
            return Err(CliError::Usage(error.render().to_string()));
        }
    };
    execute(cli, out).await
}

/// Runs an already parsed command (main parses first to set up logging).
pub async fn execute(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    cli.common.validate().map_err(|error| CliError::BadInput(error.to_string()))?;
    let context = Context { common: cli.common, options: cli.options };
    match cli.command {
        Command::Inspect(args) => inspect::run(&context, args, out).await,
        Command::Clear(args) => memory_admin::clear(&context, args, out).await,
        Command::Inject(args) => memory_admin::inject(&context, args, out).await,
        Command::Lock { memory_id } => memory_admin::set_locked(&context, memory_id, true, out).await,
        Command::Unlock { memory_id } => memory_admin::set_locked(&context, memory_id, false, out).await,
        Command::Audit(args) => audit::run(&context, args, out).await,
        Command::Stats(args) => stats::run(&context, args, out).await,
        Command::History(args) => memory_admin::history(&context, args, out).await,
        Command::Dlq { action } => dlq::run(&context, action, out).await,
        Command::OptOut { player_id } => privacy::set_opt_out(&context, player_id, true, out).await,
        Command::OptIn { player_id } => privacy::set_opt_out(&context, player_id, false, out).await,
        Command::ForgetPlayer(args) => privacy::forget(&context, args, out).await,
        Command::Export(args) => transfer::export(&context, args, out).await,
        Command::Demo(args) => demo::run(&context, args, out).await,
        Command::Import(args) => transfer::import(&context, args, out).await,
        Command::Factions { action } => factions::run(&context, action, out).await,
        Command::Consolidate { action } => consolidate::run(&context, action, out).await,
        Command::Switch { action } => switches::run(&context, action, out).await,
        Command::Recall { action } => recall::run(&context, action, out).await,
        Command::TrainExtractor(args) => train::run(args, out).map_err(|error| CliError::Failed(format!("{error:#}"))),
        Command::Bench { scenario } => {
            bench::run(&context.common, scenario).await.map_err(|error| CliError::Failed(format!("{error:#}")))
        }
    }
}

impl Cli {
    pub fn log_format(&self) -> npcmem_service::LogFormat {
        self.common.log_format
    }
}

/// What every command gets: the shared settings and the command's own.
pub(crate) struct Context {
    pub common: CommonConfig,
    pub options: CliOptions,
}

impl Context {
    pub async fn postgres(&self) -> Result<npcmem_store::PgPool, CliError> {
        connect::postgres(&self.common, self.options.connect_timeout()).await
    }

    pub async fn bus(&self) -> Result<connect::Bus, CliError> {
        connect::bus(&self.common, self.options.connect_timeout()).await
    }

    /// Tells every enricher to drop the cached pairs (core NATS, after the
    /// commit, best effort — the cache TTL is the safety net, so an unreachable NATS
    /// only earns a warning).
    pub async fn invalidate_caches(&self, messages: &[npcmem_core::wire::CacheInvalidate]) {
        let payloads =
            messages.iter().map(|message| serde_json::to_vec(message).expect("cache.invalidate serialises")).collect();
        self.publish_core(|topology| topology.cache_invalidate(), payloads, "cache TTLs will expire the change").await;
    }

    /// Publishes `payloads` on a core NATS subject and flushes (publishes are buffered,
    /// and the process may exit next). Best effort: a failure is a warning that says what
    /// happens instead (`fallback`).
    pub async fn publish_core(
        &self,
        subject: impl FnOnce(&Topology) -> String,
        payloads: Vec<Vec<u8>>,
        fallback: &str,
    ) {
        let bus = match self.bus().await {
            Ok(bus) => bus,
            Err(error) => {
                eprintln!("npcmem: warning: nothing sent on NATS ({error}); {fallback}");
                return;
            }
        };
        let subject = subject(&bus.topology);
        let sent = async {
            for payload in payloads {
                bus.client.publish(subject.clone(), payload.into()).await.map_err(|error| error.to_string())?;
            }
            match tokio::time::timeout(self.options.connect_timeout(), bus.client.flush()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err("flush timed out".to_owned()),
            }
        };
        if let Err(error) = sent.await {
            eprintln!("npcmem: warning: {subject} may not have left ({error}); {fallback}");
        }
    }
}
