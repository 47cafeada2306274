//! The `world.player_privacy` handler: opt-outs take effect for every later conversation.

use npcmem_bus::{BatchHandler, BatchWork, Delivery, Disposition, Failure, Outcome, run_batch};
use npcmem_core::validate::{ValidationError, decode_message};
use npcmem_core::wire::PlayerPrivacy;
use npcmem_store::{PgPool, StoreError, privacy};
use tracing::info;

pub struct PrivacyHandler {
    pool: PgPool,
    max_payload_bytes: usize,
}

impl PrivacyHandler {
    pub fn new(pool: PgPool, max_payload_bytes: usize) -> Self {
        Self { pool, max_payload_bytes }
    }

    async fn apply(&self, updates: &mut [PlayerPrivacy]) -> Result<(), StoreError> {
        if updates.is_empty() {
            return Ok(());
        }
        // Player order keeps concurrent batches deadlock-free; for one player the newest
        // `at` wins whatever the arrival order. A future `at` is capped at now, so a bad
        // clock cannot make one choice stick forever (an opt-out still applies).
        let now = chrono::Utc::now();
        updates.sort_unstable_by_key(|update| (update.player_id, update.at));
        let mut transaction = self.pool.begin().await?;
        for update in updates.iter() {
            let at = update.at.min(now);
            let applied =
                privacy::set_allow_memory(&mut transaction, update.player_id, update.allow_memory, at).await?;
            if applied {
                info!(player_id = %update.player_id, allow_memory = update.allow_memory, "player privacy updated");
            }
        }
        transaction.commit().await?;
        Ok(())
    }
}

impl BatchWork for PrivacyHandler {
    type Item = PlayerPrivacy;
    /// Several updates of one player in a batch all apply (the newest `at` wins).
    type Key = ();

    fn decode(&self, delivery: &Delivery) -> Result<PlayerPrivacy, ValidationError> {
        decode_message::<PlayerPrivacy>(delivery.payload(), self.max_payload_bytes)
    }

    fn key(&self, _update: &PlayerPrivacy) -> Option<()> {
        None
    }

    async fn process(&self, updates: &[PlayerPrivacy], _batch: &[Delivery]) -> Result<Outcome, Failure> {
        self.apply(&mut updates.to_vec()).await?;
        Ok(Outcome::done())
    }
}

impl BatchHandler for PrivacyHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        run_batch(self, batch).await
    }
}
