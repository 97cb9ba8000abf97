//! Wiring of the status controller (leader only): the cache of pods (the budgets and the node
//! zones are the webhook's, kept on every replica), the kube Controller on ZoneDisruptionBudgets,
//! readiness, shutdown.
//!
//! Any change of a pod reconciles every budget of its namespace (a pod whose labels changed may
//! have left a budget, which mapping by its current labels would miss). Status writes by the
//! webhook reconcile the budget too; an unchanged status is never written, so that ends there.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use zone_api::ZoneDisruptionBudget;
use zone_operator::controller::{self, CachesStopped};
use zone_operator::{RuntimeParts, WatchSet};

use crate::cli::Args;
use crate::metrics::ZdbMetrics;
use crate::reconcile::{self, Context};
use crate::shared::{SharedBudgets, SharedZones};

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

/// Runs until shutdown. `budgets` and `zones` are the webhook's caches.
pub async fn run(
    parts: RuntimeParts,
    args: Args,
    zdb_metrics: ZdbMetrics,
    budgets: SharedBudgets,
    zones: SharedZones,
) -> Result<(), CachesStopped> {
    let scope = &args.scope;
    let client = parts.client.clone();
    let initial_list = parts.initial_list(scope.namespace()).await;
    let zdbs = budgets.store().clone();

    let mut watches = WatchSet::new();
    let pod_zdbs = zdbs.clone();
    let pod_store = watches.watch(
        "pods",
        scope.api::<Pod>(&client),
        initial_list.config(),
        zone_views::budget::pods::strip_pod,
        move |pod| zdbs_in(&pod_zdbs, &pod.namespace().unwrap_or_default()),
    );
    let pods_synced = watches.synced();
    let synced = async {
        pods_synced.await.map_err(drop)?;
        budgets.wait_until_ready().await.map_err(drop)?;
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
    // The budgets' own changes come from the webhook's cache (every budget first), not from a
    // watch of the controller's: the Controller's stream of its kind stays empty.
    let no_watch = futures::stream::pending::<Result<ZoneDisruptionBudget, watcher::Error>>();
    let controller = Controller::for_stream(no_watch, zdbs)
        .reconcile_on(budgets.triggers())
        .reconcile_on(trigger_stream);
    controller::run(controller, &parts.shutdown, reconcile::reconcile, context).await;
    Ok(())
}
