//! Wiring of the status controller (leader only): caches of budgets, pods and node zones, the
//! kube Controller on ZoneDisruptionBudgets, readiness, shutdown.
//!
//! Any change of a pod reconciles every budget of its namespace (a pod whose labels changed may
//! have left a budget, which mapping by its current labels would miss). Status writes by the
//! webhook reconcile the budget too; an unchanged status is never written, so that ends there.

use std::future::ready;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use zone_api::ZoneDisruptionBudget;
use zone_operator::{InitialList, RuntimeParts};

use crate::cli::Args;
use crate::metrics::ZdbMetrics;
use crate::pods;
use crate::reconcile::{self, Context};

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("a cache stopped before its initial list completed")]
    CacheStopped,
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

/// The budgets of `namespace`.
fn zdbs_in(
    zdbs: &Store<ZoneDisruptionBudget>,
    namespace: &str,
) -> Vec<ObjectRef<ZoneDisruptionBudget>> {
    zdbs.state()
        .iter()
        .filter(|zdb| zdb.metadata.namespace.as_deref() == Some(namespace))
        .map(|zdb| ObjectRef::from_obj(zdb.as_ref()))
        .collect()
}

/// Node zones for the controller and the webhook: a metadata-only watch keeping the zone label.
pub fn node_cache(
    client: &Client,
    zone_label: &str,
    initial_list: InitialList,
) -> (
    Store<PartialObjectMeta<Node>>,
    impl futures::Stream<Item = ()> + Send + 'static,
) {
    let (nodes, writer) = reflector::store();
    let zone_label = zone_label.to_string();
    let stream = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        initial_list.config(),
    )
    .modify(move |node| pods::strip_node(node, &zone_label))
    .default_backoff()
    .reflect(writer)
    .touched_objects()
    .filter_map(|result| ready(log_errors("nodes", result)))
    .map(|_| ());
    (nodes, stream)
}

/// Runs until shutdown.
pub async fn run(
    parts: RuntimeParts,
    args: Args,
    zdb_metrics: ZdbMetrics,
) -> Result<(), ControllerError> {
    let namespace = args.watch_namespace.as_deref();
    let client = parts.client.clone();
    // Resolved by main: streaming or paginated.
    let initial_list = args.runtime.initial_list;

    let (zdbs, zdb_writer) = reflector::store();
    let zdb_stream = watcher(
        api::<ZoneDisruptionBudget>(&client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(zdb_writer)
    .applied_objects();

    let (pod_store, pod_writer) = reflector::store();
    let pod_zdbs = zdbs.clone();
    let pod_events = watcher(api::<Pod>(&client, namespace), initial_list.config())
        .modify(pods::strip_pod)
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects()
        .filter_map(|result| ready(log_errors("pods", result)))
        .map(move |pod| zdbs_in(&pod_zdbs, &pod.namespace().unwrap_or_default()));
    let (nodes, node_events) = node_cache(&client, &args.zone_label, initial_list);

    // Pod events are mapped to budgets; node events only keep the cache (pods follow any node
    // change that matters).
    let (triggers, trigger_stream) = futures::channel::mpsc::unbounded();
    let drive = tokio::spawn(async move {
        let mut pod_events = std::pin::pin!(pod_events);
        let mut node_events = std::pin::pin!(node_events);
        loop {
            tokio::select! {
                refs = pod_events.next() => match refs {
                    Some(refs) => for zdb in refs {
                        if triggers.unbounded_send(zdb).is_err() { return; }
                    },
                    None => return,
                },
                node = node_events.next() => if node.is_none() { return; },
            }
        }
    });

    let synced = tokio::select! {
        synced = async {
            pod_store.wait_until_ready().await?;
            nodes.wait_until_ready().await
        } => synced.is_ok(),
        () = parts.shutdown.cancelled() => { drive.abort(); return Ok(()); }
    };
    if !synced {
        drive.abort();
        return Err(ControllerError::CacheStopped);
    }
    // The pod, node and StatefulSet caches are what decisions read; the watch of the resources
    // themselves is driven by the controller below and needs no gate.
    tracing::info!("caches synced");
    parts.readiness.set_ready();

    tracing::info!(namespace = ?namespace, "zdb status controller running");
    let context = Arc::new(Context::new(
        client,
        zdbs.clone(),
        pod_store,
        nodes,
        parts.events.clone(),
        parts.controller_metrics(),
        zdb_metrics,
        args.zone_label.clone(),
    ));
    Controller::for_stream(zdb_stream, zdbs)
        .reconcile_on(trigger_stream)
        .graceful_shutdown_on(parts.shutdown.cancelled())
        .run(reconcile::reconcile, reconcile::error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(error = %error, "controller event");
            }
        })
        .await;
    drive.abort();
    Ok(())
}
