//! The ZoneDisruptionBudget controller and eviction webhook: keeps each budget's per-zone status
//! (leader only) and judges every eviction of a selected pod against it (every replica).
#![forbid(unsafe_code)]

mod cli;
mod controller;
mod expected;
mod metrics;
mod reconcile;
#[cfg(test)]
mod scenarios;
mod shared;
mod webhook;

use std::process::ExitCode;

/// The runtime's name for this binary: Lease, user agent, `zdb_controller_build_info`.
const NAME: &str = "zdb-controller";

#[tokio::main]
async fn main() -> ExitCode {
    let args = zone_operator::cli::parse::<cli::Args>();
    let started = zone_operator::Runtime::controller(NAME, &args.runtime).start();
    let mut runtime = match started.await {
        Ok(runtime) => runtime,
        Err(error) => return zone_operator::report_exit(&error),
    };
    let parts = runtime.clone_parts();
    let zdb_metrics = match metrics::ZdbMetrics::register(&parts.registry) {
        Ok(metrics) => metrics,
        Err(error) => return zone_operator::report_exit(&error),
    };
    // The webhook serves on every replica, standby or leader: evictions must be judged while
    // the status controller waits for the Lease.
    let initial_list = parts.initial_list(args.scope.namespace()).await;
    // Its caches are the status controller's too: budgets and nodes are watched once.
    let (budgets, zones) =
        match webhook::start(&parts, &args, initial_list, zdb_metrics.clone()).await {
            Ok(webhook) => {
                runtime.spawn_every_replica(webhook.task);
                (webhook.budgets, webhook.zones)
            }
            Err(error) => return zone_operator::report_exit(&error),
        };
    if let Err(error) = zones.zones().register_metrics(&parts.registry) {
        return zone_operator::report_exit(&error);
    }
    // The API server calls the webhook through its Service and does not retry a refused call:
    // a terminating replica stays serving until the endpoints have dropped it.
    runtime.drain_on_shutdown(args.shutdown_delay, webhook::in_flight_grace(&args));
    let controller = controller::run(parts, args, zdb_metrics, budgets, zones);
    match runtime.run(controller).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => zone_operator::report_exit(&error),
    }
}
