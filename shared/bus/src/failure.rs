//! The one typed failure every handler returns, and the one helper that runs a batch
//! (decode → process → settle) so each service writes only its decoding and its work.
//!
//! A failure is either permanent — dead-letter the message now with a reason code — or
//! transient — nak it with a delay. Store, validation and LLM errors are classified here,
//! once, instead of at every call site.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;

use npcmem_core::validate::{ReasonCode, ValidationError};
use npcmem_llm::LlmError;
use npcmem_store::StoreError;
use tracing::warn;

use crate::consumer::{Delivery, Disposition};
use crate::dlq::DeadLetterCause;

/// Why a message could not be applied, and therefore what the consumer does with it.
#[derive(Debug, Clone)]
pub enum Failure {
    /// No retry can fix it: dead-letter at once with this reason.
    Permanent(DeadLetterCause),
    /// It may pass later (an outage, a lost race): nak with a delay.
    Transient(String),
}

impl Failure {
    /// A permanent failure; the message is made header-safe as validation messages are.
    pub fn permanent(code: ReasonCode, message: impl Into<String>) -> Self {
        let safe = ValidationError::new(code, message);
        Failure::Permanent(DeadLetterCause { code, message: safe.message })
    }

    pub fn transient(reason: impl Into<String>) -> Self {
        Failure::Transient(reason.into())
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, Failure::Permanent(_))
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Permanent(cause) => write!(formatter, "{}: {}", cause.code, cause.message),
            Failure::Transient(reason) => formatter.write_str(reason),
        }
    }
}

impl From<Failure> for Disposition {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Permanent(cause) => Disposition::Reject(cause),
            Failure::Transient(reason) => Disposition::Retry(reason),
        }
    }
}

impl From<ValidationError> for Failure {
    fn from(error: ValidationError) -> Self {
        Failure::Permanent(DeadLetterCause { code: error.code, message: error.message })
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match &error {
            // The database's own words (and SQLSTATE) name the row and the rule it broke.
            StoreError::Constraint(sqlx::Error::Database(database)) => Failure::permanent(
                ReasonCode::Refused,
                format!(
                    "refused by the database (SQLSTATE {}): {}",
                    database.code().as_deref().unwrap_or("?"),
                    database.message()
                ),
            ),
            StoreError::Constraint(_) => {
                Failure::permanent(ReasonCode::Refused, format!("refused by the database: {error}"))
            }
            // A failed migration is the deployment's fault, not the message's: once the
            // schema is fixed, the same message applies.
            StoreError::Migrate(_) => Failure::Transient(error.to_string()),
            _ if error.is_transient() => Failure::Transient(error.to_string()),
            _ => Failure::permanent(ReasonCode::Refused, format!("refused by the database: {error}")),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        StoreError::from(error).into()
    }
}

impl From<LlmError> for Failure {
    /// For a handler that has no fallback for a failed call. A 400/413/422 refuses the
    /// request built from this message, so it is this message's fault; every other error
    /// (429, 5xx, timeouts, transport, a garbage or refused call while the breaker is open,
    /// and 401/403/404/408, which are a key, a model name or a network to fix) passes
    /// with time or an operator's fix and must not dead-letter valid input. Extract and
    /// consolidate fall back to the rules on any LLM error, so there it fails nothing.
    fn from(error: LlmError) -> Self {
        match &error {
            LlmError::Client { status: 400 | 413 | 422, .. } => {
                Failure::permanent(ReasonCode::Refused, format!("refused by the llm provider: {error}"))
            }
            _ => Failure::Transient(error.to_string()),
        }
    }
}

impl From<tokio::task::JoinError> for Failure {
    /// A blocking task that panicked or was cancelled (shutdown): tried again later.
    fn from(error: tokio::task::JoinError) -> Self {
        Failure::Transient(format!("background task failed: {error}"))
    }
}

/// What processing the decoded items settled, beyond "all applied": items that failed
/// alone while the rest committed (extract's exhausted jobs, a consolidate pair).
#[derive(Debug, Default)]
pub struct Outcome {
    failed: Vec<(usize, Failure)>,
}

impl Outcome {
    /// Every item applied.
    pub fn done() -> Self {
        Self::default()
    }

    /// Item `index` (of the slice given to `process`) failed; the others are applied.
    pub fn fail(&mut self, index: usize, failure: Failure) {
        self.failed.push((index, failure));
    }
}

/// A service's batch work: how one delivery decodes and how decoded items are applied.
pub trait BatchWork: Send + Sync {
    type Item: Send + Sync;
    /// Deliveries whose items share a key in one batch are applied once (all acked).
    type Key: Eq + Hash + Send;

    fn decode(&self, delivery: &Delivery) -> Result<Self::Item, ValidationError>;

    /// The deduplication key of an item; `None` never deduplicates it.
    fn key(&self, item: &Self::Item) -> Option<Self::Key>;

    /// Applies `items` (committed before returning `Ok`). `batch` is the whole batch, for
    /// in-progress acks during long work. Called again with one item at a time when a
    /// batch of several fails permanently, so it must roll back everything on `Err`.
    fn process(
        &self,
        items: &[Self::Item],
        batch: &[Delivery],
    ) -> impl Future<Output = Result<Outcome, Failure>> + Send;
}

/// Decodes every delivery, processes the decoded items and settles each delivery: bad
/// input is rejected with its validation reason whatever happens to the rest.
pub async fn run_batch<W: BatchWork>(work: &W, batch: &[Delivery]) -> Vec<Disposition> {
    let decoded: Vec<Result<W::Item, ValidationError>> = batch.iter().map(|delivery| work.decode(delivery)).collect();
    settle(work, decoded, batch).await
}

/// [`run_batch`] after decoding (unit tests call it without deliveries).
pub async fn settle<W: BatchWork>(
    work: &W,
    decoded: Vec<Result<W::Item, ValidationError>>,
    batch: &[Delivery],
) -> Vec<Disposition> {
    // Per delivery: the index of its item, or why it was rejected.
    let mut slots: Vec<Result<usize, DeadLetterCause>> = Vec::with_capacity(decoded.len());
    let mut items: Vec<W::Item> = Vec::with_capacity(decoded.len());
    let mut by_key: HashMap<W::Key, usize> = HashMap::new();
    for result in decoded {
        slots.push(match result {
            Ok(item) => match work.key(&item) {
                Some(key) => match by_key.get(&key) {
                    Some(&slot) => Ok(slot),
                    None => {
                        by_key.insert(key, items.len());
                        items.push(item);
                        Ok(items.len() - 1)
                    }
                },
                None => {
                    items.push(item);
                    Ok(items.len() - 1)
                }
            },
            Err(error) => Err(DeadLetterCause { code: error.code, message: error.message }),
        });
    }
    let item_dispositions = if items.is_empty() { Vec::new() } else { process_all(work, &items, batch).await };
    slots
        .into_iter()
        .map(|slot| match slot {
            Ok(index) => item_dispositions[index].clone(),
            Err(cause) => Disposition::Reject(cause),
        })
        .collect()
}

/// One disposition per item.
async fn process_all<W: BatchWork>(work: &W, items: &[W::Item], batch: &[Delivery]) -> Vec<Disposition> {
    match work.process(items, batch).await {
        Ok(outcome) => dispositions_of(items.len(), outcome),
        Err(Failure::Transient(reason)) => {
            warn!(%reason, size = items.len(), "batch failed, will retry");
            vec![Disposition::Retry(reason); items.len()]
        }
        Err(Failure::Permanent(cause)) if items.len() == 1 => vec![Disposition::Reject(cause)],
        Err(Failure::Permanent(cause)) => {
            // One item the database (or a model) refuses must not hold back the rest, and
            // the others must not share its reason: apply each alone to find it.
            warn!(reason = %cause.code, message = %cause.message, size = items.len(),
                  "batch refused, applying its items one by one");
            let mut dispositions = Vec::with_capacity(items.len());
            for item in items {
                let one = std::slice::from_ref(item);
                dispositions.push(match work.process(one, batch).await {
                    Ok(outcome) => dispositions_of(1, outcome).remove(0),
                    Err(failure) => failure.into(),
                });
            }
            dispositions
        }
    }
}

fn dispositions_of(count: usize, outcome: Outcome) -> Vec<Disposition> {
    let mut dispositions = vec![Disposition::Done; count];
    for (index, failure) in outcome.failed {
        if let Some(disposition) = dispositions.get_mut(index) {
            *disposition = failure.into();
        }
    }
    dispositions
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Items are numbers; `refused` ones fail permanently, `flaky` ones transiently,
    /// `exhausted` ones are reported as failed alone. Records every call.
    #[derive(Default)]
    struct Numbers {
        refused: Vec<u32>,
        flaky: Vec<u32>,
        exhausted: Vec<u32>,
        calls: Mutex<Vec<Vec<u32>>>,
    }

    impl BatchWork for Numbers {
        type Item = u32;
        type Key = u32;

        fn decode(&self, delivery: &Delivery) -> Result<u32, ValidationError> {
            std::str::from_utf8(delivery.payload())
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| ValidationError::new(ReasonCode::InvalidJson, "not a number"))
        }

        fn key(&self, item: &u32) -> Option<u32> {
            Some(*item)
        }

        async fn process(&self, items: &[u32], _batch: &[Delivery]) -> Result<Outcome, Failure> {
            self.calls.lock().unwrap().push(items.to_vec());
            if let Some(bad) = items.iter().find(|item| self.refused.contains(item)) {
                return Err(Failure::permanent(ReasonCode::Refused, format!("{bad} refused")));
            }
            if items.iter().any(|item| self.flaky.contains(item)) {
                return Err(Failure::transient("database down"));
            }
            let mut outcome = Outcome::done();
            for (index, item) in items.iter().enumerate() {
                if self.exhausted.contains(item) {
                    outcome.fail(index, Failure::permanent(ReasonCode::MaxDeliveries, format!("{item} gave up")));
                }
            }
            Ok(outcome)
        }
    }

    fn bad() -> Result<u32, ValidationError> {
        Err(ValidationError::new(ReasonCode::InvalidJson, "not a number"))
    }

    fn summary(dispositions: &[Disposition]) -> Vec<String> {
        dispositions
            .iter()
            .map(|disposition| match disposition {
                Disposition::Done => "done".to_owned(),
                Disposition::Reject(cause) => format!("reject {} {}", cause.code, cause.message),
                Disposition::Retry(reason) => format!("retry {reason}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_refused_item_is_isolated_and_rejected_with_its_own_reason() {
        let work = Numbers { refused: vec![2], ..Numbers::default() };
        let dispositions = settle(&work, vec![Ok(1), Ok(2), bad(), Ok(3)], &[]).await;
        assert_eq!(
            summary(&dispositions),
            ["done", "reject refused 2 refused", "reject invalid_json not a number", "done"]
        );
        assert_eq!(*work.calls.lock().unwrap(), [vec![1, 2, 3], vec![1], vec![2], vec![3]]);
    }

    #[tokio::test]
    async fn a_single_refused_item_is_rejected_without_a_second_try() {
        let work = Numbers { refused: vec![7], ..Numbers::default() };
        let dispositions = settle(&work, vec![Ok(7)], &[]).await;
        assert_eq!(summary(&dispositions), ["reject refused 7 refused"]);
        assert_eq!(work.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_transient_failure_retries_the_decoded_items_only() {
        let work = Numbers { flaky: vec![1], ..Numbers::default() };
        let dispositions = settle(&work, vec![Ok(1), bad(), Ok(2)], &[]).await;
        assert_eq!(
            summary(&dispositions),
            ["retry database down", "reject invalid_json not a number", "retry database down"]
        );
        assert_eq!(work.calls.lock().unwrap().len(), 1, "no one-by-one pass for a transient failure");
    }

    #[tokio::test]
    async fn isolation_keeps_transient_failures_transient() {
        let work = Numbers { refused: vec![1], flaky: vec![2], ..Numbers::default() };
        let dispositions = settle(&work, vec![Ok(1), Ok(2), Ok(3)], &[]).await;
        assert_eq!(summary(&dispositions), ["reject refused 1 refused", "retry database down", "done"]);
    }

    #[tokio::test]
    async fn duplicates_are_processed_once_and_share_their_disposition() {
        let work = Numbers { exhausted: vec![5], ..Numbers::default() };
        let dispositions = settle(&work, vec![Ok(5), Ok(4), Ok(5)], &[]).await;
        assert_eq!(
            summary(&dispositions),
            ["reject max_deliveries 5 gave up", "done", "reject max_deliveries 5 gave up"]
        );
        assert_eq!(*work.calls.lock().unwrap(), [vec![5, 4]]);
    }

    #[tokio::test]
    async fn a_batch_of_bad_input_processes_nothing() {
        let work = Numbers::default();
        let dispositions = settle(&work, vec![bad(), bad()], &[]).await;
        assert_eq!(dispositions.len(), 2);
        assert!(dispositions.iter().all(|d| matches!(d, Disposition::Reject(_))));
        assert!(work.calls.lock().unwrap().is_empty());
    }

    #[test]
    fn errors_are_classified_once() {
        let refused = Failure::from(LlmError::Client { status: 400, body: "too long".into() });
        assert!(matches!(&refused, Failure::Permanent(cause) if cause.code == ReasonCode::Refused));
        for transient in [
            LlmError::Client { status: 401, body: String::new() },
            LlmError::Client { status: 408, body: String::new() },
            LlmError::RateLimited { retry_after: None },
            LlmError::Server { status: 503 },
            LlmError::Timeout,
            LlmError::CircuitOpen,
            LlmError::InvalidResponse("garbage".into()),
        ] {
            assert!(!Failure::from(transient.clone()).is_permanent(), "{transient:?}");
        }
        let unavailable = StoreError::Unavailable(sqlx::Error::PoolTimedOut);
        assert!(!Failure::from(unavailable).is_permanent());
        let constraint = StoreError::Constraint(sqlx::Error::RowNotFound);
        assert!(matches!(Failure::from(constraint), Failure::Permanent(cause) if cause.code == ReasonCode::Refused));
        let invalid = ValidationError::new(ReasonCode::MissingField, "npc_id is missing");
        assert!(
            matches!(Failure::from(invalid), Failure::Permanent(cause) if cause.code == ReasonCode::MissingField && cause.message == "npc_id is missing")
        );
        let long = Failure::permanent(ReasonCode::Refused, format!("a\r\nb{}", "x".repeat(1_000)));
        let Failure::Permanent(cause) = long else { panic!("permanent") };
        assert!(cause.message.starts_with("a  b") && cause.message.chars().count() <= 300, "header-safe");
    }
}
