//! The backoff of every watch: exponential from 800 ms to 30 s, reset only after two minutes
//! without an error.
//!
//! kube's default backoff is reset by any `Ok` the watcher yields, and a watcher yields
//! `Event::Init` *before* each (re)list. A list that fails every time (a kind the API server does
//! not serve, a permission missing) therefore retried about once a second for ever, logging a
//! warning each time. Here an explicit reset is ignored; the delay falls back to the minimum only
//! once the watch has gone two minutes without failing.

use std::time::{Duration, Instant};

use kube::runtime::utils::Backoff;

const MIN_DELAY: Duration = Duration::from_millis(800);
const MAX_DELAY: Duration = Duration::from_secs(30);
const QUIET_RESET: Duration = Duration::from_secs(120);

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
    last: Option<Instant>,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            next: MIN_DELAY,
            last: None,
        }
    }
}

impl WatchBackoff {
    fn delay_at(&mut self, now: Instant) -> Duration {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) > QUIET_RESET)
        {
            self.next = MIN_DELAY;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_DELAY);
        self.last = Some(now);
        delay
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.delay_at(Instant::now()))
    }
}

impl Backoff for WatchBackoff {
    /// Ignored: the watcher's `Event::Init` before every list attempt would reset it.
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_to_thirty_seconds_through_resets() {
        let mut backoff = WatchBackoff::default();
        let start = Instant::now();
        let mut delays = Vec::new();
        let mut now = start;
        for _ in 0..8 {
            let delay = backoff.delay_at(now);
            delays.push(delay.as_millis());
            // What the stream does when the retried watcher yields Init before failing again.
            backoff.reset();
            now += delay;
        }
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    }

    #[test]
    fn two_quiet_minutes_start_again_from_the_minimum() {
        let mut backoff = WatchBackoff::default();
        let start = Instant::now();
        assert_eq!(backoff.delay_at(start), MIN_DELAY);
        assert_eq!(backoff.delay_at(start), MIN_DELAY * 2);
        let later = start + QUIET_RESET + Duration::from_secs(1);
        assert_eq!(backoff.delay_at(later), MIN_DELAY);
    }
}
