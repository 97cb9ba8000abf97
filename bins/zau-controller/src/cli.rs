//! Command-line flags of the ZoneAwareUpdate controller (the shared runtime flags are flattened in).

use std::time::Duration;

use clap::{Parser, ValueEnum};
use zone_operator::duration::parse_duration;
use zone_operator::{RuntimeArgs, ScopeArgs};

/// How an old-revision pod is removed so the StatefulSet controller recreates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PodRemoval {
    /// POST pods/eviction: PodDisruptionBudgets and ZoneDisruptionBudgets apply to the rollout;
    /// an eviction refused with 429 (budget exhausted) ends the batch and the controller waits.
    Evict,
    /// DELETE the pod, as the Go controller did: no disruption budget is consulted.
    Delete,
}

/// Rolls OnDelete StatefulSets zone by zone for ZoneAwareUpdate objects
/// (zonecontrol.k8s.aws/v1): old-revision pods are removed in batches of 1, 2, 4, ... up to
/// maxUnavailable, one zone at a time, pausing while a CloudWatch alarm is in ALARM or matching
/// Prometheus alerts fire (spec.alertGate), between zones (spec.bakeTime) and on request
/// (spec.paused).
#[derive(Debug, Parser)]
#[command(name = "zau-controller", version, args_override_self = true)]
pub struct Args {
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(flatten)]
    pub scope: ScopeArgs,

    /// While a rollout has old-revision pods left, how often it is re-examined and its
    /// pauseRolloutAlarm read (CloudWatch DescribeAlarms). A rollout with an alertGate is
    /// re-examined at the gate's pollInterval when that is shorter. Pods, StatefulSets and
    /// ZoneAwareUpdates are watched, not polled.
    #[arg(long, env = "ZAC_ALARM_POLL_INTERVAL", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub alarm_poll_interval: Duration,

    /// How pods are removed: `evict` (Eviction API; disruption budgets apply, a strict
    /// PodDisruptionBudget throttles the rollout) or `delete` (the Go controller's behaviour,
    /// bypassing every budget; needs the pods/delete permission).
    #[arg(long, env = "ZAC_POD_REMOVAL", value_enum, default_value_t = PodRemoval::Evict)]
    pub pod_removal: PodRemoval,

    /// CloudWatch endpoint URL, e.g. http://127.0.0.1:4566 for LocalStack. When unset the AWS SDK
    /// uses AWS_ENDPOINT_URL or the regional endpoint. Region and credentials always come from
    /// the standard AWS chain (AWS_REGION, IRSA / Pod Identity, profiles, instance metadata).
    #[arg(long, env = "ZAC_CLOUDWATCH_ENDPOINT", value_name = "URL")]
    pub cloudwatch_endpoint: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_parse_with_their_documented_defaults() {
        let args = Args::try_parse_from([
            "zau-controller",
            "--alarm-poll-interval",
            "15s",
            "--pod-removal",
            "evict",
            "--zone-label",
            zone_topology::ZONE_LABEL,
            "--field-manager",
            "zau-controller",
        ])
        .unwrap();
        assert_eq!(args.alarm_poll_interval, Duration::from_secs(15));
        assert_eq!(args.pod_removal, PodRemoval::Evict);
        assert_eq!(args.scope.zone_label, "topology.kubernetes.io/zone");
        assert_eq!(args.scope.field_manager("zau-controller"), "zau-controller");
    }

    #[test]
    fn every_flag_is_settable() {
        let args = Args::try_parse_from([
            "zau-controller",
            "--alarm-poll-interval",
            "500ms",
            "--pod-removal",
            "delete",
            "--zone-label",
            "example.com/rack",
            "--cloudwatch-endpoint",
            "http://127.0.0.1:4566",
            "--watch-namespace",
            "apps",
        ])
        .unwrap();
        assert_eq!(args.alarm_poll_interval, Duration::from_millis(500));
        assert_eq!(args.pod_removal, PodRemoval::Delete);
        assert_eq!(args.scope.zone_label, "example.com/rack");
        assert_eq!(
            args.cloudwatch_endpoint.as_deref(),
            Some("http://127.0.0.1:4566")
        );
        assert_eq!(args.scope.namespace(), Some("apps"));
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(Args::try_parse_from(["zau-controller", "--alarm-poll-interval", "15"]).is_err());
        assert!(Args::try_parse_from(["zau-controller", "--pod-removal", "kill"]).is_err());
    }

    #[test]
    fn help_is_consistent() {
        Args::command().debug_assert();
        assert!(zone_operator::cli::env::unprefixed(&Args::command()).is_empty());
        // A flag given again overrides: the chart's extraArgs can override the chart's flags.
        assert!(Args::command().is_args_override_self());
    }
}
