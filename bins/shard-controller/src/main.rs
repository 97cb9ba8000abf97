//! The ShardedPrometheus controller: Prometheus shards pinned to zones, each scraping only the
//! targets of its own zone, every target exactly once.
#![forbid(unsafe_code)]

mod access;
mod apply;
mod build;
mod cli;
mod config;
mod controller;
#[cfg(test)]
mod golden;
mod health;
mod metrics;
mod monitoring;
mod observe;
mod plan;
mod reconcile;
mod retention;
#[cfg(test)]
mod scenarios;
mod status;
mod validate;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    let runtime = args.runtime.clone();
    zone_operator::run_controller("shard-controller", &runtime, |parts| {
        controller::run(parts, args)
    })
    .await
}
