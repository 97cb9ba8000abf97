//! The evictions of one budget waiting to be recorded, within this replica: the queue of its
//! group commit.
//!
//! An allowed eviction is recorded by a PUT of the budget's status carrying the resourceVersion
//! that was decided on. When many evictions of one budget arrive at once (a parallel drain, a
//! cluster autoscaler emptying nodes), one write per eviction makes the write rate the eviction
//! rate, and the writers lose to each other with 409. Here the evictions a fresh read says to
//! record join their budget's queue ([`BudgetQueues::join`]); one committer per budget (a task
//! of its own, see `commit.rs`) takes everything queued as one batch
//! ([`BudgetQueues::next_batch`]), decides it on one version (`batch.rs`) and writes it once.
//! Evictions arriving during that write form the next batch. No batch waits to fill: a lone
//! eviction is written at once, and under a storm a batch is whatever arrived during one write.
//!
//! The queue is bounded, per budget and by time: a request that cannot be in a write while the
//! decision can still be made within the deadline is shed at once with a 429 (cheap, and the
//! client retries), never left to wait out the deadline. Memory is bounded with it: an entry
//! exists only while a committer of its budget runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use zone_api::ZoneDisruptionBudget;

use super::verdict::Verdict;
use crate::metrics::ZdbMetrics;
use zone_views::budget::batch::Candidate;

/// Evictions of one budget queued or in a batch, at most: half of the decisions a replica works
/// on at once, so that one budget's storm leaves room for the others'.
pub const MAX_QUEUED_PER_BUDGET: usize = 32;

/// A batch's write time assumed before any was measured.
const INITIAL_WRITE_ESTIMATE: Duration = Duration::from_millis(20);

/// (namespace, name) of a budget.
pub type BudgetKey = (String, String);

/// One eviction waiting for its budget's next write.
#[derive(Debug)]
pub struct Member {
    pub candidate: Candidate,
    /// The budget as this request read it fresh: one of the versions the batch may be decided
    /// on.
    pub read: Arc<ZoneDisruptionBudget>,
    /// When the request stops waiting for its answer.
    pub due: tokio::time::Instant,
    answer: oneshot::Sender<Verdict>,
}

impl Member {
    /// A member and the receiver of its answer.
    pub fn new(
        candidate: Candidate,
        read: Arc<ZoneDisruptionBudget>,
        due: tokio::time::Instant,
    ) -> (Self, oneshot::Receiver<Verdict>) {
        let (answer, receiver) = oneshot::channel();
        let member = Self {
            candidate,
            read,
            due,
            answer,
        };
        (member, receiver)
    }

    /// Whether the request gave up waiting (its deadline passed): it is not recorded.
    pub fn abandoned(&self) -> bool {
        self.answer.is_closed()
    }

    pub fn answer(self, verdict: Verdict) {
        // A request that gave up meanwhile has its own answer already.
        let _ = self.answer.send(verdict);
    }
}

#[derive(Debug, Default)]
struct Entry {
    /// Waiting for the next batch.
    pending: Vec<Member>,
    /// In the batch being decided and written.
    in_batch: usize,
    /// A committer runs for this budget (it empties `pending`, then removes the entry).
    committing: bool,
    /// The budget as this replica's last write of it returned it.
    written: Option<Arc<ZoneDisruptionBudget>>,
}

impl Entry {
    fn depth(&self) -> usize {
        self.pending.len() + self.in_batch
    }
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// [`MAX_QUEUED_PER_BUDGET`] evictions of this budget are already queued.
    QueueFull,
    /// The write in progress and the next one would not be through before the deadline.
    NoTimeLeft,
}

/// What the caller of [`BudgetQueues::join`] does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// No committer runs for the budget: the caller starts one.
    StartCommitter,
    /// The running committer will take it in its next batch.
    Queued,
}

/// The per-budget queues of this replica.
pub struct BudgetQueues {
    entries: Mutex<HashMap<BudgetKey, Entry>>,
    /// Moving average of how long a batch takes (µs): its decision and write, and the re-read
    /// after a conflict.
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
    fn publish_depth(&self, (namespace, name): &BudgetKey, depth: usize) {
        if let Some(metrics) = &self.metrics {
            metrics.queue_depth(namespace, name, depth);
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<BudgetKey, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `member` for the next write of budget `key`, or says why not: the queue is full,
    /// or the write in progress and the next one (at the measured time of a batch) would not be
    /// through within `time_left`. A request shed waits for nothing (its member is dropped).
    pub fn join(
        &self,
        key: &BudgetKey,
        member: Member,
        time_left: Duration,
    ) -> Result<Joined, Shed> {
        let mut entries = self.table();
        let entry = entries.entry(key.clone()).or_default();
        if entry.depth() >= MAX_QUEUED_PER_BUDGET {
            return Err(Shed::QueueFull);
        }
        // However long the queue, a member waits for at most the batch being written and its own.
        let batches = if entry.committing { 2 } else { 1 };
        if self.write_estimate() * batches > time_left {
            if !entry.committing && entry.depth() == 0 {
                entries.remove(key);
            }
            return Err(Shed::NoTimeLeft);
        }
        entry.pending.push(member);
        let depth = entry.depth();
        let joined = if entry.committing {
            Joined::Queued
        } else {
            entry.committing = true;
            Joined::StartCommitter
        };
        self.publish_depth(key, depth);
        Ok(joined)
    }

    /// The committer's next batch: `carried` (members of a batch to decide again) and every
    /// member queued since. `None` when there is none: the committer ends, and the entry is
    /// removed (the next member starts a new committer).
    pub fn next_batch(&self, key: &BudgetKey, carried: Vec<Member>) -> Option<Vec<Member>> {
        let mut entries = self.table();
        let entry = entries.get_mut(key)?;
        let mut batch = carried;
        batch.append(&mut entry.pending);
        entry.in_batch = batch.len();
        if batch.is_empty() {
            entries.remove(key);
            self.publish_depth(key, 0);
            return None;
        }
        self.publish_depth(key, batch.len());
        Some(batch)
    }

    /// Ends budget `key`'s queue when its committer stopped without emptying it (a panic): the
    /// members waiting are dropped, their requests answered 429 by the caller.
    pub fn abandon(&self, key: &BudgetKey) {
        let mut entries = self.table();
        if entries.remove(key).is_some() {
            self.publish_depth(key, 0);
        }
    }

    /// The budget as this replica last wrote it, while its queue lives.
    pub fn written(&self, key: &BudgetKey) -> Option<Arc<ZoneDisruptionBudget>> {
        self.table()
            .get(key)
            .and_then(|entry| entry.written.clone())
    }

    /// Records what a write of budget `key` returned, for the next batch.
    pub fn wrote(&self, key: &BudgetKey, zdb: Arc<ZoneDisruptionBudget>) {
        if let Some(entry) = self.table().get_mut(key) {
            entry.written = Some(zdb);
        }
    }

    /// Records how long a batch took: a moving average that follows a longer batch at once
    /// (half way) and a shorter one slowly (an eighth), so that after a conflict or a slow write
    /// the queue sheds early rather than let requests wait into the deadline.
    pub fn observe_batch(&self, took: Duration) {
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

    pub fn write_estimate(&self) -> Duration {
        Duration::from_micros(self.write_estimate_us.load(Ordering::Acquire))
    }

    /// Evictions of budget `key` queued or in a batch now.
    #[cfg(test)]
    pub fn depth(&self, key: &BudgetKey) -> usize {
        self.table().get(key).map_or(0, Entry::depth)
    }

    /// Budgets with a queue now.
    #[cfg(test)]
    pub fn budgets(&self) -> usize {
        self.table().len()
    }
}

#[cfg(test)]
pub mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_topology::Zone;
    use zone_topology::budget::PodCondition;

    pub fn key(name: &str) -> BudgetKey {
        ("apps".to_string(), name.to_string())
    }

    pub fn member(pod: &str, zone: &str, due_in: Duration) -> (Member, oneshot::Receiver<Verdict>) {
        let candidate = Candidate {
            pod: pod.to_string(),
            zone: Zone::known(zone),
            condition: PodCondition::Healthy,
            created_ms: 0,
            dry_run: false,
            rollout: false,
        };
        let read = Arc::new(ZoneDisruptionBudget::new("web", Default::default()));
        Member::new(candidate, read, tokio::time::Instant::now() + due_in)
    }

    const PLENTY: Duration = Duration::from_secs(3);

    /// The first member starts the committer; those arriving meanwhile are all in its next
    /// batch, and the committer ends (the entry with it) once nothing is queued.
    #[test]
    fn members_queued_during_a_write_form_the_next_batch() {
        let queues = BudgetQueues::default();
        let (first, _a) = member("web-0", "zone-a", PLENTY);
        assert_eq!(
            queues.join(&key("web"), first, PLENTY),
            Ok(Joined::StartCommitter)
        );
        let batch = queues.next_batch(&key("web"), Vec::new()).unwrap();
        assert_eq!(batch.len(), 1);
        // While that batch is written, three more arrive, and one of another budget.
        let mut receivers = Vec::new();
        for i in 1..4 {
            let (m, r) = member(&format!("web-{i}"), "zone-a", PLENTY);
            assert_eq!(queues.join(&key("web"), m, PLENTY), Ok(Joined::Queued));
            receivers.push(r);
        }
        let (other, _o) = member("db-0", "zone-a", PLENTY);
        assert_eq!(
            queues.join(&key("db"), other, PLENTY),
            Ok(Joined::StartCommitter),
            "another budget has its own committer"
        );
        assert_eq!(queues.depth(&key("web")), 4);
        let next = queues.next_batch(&key("web"), Vec::new()).unwrap();
        let pods: Vec<&str> = next.iter().map(|m| m.candidate.pod.as_str()).collect();
        assert_eq!(pods, ["web-1", "web-2", "web-3"]);
        assert!(queues.next_batch(&key("web"), Vec::new()).is_none());
        assert_eq!(queues.budgets(), 1, "an emptied queue leaves no entry");
        // The next member starts a new committer.
        let (again, _r) = member("web-9", "zone-a", PLENTY);
        assert_eq!(
            queues.join(&key("web"), again, PLENTY),
            Ok(Joined::StartCommitter)
        );
    }

    /// Members carried over (a batch decided again after a conflict) come first.
    #[test]
    fn carried_members_come_first() {
        let queues = BudgetQueues::default();
        let (first, _a) = member("web-0", "zone-a", PLENTY);
        queues.join(&key("web"), first, PLENTY).unwrap();
        let batch = queues.next_batch(&key("web"), Vec::new()).unwrap();
        let (late, _b) = member("web-1", "zone-a", PLENTY);
        queues.join(&key("web"), late, PLENTY).unwrap();
        let next = queues.next_batch(&key("web"), batch).unwrap();
        let pods: Vec<&str> = next.iter().map(|m| m.candidate.pod.as_str()).collect();
        assert_eq!(pods, ["web-0", "web-1"]);
    }

    #[test]
    fn a_full_queue_sheds_at_once() {
        let queues = BudgetQueues::default();
        let mut receivers = Vec::new();
        for i in 0..MAX_QUEUED_PER_BUDGET {
            let (m, r) = member(&format!("web-{i}"), "zone-a", PLENTY);
            queues.join(&key("web"), m, PLENTY).unwrap();
            receivers.push(r);
        }
        let (m, _r) = member("web-x", "zone-a", PLENTY);
        assert_eq!(queues.join(&key("web"), m, PLENTY), Err(Shed::QueueFull));
        // In a batch they still count: the queue is bounded until they are answered.
        let batch = queues.next_batch(&key("web"), Vec::new()).unwrap();
        let (m, _r) = member("web-y", "zone-a", PLENTY);
        assert_eq!(queues.join(&key("web"), m, PLENTY), Err(Shed::QueueFull));
        drop(batch);
        assert!(queues.next_batch(&key("web"), Vec::new()).is_none());
        assert_eq!(queues.budgets(), 0);
    }

    #[test]
    fn a_queue_that_cannot_be_through_in_time_sheds_at_once() {
        let queues = BudgetQueues::default();
        queues.observe_batch(Duration::from_millis(20));
        // Alone: its own write (20 ms) fits in 30 ms.
        let (m, _r) = member("web-0", "zone-a", PLENTY);
        assert_eq!(
            queues.join(&key("web"), m, Duration::from_millis(30)),
            Ok(Joined::StartCommitter)
        );
        // Behind the write in progress: 2 x 20 ms does not fit.
        let (m, _r) = member("web-1", "zone-a", PLENTY);
        assert_eq!(
            queues.join(&key("web"), m, Duration::from_millis(30)),
            Err(Shed::NoTimeLeft)
        );
        // A shed member leaves no entry behind when nothing else is queued.
        let empty = BudgetQueues::default();
        let (m, _r) = member("web-0", "zone-a", PLENTY);
        assert_eq!(
            empty.join(&key("web"), m, Duration::from_millis(1)),
            Err(Shed::NoTimeLeft)
        );
        assert_eq!(empty.budgets(), 0);
    }

    /// A committer that stopped early drops its waiting members: their requests see the
    /// answer channel closed instead of waiting out the deadline.
    #[test]
    fn an_abandoned_queue_drops_its_members() {
        let queues = BudgetQueues::default();
        let (m, mut receiver) = member("web-0", "zone-a", PLENTY);
        queues.join(&key("web"), m, PLENTY).unwrap();
        queues.abandon(&key("web"));
        assert!(receiver.try_recv().is_err());
        assert_eq!(queues.budgets(), 0);
    }

    /// The depth gauge follows the queue, and an emptied queue loses its series.
    #[test]
    fn queue_depths_are_published() {
        let registry = prometheus::Registry::new();
        let metrics = ZdbMetrics::register(&registry).unwrap();
        let queues = BudgetQueues::with_metrics(metrics);
        let series = r#"zone_aware_zdb_webhook_queue_depth{name="web",namespace="apps"}"#;
        let mut receivers = Vec::new();
        for i in 0..2 {
            let (m, r) = member(&format!("web-{i}"), "zone-a", PLENTY);
            queues.join(&key("web"), m, PLENTY).unwrap();
            receivers.push(r);
        }
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(&format!("{series} 2")), "{text}");
        let batch = queues.next_batch(&key("web"), Vec::new()).unwrap();
        drop(batch);
        assert!(queues.next_batch(&key("web"), Vec::new()).is_none());
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(series), "{text}");
    }

    #[test]
    fn the_estimate_follows_the_measured_batches() {
        let slow = BudgetQueues::default();
        slow.observe_batch(Duration::from_millis(100));
        // Half way up at once: 20 ms -> 60 ms.
        assert_eq!(slow.write_estimate(), Duration::from_millis(60));
        let queues = BudgetQueues::default();
        for _ in 0..50 {
            queues.observe_batch(Duration::from_millis(4));
        }
        let estimate = queues.write_estimate();
        assert!(
            estimate < Duration::from_millis(5) && estimate >= Duration::from_millis(4),
            "{estimate:?}"
        );
    }
}
