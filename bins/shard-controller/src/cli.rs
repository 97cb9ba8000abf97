//! Command-line flags of the ShardedPrometheus controller (the shared runtime flags are
//! flattened in).

use std::time::Duration;

use clap::Parser;
use zone_operator::duration::parse_duration;
use zone_operator::{RuntimeArgs, ScopeArgs};

/// Runs ShardedPrometheus resources (zonecontrol.k8s.aws/v1): per shard a StatefulSet of
/// Prometheus pinned to one zone, with its own configuration that scrapes that zone's targets,
/// and a headless Service.
#[derive(Debug, Parser)]
#[command(name = "shard-controller", version, args_override_self = true)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(flatten)]
    pub scope: ScopeArgs,

    /// How long after a shard's configuration changed its Prometheus pods may still run the
    /// previous one before the status says so (ConfigLoaded False, reason ConfigNotLoaded). The
    /// controller annotates the pods so the kubelet copies the new Secret at once, and
    /// Prometheus re-reads the file every 10s: about 10 s in all. Without the annotation (pods
    /// not patchable) the kubelet's next sync of the pod (syncFrequency, 1m by default) decides.
    #[arg(long, env = "ZAC_CONFIG_LOAD_GRACE", default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub config_load_grace: Duration,

    /// Whether a zau-controller runs to roll the shards zone by zone (`spec.rollout.strategy:
    /// ZoneAware`, the default). false: every ShardedPrometheus's StatefulSets roll themselves,
    /// as with strategy RollingUpdate (the chart sets it when the zau-controller is disabled).
    #[arg(long, env = "ZAC_ZONE_AWARE_ROLLOUTS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub zone_aware_rollouts: bool,
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
        assert_eq!(args.config_load_grace, crate::health::DEFAULT_GRACE);
        assert!(args.zone_aware_rollouts);
        let off = ["shard-controller", "--zone-aware-rollouts=false"];
        assert!(!Args::try_parse_from(off).unwrap().zone_aware_rollouts);
        let args =
            Args::try_parse_from(["shard-controller", "--watch-namespace", "monitoring"]).unwrap();
        assert_eq!(args.scope.namespace(), Some("monitoring"));
        let args = Args::try_parse_from(["shard-controller", "--config-load-grace", "5m"]).unwrap();
        assert_eq!(args.config_load_grace, Duration::from_secs(300));
    }

    #[test]
    fn help_is_consistent() {
        Args::command().debug_assert();
        assert!(zone_operator::cli::env::unprefixed(&Args::command()).is_empty());
        // A flag given again overrides: the chart's extraArgs can override the chart's flags.
        assert!(Args::command().is_args_override_self());
    }
}
