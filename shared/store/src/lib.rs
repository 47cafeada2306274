//! PostgreSQL persistence for npcmem: the connection pool, the embedded migrations, and
//! one repository module per bounded context. All SQL of the project lives here, next to
//! the row types it reads and writes; queries are parameterised and checked by the
//! integration tests that run them. Depends on `npcmem-core` only, never on NATS.

pub mod admin;
pub mod audit;
pub mod budgets;
pub mod context;
pub mod conversations;
pub mod error;
pub mod error_budgets;
pub mod export;
pub mod factions;
pub mod inspect;
pub mod knowledge;
pub mod locks;
pub mod maintenance;
pub mod memories;
pub mod outbox;
pub mod pool;
pub mod privacy;
pub mod recall;
pub mod relationships;
pub mod stats;
pub mod switches;
pub mod working_memory;

pub use error::StoreError;
pub use pool::{PoolOptions, connect, ensure_database, migrate};
pub use sqlx::{PgConnection, PgPool, Postgres, Transaction};
