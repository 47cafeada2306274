//! LLM extraction: one call per conversation through the
//! circuit breaker, paid from the shared budgets, with a reason whenever the rules
//! extractor has to stand in.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{DateTime, NaiveDate, Utc};
use npcmem_core::extraction::ExtractedMemory;
use npcmem_core::extraction::parse::parse_extraction;
use npcmem_core::extraction::prompt::{EXTRACTION_MAX_OUTPUT_TOKENS, EXTRACTION_TEMPERATURE};
use npcmem_llm::{
    AttemptGate, BreakerState, ChatMessage, CircuitBreaker, CompletionOptions, LlmClient, LlmError, LlmProvider,
    TokenUsage,
};
use npcmem_store::{PgConnection, StoreError, budgets::NpcSettlement};
use tokio::sync::Semaphore;
use tracing::{debug, warn};
use uuid::Uuid;

use crate::budget::Budget;

/// Why a conversation went to the rules extractor (the `reason` label of
/// `npcmem_extraction_fallbacks_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// `NPCMEM_MEMORY_ENABLED=false`.
    Disabled,
    /// `NPCMEM_MEMORY_EXTRACTION_RPM` reached.
    RateLimited,
    /// The global daily token budget cannot pay the call.
    GlobalBudget,
    /// The NPC's daily token budget cannot pay the call.
    NpcBudget,
    /// The breaker is open.
    BreakerOpen,
    /// The call failed after its retries.
    LlmError(&'static str),
    /// The model answered, but not with memories.
    InvalidOutput,
}

impl Fallback {
    pub fn label(&self) -> &'static str {
        match self {
            Fallback::Disabled => "disabled",
            Fallback::RateLimited => "rate_limited",
            Fallback::GlobalBudget => "global_budget",
            Fallback::NpcBudget => "npc_budget",
            Fallback::BreakerOpen => "breaker_open",
            Fallback::LlmError(_) => "llm_error",
            Fallback::InvalidOutput => "invalid_output",
        }
    }
}

/// A conversation ready for the model: its prompt and what one attempt may cost.
pub struct Prompt {
    pub npc_id: Uuid,
    pub messages: Vec<ChatMessage>,
    /// Counted prompt tokens plus the output cap.
    pub tokens_per_attempt: i64,
}

/// One attempt's tokens reserved globally and for the NPC, on `day`.
#[derive(Debug, Clone, Copy)]
pub struct Reservation {
    pub day: NaiveDate,
    pub tokens_per_attempt: i64,
}

/// What a call produced and what it cost.
pub struct CallOutcome {
    pub memories: Result<Vec<ExtractedMemory>, Fallback>,
    pub settlement: NpcSettlement,
}

pub struct LlmExtractor {
    client: LlmClient,
    breaker: CircuitBreaker,
    budget: Budget,
    in_flight: Semaphore,
    options: CompletionOptions,
}

impl LlmExtractor {
    pub fn new(client: LlmClient, breaker: CircuitBreaker, budget: Budget, in_flight: usize, json_mode: bool) -> Self {
        let options = CompletionOptions {
            temperature: EXTRACTION_TEMPERATURE,
            max_tokens: EXTRACTION_MAX_OUTPUT_TOKENS,
            json_mode,
        };
        Self { client, breaker, budget, in_flight: Semaphore::new(in_flight.max(1)), options }
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    pub fn output_cap(&self) -> i64 {
        i64::from(self.options.max_tokens)
    }

    /// Decides, inside the claim transaction, which prompts go to the model: the global
    /// lease, the per-NPC budgets and the extraction rate must all pay for a first attempt
    /// (the rate is asked last, so a refused conversation never uses up a request). An NPC
    /// with several conversations in the batch is reserved for all of them or none.
    /// Global tokens taken here must be given back with [`LlmExtractor::release`] if the
    /// transaction does not commit.
    pub async fn plan(
        &self,
        transaction: &mut PgConnection,
        now: DateTime<Utc>,
        day: NaiveDate,
        prompts: &[Prompt],
    ) -> Result<Vec<Result<Reservation, Fallback>>, StoreError> {
        if !self.budget.settings().enabled {
            return Ok(prompts.iter().map(|_| Err(Fallback::Disabled)).collect());
        }
        if self.breaker.state() == BreakerState::Open {
            return Ok(prompts.iter().map(|_| Err(Fallback::BreakerOpen)).collect());
        }
        let mut routes: Vec<Result<Reservation, Fallback>> = Vec::with_capacity(prompts.len());
        let planned = self.reserve(transaction, now, day, prompts, &mut routes).await;
        if let Err(error) = planned {
            // Nothing of this plan will be used: give the global tokens back.
            self.release(&routes).await;
            return Err(error);
        }
        Ok(routes)
    }

    async fn reserve(
        &self,
        transaction: &mut PgConnection,
        now: DateTime<Utc>,
        day: NaiveDate,
        prompts: &[Prompt],
        routes: &mut Vec<Result<Reservation, Fallback>>,
    ) -> Result<(), StoreError> {
        for prompt in prompts {
            routes.push(if self.budget.take_global(day, prompt.tokens_per_attempt).await? {
                Ok(Reservation { day, tokens_per_attempt: prompt.tokens_per_attempt })
            } else {
                Err(Fallback::GlobalBudget)
            });
        }
        let per_npc = totals_per_npc(prompts, routes, |_| true);
        let reserved = self.budget.reserve_npcs(transaction, day, &per_npc).await?;
        for (prompt, route) in prompts.iter().zip(routes.iter_mut()) {
            if let Ok(reservation) = route
                && !reserved.contains(&prompt.npc_id)
            {
                self.budget.settle_global(day, reservation.tokens_per_attempt, 0, 0).await;
                *route = Err(Fallback::NpcBudget);
            }
        }
        let paid = routes.iter().filter(|route| route.is_ok()).count() as i64;
        let granted = self.budget.grant_extractions(transaction, now, paid).await?;
        if granted < paid {
            // Beyond the rate: undo both reservations of the last ones.
            let mut kept = 0;
            let mut refused = vec![false; routes.len()];
            for (index, route) in routes.iter().enumerate() {
                if route.is_ok() {
                    kept += 1;
                    refused[index] = kept > granted;
                }
            }
            let refunds: Vec<NpcSettlement> = totals_per_npc(prompts, routes, |index| refused[index])
                .into_iter()
                .map(|(npc_id, reserved)| NpcSettlement { npc_id, reserved, charged: 0, calls: 0 })
                .collect();
            self.budget.settle_npcs(transaction, day, &refunds).await?;
            for (index, route) in routes.iter_mut().enumerate() {
                if refused[index]
                    && let Ok(reservation) = route
                {
                    self.budget.settle_global(day, reservation.tokens_per_attempt, 0, 0).await;
                    *route = Err(Fallback::RateLimited);
                }
            }
        }
        Ok(())
    }

    /// Gives back the global tokens of routes whose claim transaction did not commit.
    pub async fn release(&self, routes: &[Result<Reservation, Fallback>]) {
        for reservation in routes.iter().flatten() {
            self.budget.settle_global(reservation.day, reservation.tokens_per_attempt, 0, 0).await;
        }
    }

    /// One extraction call, at most K at a time per replica. Every HTTP attempt is paid:
    /// the first by `reservation`, each retry by a new reservation taken before it.
    pub async fn call(&self, prompt: &Prompt, reservation: Reservation) -> CallOutcome {
        let _slot = self.in_flight.acquire().await.expect("the semaphore is never closed");
        let gate = BudgetGate { budget: &self.budget, npc_id: prompt.npc_id, reservation, retries: AtomicU32::new(0) };
        let reported: Mutex<Option<(TokenUsage, u32)>> = Mutex::new(None);
        let result = self
            .breaker
            .call(|| async {
                let completion = self.client.complete_gated(&prompt.messages, &self.options, &gate).await?;
                *reported.lock().unwrap_or_else(|poison| poison.into_inner()) =
                    Some((completion.usage, completion.attempts));
                // An unusable reply counts against the breaker: a model that keeps
                // answering prose is as useless as one that is down.
                parse_extraction(&completion.content)
                    .map_err(|error| LlmError::InvalidResponse(format!("{}: {error}", error.code())))
            })
            .await;
        let per_attempt = reservation.tokens_per_attempt;
        let paid_attempts = 1 + i64::from(gate.retries.load(Ordering::Relaxed));
        let reserved = paid_attempts * per_attempt;
        let reported = reported.into_inner().unwrap_or_else(|poison| poison.into_inner());
        let (charged, calls) = match (&result, reported) {
            // Failed attempts rarely report usage: each is charged its full reservation;
            // the answered one what the provider says it cost.
            (_, Some((usage, attempts))) => {
                let failed_before = i64::from(attempts.saturating_sub(1)) * per_attempt;
                let answered = match i64::from(usage.total_tokens()) {
                    0 => per_attempt,
                    reported => reported,
                };
                (failed_before + answered, i64::from(attempts))
            }
            (Err(LlmError::CircuitOpen), None) => (0, 0),
            (_, None) => (reserved, paid_attempts),
        };
        self.budget.settle_global(reservation.day, reserved, charged, calls).await;
        let memories = result.map_err(|error| match error {
            LlmError::CircuitOpen => Fallback::BreakerOpen,
            LlmError::InvalidResponse(reason) => {
                debug!(%reason, "llm reply unusable, falling back to rules");
                Fallback::InvalidOutput
            }
            other => {
                warn!(error = %other, "llm extraction failed, falling back to rules");
                Fallback::LlmError(other.kind())
            }
        });
        CallOutcome { memories, settlement: NpcSettlement { npc_id: prompt.npc_id, reserved, charged, calls } }
    }
}

/// Tokens per NPC of the paid routes whose index `include` selects.
fn totals_per_npc(
    prompts: &[Prompt],
    routes: &[Result<Reservation, Fallback>],
    include: impl Fn(usize) -> bool,
) -> Vec<(Uuid, i64)> {
    let mut totals: Vec<(Uuid, i64)> = Vec::new();
    for (index, (prompt, route)) in prompts.iter().zip(routes).enumerate() {
        let Ok(reservation) = route else { continue };
        if !include(index) {
            continue;
        }
        match totals.iter_mut().find(|(npc_id, _)| *npc_id == prompt.npc_id) {
            Some((_, total)) => *total += reservation.tokens_per_attempt,
            None => totals.push((prompt.npc_id, reservation.tokens_per_attempt)),
        }
    }
    totals
}

/// Pays each retry of one call before it is sent: global lease first, then the NPC.
struct BudgetGate<'a> {
    budget: &'a Budget,
    npc_id: Uuid,
    reservation: Reservation,
    retries: AtomicU32,
}

impl AttemptGate for BudgetGate<'_> {
    async fn admit_retry(&self, attempt: u32) -> bool {
        let Reservation { day, tokens_per_attempt } = self.reservation;
        let paid = async {
            if !self.budget.take_global(day, tokens_per_attempt).await? {
                return Ok(false);
            }
            if self.budget.reserve_npc_now(day, self.npc_id, tokens_per_attempt).await? {
                return Ok(true);
            }
            self.budget.settle_global(day, tokens_per_attempt, 0, 0).await;
            Ok::<_, StoreError>(false)
        }
        .await;
        match paid {
            Ok(true) => {
                self.retries.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(false) => {
                debug!(attempt, "budget cannot pay another attempt");
                false
            }
            Err(error) => {
                warn!(%error, attempt, "cannot reserve budget for a retry; not retrying");
                false
            }
        }
    }
}
