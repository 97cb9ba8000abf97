//! `ZoneAwareUpdate`: zone-by-zone, exponentially growing rollouts of an `OnDelete` StatefulSet.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::lenient;

/// Condition types of a ZoneAwareUpdate.
pub mod condition {
    /// Old-revision pods remain and the controller is working through them.
    pub const PROGRESSING: &str = "Progressing";
    /// The rollout is held (alarm in ALARM, alarm unreadable, or dry run).
    pub const PAUSED: &str = "Paused";
    /// Every pod runs the update revision and is Ready.
    pub const COMPLETE: &str = "Complete";
    /// The spec cannot be acted on; nothing is deleted until it changes.
    pub const INVALID: &str = crate::conditions::INVALID;
}

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const STATEFULSET_NOT_FOUND: &str = "StatefulSetNotFound";
    pub const NOT_ON_DELETE: &str = "UpdateStrategyNotOnDelete";
    pub const VALID: &str = "Valid";
    pub const WAITING_FOR_STATEFULSET: &str = "WaitingForStatefulSet";
    pub const WAITING: &str = "Waiting";
    pub const BATCH_REMOVED: &str = "BatchRemoved";
    pub const BUDGET_EXHAUSTED: &str = "DisruptionBudgetExhausted";
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    pub const IN_PROGRESS: &str = "InProgress";
    pub const ALARM_FIRING: &str = "AlarmFiring";
    pub const ALARM_NOT_FOUND: &str = "AlarmNotFound";
    pub const ALARM_UNAVAILABLE: &str = "AlarmUnavailable";
    pub const DRY_RUN: &str = "DryRun";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const PAUSED: &str = "Paused";
}

/// Alarm-related pause reasons (they set `pausedRollout`).
pub const ALARM_REASONS: [&str; 3] = [
    reason::ALARM_FIRING,
    reason::ALARM_NOT_FOUND,
    reason::ALARM_UNAVAILABLE,
];

/// Rolls the pods of `statefulset` (update strategy `OnDelete`) zone by zone, deleting
/// old-revision pods in batches of 1, 2, 4, … up to `maxUnavailable`, and pausing while the
/// CloudWatch alarm `pauseRolloutAlarm` is in ALARM.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "zonecontrol.k8s.aws",
    version = "v1",
    kind = "ZoneAwareUpdate",
    doc = "A zone-by-zone rollout of an OnDelete StatefulSet (see spec).",
    plural = "zoneawareupdates",
    shortname = "zau",
    namespaced,
    status = "ZoneAwareUpdateStatus",
    printcolumn = r#"{"name":"StatefulSet","type":"string","jsonPath":".spec.statefulset"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".status.currentZone"}"#,
    printcolumn = r#"{"name":"Step","type":"integer","jsonPath":".status.updateStep"}"#,
    printcolumn = r#"{"name":"Old","type":"integer","jsonPath":".status.totalOldReplicas"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".status.pausedRollout"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::statefulset_named())]
pub struct ZoneAwareUpdateSpec {
    /// The name of the StatefulSet (in the same namespace) this rollout applies to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub statefulset: String,

    /// Max number (or percentage of spec.replicas, rounded up) of pods unavailable at once: at
    /// least 1 or 1%. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = crate::schema::max_unavailable_form(),
        validation = crate::schema::max_unavailable_not_zero()
    )]
    pub max_unavailable: Option<IntOrString>,

    /// Growth rate of the batch size, as a decimal string: batches are floor(factor^step) pods.
    /// "0" disables the growth (every batch is maxUnavailable); otherwise it must be >= 1.
    #[serde(default = "default_exponential_factor")]
    #[schemars(default = "default_exponential_factor")]
    #[x_kube(validation = crate::schema::exponential_factor())]
    pub exponential_factor: String,

    /// Name of a CloudWatch alarm (metric or composite) that pauses the rollout while in ALARM.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pause_rollout_alarm: String,

    /// Ignore pauseRolloutAlarm.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_alarm: bool,

    /// Plan and report (status, events) without deleting any pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn default_exponential_factor() -> String {
    zone_topology::rollout::DEFAULT_EXPONENTIAL_FACTOR.to_string()
}

/// Observed state. The first six fields are the Go controller's, unchanged.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneAwareUpdateStatus {
    /// The StatefulSet revision the old pods run.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub current_revision: String,

    /// The StatefulSet revision being rolled out.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub update_revision: String,

    /// Old-revision pods per zone.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub old_replicas: BTreeMap<String, i32>,

    /// Batches removed so far in this rollout; sizes the next batch.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub update_step: i32,

    /// Pods removed by the last batch.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub deleted_replicas: i32,

    /// Whether the rollout is paused by its alarm.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub paused_rollout: bool,

    /// The zone being updated.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_zone: Option<String>,

    /// Sum of oldReplicas (for the printer column).
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub total_old_replicas: i32,

    /// The generation of the spec this status reflects.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,

    /// Progressing, Paused, Complete, Invalid.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditions for ZoneAwareUpdateStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    fn generation(&self) -> Option<i64> {
        self.observed_generation
    }
}
