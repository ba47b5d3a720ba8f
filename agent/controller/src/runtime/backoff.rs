//! Retry backoff after failures: the delay doubles with each failure in a row, from the
//! kind's retry interval up to its interval.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Delay before retrying after `failures` consecutive failures: `retry`, doubling with each
/// failure, never more than the larger of `interval` and `retry`. Saturates, never overflows.
pub fn delay(retry: Duration, interval: Duration, failures: u32) -> Duration {
    let cap = interval.max(retry);
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    retry.saturating_mul(factor).min(cap)
}

/// Consecutive failures per object (`Kind/namespace/name`). In memory: a restart starts afresh.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Records a failure of `key` and returns how many in a row.
    pub fn record(&self, key: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    pub fn clear(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_interval() {
        let s = Duration::from_secs;
        let got: Vec<u64> = (1..=7).map(|n| delay(s(2), s(60), n).as_secs()).collect();
        assert_eq!(got, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(
            delay(s(30), s(10), 5),
            s(30),
            "retry longer than interval stays retry"
        );
        assert_eq!(delay(s(2), s(60), u32::MAX), s(60));
        let huge = Duration::from_nanos(i64::MAX as u64);
        assert_eq!(delay(huge, huge, u32::MAX), huge, "saturates");
    }

    #[test]
    fn failures_count_until_cleared() {
        let f = Failures::default();
        assert_eq!(f.record("a"), 1);
        assert_eq!(f.record("a"), 2);
        f.clear("a");
        assert_eq!(f.record("a"), 1);
    }
}
