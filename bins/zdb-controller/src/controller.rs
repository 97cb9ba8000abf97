//! Wiring of the status controller (leader only): caches of budgets and pods (the node zones
//! are the webhook's, kept on every replica), the kube Controller on ZoneDisruptionBudgets,
//! readiness, shutdown.
//!
//! Any change of a pod reconciles every budget of its namespace (a pod whose labels changed may
//! have left a budget, which mapping by its current labels would miss). Status writes by the
//! webhook reconcile the budget too; an unchanged status is never written, so that ends there.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use zone_api::ZoneDisruptionBudget;
use zone_operator::controller::{self, CachesStopped};
use zone_operator::zones;
use zone_operator::{RuntimeParts, WatchSet};

use crate::cli::Args;
use crate::metrics::ZdbMetrics;
use crate::nodes::SharedZones;
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

/// Runs until shutdown. `zones` is the webhook's node cache.
pub async fn run(
    parts: RuntimeParts,
    args: Args,
    zdb_metrics: ZdbMetrics,
    zones: SharedZones,
) -> Result<(), CachesStopped> {
    let scope = &args.scope;
    let client = parts.client.clone();
    let initial_list = parts.initial_list(scope.namespace()).await;

    let (zdbs, zdb_writer) = reflector::store();
    let zdb_stream = watcher(scope.api(&client), watcher::Config::default())
        .backoff(zone_operator::backoff::WatchBackoff::default())
        .reflect(zdb_writer)
        .applied_objects();

    let mut watches = WatchSet::new();
    let pod_zdbs = zdbs.clone();
    let pod_store = watches.watch(
        "pods",
        scope.api::<Pod>(&client),
        initial_list.config(),
        zones::strip_pod,
        move |pod| zdbs_in(&pod_zdbs, &pod.namespace().unwrap_or_default()),
    );
    // The pod and node caches are what decisions read; the watch of the budgets themselves is
    // driven by the controller below and needs no gate.
    let pods_synced = watches.synced();
    let synced = async {
        pods_synced.await.map_err(drop)?;
        zones.wait_until_ready().await.map_err(drop)
    };
    let (_driving, trigger_stream) = watches.spawn();
    if !controller::wait_for_caches(synced, &parts.readiness, &parts.shutdown).await? {
        return Ok(());
    }

    tracing::info!(namespace = ?scope.namespace(), "zdb status controller running");
    let context = Arc::new(Context {
        client,
        zdbs: zdbs.clone(),
        pods: pod_store,
        zones: zones.zones().clone(),
        events: parts.events.clone(),
        metrics: parts.controller_metrics(),
        zdb_metrics,
        field_manager: scope.field_manager(&parts.controller),
        series: Default::default(),
    });
    let controller = Controller::for_stream(zdb_stream, zdbs).reconcile_on(trigger_stream);
    controller::run(controller, &parts.shutdown, reconcile::reconcile, context).await;
    Ok(())
}
