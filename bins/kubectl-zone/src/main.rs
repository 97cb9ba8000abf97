//! `kubectl zone`: what the zone-aware controllers will do, before they do it. It reads the
//! cluster with the user's kubeconfig and RBAC, and never writes.
//!
//! - `kubectl zone rollout plan <zau>`: the batches a ZoneAwareUpdate removes from now on, in
//!   order, from live state and the controller's own planner, and what holds the rollout now.
//!
//! Exit status: 0 when the command answered, 1 when it could not (a one-line reason on stderr).
#![forbid(unsafe_code)]

mod output;
mod rollout;

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
struct Cli {
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
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kubectl zone: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), rollout::PlanError> {
    let client = kube::Client::try_default()
        .await
        .map_err(rollout::PlanError::Client)?;
    let namespace = cli
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    match cli.command {
        Command::Rollout {
            command: RolloutCommand::Plan { name, zone_label },
        } => {
            let plan = rollout::plan(&client, &namespace, &name, &zone_label).await?;
            let text = cli.output.render(&plan, rollout::table)?;
            print!("{text}");
            Ok(())
        }
    }
}
