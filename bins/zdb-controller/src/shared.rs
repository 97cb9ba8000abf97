//! The caches watched once per process: the webhook keeps them on every replica (it judges from
//! them whether or not this replica leads), the status controller (on the leader) reads the same
//! ones and is triggered by the budgets' changes.

use futures::future::{BoxFuture, Shared};
use futures::stream::{self, Stream, StreamExt};
use futures::{Future, FutureExt};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast::{self, error::RecvError};
use zone_api::ZoneDisruptionBudget;
use zone_operator::NodeZones;

/// A cache's first list as a future any number of tasks can await: a kube Store wakes only the
/// last of concurrent waiters, and the webhook and the status controller both wait.
#[derive(Clone)]
struct FirstList(Shared<BoxFuture<'static, bool>>);

impl FirstList {
    fn of<E>(listed: impl Future<Output = Result<(), E>> + Send + 'static) -> Self {
        Self(async move { listed.await.is_ok() }.boxed().shared())
    }

    /// True once the first list is complete; false if the cache stopped before.
    async fn wait(&self) -> bool {
        self.0.clone().await
    }
}

/// A shared cache stopped before its first list.
#[derive(Debug)]
pub struct CacheStopped;

/// The node cache: the zones of pods.
#[derive(Clone)]
pub struct SharedZones {
    zones: NodeZones,
    listed: FirstList,
}

impl SharedZones {
    pub fn new(zones: NodeZones) -> Self {
        let waits = zones.clone();
        let listed = FirstList::of(async move { waits.wait_until_ready().await });
        Self { zones, listed }
    }

    /// The zones, to place pods.
    pub fn zones(&self) -> &NodeZones {
        &self.zones
    }

    /// Resolves once the first list is complete; fails if the cache stopped before.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.listed.wait().await.then_some(()).ok_or(CacheStopped)
    }
}

/// Changes a lagging status controller may miss before it catches up by reconciling every
/// budget (a budget's changes come a few at a time; a re-list sends them all at once).
const CHANGES_BUFFERED: usize = 1024;

/// The budget cache, and its changes (every budget added, changed or deleted, once the cache
/// holds the change) for the status controller.
#[derive(Clone)]
pub struct SharedBudgets {
    store: Store<ZoneDisruptionBudget>,
    listed: FirstList,
    changes: broadcast::Sender<ObjectRef<ZoneDisruptionBudget>>,
}

impl SharedBudgets {
    pub fn new(store: Store<ZoneDisruptionBudget>) -> Self {
        let waits = store.clone();
        let listed = FirstList::of(async move { waits.wait_until_ready().await });
        let (changes, _) = broadcast::channel(CHANGES_BUFFERED);
        Self {
            store,
            listed,
            changes,
        }
    }

    pub fn store(&self) -> &Store<ZoneDisruptionBudget> {
        &self.store
    }

    /// Resolves once the first list is complete; fails if the cache stopped before.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.listed.wait().await.then_some(()).ok_or(CacheStopped)
    }

    /// Tells the status controller, if one listens, that `budget` changed.
    pub fn publish(&self, budget: ObjectRef<ZoneDisruptionBudget>) {
        // No receiver (not the leader) is no error: the controller lists every budget as it
        // starts.
        let _ = self.changes.send(budget);
    }

    /// Every budget of the cache once, then, for every change published from now on, the
    /// changed budget and the other budgets of its namespace (whether two budgets overlap, so
    /// are both invalid, changes with either: a new budget over a budget's pods makes that one
    /// invalid too, a deleted one may make it valid again); every budget again when the
    /// listener fell more than [`CHANGES_BUFFERED`] changes behind.
    pub fn triggers(&self) -> impl Stream<Item = ObjectRef<ZoneDisruptionBudget>> + use<> {
        // Subscribed before the cache is read: a change between the two is in both.
        let receiver = self.changes.subscribe();
        let initial = every_budget(&self.store);
        let store = self.store.clone();
        let changes = stream::unfold(receiver, move |mut receiver| {
            let store = store.clone();
            async move {
                let changed = match receiver.recv().await {
                    Ok(budget) => with_neighbours(&store, budget),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "budget changes missed; reconciling every budget");
                        every_budget(&store)
                    }
                    Err(RecvError::Closed) => return None,
                };
                Some((changed, receiver))
            }
        });
        stream::iter(initial).chain(changes.flat_map(stream::iter))
    }
}

/// `budget` (which may be gone from the cache), then the other budgets of its namespace.
fn with_neighbours(
    store: &Store<ZoneDisruptionBudget>,
    budget: ObjectRef<ZoneDisruptionBudget>,
) -> Vec<ObjectRef<ZoneDisruptionBudget>> {
    let neighbours = store
        .state()
        .iter()
        .filter(|other| {
            other.metadata.namespace == budget.namespace
                && other.metadata.name.as_deref() != Some(budget.name.as_str())
        })
        .map(|other| ObjectRef::from_obj(other.as_ref()))
        .collect::<Vec<_>>();
    std::iter::once(budget).chain(neighbours).collect()
}

fn every_budget(store: &Store<ZoneDisruptionBudget>) -> Vec<ObjectRef<ZoneDisruptionBudget>> {
    store
        .state()
        .iter()
        .map(|budget| ObjectRef::from_obj(budget.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn budget(name: &str) -> ZoneDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneDisruptionBudget",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"selector": {"matchLabels": {"app": name}}, "maxUnavailable": 1},
        }))
        .unwrap()
    }

    /// The names, sorted (a store lists in no order).
    fn names(refs: &[ObjectRef<ZoneDisruptionBudget>]) -> Vec<String> {
        let mut names: Vec<String> = refs.iter().map(|r| r.name.clone()).collect();
        names.sort();
        names
    }

    /// The controller starts from every cached budget, then follows the published changes (each
    /// with the other budgets of its namespace: they may overlap); one that falls behind the
    /// buffer reconciles every budget instead of missing some.
    #[tokio::test]
    async fn triggers_list_every_budget_then_follow_changes_and_catch_up_after_a_lag() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(budget("a")));
        writer.apply_watcher_event(&Event::Apply(budget("b")));
        let budgets = SharedBudgets::new(store);
        budgets.publish(ObjectRef::from_obj(&budget("before")));

        let mut triggers = Box::pin(budgets.triggers());
        let first: Vec<_> = triggers.by_ref().take(2).collect().await;
        assert_eq!(names(&first), ["a", "b"]);
        budgets.publish(ObjectRef::from_obj(&budget("a")));
        let next_two = triggers.by_ref().take(2).collect::<Vec<_>>();
        let changed = tokio::time::timeout(std::time::Duration::from_secs(5), next_two)
            .await
            .expect("the changed budget and its namespace's other one");
        assert_eq!(changed[0].name, "a", "the changed budget first");
        assert_eq!(names(&changed), ["a", "b"], "then its namespace's others");

        for _ in 0..=CHANGES_BUFFERED {
            budgets.publish(ObjectRef::from_obj(&budget("c")));
        }
        let caught_up: Vec<_> = triggers.by_ref().take(2).collect().await;
        assert_eq!(names(&caught_up), ["a", "b"], "every budget after a lag");
    }
}
