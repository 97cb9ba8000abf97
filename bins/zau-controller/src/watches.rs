//! The caches the controller reads (StatefulSets, their pods, node zones) and the triggers they
//! produce: a change to a StatefulSet or to one of its pods reconciles the ZoneAwareUpdates that
//! name that StatefulSet. Each trigger follows its cache's update ([`WatchSet`]).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use zone_api::ZoneAwareUpdate;
use zone_operator::{InitialList, NodeZones, ScopeArgs, WatchSet};

use crate::pods::{self, REVISION_LABEL};

/// The read side of every cache.
#[derive(Clone)]
pub struct Caches {
    pub statefulsets: Store<StatefulSet>,
    pub pods: Store<Pod>,
    pub zones: NodeZones,
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

/// The caches, and the set of watches that fills them and sends the ZoneAwareUpdates their
/// changes reconcile (start it to drive them).
pub fn caches(
    client: &Client,
    scope: &ScopeArgs,
    initial_list: InitialList,
    zaus: Store<ZoneAwareUpdate>,
) -> (Caches, WatchSet<ZoneAwareUpdate>) {
    let mut watches = WatchSet::new();
    let sts_zaus = zaus.clone();
    let statefulsets = watches.watch(
        "statefulsets",
        scope.api::<StatefulSet>(client),
        initial_list.config(),
        pods::strip_statefulset,
        move |set| {
            let namespace = set.namespace().unwrap_or_default();
            zaus_for(&sts_zaus, &namespace, &set.name_any())
        },
    );
    // Only StatefulSet pods carry the revision label; other pods never enter the cache.
    let pod_store = watches.watch(
        "pods",
        scope.api::<Pod>(client),
        initial_list.config().labels(REVISION_LABEL),
        pods::strip_pod,
        move |pod| match pods::owner_statefulset(pod) {
            Some(owner) => zaus_for(&zaus, &pod.namespace().unwrap_or_default(), owner),
            None => Vec::new(),
        },
    );
    // Node zones change rarely; pods follow any change that matters, so nodes trigger nothing.
    let zones = watches.zones(client, &scope.zone_label, initial_list);
    let caches = Caches {
        statefulsets,
        pods: pod_store,
        zones,
    };
    (caches, watches)
}
