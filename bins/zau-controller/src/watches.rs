//! The caches the controller reads (StatefulSets, their pods, node zones) and the triggers they
//! produce: a change to a StatefulSet or to one of its pods reconciles the ZoneAwareUpdates that
//! name that StatefulSet.
//!
//! Each cache is a reflector whose store is updated *before* its trigger is sent, so a reconcile
//! never runs on a cache older than the event that caused it (the Controller's own `watches`
//! would race a separate store).

use std::future::ready;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use zone_api::ZoneAwareUpdate;
use zone_operator::controller::{forward_triggers, log_watch_error};
use zone_operator::{InitialList, NodeZones, ScopeArgs};

use crate::pods::{self, REVISION_LABEL};

/// The read side of every cache.
#[derive(Clone)]
pub struct Caches {
    pub statefulsets: Store<StatefulSet>,
    pub pods: Store<Pod>,
    pub zones: NodeZones,
}

impl Caches {
    /// Resolves once every cache has completed its initial list.
    pub async fn synced(&self) -> Result<(), reflector::store::WriterDropped> {
        self.statefulsets.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.zones.wait_until_ready().await
    }
}

/// The ZoneAwareUpdates of `namespace` whose `spec.statefulset` is `statefulset`.
pub fn zaus_for(
    zaus: &Store<ZoneAwareUpdate>,
    namespace: &str,
    statefulset: &str,
) -> Vec<ObjectRef<ZoneAwareUpdate>> {
    zaus.state()
        .iter()
        .filter(|zau| {
            zau.metadata.namespace.as_deref() == Some(namespace)
                && zau.spec.statefulset == statefulset
        })
        .map(|zau| ObjectRef::from_obj(zau.as_ref()))
        .collect()
}

/// Starts the caches: returns their stores and one future driving all of them, which sends the
/// ZoneAwareUpdates to reconcile into `triggers`. The future ends only if `triggers` closes.
pub fn start(
    client: &Client,
    scope: &ScopeArgs,
    initial_list: InitialList,
    zaus: Store<ZoneAwareUpdate>,
    triggers: UnboundedSender<ObjectRef<ZoneAwareUpdate>>,
) -> (
    Caches,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (statefulsets, sts_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();

    let sts_zaus = zaus.clone();
    let sts_events = watcher(scope.api::<StatefulSet>(client), initial_list.config())
        .modify(pods::strip_statefulset)
        .default_backoff()
        .reflect(sts_writer)
        .touched_objects()
        .filter_map(|result| ready(log_watch_error("statefulsets", result)))
        .map(move |set| {
            let namespace = set.namespace().unwrap_or_default();
            zaus_for(&sts_zaus, &namespace, &set.name_any())
        });

    // Only StatefulSet pods carry the revision label; other pods never enter the cache.
    let pod_config = initial_list.config().labels(REVISION_LABEL);
    let pod_events = watcher(scope.api::<Pod>(client), pod_config)
        .modify(pods::strip_pod)
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects()
        .filter_map(|result| ready(log_watch_error("pods", result)))
        .map(move |pod| match pods::owner_statefulset(&pod) {
            Some(owner) => zaus_for(&zaus, &pod.namespace().unwrap_or_default(), owner),
            None => Vec::new(),
        });

    // Node zones change rarely; pods follow any change that matters, so nodes trigger nothing.
    let (zones, node_events) = NodeZones::watch(client, &scope.zone_label, initial_list);
    let node_events = node_events.map(|()| Vec::new());

    let all = futures::stream::select(futures::stream::select(sts_events, pod_events), node_events);
    let drive = forward_triggers(all, triggers);
    (
        Caches {
            statefulsets,
            pods: pod_store,
            zones,
        },
        drive,
    )
}
