//! The retry policy both clients share: up to `max_attempts` HTTP attempts, each bounded
//! by the client timeout, with exponential backoff between them — or exactly the
//! server's `Retry-After` when it sent one. The `backoff` crate stays behind this module
//! (it is flagged unmaintained, RUSTSEC-2025-0012) so it can be swapped without touching
//! the clients.

use std::future::Future;
use std::time::Duration;

use backoff::backoff::Backoff;
use chrono::{DateTime, Utc};
use reqwest::header::HeaderMap;
use tracing::warn;

use crate::provider::{AttemptGate, LlmError, TokenUsage};

/// ± fraction of random jitter on backoff delays, so replicas that failed together do
/// not retry together. `Retry-After` waits are exact.
const BACKOFF_JITTER: f64 = 0.2;
const BACKOFF_MULTIPLIER: f64 = 2.0;
/// Any `Retry-After` number above this is read as this (about 31 years in seconds).
const LARGEST_NUMBER: f64 = 1.0e9;

/// How hard one [`crate::LlmProvider::complete`] call tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// HTTP attempts in total, the first included. 0 is treated as 1.
    pub max_attempts: u32,
    /// Backoff before the second attempt; it doubles for each further one.
    pub initial_delay: Duration,
    /// Upper bound of any wait, `Retry-After` included.
    pub max_delay: Duration,
}

impl Default for RetrySettings {
    /// 3 attempts, 0.5 s then 1 s apart: a blip is ridden out, while a dead provider costs
    /// a conversation at most three timeouts before the breaker counts it.
    fn default() -> Self {
        Self { max_attempts: 3, initial_delay: Duration::from_millis(500), max_delay: Duration::from_secs(10) }
    }
}

/// What one HTTP attempt produced.
#[derive(Debug)]
pub(crate) struct Attempt<T> {
    pub outcome: Result<T, LlmError>,
    /// Usage the response reported, also on a failed attempt.
    pub usage: Option<TokenUsage>,
    /// The server's `Retry-After`, on any status.
    pub retry_after: Option<Duration>,
}

impl<T> Attempt<T> {
    pub fn failed(error: LlmError) -> Self {
        Self { outcome: Err(error), usage: None, retry_after: None }
    }
}

/// The result of the last attempt, with the attempts made and the usage summed over all.
#[derive(Debug)]
pub(crate) struct Retried<T> {
    pub result: Result<T, LlmError>,
    pub attempts: u32,
    pub usage: TokenUsage,
}

/// Runs `attempt` until it succeeds, fails permanently, `max_attempts` are spent, or
/// `gate` refuses a retry. Each attempt is cut off after `timeout` (→ [`LlmError::Timeout`]).
pub(crate) async fn run<T, F, Fut, G>(
    settings: &RetrySettings,
    timeout: Duration,
    provider: &str,
    gate: &G,
    mut attempt: F,
) -> Retried<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T>>,
    G: AttemptGate,
{
    let max_attempts = settings.max_attempts.max(1);
    let mut schedule = BackoffSchedule::new(settings);
    let mut usage = TokenUsage::default();
    let mut attempts_made = 0;
    loop {
        attempts_made += 1;
        let report = match tokio::time::timeout(timeout, attempt()).await {
            Ok(report) => report,
            Err(_elapsed) => Attempt::failed(LlmError::Timeout),
        };
        if let Some(reported) = report.usage {
            usage += reported;
        }
        let error = match report.outcome {
            Ok(value) => return Retried { result: Ok(value), attempts: attempts_made, usage },
            Err(error) => error,
        };
        if !error.is_retryable() || attempts_made >= max_attempts || !gate.admit_retry(attempts_made + 1).await {
            return Retried { result: Err(error), attempts: attempts_made, usage };
        }
        let backoff_delay = schedule.next_delay();
        let delay = report.retry_after.map_or(backoff_delay, |wait| wait.min(settings.max_delay));
        warn!(
            provider,
            attempt = attempts_made,
            max_attempts,
            error = %error,
            delay_ms = delay.as_millis() as u64,
            "llm call failed, retrying"
        );
        tokio::time::sleep(delay).await;
    }
}

/// Exponential delays from the `backoff` crate, capped at `max_delay`.
struct BackoffSchedule {
    inner: backoff::ExponentialBackoff,
    max_delay: Duration,
}

impl BackoffSchedule {
    fn new(settings: &RetrySettings) -> Self {
        Self::with_jitter(settings, BACKOFF_JITTER)
    }

    fn with_jitter(settings: &RetrySettings, jitter: f64) -> Self {
        let initial_delay = settings.initial_delay.min(settings.max_delay);
        let inner = backoff::ExponentialBackoff {
            current_interval: initial_delay,
            initial_interval: initial_delay,
            randomization_factor: jitter,
            multiplier: BACKOFF_MULTIPLIER,
            max_interval: settings.max_delay,
            // Attempts are bounded by `max_attempts`, not by time.
            max_elapsed_time: None,
            ..backoff::ExponentialBackoff::default()
        };
        Self { inner, max_delay: settings.max_delay }
    }

    fn next_delay(&mut self) -> Duration {
        self.inner.next_backoff().unwrap_or(self.max_delay).min(self.max_delay)
    }
}

/// How long the server asked us to wait: OpenAI's `retry-after-ms` (milliseconds), else
/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3). A date in the past
/// means "now"; anything unparsable is ignored.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    let header_text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    if let Some(millis) = header_text("retry-after-ms").and_then(parse_non_negative_number) {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    let value = header_text("retry-after")?;
    if let Some(seconds) = parse_non_negative_number(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    // IMF-fixdate ("Wed, 21 Oct 2015 07:28:00 GMT") is RFC 2822 with the zone named GMT.
    let date = DateTime::parse_from_rfc2822(value).ok()?.with_timezone(&Utc);
    Some((date - now).to_std().unwrap_or(Duration::ZERO))
}

/// Seconds are integers by the RFC; some servers send fractions. Huge values are cut to
/// [`LARGEST_NUMBER`] so `Duration` conversion cannot panic; the wait is capped at
/// `max_delay` anyway.
fn parse_non_negative_number(text: &str) -> Option<f64> {
    let number: f64 = text.parse().ok()?;
    (number.is_finite() && number >= 0.0).then_some(number.min(LARGEST_NUMBER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Ungated;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z").expect("valid date").with_timezone(&Utc)
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        assert_eq!(retry_after(&headers(&[("retry-after", "1")]), now()), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(&headers(&[("retry-after", " 2.5 ")]), now()), Some(Duration::from_millis(2500)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:07 GMT")]), now()),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]), now()),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")]), now()),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn unusable_retry_after_is_ignored() {
        assert_eq!(retry_after(&headers(&[]), now()), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now()), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-4")]), now()), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "NaN")]), now()), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "inf")]), now()), None);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1e300")]), now()),
            Some(Duration::from_secs(1_000_000_000)),
            "huge values stay convertible"
        );
    }

    #[test]
    fn backoff_doubles_and_stays_capped() {
        let settings = RetrySettings {
            max_attempts: 10,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(3),
        };
        let mut schedule = BackoffSchedule::with_jitter(&settings, 0.0);
        let delays: Vec<Duration> = (0..5).map(|_| schedule.next_delay()).collect();
        let millis: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, vec![500, 1000, 2000, 3000, 3000]);
    }

    #[test]
    fn backoff_jitter_stays_within_its_fraction() {
        let settings = RetrySettings::default();
        for _ in 0..100 {
            let first = BackoffSchedule::new(&settings).next_delay().as_secs_f64();
            assert!((0.4..=0.6).contains(&first), "{first}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_follow_retry_after_capped_at_max_delay() {
        let settings = RetrySettings {
            max_attempts: 3,
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        };
        let started = tokio::time::Instant::now();
        let mut calls = 0;
        let retried: Retried<()> = run(&settings, Duration::from_secs(1), "test", &Ungated, || {
            calls += 1;
            let usage = Some(TokenUsage { prompt_tokens: 1, completion_tokens: 0 });
            async move {
                Attempt {
                    outcome: Err(LlmError::RateLimited { retry_after: Some(Duration::from_secs(60)) }),
                    usage,
                    retry_after: Some(Duration::from_secs(60)),
                }
            }
        })
        .await;
        assert_eq!(calls, 3);
        assert_eq!(retried.attempts, 3);
        assert_eq!(retried.usage, TokenUsage { prompt_tokens: 3, completion_tokens: 0 });
        assert!(matches!(retried.result, Err(LlmError::RateLimited { .. })));
        assert_eq!(started.elapsed(), Duration::from_secs(10), "two waits of max_delay");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_max_attempts_still_tries_once() {
        let settings = RetrySettings { max_attempts: 0, ..RetrySettings::default() };
        let retried: Retried<u8> =
            run(&settings, Duration::from_secs(1), "test", &Ungated, || async { Attempt::failed(LlmError::Timeout) })
                .await;
        assert_eq!(retried.attempts, 1);
        assert_eq!(retried.result, Err(LlmError::Timeout));
    }

    /// Admits `allowed` retries, then refuses; records what it was asked.
    struct CountingGate {
        allowed: u32,
        asked: std::sync::Mutex<Vec<u32>>,
    }

    impl AttemptGate for CountingGate {
        async fn admit_retry(&self, attempt: u32) -> bool {
            let mut asked = self.asked.lock().expect("not poisoned");
            asked.push(attempt);
            asked.len() as u32 <= self.allowed
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_gate_stops_retries_without_waiting() {
        let settings = RetrySettings { max_attempts: 5, ..RetrySettings::default() };
        let gate = CountingGate { allowed: 1, asked: Default::default() };
        let started = tokio::time::Instant::now();
        let retried: Retried<u8> = run(&settings, Duration::from_secs(1), "test", &gate, || async {
            Attempt::failed(LlmError::Server { status: 503 })
        })
        .await;
        assert_eq!(retried.attempts, 2, "one admitted retry");
        assert_eq!(*gate.asked.lock().expect("not poisoned"), vec![2, 3]);
        assert!(started.elapsed() < Duration::from_secs(1), "no backoff after the refusal");
    }
}
