//! The retry policy: how long to wait before the next delivery of a message that failed
//! transiently. The `backoff` crate is kept behind this one type (it is flagged
//! unmaintained, RUSTSEC-2025-0012) so it can be swapped without touching callers.

use std::time::Duration;

use backoff::backoff::Backoff;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub initial_delay: Duration,
    pub max_delay: Duration,
    pub multiplier: f64,
    /// ± fraction of random jitter so replicas retrying together spread out.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 1 s, 3 s, 9 s, 27 s: with max_deliver 5 a message survives ~40 s of a dependency
    /// being down before it is dead-lettered (and can be replayed from the DLQ).
    fn default() -> Self {
        Self { initial_delay: Duration::from_secs(1), max_delay: Duration::from_secs(60), multiplier: 3.0, jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// Delay before attempt `failed_attempts + 1`, `failed_attempts` counting from 1.
    pub fn delay_after(&self, failed_attempts: u32) -> Duration {
        let mut schedule = backoff::ExponentialBackoff {
            current_interval: self.initial_delay,
            initial_interval: self.initial_delay,
            randomization_factor: self.jitter,
            multiplier: self.multiplier,
            max_interval: self.max_delay,
            max_elapsed_time: None,
            ..backoff::ExponentialBackoff::default()
        };
        let mut delay = self.initial_delay;
        for _ in 0..failed_attempts.max(1) {
            delay = schedule.next_backoff().unwrap_or(self.max_delay);
        }
        delay.min(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_capped() {
        let policy = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(policy.delay_after(1), Duration::from_secs(1));
        assert_eq!(policy.delay_after(2), Duration::from_secs(3));
        assert_eq!(policy.delay_after(3), Duration::from_secs(9));
        assert_eq!(policy.delay_after(20), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let policy = RetryPolicy::default();
        for _ in 0..100 {
            let delay = policy.delay_after(2).as_secs_f64();
            assert!((2.4..=3.6).contains(&delay), "{delay}");
        }
    }
}
