//! The children of a ShardedPrometheus's shards: how they are built (StatefulSet, Services,
//! configuration Secret, rule ConfigMaps, disruption budgets, the rollout's ZoneAwareUpdate), the Prometheus configuration they
//! carry, the Thanos sidecar, and the retention of shards scaled away.

pub mod budgets;
pub mod build;
pub mod config;
pub mod retention;
pub mod rollout;
pub mod thanos;

use k8s_openapi::api::core::v1::{HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A probe of `path` on the container's port `port` (a name), every 5 s.
fn http_probe(path: &str, port: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(port.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        ..Probe::default()
    }
}
