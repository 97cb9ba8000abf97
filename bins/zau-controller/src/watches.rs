//! The caches the controller reads (StatefulSets, their pods, node zones) and the triggers they
//! produce: a change to a StatefulSet or to one of its pods reconciles the ZoneAwareUpdates that
//! name that StatefulSet, or select it into their rollout group. Each trigger follows its cache's
//! update ([`WatchSet`]).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::core::{Selector, SelectorExt};
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

/// The ZoneAwareUpdates that roll `set`: they name it (`spec.statefulset`), or select it into
/// their group (`spec.selector`), in its namespace.
pub fn zaus_for(
    zaus: &Store<ZoneAwareUpdate>,
    set: &StatefulSet,
) -> Vec<ObjectRef<ZoneAwareUpdate>> {
    let namespace = set.metadata.namespace.as_deref();
    let name = set.name_any();
    zaus.state()
        .iter()
        .filter(|zau| zau.metadata.namespace.as_deref() == namespace)
        .filter(|zau| match &zau.spec.selector {
            None => zau.spec.statefulset == name,
            Some(selector) => Selector::try_from(selector.clone())
                .is_ok_and(|selector| selector.matches(set.labels())),
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
        move |set| zaus_for(&sts_zaus, set),
    );
    let owners = statefulsets.clone();
    // Only StatefulSet pods carry the revision label; other pods never enter the cache.
    let pod_store = watches.watch(
        "pods",
        scope.api::<Pod>(client),
        initial_list.config().labels(REVISION_LABEL),
        pods::strip_pod,
        move |pod| {
            let owner = pods::owner_statefulset(pod).and_then(|owner| {
                owners.get(&ObjectRef::new(owner).within(&pod.namespace().unwrap_or_default()))
            });
            owner.map_or_else(Vec::new, |set| zaus_for(&zaus, &set))
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
