//! The circuit breaker in front of a provider: after `failure_threshold`
//! consecutive failed calls it opens and refuses calls with [`LlmError::CircuitOpen`] —
//! the caller falls back to the rules extractor at once instead of waiting out timeouts —
//! until `cool_down` has passed; then it lets one probe through, which closes it on
//! success and re-opens it on failure.
//!
//! Time is `tokio::time`, so tests drive it with `tokio::time::pause()`.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::provider::LlmError;

type Labels = Vec<(String, String)>;

const OUTCOME_SUCCESS: &str = "success";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls are refused until the cool-down has passed.
    Open,
    /// The cool-down has passed: the next call is a probe, others are refused meanwhile.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The value of `npcmem_llm_breaker_state`: grows with how unavailable the provider is.
    pub fn gauge_value(&self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failed calls that open the breaker. 0 is treated as 1.
    pub failure_threshold: u32,
    /// How long an open breaker refuses calls before it lets a probe through.
    pub cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self { failure_threshold: 5, cool_down: Duration::from_secs(30) }
    }
}

/// `npcmem_llm_breaker_state{provider}` and `npcmem_llm_calls_total{provider,outcome}`,
/// where `outcome` is `success` or [`LlmError::kind`] (`circuit_open` for a refused call).
#[derive(Clone, Default)]
pub struct BreakerMetrics {
    state: Family<Labels, Gauge>,
    calls: Family<Labels, Counter>,
}

impl std::fmt::Debug for BreakerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakerMetrics").finish_non_exhaustive()
    }
}

impl BreakerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "npcmem_llm_breaker_state",
            "LLM circuit breaker state per provider (0 closed, 1 half-open, 2 open)",
            metrics.state.clone(),
        );
        // prometheus-client appends `_total` to counters.
        registry.register(
            "npcmem_llm_calls",
            "LLM calls through the circuit breaker by provider and outcome",
            metrics.calls.clone(),
        );
        metrics
    }

    fn set_state(&self, provider: &str, state: BreakerState) {
        self.state.get_or_create(&vec![("provider".to_owned(), provider.to_owned())]).set(state.gauge_value());
    }

    fn count_call(&self, provider: &str, outcome: &str) {
        self.calls
            .get_or_create(&vec![
                ("provider".to_owned(), provider.to_owned()),
                ("outcome".to_owned(), outcome.to_owned()),
            ])
            .inc();
    }
}

pub struct CircuitBreaker {
    provider: String,
    settings: BreakerSettings,
    inner: Mutex<Inner>,
    metrics: Option<BreakerMetrics>,
}

impl std::fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("provider", &self.provider)
            .field("settings", &self.settings)
            .field("state", &self.state())
            .finish()
    }
}

/// Guarded by the mutex; never held across an `.await`.
struct Inner {
    phase: Phase,
    /// Bumped on every state change, so the result of a call admitted in an earlier state
    /// (a slow call still running when the breaker opened) does not move the new state.
    generation: u64,
}

enum Phase {
    Closed { consecutive_failures: u32 },
    Open { probe_allowed_at: Instant },
    HalfOpen { probe_in_flight: bool },
}

impl Phase {
    fn state(&self) -> BreakerState {
        match self {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Permit {
    generation: u64,
    is_probe: bool,
}

impl CircuitBreaker {
    /// A closed breaker; `provider` labels its metrics and logs.
    pub fn new(provider: impl Into<String>, settings: BreakerSettings) -> Self {
        let inner = Inner { phase: Phase::Closed { consecutive_failures: 0 }, generation: 0 };
        Self { provider: provider.into(), settings, inner: Mutex::new(inner), metrics: None }
    }

    /// Reports state changes and call outcomes to `metrics`.
    pub fn with_metrics(mut self, metrics: BreakerMetrics) -> Self {
        metrics.set_state(&self.provider, self.state());
        self.metrics = Some(metrics);
        self
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    /// The state a call made now would meet: an open breaker whose cool-down has passed
    /// reads as half-open.
    pub fn state(&self) -> BreakerState {
        let mut inner = self.lock();
        self.refresh(&mut inner);
        inner.phase.state()
    }

    /// Runs `call` unless the breaker refuses it with [`LlmError::CircuitOpen`] (then
    /// `call` is never invoked). Every error `call` returns counts as a failure: a
    /// provider that rejects every request (a bad key, an unknown model) is as unusable
    /// as one that is down.
    ///
    /// If the returned future is dropped while it runs a half-open probe, the probe slot
    /// is freed so the next call probes instead.
    pub async fn call<F, Fut, T>(&self, call: F) -> Result<T, LlmError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, LlmError>>,
    {
        let Some(permit) = self.admit() else {
            self.count_call(LlmError::CircuitOpen.kind());
            return Err(LlmError::CircuitOpen);
        };
        let mut probe_guard = ProbeGuard { breaker: self, permit, finished: false };
        let result = call().await;
        probe_guard.finished = true;
        self.record(permit, result.is_ok());
        self.count_call(match &result {
            Ok(_) => OUTCOME_SUCCESS,
            Err(error) => error.kind(),
        });
        result
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while the lock is held, and the state stays consistent if it did.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn admit(&self) -> Option<Permit> {
        let mut inner = self.lock();
        self.refresh(&mut inner);
        let generation = inner.generation;
        match &mut inner.phase {
            Phase::Closed { .. } => Some(Permit { generation, is_probe: false }),
            Phase::Open { .. } => None,
            Phase::HalfOpen { probe_in_flight } => {
                if *probe_in_flight {
                    return None;
                }
                *probe_in_flight = true;
                Some(Permit { generation, is_probe: true })
            }
        }
    }

    fn record(&self, permit: Permit, succeeded: bool) {
        let mut inner = self.lock();
        if inner.generation != permit.generation {
            return;
        }
        let failure_threshold = self.settings.failure_threshold.max(1);
        match (&mut inner.phase, succeeded) {
            (Phase::Closed { consecutive_failures }, true) => *consecutive_failures = 0,
            (Phase::Closed { consecutive_failures }, false) => {
                *consecutive_failures += 1;
                if *consecutive_failures >= failure_threshold {
                    warn!(provider = %self.provider, consecutive_failures = *consecutive_failures, "llm circuit breaker opened");
                    self.open(&mut inner);
                }
            }
            (Phase::HalfOpen { .. }, true) => {
                debug_assert!(permit.is_probe, "only a probe is admitted while half-open");
                info!(provider = %self.provider, "llm circuit breaker closed after a successful probe");
                self.transition(&mut inner, Phase::Closed { consecutive_failures: 0 });
            }
            (Phase::HalfOpen { .. }, false) => {
                warn!(provider = %self.provider, "llm circuit breaker probe failed, reopening");
                self.open(&mut inner);
            }
            (Phase::Open { .. }, _) => {
                debug_assert!(false, "no call is admitted while open, and opening bumps the generation");
            }
        }
    }

    /// Open → half-open once the cool-down has passed.
    fn refresh(&self, inner: &mut Inner) {
        if let Phase::Open { probe_allowed_at } = inner.phase
            && Instant::now() >= probe_allowed_at
        {
            info!(provider = %self.provider, "llm circuit breaker half-open, next call probes");
            self.transition(inner, Phase::HalfOpen { probe_in_flight: false });
        }
    }

    fn open(&self, inner: &mut Inner) {
        let probe_allowed_at = Instant::now() + self.settings.cool_down;
        self.transition(inner, Phase::Open { probe_allowed_at });
    }

    fn transition(&self, inner: &mut Inner, phase: Phase) {
        inner.phase = phase;
        inner.generation += 1;
        if let Some(metrics) = &self.metrics {
            metrics.set_state(&self.provider, inner.phase.state());
        }
    }

    fn count_call(&self, outcome: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.count_call(&self.provider, outcome);
        }
    }
}

/// Frees the half-open probe slot when a probe's future is dropped before it finished,
/// so a cancelled probe cannot leave the breaker refusing calls for ever.
struct ProbeGuard<'a> {
    breaker: &'a CircuitBreaker,
    permit: Permit,
    finished: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.finished || !self.permit.is_probe {
            return;
        }
        let mut inner = self.breaker.lock();
        if inner.generation == self.permit.generation
            && let Phase::HalfOpen { probe_in_flight } = &mut inner.phase
        {
            *probe_in_flight = false;
        }
    }
}
