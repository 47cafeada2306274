//! One place that maps database failures onto what a consumer must do with them.

/// A store failure, classified once so call sites never re-guess it (STYLE §Errors).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or the connection broke: retry later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent transaction won (serialization failure, deadlock): retry now.
    #[error("concurrent update conflict: {0}")]
    Conflict(#[source] sqlx::Error),
    /// A row violates a constraint: the input itself is wrong, retrying cannot help.
    #[error("constraint violated: {0}")]
    Constraint(#[source] sqlx::Error),
    /// Anything else the database reported.
    #[error("database error: {0}")]
    Other(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// True when the same operation may succeed if tried again later.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unavailable(_) | StoreError::Conflict(_) => true,
            StoreError::Constraint(_) | StoreError::Migrate(_) => false,
            // Unknown server-side errors (out of disk, admin shutdown, ...) are retried:
            // dead-lettering valid input because the server hiccuped would lose nothing
            // but would need an operator, retrying costs only time.
            StoreError::Other(_) => true,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => StoreError::Unavailable(error),
            sqlx::Error::Database(database_error) => {
                let sqlstate = database_error.code().map(|code| code.to_string());
                match sqlstate.as_deref() {
                    // serialization_failure, deadlock_detected
                    Some("40001") | Some("40P01") => StoreError::Conflict(error),
                    // class 08: connection exceptions; 57P0x: admin/crash shutdown
                    Some(code) if code.starts_with("08") || code.starts_with("57P") => StoreError::Unavailable(error),
                    // class 23: integrity constraint violations; 22: data exceptions
                    Some(code) if code.starts_with("23") || code.starts_with("22") => StoreError::Constraint(error),
                    _ => StoreError::Other(error),
                }
            }
            _ => StoreError::Other(error),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
