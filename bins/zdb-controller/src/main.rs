//! The ZoneDisruptionBudget controller and eviction webhook: keeps each budget's per-zone status
//! (leader only) and judges every eviction of a selected pod against it (every replica).
#![forbid(unsafe_code)]

mod cli;
mod controller;
mod expected;
mod metrics;
mod pods;
mod reconcile;
mod status;
mod tls;
mod view;
mod webhook;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = cli::Args::parse();
    // One process-wide rustls provider (the one kube is built with), before any TLS is set up.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match zone_operator::Runtime::start("zdb-controller", &args.runtime).await {
        Ok(runtime) => runtime,
        Err(error) => return zone_operator::report_exit(&error),
    };
    let parts = runtime.clone_parts();
    let zdb_metrics = match metrics::ZdbMetrics::register(&parts.registry) {
        Ok(metrics) => metrics,
        Err(error) => return zone_operator::report_exit(&error),
    };
    // Asked once for the webhook's caches and the controller's.
    args.runtime.initial_list = args
        .runtime
        .initial_list
        .resolve(&parts.client, args.watch_namespace.as_deref())
        .await;
    // The webhook serves on every replica, standby or leader: evictions must be judged while
    // the status controller waits for the Lease.
    let webhook = match webhook::start(&parts, &args, zdb_metrics.clone()).await {
        Ok((task, _)) => task,
        Err(error) => return zone_operator::report_exit(&error),
    };
    let controller = controller::run(parts, args, zdb_metrics);
    let outcome = runtime.run(controller).await;
    webhook.abort();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => zone_operator::report_exit(&error),
    }
}
