//! The ShardedPrometheus controller: Prometheus shards pinned to zones, each scraping only the
//! targets of its own zone, every target exactly once.
#![forbid(unsafe_code)]

mod children;
mod cli;
mod context;
mod controller;
mod final_upload;
#[cfg(test)]
mod golden;
mod health;
mod metrics;
mod monitoring;
mod reconcile;
#[cfg(test)]
mod scenarios;

mod status;
mod traffic;

use std::process::ExitCode;

/// The runtime's name for this binary: Lease, user agent, `shard_controller_build_info`.
const NAME: &str = "shard-controller";

#[tokio::main]
async fn main() -> ExitCode {
    let args = zone_operator::cli::parse::<cli::Args>();
    let runtime = args.runtime.clone();
    zone_operator::run_controller(NAME, &runtime, |parts| controller::run(parts, args)).await
}
