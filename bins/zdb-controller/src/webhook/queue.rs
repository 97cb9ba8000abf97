//! One writer at a time per budget, within this replica.
//!
//! An allowed eviction is recorded by a PUT of the budget's status carrying the resourceVersion
//! that was read. When many evictions of one budget arrive at once (a parallel drain, a cluster
//! autoscaler emptying nodes), letting each read, decide and PUT on its own makes all but one
//! lose with 409 and start again, over and over: a conflict storm inside one process, with
//! every request holding its copies of the budget until the decision deadline.
//!
//! Here the decisions that would write a budget take turns ([`BudgetQueues::turn`]): the holder
//! of a turn decides on the latest version this replica knows (the one the previous writer
//! stored) and writes; the next one starts from its result. Across replicas nothing changes: the
//! PUT with the resourceVersion still lets only one of two replicas win.
//!
//! The queue is bounded, per budget and by time: a request that cannot get its turn while the
//! decision can still be made within the deadline is shed at once with a 429 (cheap, and the
//! client retries), never left to wait out the deadline. Memory is bounded with it: an entry
//! exists only while a decision of its budget is in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};
use zone_api::ZoneDisruptionBudget;

use crate::metrics::ZdbMetrics;

/// Requests of one budget waiting for (or holding) the writer's turn, at most: half of the
/// decisions a replica works on at once, so that one budget's storm leaves room for the others'.
pub const MAX_QUEUED_PER_BUDGET: usize = 32;

/// A turn's duration assumed before any was measured.
const INITIAL_WRITE_ESTIMATE: Duration = Duration::from_millis(20);

/// (namespace, name) → the turn of that budget.
type Entries = HashMap<(String, String), Arc<Entry>>;

#[derive(Debug, Default)]
struct Entry {
    turn: Arc<TurnLock<()>>,
    /// Waiting for the turn or holding it (changed under the table's lock).
    queued: std::sync::atomic::AtomicUsize,
    /// The budget as the last holder of the turn wrote it: where the next one starts.
    written: Mutex<Option<Arc<ZoneDisruptionBudget>>>,
}

/// Why a request did not get its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// [`MAX_QUEUED_PER_BUDGET`] requests of this budget are already queued.
    QueueFull,
    /// The queue ahead would not be through before the deadline.
    NoTimeLeft,
}

/// The per-budget turns of this replica.
pub struct BudgetQueues {
    entries: Mutex<Entries>,
    /// Moving average of how long a turn is held (µs), to tell whether the queue ahead fits.
    write_estimate_us: AtomicU64,
    /// Where each change of a queue's depth is published.
    metrics: Option<ZdbMetrics>,
}

impl Default for BudgetQueues {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            write_estimate_us: AtomicU64::new(micros(INITIAL_WRITE_ESTIMATE)),
            metrics: None,
        }
    }
}

impl std::fmt::Debug for BudgetQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetQueues")
            .field("entries", &self.entries)
            .field("write_estimate_us", &self.write_estimate_us)
            .finish_non_exhaustive()
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The writer's turn for one budget; the next request gets it when this drops, and how long it
/// was held (the write, and any re-read and retry after a conflict) is what the next requests
/// expect to wait per request ahead of them.
#[derive(Debug)]
pub struct Turn {
    _held: OwnedMutexGuard<()>,
    queue: Queued,
    acquired: tokio::time::Instant,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.queue.queues.observe_turn(self.acquired.elapsed());
    }
}

impl Turn {
    /// Requests of this budget queued behind and including this one.
    #[cfg(test)]
    fn depth(&self) -> usize {
        self.queue.entry.queued.load(Ordering::Acquire)
    }

    /// The budget as an earlier holder of this queue's turn wrote it, if one did: newer than
    /// what was read before waiting.
    pub fn written(&self) -> Option<Arc<ZoneDisruptionBudget>> {
        self.queue
            .entry
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records what this holder wrote, for the next one.
    pub fn wrote(&self, zdb: &ZoneDisruptionBudget) {
        *self
            .queue
            .entry
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(zdb.clone()));
    }
}

/// A place in a budget's queue; leaving it (drop) removes the budget's entry when it empties.
#[derive(Debug)]
struct Queued {
    queues: Arc<BudgetQueues>,
    key: (String, String),
    entry: Arc<Entry>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let mut entries = self
            .queues
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let left = self.entry.queued.fetch_sub(1, Ordering::AcqRel) - 1;
        if left == 0 {
            entries.remove(&self.key);
        }
        self.queues.publish_depth(&self.key, left);
    }
}

impl BudgetQueues {
    /// Queues whose depth is published as `webhook_queue_depth` (the series of an emptied
    /// queue is removed).
    pub fn with_metrics(metrics: ZdbMetrics) -> Self {
        Self {
            metrics: Some(metrics),
            ..Self::default()
        }
    }

    /// Called under the table's lock, so the published depths follow the changes in order.
    fn publish_depth(&self, (namespace, name): &(String, String), depth: usize) {
        if let Some(metrics) = &self.metrics {
            metrics.queue_depth(namespace, name, depth);
        }
    }

    /// Waits for the writer's turn of budget `namespace/name`, or says why not: the queue is
    /// full, or what waits ahead (at the measured time of a turn) would not be through within
    /// `time_left`. A request shed waits for nothing.
    pub async fn turn(
        self: &Arc<Self>,
        namespace: &str,
        name: &str,
        time_left: Duration,
    ) -> Result<Turn, Shed> {
        let key = (namespace.to_owned(), name.to_owned());
        let (entry, ahead) = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = entries.entry(key.clone()).or_default().clone();
            let ahead = entry.queued.load(Ordering::Acquire);
            if ahead >= MAX_QUEUED_PER_BUDGET {
                return Err(Shed::QueueFull);
            }
            // Our own write counts too: the decision must fit after the queue.
            let needed = self.write_estimate() * u32::try_from(ahead + 1).unwrap_or(u32::MAX);
            if needed > time_left {
                return Err(Shed::NoTimeLeft);
            }
            entry.queued.fetch_add(1, Ordering::AcqRel);
            self.publish_depth(&key, ahead + 1);
            (entry, ahead)
        };
        let queue = Queued {
            queues: self.clone(),
            key,
            entry,
        };
        let until = tokio::time::Instant::now() + time_left;
        let wait = queue.entry.turn.clone().lock_owned();
        match tokio::time::timeout(time_left, wait).await {
            // The turn came too late for a turn's usual work: give it to the next one rather
            // than run into the deadline holding it.
            Ok(_)
                if until.saturating_duration_since(tokio::time::Instant::now())
                    < self.write_estimate() =>
            {
                tracing::debug!(ahead, "the writer's turn came too late");
                Err(Shed::NoTimeLeft)
            }
            Ok(held) => Ok(Turn {
                _held: held,
                queue,
                acquired: tokio::time::Instant::now(),
            }),
            Err(_) => {
                tracing::debug!(ahead, "the writer's turn did not come in time");
                Err(Shed::NoTimeLeft)
            }
        }
    }

    /// Records how long a turn was held: a moving average that follows a longer turn at once
    /// (half way) and a shorter one slowly (an eighth), so that after a conflict or a slow write
    /// the queue sheds early rather than let requests wait into the deadline.
    fn observe_turn(&self, took: Duration) {
        let sample = micros(took);
        let _ =
            self.write_estimate_us
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |estimate| {
                    Some(if sample > estimate {
                        (estimate + sample) / 2
                    } else {
                        (estimate * 7 + sample) / 8
                    })
                });
    }

    fn write_estimate(&self) -> Duration {
        Duration::from_micros(self.write_estimate_us.load(Ordering::Acquire))
    }

    /// Requests of budget `namespace/name` queued now.
    #[cfg(test)]
    fn depth(&self, namespace: &str, name: &str) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace.to_owned(), name.to_owned()))
            .map_or(0, |entry| entry.queued.load(Ordering::Acquire))
    }

    /// Budgets with a queue now, and its depth.
    #[cfg(test)]
    fn depths(&self) -> Vec<((String, String), usize)> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(key, entry)| (key.clone(), entry.queued.load(Ordering::Acquire)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const PLENTY: Duration = Duration::from_secs(3);

    /// Requests of one budget never hold the turn together; another budget's do not wait for it.
    #[tokio::test]
    async fn writers_of_one_budget_take_turns() {
        let queues = Arc::new(BudgetQueues::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (queues, inside, most) = (queues.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = queues.turn("apps", "web", PLENTY).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Give the other writers every chance to come in meanwhile.
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        let held = queues.turn("apps", "db", PLENTY).await.unwrap();
        assert_eq!(held.depth(), 1, "another budget has its own queue");
        assert!(held.written().is_none());
        let mut budget = ZoneDisruptionBudget::new("web", Default::default());
        budget.metadata.resource_version = Some("7".into());
        held.wrote(&budget);
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "one writer at a time");
        assert!(queues.depths().is_empty(), "empty queues leave no entry");
    }

    /// The next holder starts from what the previous one wrote, not from its own older read.
    #[tokio::test]
    async fn the_next_writer_starts_from_the_last_write() {
        let queues = Arc::new(BudgetQueues::default());
        let first = queues.turn("apps", "web", PLENTY).await.unwrap();
        let next = {
            let queues = queues.clone();
            tokio::spawn(async move {
                let turn = queues.turn("apps", "web", PLENTY).await.unwrap();
                turn.written()
                    .and_then(|zdb| zdb.metadata.resource_version.clone())
            })
        };
        while queues.depth("apps", "web") < 2 {
            tokio::task::yield_now().await;
        }
        let mut budget = ZoneDisruptionBudget::new("web", Default::default());
        budget.metadata.resource_version = Some("8".into());
        first.wrote(&budget);
        drop(first);
        assert_eq!(next.await.unwrap().as_deref(), Some("8"));
    }

    #[tokio::test]
    async fn a_full_queue_sheds_at_once() {
        let queues = Arc::new(BudgetQueues::default());
        let held = queues.turn("apps", "web", PLENTY).await.unwrap();
        let mut waiting = Vec::new();
        for _ in 1..MAX_QUEUED_PER_BUDGET {
            let queues = queues.clone();
            waiting.push(tokio::spawn(async move {
                queues
                    .turn("apps", "web", Duration::from_secs(60))
                    .await
                    .map(drop)
            }));
        }
        while queues.depths() != [(("apps".into(), "web".into()), MAX_QUEUED_PER_BUDGET)] {
            tokio::task::yield_now().await;
        }
        let started = tokio::time::Instant::now();
        let shed = queues.turn("apps", "web", Duration::from_secs(60)).await;
        assert_eq!(shed.unwrap_err(), Shed::QueueFull);
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "shed without waiting"
        );
        drop(held);
        for task in waiting {
            task.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_queue_that_cannot_be_through_in_time_sheds_at_once() {
        let queues = Arc::new(BudgetQueues::default());
        queues.observe_turn(Duration::from_millis(20));
        let _held = queues.turn("apps", "web", PLENTY).await.unwrap();
        // One ahead (20 ms) plus our own write (20 ms) does not fit in 30 ms.
        let shed = queues.turn("apps", "web", Duration::from_millis(30)).await;
        assert_eq!(shed.unwrap_err(), Shed::NoTimeLeft);
        // It fits in a second, but the holder keeps the turn: the wait ends at the time left.
        let started = tokio::time::Instant::now();
        let late = queues.turn("apps", "web", Duration::from_millis(200)).await;
        assert_eq!(late.unwrap_err(), Shed::NoTimeLeft);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    /// A turn that comes with less time left than a turn takes is handed on, not taken into
    /// the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_turn_that_comes_too_late_is_given_up() {
        let queues = Arc::new(BudgetQueues::default());
        let held = queues.turn("apps", "web", PLENTY).await.unwrap();
        // Admitted: one ahead and its own turn, 2 x 20 ms, fit in 100 ms.
        let waiter = {
            let queues = queues.clone();
            tokio::spawn(async move {
                queues
                    .turn("apps", "web", Duration::from_millis(100))
                    .await
                    .map(drop)
            })
        };
        while queues.depth("apps", "web") < 2 {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(Duration::from_millis(90)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap_err(), Shed::NoTimeLeft);
        assert!(queues.depths().is_empty());
    }

    /// The depth gauge follows the queue, and an emptied queue loses its series.
    #[tokio::test]
    async fn queue_depths_are_published() {
        let registry = prometheus::Registry::new();
        let metrics = ZdbMetrics::register(&registry).unwrap();
        let queues = Arc::new(BudgetQueues::with_metrics(metrics));
        let series = r#"zone_aware_zdb_webhook_queue_depth{name="web",namespace="apps"}"#;
        let first = queues.turn("apps", "web", PLENTY).await.unwrap();
        let second = {
            let queues = queues.clone();
            tokio::spawn(async move { queues.turn("apps", "web", PLENTY).await.map(drop) })
        };
        while queues.depth("apps", "web") < 2 {
            tokio::task::yield_now().await;
        }
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(&format!("{series} 2")), "{text}");
        drop(first);
        second.await.unwrap().unwrap();
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(series), "{text}");
    }

    #[test]
    fn the_estimate_follows_the_measured_turns() {
        let slow = BudgetQueues::default();
        slow.observe_turn(Duration::from_millis(100));
        // Half way up at once: 20 ms -> 60 ms.
        assert_eq!(slow.write_estimate(), Duration::from_millis(60));
        let queues = BudgetQueues::default();
        for _ in 0..50 {
            queues.observe_turn(Duration::from_millis(4));
        }
        let estimate = queues.write_estimate();
        assert!(
            estimate < Duration::from_millis(5) && estimate >= Duration::from_millis(4),
            "{estimate:?}"
        );
    }
}
