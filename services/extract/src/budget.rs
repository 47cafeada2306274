//! This replica's side of the shared LLM budgets: a lease on the global day
//! budget spent locally, per-NPC reservations and the extraction rate in the claim
//! transaction, and settlement with what the provider reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use npcmem_store::{PgConnection, PgPool, StoreError, budgets};
use tokio::sync::Mutex;
use tracing::{debug, warn};

#[derive(Debug, Clone)]
pub struct BudgetSettings {
    pub enabled: bool,
    pub daily_tokens: i64,
    pub per_npc_daily_tokens: i64,
    pub extractions_per_minute: i64,
    pub lease_tokens: i64,
    pub lease_return: Duration,
}

/// The budget day: reservations and settlements use the UTC date of the reservation.
pub fn budget_day(now: DateTime<Utc>) -> NaiveDate {
    now.date_naive()
}

/// Clone-cheap handle; every batch of the replica shares one lease.
#[derive(Clone)]
pub struct Budget {
    pool: PgPool,
    settings: Arc<BudgetSettings>,
    lease: Arc<Mutex<Lease>>,
}

/// Tokens leased from one day's global row and not yet reserved, plus what the reserved
/// ones really cost (written back when the lease is returned).
struct Lease {
    day: NaiveDate,
    remaining: i64,
    spent: i64,
    calls: i64,
    last_grant: i64,
    last_grant_at: Option<Instant>,
}

impl Budget {
    pub fn new(pool: PgPool, settings: BudgetSettings) -> Self {
        let lease =
            Lease { day: budget_day(Utc::now()), remaining: 0, spent: 0, calls: 0, last_grant: 0, last_grant_at: None };
        Self { pool, settings: Arc::new(settings), lease: Arc::new(Mutex::new(lease)) }
    }

    pub fn settings(&self) -> &BudgetSettings {
        &self.settings
    }

    /// Takes `tokens` of `day`'s global budget from the lease, leasing more when it runs
    /// short; false when the day's budget cannot pay them.
    pub async fn take_global(&self, day: NaiveDate, tokens: i64) -> Result<bool, StoreError> {
        let mut lease = self.lease.lock().await;
        if lease.day != day {
            self.return_lease(&mut lease).await?;
            lease.day = day;
        }
        if lease.remaining >= tokens {
            lease.remaining -= tokens;
            return Ok(true);
        }
        // Under load a lease lasts only moments: lease twice the last one if it was taken
        // within the last second, so the global row is written a few times a second at most.
        let recent = lease.last_grant_at.is_some_and(|at| at.elapsed() < Duration::from_secs(1));
        let base = if recent { lease.last_grant.saturating_mul(2) } else { self.settings.lease_tokens };
        let want = base.max(self.settings.lease_tokens).max(tokens - lease.remaining);
        let need = tokens - lease.remaining;
        let mut connection = self.pool.acquire().await?;
        let granted = budgets::lease_global(&mut connection, day, want, need, self.settings.daily_tokens).await?;
        if granted < need {
            debug!(tokens, granted, "global token budget spent for today");
            return Ok(false);
        }
        lease.remaining += granted - tokens;
        lease.last_grant = granted;
        lease.last_grant_at = Some(Instant::now());
        Ok(true)
    }

    /// Settles `reserved` global tokens taken on `day` with what they really cost.
    pub async fn settle_global(&self, day: NaiveDate, reserved: i64, charged: i64, calls: i64) {
        let mut lease = self.lease.lock().await;
        if lease.day == day {
            lease.remaining += reserved - charged;
            lease.spent += charged;
            lease.calls += calls;
            return;
        }
        // The day changed while the call ran: settle against the day it was taken from.
        drop(lease);
        let result = async {
            let mut connection = self.pool.acquire().await?;
            budgets::release_global(&mut connection, day, reserved - charged, charged, calls).await
        }
        .await;
        if let Err(error) = result {
            warn!(%error, "settling yesterday's global tokens failed; they stay reserved");
        }
    }

    /// Gives the lease's unused tokens back and records what was spent.
    pub async fn return_unused(&self) -> Result<(), StoreError> {
        let mut lease = self.lease.lock().await;
        self.return_lease(&mut lease).await
    }

    async fn return_lease(&self, lease: &mut Lease) -> Result<(), StoreError> {
        if lease.remaining == 0 && lease.spent == 0 && lease.calls == 0 {
            return Ok(());
        }
        let mut connection = self.pool.acquire().await?;
        budgets::release_global(&mut connection, lease.day, lease.remaining, lease.spent, lease.calls).await?;
        lease.remaining = 0;
        lease.spent = 0;
        lease.calls = 0;
        Ok(())
    }

    /// Reserves per-NPC tokens inside the claim transaction; returns the NPCs that got them.
    pub async fn reserve_npcs(
        &self,
        connection: &mut PgConnection,
        day: NaiveDate,
        requests: &[(uuid::Uuid, i64)],
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        budgets::reserve_npcs(connection, day, requests, self.settings.per_npc_daily_tokens).await
    }

    /// Replaces per-NPC reservations by what they cost, inside `connection`'s transaction.
    pub async fn settle_npcs(
        &self,
        connection: &mut PgConnection,
        day: NaiveDate,
        settlements: &[budgets::NpcSettlement],
    ) -> Result<(), StoreError> {
        budgets::settle_npcs(connection, day, settlements).await
    }

    /// One NPC reservation outside any transaction (a retry's).
    pub async fn reserve_npc_now(&self, day: NaiveDate, npc_id: uuid::Uuid, tokens: i64) -> Result<bool, StoreError> {
        let mut connection = self.pool.acquire().await?;
        let granted = self.reserve_npcs(&mut connection, day, &[(npc_id, tokens)]).await?;
        Ok(!granted.is_empty())
    }

    /// Extraction requests granted by the shared per-minute rate.
    pub async fn grant_extractions(
        &self,
        connection: &mut PgConnection,
        now: DateTime<Utc>,
        wanted: i64,
    ) -> Result<i64, StoreError> {
        budgets::grant_requests(connection, budgets::EXTRACTION_RATE, now, wanted, self.settings.extractions_per_minute)
            .await
    }

    /// Returns the lease every `lease_return`, so an idle replica holds no tokens another
    /// could use, until `shutdown` flips (the service returns it a last time once its
    /// batches are done).
    pub async fn run_returns(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut interval = tokio::time::interval(self.settings.lease_return);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => break,
            }
            if let Err(error) = self.return_unused().await {
                warn!(%error, "returning the token lease failed, will retry");
            }
        }
    }
}
