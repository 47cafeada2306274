//! What every npcmem binary shares: configuration from flags and `NPCMEM_*` environment
//! variables, tracing set-up, the `/healthz` `/readyz` `/metrics` HTTP listener, graceful
//! shutdown, and [`ServiceContext`], the connected NATS + Postgres a service runs on.
//! Knows the bus and the store, never a particular service.

pub mod config;
pub mod context;
pub mod embed;
pub mod error;
pub mod error_budgets;
pub mod health;
pub mod http;
pub mod llm;
pub mod shutdown;
pub mod switches;
pub mod telemetry;

pub use config::{CommonConfig, LogFormat};
pub use context::{ServiceContext, Support};
pub use error::ServiceError;
pub use error_budgets::ErrorBudgets;
pub use health::Health;
pub use shutdown::{Shutdown, run_main, wait_for_signal};
