//! `kubectl zone`: what the zone-aware controllers will do, before they do it. It reads the
//! cluster with the user's kubeconfig and RBAC, and never writes.
//!
//! - `kubectl zone rollout plan <zau>`: the batches a ZoneAwareUpdate removes from now on, in
//!   order, from live state and the controller's own planner, and what holds the rollout now.
//!
//! - `kubectl zone budget [<zdb>]`: a ZoneDisruptionBudget's zones (expected, healthy, disrupted,
//!   allowed) and the pods the webhook would let go now; `--drain <node>…` predicts a drain's
//!   evictions with the webhook's own code.
//! - `kubectl zone shards <sprom> [--to N]`: a ShardedPrometheus's shards, the targets each
//!   scrapes, its retained shards; with `--to N`, the targets a resize would move and where.
//! - `kubectl zone drill <zone>`: what each controller would do if the zone went dark now, and
//!   each zone's health across the kinds (docs/outages.md).
//! - `kubectl zone check [--dry-run-evict NS/POD]`: whether the installation in the namespace
//!   works: each controller answers, and the eviction webhook judges a dry-run eviction (the
//!   chart's `helm test` runs it).
//!
//! Exit status: 0 when the command answered, 1 when it could not or a check failed (a one-line
//! reason on stderr), 3 when `budget --drain` predicts a refused eviction.
#![forbid(unsafe_code)]

mod budget;
mod check;
mod cluster;
mod complete;
mod drill;
mod output;
mod rollout;
mod shards;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::Format;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-zone",
    bin_name = "kubectl zone",
    version,
    about = "What the zone-aware controllers will do, before they do it (read-only)"
)]
pub(crate) struct Cli {
    /// The namespace; default: the kubeconfig context's.
    #[arg(short, long, global = true)]
    namespace: Option<String>,

    /// table, json or yaml.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// ZoneAwareUpdate rollouts.
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// A ZoneDisruptionBudget's zones and the pods that may be evicted now; with --drain, the
    /// evictions a drain of nodes would meet.
    Budget {
        /// The ZoneDisruptionBudget; default: every one of the namespace.
        name: Option<String>,

        /// Predict a drain of these nodes (every pod on them, in every namespace): which
        /// evictions the webhook would allow and refuse, and why. Exit status 3 if any would be
        /// refused.
        #[arg(long, num_args = 1.., value_name = "NODE", conflicts_with = "name")]
        drain: Vec<String>,

        /// With --drain: only the pods these labels select (as kubectl drain's --pod-selector).
        #[arg(long, requires = "drain", value_name = "SELECTOR")]
        pod_selector: Option<String>,

        /// The node label holding a node's zone (the controllers' --zone-label).
        #[arg(long, default_value = zone_topology::zone::ZONE_LABEL)]
        zone_label: String,
    },
    /// A ShardedPrometheus's shards: zone, readiness, the targets each scrapes (read from the
    /// shards through the API server's proxy), the retained shards and their deadlines.
    Shards(ShardsArgs),
    /// Whether the installation in the namespace works: each controller's Ready pods answer
    /// /readyz (through the API server's proxy), and with --dry-run-evict the eviction webhook
    /// judges and admits a dry-run eviction. Exit status 1 if a check fails.
    Check {
        /// A pod whose eviction the webhook should judge, as NAMESPACE/POD (a dry run: nothing
        /// is evicted). Pick one in a namespace the webhook covers.
        #[arg(long, value_name = "NAMESPACE/POD", value_parser = parse_pod_ref)]
        dry_run_evict: Option<(String, String)>,
    },
    /// What each controller would do if ZONE went dark now: the namespace's budgets, rollouts
    /// and shards, and each zone's health (nothing is written).
    Drill {
        /// The zone.
        zone: String,

        /// The node label holding a node's zone (the controllers' --zone-label).
        #[arg(long, default_value = zone_topology::zone::ZONE_LABEL)]
        zone_label: String,
    },
}

/// `kubectl zone shards`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct ShardsArgs {
    /// The ShardedPrometheus.
    pub name: String,

    /// Predict a resize to this many shards: the targets that would move, and where.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub to: Option<u32>,

    /// Also the shards' scrape traffic per day (status.traffic): same-zone, cross-zone and
    /// zoneless bytes, the price of the cross-zone ones, and the saving against Classic
    /// sharding of the same targets.
    #[arg(long)]
    pub cost: bool,

    /// The price of a GiB moved between zones (with --cost). Default: AWS's $0.01 per GB
    /// out of one zone plus $0.01 per GB into the other.
    #[arg(long, value_name = "X", default_value_t = shards::cost::DEFAULT_PRICE_PER_GIB, value_parser = price)]
    pub price_per_gib: f64,

    /// The node label holding a node's zone (the shard-controller's --zone-label).
    #[arg(long, default_value = zone_topology::zone::ZONE_LABEL)]
    pub zone_label: String,
}

#[derive(Subcommand, Debug)]
enum RolloutCommand {
    /// The batches ahead, in order (zone, pods, size as the step grows), and what holds the
    /// rollout now.
    Plan {
        /// The ZoneAwareUpdate.
        name: String,

        /// The node label holding a node's zone (the controller's --zone-label).
        #[arg(long, default_value = zone_topology::zone::ZONE_LABEL)]
        zone_label: String,

        /// Preview a rollout that has not started: of a new image (every pod is old).
        #[arg(long, value_name = "IMAGE", conflicts_with = "revision")]
        image: Option<String>,

        /// Preview a rollout that has not started: to this ControllerRevision of the
        /// StatefulSet (a rollback; the pods already at it stay).
        #[arg(long, value_name = "REVISION")]
        revision: Option<String>,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(complete::COMPLETE) {
        print!("{}", complete::complete::<Cli>(&args[1..]));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    match run(cli).await {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!("kubectl zone: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `NAMESPACE/POD`.
/// A price: a finite number, 0 or more.
fn price(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(price) if price.is_finite() && price >= 0.0 => Ok(price),
        _ => Err(format!("{value:?} is not a price (a number, 0 or more)")),
    }
}

fn parse_pod_ref(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((namespace, pod))
            if !namespace.is_empty() && !pod.is_empty() && !pod.contains('/') =>
        {
            Ok((namespace.to_string(), pod.to_string()))
        }
        _ => Err(format!("{value:?} is not NAMESPACE/POD")),
    }
}

/// Exit status 3: the answer is a drain that would be refused.
const REFUSED: u8 = 3;

async fn run(cli: Cli) -> Result<ExitCode, cluster::Error> {
    let client = kube::Client::try_default()
        .await
        .map_err(cluster::Error::Client)?;
    let namespace = cli
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    match cli.command {
        Command::Rollout {
            command:
                RolloutCommand::Plan {
                    name,
                    zone_label,
                    image,
                    revision,
                },
        } => {
            let what_if = image
                .map(rollout::WhatIf::Image)
                .or(revision.map(rollout::WhatIf::Revision));
            let plan =
                rollout::plan(&client, &namespace, &name, &zone_label, what_if.as_ref()).await?;
            print!("{}", cli.output.render(&plan, rollout::table)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Budget {
            name: _,
            drain,
            pod_selector,
            zone_label,
        } if !drain.is_empty() => {
            let drain =
                budget::drain(&client, &drain, pod_selector.as_deref(), &zone_label).await?;
            print!("{}", cli.output.render(&drain, budget::drain_table)?);
            Ok(if drain.refused() > 0 {
                ExitCode::from(REFUSED)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Budget {
            name, zone_label, ..
        } => {
            let report = budget::report(&client, &namespace, name.as_deref(), &zone_label).await?;
            print!("{}", cli.output.render(&report, budget::table)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Shards(args) => {
            let report = shards::report(&client, &namespace, &args).await?;
            print!("{}", cli.output.render(&report, shards::table)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { dry_run_evict } => {
            let evict = dry_run_evict
                .as_ref()
                .map(|(ns, pod)| (ns.as_str(), pod.as_str()));
            let report = check::check(&client, &namespace, evict).await?;
            print!("{}", cli.output.render(&report, check::table)?);
            if report.failed() > 0 {
                eprintln!(
                    "kubectl zone: {} of {} checks failed",
                    report.failed(),
                    report.checks.len()
                );
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Drill { zone, zone_label } => {
            let drill = drill::drill(&client, &namespace, &zone, &zone_label).await?;
            print!("{}", cli.output.render(&drill, drill::table)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
