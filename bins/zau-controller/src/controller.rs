//! Wiring: caches, the kube Controller on ZoneAwareUpdates, readiness, shutdown.

use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::{self};
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use zone_api::ZoneAwareUpdate;
use zone_operator::RuntimeParts;

use crate::alarm::AlarmChecker;
use crate::cli::Args;
use crate::metrics::{MetricsError, ZauMetrics};
use crate::reconcile::{self, Context, Settings};
use crate::watches;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot register the rollout metrics")]
    Metrics(#[source] MetricsError),
    #[error("a cache stopped before its initial list completed")]
    CacheStopped,
}

/// Runs until shutdown.
pub async fn run(parts: RuntimeParts, args: Args) -> Result<(), ControllerError> {
    let zau_metrics = ZauMetrics::register(&parts.registry).map_err(ControllerError::Metrics)?;
    let namespace = args.watch_namespace.as_deref();
    let zau_api: Api<ZoneAwareUpdate> = match namespace {
        Some(namespace) => Api::namespaced(parts.client.clone(), namespace),
        None => Api::all(parts.client.clone()),
    };

    let (zaus, zau_writer) = reflector::store();
    // Our status writes change the resourceVersion, not the generation: filtering on the
    // generation keeps them from triggering another reconcile. Pods and the StatefulSet (watched
    // below) trigger everything else.
    let zau_stream = watcher(zau_api, watcher::Config::default())
        .default_backoff()
        .reflect(zau_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());

    let initial_list = args
        .runtime
        .initial_list
        .resolve(&parts.client, namespace)
        .await;
    let (triggers, trigger_stream) = futures::channel::mpsc::unbounded();
    let (caches, drive_caches) = watches::start(
        &parts.client,
        namespace,
        &args.zone_label,
        initial_list,
        zaus.clone(),
        triggers,
    );
    let drive_caches = tokio::spawn(drive_caches);

    // Nothing is planned before the caches hold every pod and node: an empty node cache would
    // put every pod in the unknown zone.
    let synced = tokio::select! {
        synced = caches.synced() => synced.is_ok(),
        () = parts.shutdown.cancelled() => { drive_caches.abort(); return Ok(()); }
    };
    if !synced {
        return Err(ControllerError::CacheStopped);
    }
    // The pod, node and StatefulSet caches are what decisions read; the watch of the resources
    // themselves is driven by the controller below and needs no gate.
    tracing::info!("caches synced");
    parts.readiness.set_ready();

    let settings = Settings {
        alarm_poll_interval: args.alarm_poll_interval,
        pod_removal: args.pod_removal,
        zone_label: args.zone_label.clone(),
        field_manager: args.field_manager.clone(),
    };
    tracing::info!(settings = ?settings, namespace = ?namespace, "zau-controller running");
    let context = Arc::new(Context::new(
        parts.client.clone(),
        zaus.clone(),
        caches,
        AlarmChecker::new(args.cloudwatch_endpoint.clone()),
        parts.events.clone(),
        parts.leader.clone(),
        parts.controller_metrics(),
        zau_metrics,
        settings,
    ));

    Controller::for_stream(zau_stream, zaus)
        .reconcile_on(trigger_stream)
        .graceful_shutdown_on(parts.shutdown.cancelled())
        .run(reconcile::reconcile, reconcile::error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(error = %error, "controller event");
            }
        })
        .await;
    drive_caches.abort();
    Ok(())
}
