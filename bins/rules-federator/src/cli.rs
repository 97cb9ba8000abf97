//! Flags (each with an environment fallback).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use zone_operator::LogFormat;

/// What a request gets when some backends fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartialResponse {
    /// Answer from the backends that answered, with one warning per failed backend.
    Warn,
    /// Fail the request (HTTP 503, `errorType: unavailable`).
    Abort,
}

/// A Prometheus-compatible rules and alerts API over many Prometheus servers: shards are kept
/// apart, replicas of one shard deduplicated.
#[derive(Debug, Clone, Parser)]
#[command(name = "rules-federator", version, about, long_about = None)]
pub struct Args {
    /// Where /api/v1/rules, /api/v1/alerts, /healthz, /readyz and /metrics are served.
    #[arg(
        long,
        env = "LISTEN_ADDRESS",
        default_value = "0.0.0.0:9090",
        value_name = "HOST:PORT"
    )]
    pub listen_address: SocketAddr,

    /// A Prometheus to ask, as its base URL; repeat the flag for more. The fragment tells its
    /// shard and replica: `http://prom-a:9090#shard=0&replica=a`. Endpoints without a shard
    /// are replicas of one unsharded Prometheus.
    #[arg(
        long = "endpoint",
        env = "ENDPOINTS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub endpoints: Vec<String>,

    /// Discover the Prometheus pods of this ShardedPrometheus (a watch of its pods; shard and
    /// replica from their labels). Given twice, the last wins.
    #[arg(
        long,
        env = "DISCOVER_SPROM",
        value_name = "NAME",
        overrides_with = "discover_sprom"
    )]
    pub discover_sprom: Option<String>,

    /// Discover the pods this label selector finds instead (with `--discover-port`).
    #[arg(
        long,
        env = "DISCOVER_SELECTOR",
        value_name = "SELECTOR",
        conflicts_with = "discover_sprom"
    )]
    pub discover_selector: Option<String>,

    /// The namespace of the discovered pods (default: the kubeconfig's, or the pod's own). Given
    /// twice, the last wins (an overlay may append it to the shipped arguments).
    #[arg(
        long,
        env = "DISCOVER_NAMESPACE",
        value_name = "NAMESPACE",
        overrides_with = "discover_namespace"
    )]
    pub discover_namespace: Option<String>,

    /// The port Prometheus serves on in the discovered pods.
    #[arg(long, env = "DISCOVER_PORT", default_value_t = 9090)]
    pub discover_port: u16,

    /// How long one backend may take to answer before it is cut and named in a warning.
    #[arg(long, env = "ENDPOINT_TIMEOUT", default_value = "10s", value_parser = zone_operator::duration::parse_duration)]
    pub endpoint_timeout: Duration,

    /// Backends asked at once, at most, per request.
    #[arg(long, env = "MAX_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrency: u16,

    /// Merges at once, at most. A request's backends are asked at once and their answers kept
    /// compressed; the merge (and the answer it builds, most of a request's memory) waits for a
    /// turn.
    #[arg(long, env = "MAX_CONCURRENT_MERGES", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_merges: u16,

    /// What a request gets when some backends fail.
    #[arg(long, env = "PARTIAL_RESPONSE", value_enum, default_value_t = PartialResponse::Warn)]
    pub partial_response: PartialResponse,

    /// Labels that differ between the replicas of one shard, removed before rules and alerts
    /// are compared (repeatable).
    #[arg(long = "replica-label", env = "REPLICA_LABELS", value_delimiter = ',', default_values_t = ["prometheus_replica".to_string(), "replica".to_string()])]
    pub replica_labels: Vec<String>,

    /// The label that tells the shards' rules and alerts apart; empty: none.
    #[arg(long, env = "SHARD_LABEL", default_value = "shard")]
    pub shard_label: String,

    /// Kubeconfig file (discovery only). When unset: ~/.kube/config if it exists, else the
    /// in-cluster service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context (discovery only).
    #[arg(long, env = "KUBE_CONTEXT", value_name = "NAME")]
    pub kube_context: Option<String>,

    /// Log line format: `json` for log collectors, `plain` for a terminal.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log filter: a level or per-module directives ("info,rules_federator=debug").
    #[arg(long, env = "RUST_LOG", default_value = "info", value_name = "FILTER")]
    pub log_level: String,
}

impl Args {
    /// The label selector of the discovered pods, if discovery is on.
    pub fn discovery_selector(&self) -> Option<String> {
        if let Some(name) = &self.discover_sprom {
            return Some(format!(
                "app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=shard-controller"
            ));
        }
        self.discover_selector.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_overlay_may_append_the_namespace_again() {
        let args = Args::try_parse_from([
            "rules-federator",
            "--discover-sprom=prometheus",
            "--discover-namespace=default",
            "--discover-namespace=mine",
        ])
        .unwrap();
        assert_eq!(args.discover_namespace.as_deref(), Some("mine"));
        assert_eq!(
            args.discovery_selector().as_deref(),
            Some(
                "app.kubernetes.io/instance=prometheus,app.kubernetes.io/managed-by=shard-controller"
            )
        );
    }
}
