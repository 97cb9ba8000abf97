//! Wiring: caches, the kube Controller on ZoneAwareUpdates, readiness, shutdown.

use std::sync::Arc;

use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use zone_operator::RuntimeParts;
use zone_operator::controller::{self, CachesStopped};
use zone_operator::metrics::MetricsError;

use crate::alarm::AlarmChecker;
use crate::cli::Args;
use crate::gate::GatePolls;
use crate::metrics::ZauMetrics;
use crate::reconcile::{self, Context, Settings};
use crate::watches;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot register the rollout metrics")]
    Metrics(#[source] MetricsError),
    #[error(transparent)]
    Caches(#[from] CachesStopped),
}

/// Runs until shutdown.
pub async fn run(parts: RuntimeParts, args: Args) -> Result<(), ControllerError> {
    let zau_metrics = ZauMetrics::register(&parts.registry).map_err(ControllerError::Metrics)?;
    let scope = &args.scope;

    let (zaus, zau_writer) = reflector::store();
    // Our status writes change the resourceVersion, not the generation: filtering on the
    // generation keeps them from triggering another reconcile. Pods and the StatefulSet (watched
    // below) trigger everything else.
    let zau_stream = watcher(scope.api(&parts.client), watcher::Config::default())
        .backoff(zone_operator::backoff::WatchBackoff::default())
        .reflect(zau_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());

    let initial_list = parts.initial_list(scope.namespace()).await;
    let (caches, watch_set) = watches::caches(&parts.client, scope, initial_list, zaus.clone());
    caches
        .zones
        .register_metrics(&parts.registry)
        .map_err(ControllerError::Metrics)?;
    // The pod, node and StatefulSet caches are what decisions read; the watch of the resources
    // themselves is driven by the controller below and needs no gate.
    let synced = watch_set.synced();
    let (_driving, trigger_stream) = watch_set.spawn();
    if !controller::wait_for_caches(synced, &parts.readiness, &parts.shutdown).await? {
        return Ok(());
    }

    let settings = Settings {
        alarm_poll_interval: args.alarm_poll_interval,
        pod_removal: args.pod_removal,
        field_manager: scope.field_manager(&parts.controller),
    };
    tracing::info!(settings = ?settings, namespace = ?scope.namespace(), "zau-controller running");
    // A changed alert gate answer reconciles the rollouts reading it at once.
    let (gate_triggers, gate_changes) = futures::channel::mpsc::unbounded();
    let gates = GatePolls::new(Some(gate_triggers), Some(zau_metrics.gate_polls()));
    let context = Arc::new(Context {
        client: parts.client.clone(),
        zaus: zaus.clone(),
        caches,
        alarms: Arc::new(AlarmChecker::new(args.cloudwatch_endpoint.clone())),
        gates,
        events: parts.events.clone(),
        leader: parts.leader.clone(),
        metrics: parts.controller_metrics(),
        zau_metrics,
        settings,
        memory: Default::default(),
        series: Default::default(),
    });

    let controller = Controller::for_stream(zau_stream, zaus)
        .reconcile_on(trigger_stream)
        .reconcile_on(gate_changes);
    controller::run(controller, &parts.shutdown, reconcile::reconcile, context).await;
    Ok(())
}
