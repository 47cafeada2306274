//! How a command fails, and the exit code a script sees for it (docs/cli.md §Exit codes).

use npcmem_store::StoreError;

/// Exit codes scripts can rely on. Clap's own usage errors also exit with 2.
pub mod exit_code {
    pub const OK: u8 = 0;
    /// The command ran and failed (a write failed, a replay could not be published, …).
    pub const FAILURE: u8 = 1;
    /// Usage or bad input: unknown flag, malformed UUID, unreadable or invalid file,
    /// a destructive command without `--yes`.
    pub const BAD_INPUT: u8 = 2;
    /// The memory, audit entry, dead letter or stream named does not exist.
    pub const NOT_FOUND: u8 = 3;
    /// NATS or Postgres could not be reached (or did not answer in time).
    pub const UNREACHABLE: u8 = 4;
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Clap's rendered message (it already names the argument and shows the usage).
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{dependency} unreachable at {target}: {detail}")]
    Unreachable { dependency: &'static str, target: String, detail: String },
    #[error("{0}")]
    Failed(String),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::BadInput(_) => exit_code::BAD_INPUT,
            CliError::NotFound(_) => exit_code::NOT_FOUND,
            CliError::Unreachable { .. } => exit_code::UNREACHABLE,
            CliError::Failed(_) | CliError::Output(_) => exit_code::FAILURE,
        }
    }

    pub fn failed(context: &str, error: impl std::fmt::Display) -> Self {
        CliError::Failed(format!("{context}: {error}"))
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(source) => CliError::Unreachable {
                dependency: "Postgres",
                target: "NPCMEM_DATABASE_URL".into(),
                detail: source.to_string(),
            },
            StoreError::Constraint(source) => CliError::BadInput(format!("the database refused the change: {source}")),
            other => CliError::Failed(other.to_string()),
        }
    }
}

impl From<sqlx::Error> for CliError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::from(error).into()
    }
}
