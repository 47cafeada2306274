//! `/healthz` and `/readyz`: healthy when the store and
//! NATS answer; degraded when NATS is down, the outbox is backing up (the service still
//! commits work, its messages wait) or one of its error budgets is breached; unhealthy
//! when the store is down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use npcmem_bus::BusMetrics;
use serde::Serialize;
use sqlx::PgPool;

/// Outbox rows beyond which the relay is considered behind.
const OUTBOX_BACKLOG_DEGRADED: i64 = 10_000;

#[derive(Clone)]
pub struct Health {
    pool: PgPool,
    nats: async_nats::Client,
    metrics: BusMetrics,
    ready: Arc<AtomicBool>,
    budgets: Arc<OnceLock<crate::ErrorBudgets>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Healthy,
    Degraded,
    Unhealthy,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub status: Status,
    pub ready: bool,
    pub checks: Checks,
}

#[derive(Debug, Serialize)]
pub struct Checks {
    pub store_available: bool,
    pub nats_connected: bool,
    pub outbox_within_limit: bool,
    pub error_budgets_met: bool,
    /// This instance's breached error budgets (see `npcmem switch list` for all).
    pub budgets_breached: Vec<&'static str>,
}

impl Health {
    pub fn new(pool: PgPool, nats: async_nats::Client, metrics: BusMetrics) -> Self {
        Self { pool, nats, metrics, ready: Arc::new(AtomicBool::new(false)), budgets: Arc::default() }
    }

    /// Called once the service's consumers run; `/readyz` answers 200 from then on.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// The service's error budgets: judged by the monitor `start_support` runs, and
    /// reported here. Set once, before `start_support`.
    pub fn watch_budgets(&self, budgets: crate::ErrorBudgets) {
        let _ = self.budgets.set(budgets);
    }

    pub fn budgets(&self) -> Option<&crate::ErrorBudgets> {
        self.budgets.get()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub async fn report(&self) -> Report {
        let store_available = tokio::time::timeout(
            Duration::from_secs(2),
            sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&self.pool),
        )
        .await
        .is_ok_and(|result| result.is_ok());
        let nats_connected = self.nats.connection_state() == async_nats::connection::State::Connected;
        let outbox_within_limit = self.metrics.outbox_depth() < OUTBOX_BACKLOG_DEGRADED;
        let budgets_breached = self.budgets().map(crate::ErrorBudgets::breached).unwrap_or_default();
        let error_budgets_met = budgets_breached.is_empty();
        let status = if !store_available {
            Status::Unhealthy
        } else if nats_connected && outbox_within_limit && error_budgets_met {
            Status::Healthy
        } else {
            Status::Degraded
        };
        Report {
            status,
            ready: self.is_ready(),
            checks: Checks {
                store_available,
                nats_connected,
                outbox_within_limit,
                error_budgets_met,
                budgets_breached,
            },
        }
    }
}
