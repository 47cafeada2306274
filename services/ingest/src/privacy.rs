//! The `world.player_privacy` handler: opt-outs take effect for every later conversation.

use npcmem_bus::{BatchHandler, Delivery, Disposition};
use npcmem_core::validate::decode_message;
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

impl BatchHandler for PrivacyHandler {
    async fn handle(&self, batch: &[Delivery]) -> Vec<Disposition> {
        let mut dispositions = Vec::with_capacity(batch.len());
        let mut updates = Vec::with_capacity(batch.len());
        for delivery in batch {
            match decode_message::<PlayerPrivacy>(delivery.payload(), self.max_payload_bytes) {
                Ok(update) => {
                    updates.push(update);
                    dispositions.push(Disposition::Done);
                }
                Err(error) => dispositions.push(error.into()),
            }
        }
        if let Err(error) = self.apply(&mut updates).await {
            Disposition::retry_done(&mut dispositions, &error.to_string());
        }
        dispositions
    }
}
