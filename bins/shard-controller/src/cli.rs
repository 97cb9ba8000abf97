//! Command-line flags of the ShardedPrometheus controller (the shared runtime flags are
//! flattened in).

use clap::Parser;
use zone_operator::{RuntimeArgs, ScopeArgs};

/// Runs ShardedPrometheus resources (zonecontrol.k8s.aws/v1): per shard a StatefulSet of
/// Prometheus pinned to one zone, with its own configuration that scrapes that zone's targets,
/// and a headless Service.
#[derive(Debug, Parser)]
#[command(name = "shard-controller", version)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(flatten)]
    pub scope: ScopeArgs,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_parse_with_their_documented_defaults() {
        let args = Args::try_parse_from(["shard-controller"]).unwrap();
        assert_eq!(args.scope.zone_label, "topology.kubernetes.io/zone");
        assert_eq!(
            args.scope.field_manager("shard-controller"),
            "shard-controller"
        );
        let args =
            Args::try_parse_from(["shard-controller", "--watch-namespace", "monitoring"]).unwrap();
        assert_eq!(args.scope.namespace(), Some("monitoring"));
    }

    #[test]
    fn help_is_consistent() {
        Args::command().debug_assert();
    }
}
