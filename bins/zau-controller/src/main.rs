//! The ZoneAwareUpdate controller: rolls OnDelete StatefulSets zone by zone in exponentially
//! growing batches, through the Eviction API, pausing while a CloudWatch alarm fires.
#![forbid(unsafe_code)]

mod alarm;
mod cli;
mod controller;
mod metrics;
mod pods;
mod reconcile;
mod removal;
#[cfg(test)]
mod scenarios;
mod watches;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    let runtime = match zone_operator::Runtime::start("zau-controller", &args.runtime).await {
        Ok(runtime) => runtime,
        Err(error) => return zone_operator::report_exit(&error),
    };
    let controller = controller::run(runtime.clone_parts(), args);
    match runtime.run(controller).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => zone_operator::report_exit(&error),
    }
}
