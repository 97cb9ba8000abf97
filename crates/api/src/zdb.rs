//! `ZoneDisruptionBudget`: a PodDisruptionBudget per zone — many disruptions in one zone, none in
//! the others meanwhile.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{lenient, schema};

pub mod cel;
pub mod validation;

pub use validation::{ValidZdb, ZdbError};

/// Condition types of a ZoneDisruptionBudget.
pub mod condition {
    /// The budget is computed and the webhook decides from it.
    pub const READY: &str = "Ready";
    /// Some zone is disrupted: evictions elsewhere are denied.
    pub const DISRUPTED: &str = "Disrupted";
    /// The spec cannot be acted on (bad selector, bad maxUnavailable, overlapping budgets).
    pub const INVALID: &str = crate::conditions::INVALID;
}

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const OVERLAPPING: &str = "OverlappingBudgets";
    pub const COMPUTED: &str = "BudgetComputed";
    pub const ZONE_DISRUPTED: &str = "ZoneDisrupted";
    pub const NOT_DISRUPTED: &str = "NoZoneDisrupted";
    /// The Ready reason (and the event) of a budget whose maxUnavailable is 0 or 0%: computed,
    /// and every eviction of its running pods is denied. Ready, not Invalid: a freeze is how
    /// teams stop voluntary disruption during an incident or a migration, as with a
    /// PodDisruptionBudget.
    pub const FROZEN: &str = "BudgetFrozen";
    /// The event of a recorded eviction that was not carried out: its pod still ran, the same
    /// pod, once the confirmation window passed, so the record was dropped.
    pub const EVICTION_UNCONFIRMED: &str = "EvictionUnconfirmed";
}

/// Allows evictions of the selected pods only in one zone at a time, at most `maxUnavailable`
/// unavailable pods (or at least `minAvailable` available ones) in that zone.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "zonecontrol.k8s.aws",
    version = "v1",
    kind = "ZoneDisruptionBudget",
    doc = "A per-zone disruption budget enforced by the eviction webhook (see spec).",
    derive = "PartialEq",
    plural = "zonedisruptionbudgets",
    shortname = "zdb",
    category = "zone-aware",
    namespaced,
    status = "ZoneDisruptionBudgetStatus",
    printcolumn = r#"{"name":"MaxUnavailable","type":"string","jsonPath":".spec.maxUnavailable"}"#,
    printcolumn = r#"{"name":"MinAvailable","type":"string","jsonPath":".spec.minAvailable"}"#,
    printcolumn = r#"{"name":"Disrupted","type":"string","jsonPath":".status.disruptedZones"}"#,
    printcolumn = r#"{"name":"DryRun","type":"boolean","jsonPath":".spec.dryRun"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::zdb::cel::selector_not_empty())]
#[x_kube(validation = crate::zdb::cel::one_limit())]
pub struct ZoneDisruptionBudgetSpec {
    /// Label query over the pods the budget protects (required, not empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::selector_schema")]
    pub selector: Option<LabelSelector>,

    /// Max unavailable pods per zone, as a number or a percentage of all expected pods (rounded
    /// up). 0 or 0% freezes the workload: no running pod it selects may be evicted. Default 1
    /// (when minAvailable is not set either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::shared::cel::max_unavailable_form())]
    pub max_unavailable: Option<IntOrString>,

    /// Min available pods per zone, as a number or a percentage of the zone's expected pods
    /// (rounded up): in each zone, a PodDisruptionBudget's minAvailable over that zone's pods.
    /// Exclusive with maxUnavailable. 100% freezes the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::shared::cel::min_available_form())]
    pub min_available: Option<IntOrString>,

    /// When a running pod that is not Ready may be evicted, as a PodDisruptionBudget's field:
    /// IfHealthyBudget (only while its zone has the healthy pods the budget asks for) or
    /// AlwaysAllow (always, frozen budget or not). Unset: always, but while the budget is
    /// frozen. Pending, Succeeded and Failed pods may always be evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_pod_eviction_policy: Option<UnhealthyPodEvictionPolicy>,

    /// Whether a freeze (maxUnavailable 0, minAvailable 100%) holds the evictions a
    /// ZoneAwareUpdate rollout of these pods makes in the zone it rolls: Hold (the default: a
    /// freeze is a freeze, the rollout waits and says why) or Proceed (the rollout's own
    /// evictions go on; every other eviction is still refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollouts_when_frozen: Option<RolloutsWhenFrozen>,

    /// Shadow mode: never deny, but count and report what would have been denied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// PodDisruptionBudget's `unhealthyPodEvictionPolicy` values.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UnhealthyPodEvictionPolicy {
    IfHealthyBudget,
    AlwaysAllow,
}

/// Hold or Proceed (see `rolloutsWhenFrozen`).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutsWhenFrozen {
    Hold,
    Proceed,
}

/// Observed state; per-zone maps keyed by zone name. The Go controller's fields are unchanged.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneDisruptionBudgetStatus {
    /// The generation this status was computed for; the webhook trusts the counts only when it
    /// matches the object's generation.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub observed_generation: i64,

    /// Evictions allowed by the webhook and not yet observed: pod name → time allowed.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub disrupted_pods: BTreeMap<String, Time>,

    /// The zone of each disruptedPods entry (a recreated pod has no node, hence no zone, for a while).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub disrupted_pod_zones: BTreeMap<String, String>,

    /// Evictions allowed now, per zone.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub disruptions_allowed: BTreeMap<String, i32>,

    /// Per zone: the budget's pods that are Ready, not terminating and not recorded as evicted.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub current_healthy: BTreeMap<String, i32>,

    /// Expected minus healthy: missing pods count as unhealthy.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub current_unhealthy: BTreeMap<String, i32>,

    /// Per zone: the healthy pods the budget keeps (minAvailable, or expected minus
    /// maxUnavailable).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub desired_healthy: BTreeMap<String, i32>,

    /// Per zone: the pods the budget expects, missing ones included (counted in the zone they
    /// were last seen in).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub expected_pods: BTreeMap<String, i32>,

    /// Zones with an unhealthy, missing or evicted pod (for the printer column).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub disrupted_zones: Vec<String>,

    /// Ready, Disrupted, Invalid.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    // One condition per type: a map keyed by `type`, so that server-side apply merges them.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditions for ZoneDisruptionBudgetStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    fn generation(&self) -> Option<i64> {
        Some(self.observed_generation)
    }
}
