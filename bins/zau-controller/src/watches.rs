//! The caches the controller reads (StatefulSets, their pods, node zones) and the triggers they
//! produce: a change to a StatefulSet or to one of its pods reconciles the ZoneAwareUpdates that
//! name that StatefulSet.
//!
//! Each cache is a reflector whose store is updated *before* its trigger is sent, so a reconcile
//! never runs on a cache older than the event that caused it (the Controller's own `watches`
//! would race a separate store).

use std::future::ready;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use zone_api::ZoneAwareUpdate;
use zone_operator::InitialList;

use crate::pods::{self, REVISION_LABEL};

/// The read side of every cache.
#[derive(Clone)]
pub struct Caches {
    pub statefulsets: Store<StatefulSet>,
    pub pods: Store<Pod>,
    pub nodes: Store<PartialObjectMeta<Node>>,
}

impl Caches {
    /// Resolves once every cache has completed its initial list.
    pub async fn synced(&self) -> Result<(), reflector::store::WriterDropped> {
        self.statefulsets.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await
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

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Starts the caches: returns their stores and one future driving all of them, which sends the
/// ZoneAwareUpdates to reconcile into `triggers`. The future ends only if `triggers` closes.
pub fn start(
    client: &Client,
    namespace: Option<&str>,
    zone_label: &str,
    initial_list: InitialList,
    zaus: Store<ZoneAwareUpdate>,
    triggers: UnboundedSender<ObjectRef<ZoneAwareUpdate>>,
) -> (
    Caches,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (statefulsets, sts_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let (nodes, node_writer) = reflector::store();

    let sts_zaus = zaus.clone();
    let sts_events = watcher(api::<StatefulSet>(client, namespace), initial_list.config())
        .modify(pods::strip_statefulset)
        .default_backoff()
        .reflect(sts_writer)
        .touched_objects()
        .filter_map(|result| ready(log_errors("statefulsets", result)))
        .map(move |set| {
            let namespace = set.namespace().unwrap_or_default();
            zaus_for(&sts_zaus, &namespace, &set.name_any())
        });

    // Only StatefulSet pods carry the revision label; other pods never enter the cache.
    let pod_config = initial_list.config().labels(REVISION_LABEL);
    let pod_events = watcher(api::<Pod>(client, namespace), pod_config)
        .modify(pods::strip_pod)
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects()
        .filter_map(|result| ready(log_errors("pods", result)))
        .map(move |pod| match pods::owner_statefulset(&pod) {
            Some(owner) => zaus_for(&zaus, &pod.namespace().unwrap_or_default(), owner),
            None => Vec::new(),
        });

    // Node zones change rarely; pods follow any change that matters, so nodes trigger nothing.
    let zone_label = zone_label.to_string();
    let node_events = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        initial_list.config(),
    )
    .modify(move |node| pods::strip_node(node, &zone_label))
    .default_backoff()
    .reflect(node_writer)
    .touched_objects()
    .filter_map(|result| ready(log_errors("nodes", result)))
    .map(|_| Vec::new());

    let all = futures::stream::select(futures::stream::select(sts_events, pod_events), node_events);
    let drive = forward(all, triggers);
    (
        Caches {
            statefulsets,
            pods: pod_store,
            nodes,
        },
        drive,
    )
}

async fn forward(
    stream: impl Stream<Item = Vec<ObjectRef<ZoneAwareUpdate>>> + Send + 'static,
    triggers: UnboundedSender<ObjectRef<ZoneAwareUpdate>>,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(refs) = stream.next().await {
        for zau in refs {
            if triggers.unbounded_send(zau).is_err() {
                return;
            }
        }
    }
}

fn log_errors<K>(cache: &'static str, result: Result<K, watcher::Error>) -> Option<K> {
    match result {
        Ok(object) => Some(object),
        Err(error) => {
            // The backoff retries the watch; the error is worth a line, not a crash.
            tracing::warn!(cache, error = %error, "watch error");
            None
        }
    }
}
