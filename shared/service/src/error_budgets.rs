//! Automatic degraded mode, from the original design's error budgets: each service
//! instance measures its own checks over fixed windows (enrich: retrieval and context
//! p99, cache hit rate; extract: extraction success rate), decides with hysteresis
//! whether each is breached, and reports the verdicts to `error_budget_checks`. While the
//! `degraded` switch is "auto", any fresh breached row puts every service in degraded
//! mode (`npcmem_store::switches::read`).
//!
//! Hysteresis twice over: a check is breached only after `enter_after` windows in a row
//! beyond its degraded threshold, and met again only after `leave_after` windows in a row
//! within its (stricter) target. A window with too few samples to judge changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use npcmem_bus::Topology;
use npcmem_core::wire::ControlChanged;
use npcmem_store::PgPool;
use npcmem_store::error_budgets::{self, CheckRow};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tracing::{info, warn};

/// What a check measures per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// The 99th percentile of observed durations, in milliseconds: lower is better.
    P99Millis,
    /// The share of good outcomes: higher is better.
    Ratio,
}

/// One error budget: its target and the threshold past which the system degrades.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    pub name: &'static str,
    pub measure: Measure,
    pub target: f64,
    pub degraded: f64,
    /// A window with fewer observations than this is not judged.
    pub min_samples: u64,
}

/// The original design's budgets (target, degraded threshold).
pub const RETRIEVAL_P99: Check =
    Check { name: "retrieval_p99_ms", measure: Measure::P99Millis, target: 40.0, degraded: 100.0, min_samples: 50 };
pub const CONTEXT_P99: Check =
    Check { name: "context_p99_ms", measure: Measure::P99Millis, target: 60.0, degraded: 150.0, min_samples: 50 };
pub const CACHE_HIT_RATE: Check =
    Check { name: "cache_hit_rate", measure: Measure::Ratio, target: 0.7, degraded: 0.5, min_samples: 50 };
pub const EXTRACTION_SUCCESS_RATE: Check =
    Check { name: "extraction_success_rate", measure: Measure::Ratio, target: 0.95, degraded: 0.8, min_samples: 20 };

/// How one window of a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Past the degraded threshold.
    Beyond,
    /// Worse than the target, not yet past the threshold.
    Between,
    /// Within the target.
    Within,
    /// Too few samples to say.
    Unjudged,
}

impl Check {
    pub fn verdict(&self, value: Option<f64>, samples: u64) -> Verdict {
        let Some(value) = value.filter(|_| samples >= self.min_samples) else { return Verdict::Unjudged };
        // Orient both kinds so that larger is worse.
        let (value, target, degraded) = match self.measure {
            Measure::P99Millis => (value, self.target, self.degraded),
            Measure::Ratio => (-value, -self.target, -self.degraded),
        };
        if value >= degraded {
            Verdict::Beyond
        } else if value < target {
            Verdict::Within
        } else {
            Verdict::Between
        }
    }
}

/// A check's breached state, changed only by a run of like windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    pub breached: bool,
    streak: u32,
    enter_after: u32,
    leave_after: u32,
}

impl Hysteresis {
    pub fn new(enter_after: u32, leave_after: u32) -> Self {
        Hysteresis { breached: false, streak: 0, enter_after: enter_after.max(1), leave_after: leave_after.max(1) }
    }

    /// Takes one window's verdict; true when the breached state changed.
    pub fn step(&mut self, verdict: Verdict) -> bool {
        let toward = match (self.breached, verdict) {
            (_, Verdict::Unjudged) => return false,
            (false, Verdict::Beyond) => true,
            (true, Verdict::Within) => true,
            _ => false,
        };
        self.streak = if toward { self.streak + 1 } else { 0 };
        let needed = if self.breached { self.leave_after } else { self.enter_after };
        if self.streak >= needed {
            self.breached = !self.breached;
            self.streak = 0;
            return true;
        }
        false
    }
}

/// Latency buckets: bucket i holds durations up to 0.1 ms × 1.25^i (up to ~2 min).
const BUCKETS: usize = 64;

fn bucket_bound_ms(index: usize) -> f64 {
    0.1 * 1.25f64.powi(index as i32)
}

fn bucket_of(millis: f64) -> usize {
    if millis <= 0.1 {
        return 0;
    }
    ((millis / 0.1).ln() / 1.25f64.ln()).ceil().clamp(0.0, (BUCKETS - 1) as f64) as usize
}

/// One window's observations of a check; taking them starts the next window.
enum Window {
    Ratio { good: AtomicU64, total: AtomicU64 },
    Latency { buckets: Box<[AtomicU64; BUCKETS]> },
}

impl Window {
    fn new(measure: Measure) -> Self {
        match measure {
            Measure::Ratio => Window::Ratio { good: AtomicU64::new(0), total: AtomicU64::new(0) },
            Measure::P99Millis => Window::Latency { buckets: Box::new(std::array::from_fn(|_| AtomicU64::new(0))) },
        }
    }

    /// The window's value (None when empty) and its sample count.
    fn take(&self) -> (Option<f64>, u64) {
        match self {
            Window::Ratio { good, total } => {
                let (good, total) = (good.swap(0, Ordering::Relaxed), total.swap(0, Ordering::Relaxed));
                ((total > 0).then(|| good.min(total) as f64 / total as f64), total)
            }
            Window::Latency { buckets } => {
                let counts: Vec<u64> = buckets.iter().map(|bucket| bucket.swap(0, Ordering::Relaxed)).collect();
                let total: u64 = counts.iter().sum();
                if total == 0 {
                    return (None, 0);
                }
                // The smallest bucket bound that holds 99 % of the window.
                let wanted = (total as f64 * 0.99).ceil() as u64;
                let mut seen = 0;
                let index = counts
                    .iter()
                    .position(|count| {
                        seen += count;
                        seen >= wanted
                    })
                    .unwrap_or(BUCKETS - 1);
                (Some(bucket_bound_ms(index)), total)
            }
        }
    }
}

struct Entry {
    check: Check,
    window: Window,
    state: Mutex<State>,
}

#[derive(Clone, Copy)]
struct State {
    hysteresis: Hysteresis,
    since: chrono::DateTime<Utc>,
}

/// A service's checks: recorded on its hot paths, judged by [`monitor`].
#[derive(Clone, Default)]
pub struct ErrorBudgets {
    entries: Arc<Vec<Entry>>,
    /// `npcmem_error_budget_breached{check}`: 1 while breached on this instance.
    gauge: Family<Vec<(String, String)>, Gauge>,
}

impl ErrorBudgets {
    pub fn new(checks: &[Check], enter_after: u32, leave_after: u32) -> Self {
        let state = State { hysteresis: Hysteresis::new(enter_after, leave_after), since: Utc::now() };
        let entries = checks
            .iter()
            .map(|check| Entry { check: *check, window: Window::new(check.measure), state: Mutex::new(state) })
            .collect();
        let budgets = ErrorBudgets { entries: Arc::new(entries), gauge: Family::default() };
        for check in checks {
            budgets.gauge_of(check.name).set(0);
        }
        budgets
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "npcmem_error_budget_breached",
            "1 while this instance's error-budget check is breached (degraded mode while the switch is auto)",
            self.gauge.clone(),
        );
    }

    fn gauge_of(&self, check: &str) -> Gauge {
        self.gauge.get_or_create(&vec![("check".to_owned(), check.to_owned())]).clone()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn entry(&self, check: &Check) -> Option<&Entry> {
        self.entries.iter().find(|entry| entry.check.name == check.name)
    }

    /// One outcome of a ratio check (a cache lookup, an extraction job).
    pub fn outcome(&self, check: &Check, good: bool) {
        self.outcomes(check, u64::from(good), 1);
    }

    /// `total` outcomes of a ratio check, `good` of them good.
    pub fn outcomes(&self, check: &Check, good: u64, total: u64) {
        if let Some(Entry { window: Window::Ratio { good: goods, total: totals }, .. }) = self.entry(check) {
            goods.fetch_add(good, Ordering::Relaxed);
            totals.fetch_add(total, Ordering::Relaxed);
        }
    }

    /// One duration of a latency check.
    pub fn duration(&self, check: &Check, seconds: f64) {
        if let Some(Entry { window: Window::Latency { buckets }, .. }) = self.entry(check) {
            buckets[bucket_of(seconds * 1000.0)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The names of the checks breached now.
    pub fn breached(&self) -> Vec<&'static str> {
        self.entries
            .iter()
            .filter(|entry| entry.state.lock().expect("budget state").hysteresis.breached)
            .map(|entry| entry.check.name)
            .collect()
    }

    /// Judges the window that just ended: one row per check, and the checks whose state
    /// changed with their value.
    fn close_window(&self, instance: &str, service: &str, expires_in: Duration) -> (Vec<CheckRow>, Vec<Change>) {
        let now = Utc::now();
        let expires_at = now + chrono::Duration::from_std(expires_in).unwrap_or(chrono::Duration::seconds(60));
        let mut rows = Vec::new();
        let mut changes = Vec::new();
        for entry in self.entries.iter() {
            let (value, samples) = entry.window.take();
            let mut state = entry.state.lock().expect("budget state");
            if state.hysteresis.step(entry.check.verdict(value, samples)) {
                state.since = now;
                self.gauge_of(entry.check.name).set(i64::from(state.hysteresis.breached));
                changes.push(Change { check: entry.check, value, breached: state.hysteresis.breached });
            }
            rows.push(CheckRow {
                instance: instance.to_owned(),
                service: service.to_owned(),
                check_name: entry.check.name.to_owned(),
                value: value.filter(|_| samples >= entry.check.min_samples),
                breached: state.hysteresis.breached,
                since: state.since,
                expires_at,
            });
        }
        (rows, changes)
    }
}

struct Change {
    check: Check,
    value: Option<f64>,
    breached: bool,
}

/// How the monitor runs.
#[derive(Debug, Clone, Copy)]
pub struct MonitorSettings {
    pub window: Duration,
    /// A report not refreshed within this many windows no longer counts.
    pub expires_after_windows: u32,
}

/// Every window: judges the checks, writes the verdicts, and on a change records an
/// admin action and announces `P.control.changed` so that services re-read the switches
/// at once. On shutdown the instance's rows are removed.
pub async fn monitor(
    budgets: ErrorBudgets,
    pool: PgPool,
    nats: async_nats::Client,
    topology: Topology,
    service: String,
    settings: MonitorSettings,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let instance = format!("{service}-{}", uuid::Uuid::new_v4().simple());
    let expires_in = settings.window * settings.expires_after_windows.max(2);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + settings.window, settings.window);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => break,
        }
        let (rows, changes) = budgets.close_window(&instance, &service, expires_in);
        if let Err(error) = write(&pool, &instance, &service, &rows, &changes).await {
            warn!(%error, "cannot write the error-budget checks");
            continue;
        }
        if !changes.is_empty() {
            let change = ControlChanged { switch: "degraded".to_owned(), value: json!("auto") };
            let payload = serde_json::to_vec(&change).expect("control.changed serialises");
            // Best effort: services re-read the switches on a timer too.
            if let Err(error) = nats.publish(topology.control_changed(), payload.into()).await {
                warn!(%error, "cannot announce an error-budget change");
            }
        }
    }
    match pool.acquire().await {
        Ok(mut connection) => {
            if let Err(error) = error_budgets::forget_instance(&mut connection, &instance).await {
                warn!(%error, "cannot remove this instance's error-budget checks");
            }
        }
        Err(error) => warn!(%error, "cannot remove this instance's error-budget checks"),
    }
}

async fn write(
    pool: &PgPool,
    instance: &str,
    service: &str,
    rows: &[CheckRow],
    changes: &[Change],
) -> Result<(), npcmem_store::StoreError> {
    let mut transaction = pool.begin().await?;
    for row in rows {
        error_budgets::report(&mut transaction, row).await?;
    }
    for change in changes {
        let (action, verb) =
            if change.breached { ("degraded.budget_breached", "breached") } else { ("degraded.budget_met", "met") };
        let details = json!({ "check": change.check.name, "value": change.value, "instance": instance });
        npcmem_store::admin::record_action(&mut transaction, &format!("auto:{service}"), action, &details).await?;
        if change.breached {
            warn!(check = change.check.name, value = ?change.value, "error budget {verb}: degraded mode while the switch is auto");
        } else {
            info!(check = change.check.name, value = ?change.value, "error budget {verb} again");
        }
    }
    transaction.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_reads_each_window_against_its_target_and_threshold() {
        let hit_rate = CACHE_HIT_RATE;
        assert_eq!(hit_rate.verdict(Some(0.4), 100), Verdict::Beyond);
        assert_eq!(hit_rate.verdict(Some(0.5), 100), Verdict::Beyond, "the design's check is > 0.5");
        assert_eq!(hit_rate.verdict(Some(0.6), 100), Verdict::Between);
        assert_eq!(hit_rate.verdict(Some(0.9), 100), Verdict::Within);
        assert_eq!(hit_rate.verdict(Some(0.0), 49), Verdict::Unjudged, "too few lookups");
        assert_eq!(hit_rate.verdict(None, 0), Verdict::Unjudged);
        let p99 = RETRIEVAL_P99;
        assert_eq!(p99.verdict(Some(120.0), 50), Verdict::Beyond);
        assert_eq!(p99.verdict(Some(100.0), 50), Verdict::Beyond, "the design's check is < 100 ms");
        assert_eq!(p99.verdict(Some(60.0), 50), Verdict::Between);
        assert_eq!(p99.verdict(Some(10.0), 50), Verdict::Within);
    }

    #[test]
    fn a_breach_needs_a_run_of_bad_windows_and_recovery_a_run_of_good_ones() {
        use Verdict::*;
        let mut state = Hysteresis::new(3, 4);
        // Two bad windows, then one merely worse than target: the run is broken.
        for verdict in [Beyond, Beyond, Between, Beyond, Unjudged, Beyond] {
            assert!(!state.step(verdict), "{verdict:?}");
        }
        assert!(!state.breached);
        assert!(state.step(Beyond), "the third bad window in a row (an unjudged one between does not count)");
        assert!(state.breached);
        // Between target and threshold is not recovery: it stays breached.
        for verdict in [Between, Within, Within, Within, Beyond, Between, Within, Within, Within] {
            assert!(!state.step(verdict), "{verdict:?}");
        }
        assert!(state.breached);
        assert!(state.step(Within), "the fourth good window in a row");
        assert!(!state.breached);
    }

    #[test]
    fn a_window_gives_its_ratio_or_p99_and_starts_afresh() {
        let budgets = ErrorBudgets::new(&[CACHE_HIT_RATE, RETRIEVAL_P99], 1, 1);
        for at in 0..100 {
            budgets.outcome(&CACHE_HIT_RATE, at % 4 != 0);
            // 98 fast lookups and two slow ones: p99 is the slow ones' bucket.
            budgets.duration(&RETRIEVAL_P99, if at < 98 { 0.002 } else { 0.150 });
        }
        // A check the service does not have is ignored.
        budgets.outcome(&EXTRACTION_SUCCESS_RATE, false);
        let (rows, changes) = budgets.close_window("i", "enrich", Duration::from_secs(60));
        let value = |name: &str| rows.iter().find(|row| row.check_name == name).and_then(|row| row.value);
        assert_eq!(value("cache_hit_rate"), Some(0.75));
        let p99 = value("retrieval_p99_ms").expect("judged");
        assert!((150.0..=190.0).contains(&p99), "p99 {p99}");
        assert_eq!(changes.len(), 1, "enter_after 1: p99 beyond 100 ms breaches at once");
        assert_eq!(budgets.breached(), vec!["retrieval_p99_ms"]);
        let (rows, _) = budgets.close_window("i", "enrich", Duration::from_secs(60));
        assert!(rows.iter().all(|row| row.value.is_none()), "the next window is empty");
        assert_eq!(budgets.breached(), vec!["retrieval_p99_ms"], "an empty window changes nothing");
    }
}
