//! Wiring of the status controller (leader only): caches of budgets, pods and node zones, the
//! kube Controller on ZoneDisruptionBudgets, readiness, shutdown.
//!
//! Any change of a pod reconciles every budget of its namespace (a pod whose labels changed may
//! have left a budget, which mapping by its current labels would miss). Status writes by the
//! webhook reconcile the budget too; an unchanged status is never written, so that ends there.

use std::future::ready;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use zone_api::ZoneDisruptionBudget;
use zone_operator::RuntimeParts;
use zone_operator::controller::{self, CachesStopped, forward_triggers, log_watch_error};
use zone_operator::zones::{self, NodeZones};

use crate::cli::Args;
use crate::metrics::ZdbMetrics;
use crate::reconcile::{self, Context};

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

/// Runs until shutdown.
pub async fn run(
    parts: RuntimeParts,
    args: Args,
    zdb_metrics: ZdbMetrics,
) -> Result<(), CachesStopped> {
    let scope = &args.scope;
    let client = parts.client.clone();
    let initial_list = parts.initial_list(scope.namespace()).await;

    let (zdbs, zdb_writer) = reflector::store();
    let zdb_stream = watcher(scope.api(&client), watcher::Config::default())
        .default_backoff()
        .reflect(zdb_writer)
        .applied_objects();

    let (pod_store, pod_writer) = reflector::store();
    let pod_zdbs = zdbs.clone();
    let pod_events = watcher(scope.api::<Pod>(&client), initial_list.config())
        .modify(zones::strip_pod)
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects()
        .filter_map(|result| ready(log_watch_error("pods", result)))
        .map(move |pod| zdbs_in(&pod_zdbs, &pod.namespace().unwrap_or_default()));
    // Node events only keep the cache (pods follow any node change that matters).
    let (zones, node_events) = NodeZones::watch(&client, &scope.zone_label, initial_list);
    let node_events = node_events.map(|()| Vec::new());
    let (triggers, trigger_stream) = futures::channel::mpsc::unbounded();
    let drive = tokio::spawn(forward_triggers(
        futures::stream::select(pod_events, node_events),
        triggers,
    ));

    // The pod and node caches are what decisions read; the watch of the budgets themselves is
    // driven by the controller below and needs no gate.
    let synced = controller::wait_for_caches(
        async {
            pod_store.wait_until_ready().await?;
            zones.wait_until_ready().await
        },
        &parts.readiness,
        &parts.shutdown,
    )
    .await;
    if synced != Ok(true) {
        drive.abort();
        return synced.map(drop);
    }

    tracing::info!(namespace = ?scope.namespace(), "zdb status controller running");
    let context = Arc::new(Context {
        client,
        zdbs: zdbs.clone(),
        pods: pod_store,
        zones,
        events: parts.events.clone(),
        metrics: parts.controller_metrics(),
        zdb_metrics,
        field_manager: scope.field_manager(&parts.controller),
        series: Default::default(),
    });
    let controller = Controller::for_stream(zdb_stream, zdbs).reconcile_on(trigger_stream);
    controller::run(controller, &parts.shutdown, reconcile::reconcile, context).await;
    drive.abort();
    Ok(())
}
