//! The ZoneAwareUpdate controller: rolls OnDelete StatefulSets zone by zone in exponentially
//! growing batches, through the Eviction API, pausing while a CloudWatch alarm or matching
//! Prometheus alerts fire, between zones for a bake time, and on request.
#![forbid(unsafe_code)]

mod alarm;
mod cli;
mod controller;
mod gate;
mod metrics;
mod pods;
mod reconcile;
mod removal;
#[cfg(test)]
mod scenarios;
mod watches;

use std::process::ExitCode;

/// The runtime's name for this binary: Lease, user agent, `zau_controller_build_info`.
const NAME: &str = "zau-controller";

#[tokio::main]
async fn main() -> ExitCode {
    let args = zone_operator::cli::parse::<cli::Args>();
    let runtime = args.runtime.clone();
    zone_operator::run_controller(NAME, &runtime, |parts| controller::run(parts, args)).await
}
