//! Custom resources of `zonecontrol.k8s.aws/v1`.
//!
//! `ShardedPrometheus` has no Go predecessor: Prometheus sharded over zones, scaled through its
//! scale subresource.
//!
//! `ZoneAwareUpdate` and `ZoneDisruptionBudget` keep every field, name and type of the Go
//! controllers' API so manifests and stored objects carry over unchanged; we only add status
//! fields (`conditions`, `observedGeneration`, …). Status types deserialize leniently: one stored
//! object with an unexpected status must not break a whole watch.
#![forbid(unsafe_code)]

pub mod conditions;
pub mod lenient;
pub mod patterns;
pub mod schema;
pub mod shared;
pub mod sprom;
/// Prometheus durations and sizes, shared with the translation of monitoring objects.
pub use zone_topology::units;
pub mod zau;
pub mod zdb;

pub use sprom::{
    PrometheusMode, ShardedPrometheus, ShardedPrometheusSpec, ShardedPrometheusStatus,
    ShardingMode, WhenScaled, ZonelessTargets,
};
pub use sprom::{ShardStorage, SpromError, ValidSprom};
pub use units::{UnitError, parse_prometheus_duration, parse_prometheus_size};
pub use zau::{ValidZau, ZauError, ZoneAwareUpdate, ZoneAwareUpdateSpec, ZoneAwareUpdateStatus};
pub use zdb::{
    ValidZdb, ZdbError, ZoneDisruptionBudget, ZoneDisruptionBudgetSpec, ZoneDisruptionBudgetStatus,
};

/// The API group of every resource here.
pub const GROUP: &str = "zonecontrol.k8s.aws";

/// Every CRD of this crate, in a stable order (what `crdgen` writes).
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![
        ZoneAwareUpdate::crd(),
        ZoneDisruptionBudget::crd(),
        ShardedPrometheus::crd(),
    ]
}
