//! `ZoneAwareUpdate`: zone-by-zone, exponentially growing rollouts of an `OnDelete` StatefulSet.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{lenient, schema};

pub mod cel;
pub mod validation;

pub use validation::{
    DEFAULT_GATE_POLL_INTERVAL, DEFAULT_GATE_TIMEOUT, DEFAULT_GATE_ZONE_LABEL, GateTarget,
    RolloutTarget, ValidAlertGate, ValidZau, ZauError,
};

/// Condition types of a ZoneAwareUpdate.
pub mod condition {
    /// Old-revision pods remain and the controller is working through them.
    pub const PROGRESSING: &str = "Progressing";
    /// The rollout is held: a zone dark, alarm in ALARM or unreadable, matching alerts firing or the alert
    /// gate unreadable, `spec.paused`, a bake between zones, or a dry run.
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
    /// Alerts matching `spec.alertGate.matchers` fire (or are pending, with includePending).
    pub const ALERT_FIRING: &str = "AlertFiring";
    /// The alert gate gave no clear answer (unreachable, non-2xx, timeout, unparsable, its
    /// Secret or Service unreadable): paused to be safe.
    pub const ALERT_GATE_UNAVAILABLE: &str = "AlertGateUnavailable";
    /// A zone has no Ready node (an outage): no pod is removed until it is back.
    pub const ZONE_DARK: &str = "ZoneDark";
    /// `spec.paused` is set.
    pub const MANUALLY_PAUSED: &str = "ManuallyPaused";
    /// A zone completed less than `spec.bakeTime` ago: the next zone waits.
    pub const BAKING: &str = "Baking";
    pub const DRY_RUN: &str = "DryRun";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const PAUSED: &str = "Paused";
}

/// On a ZoneAwareUpdate whose `spec.paused` another controller sets (the shard-controller, over
/// its shards): why, quoted in the Paused condition's message.
pub const PAUSED_BECAUSE_ANNOTATION: &str = "zonecontrol.k8s.aws/paused-because";

/// What can hold a rollout, as `status.pausedBy` names them (comma-joined, in this order).
pub mod pause_source {
    /// A zone has no Ready node: an outage, whichever zone is rolled.
    pub const ZONE: &str = "Zone";
    /// `pauseRolloutAlarm` in ALARM, missing or unreadable.
    pub const ALARM: &str = "Alarm";
    /// `alertGate`: matching alerts, or no clear answer.
    pub const ALERT: &str = "Alert";
    /// `spec.paused`.
    pub const MANUAL: &str = "Manual";
    /// `spec.bakeTime` after a completed zone.
    pub const BAKE: &str = "Bake";
    /// Every source, in the order `pausedBy` lists them.
    pub const ORDER: [&str; 5] = [ZONE, ALARM, ALERT, MANUAL, BAKE];
}

/// Alarm-related pause reasons (they set `pausedRollout`).
pub const ALARM_REASONS: [&str; 3] = [
    reason::ALARM_FIRING,
    reason::ALARM_NOT_FOUND,
    reason::ALARM_UNAVAILABLE,
];

/// Rolls the pods of `statefulset` (update strategy `OnDelete`), or of the rollout group of
/// StatefulSets `selector` selects, zone by zone, deleting old-revision pods in batches of 1, 2,
/// 4, … up to `maxUnavailable`, and pausing while the CloudWatch alarm `pauseRolloutAlarm` is in
/// ALARM.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "zonecontrol.k8s.aws",
    version = "v1",
    kind = "ZoneAwareUpdate",
    doc = "A zone-by-zone rollout of an OnDelete StatefulSet, or of a group of them (see spec).",
    derive = "PartialEq",
    plural = "zoneawareupdates",
    shortname = "zau",
    category = "zone-aware",
    namespaced,
    status = "ZoneAwareUpdateStatus",
    printcolumn = r#"{"name":"StatefulSet","type":"string","jsonPath":".spec.statefulset"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".status.currentZone"}"#,
    printcolumn = r#"{"name":"Step","type":"integer","jsonPath":".status.updateStep"}"#,
    printcolumn = r#"{"name":"Old","type":"integer","jsonPath":".status.totalOldReplicas"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".status.pausedRollout"}"#,
    printcolumn = r#"{"name":"Paused By","type":"string","jsonPath":".status.pausedBy"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::zau::cel::statefulset_named())]
#[x_kube(validation = crate::zau::cel::one_target())]
#[x_kube(validation = crate::zau::cel::group_selector_not_empty())]
pub struct ZoneAwareUpdateSpec {
    /// The name of the StatefulSet (in the same namespace) this rollout applies to. Exactly one
    /// of statefulset and selector.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub statefulset: String,

    /// A rollout group: the StatefulSets of the namespace with these labels (for instance
    /// `rollout-group: ingester`, one StatefulSet per zone) rolled as one, zone by zone, never
    /// two zones at once, each pod to its own StatefulSet's update revision; maxUnavailable is of
    /// their replicas summed. Exactly one of statefulset and selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::selector_schema")]
    pub selector: Option<LabelSelector>,

    /// Max number (or percentage of spec.replicas, rounded up) of pods unavailable at once: at
    /// least 1 or 1%. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = crate::shared::cel::max_unavailable_form(),
        validation = crate::zau::cel::max_unavailable_not_zero()
    )]
    pub max_unavailable: Option<IntOrString>,

    /// Growth rate of the batch size, as a decimal string: batches are floor(factor^step) pods.
    /// "0" disables the growth (every batch is maxUnavailable); otherwise it must be >= 1.
    #[serde(default = "default_exponential_factor")]
    #[schemars(default = "default_exponential_factor")]
    #[x_kube(validation = crate::zau::cel::exponential_factor())]
    pub exponential_factor: String,

    /// Name of a CloudWatch alarm (metric or composite) that pauses the rollout while in ALARM.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pause_rollout_alarm: String,

    /// Ignore pauseRolloutAlarm, and alertGate: neither pauses the rollout (the gate is not
    /// polled).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_alarm: bool,

    /// Plan and report (status, events) without deleting any pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,

    /// A Prometheus-compatible alerts API (Prometheus, the rules-federator) whose matching alerts
    /// pause the rollout. No clear answer pauses too (fail safe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_gate: Option<AlertGate>,

    /// After a zone completes (all its pods updated and Ready), the next zone's first removal
    /// waits this long (a Prometheus duration such as 5m); the alarm and the alert gate are
    /// still watched meanwhile. The last zone needs no bake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_time: Option<String>,

    /// Manual pause: no pod is removed after the current batch while set; unset to resume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// `spec.alertGate`: where to read alerts, which of them pause the rollout, and how often.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = alert_gate_one_target())]
pub struct AlertGate {
    /// Base URL of the alerts API, e.g. http://prometheus.monitoring:9090. Exactly one of url
    /// and service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,

    /// A Service of the cluster, resolved through its EndpointSlices: a ready endpoint address
    /// is dialled directly. Exactly one of url and service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<GateService>,

    /// http (default) or https, with service. A url carries its own scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<GateScheme>,

    /// Prefix of the API path; the request is <base><pathPrefix>api/v1/alerts. Default "/".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,

    /// TLS of an https endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<GateTlsConfig>,

    /// A Secret key (in the ZoneAwareUpdate's namespace) whose value is sent as
    /// `Authorization: Bearer <token>`, e.g. a ServiceAccount token the rules-federator's
    /// --auth=kubernetes accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_secret: Option<SecretKeyRef>,

    /// A PromQL selector of the alerts that pause, e.g. {severity="critical", app="web"}: at
    /// least one matcher; =, !=, =~ and !~.
    pub matchers: String,

    /// Pending alerts (their `for` not yet elapsed) pause too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_pending: bool,

    /// Any (default): any matching alert pauses. RolloutZone: only alerts whose zone label is
    /// the zone being rolled out, or that carry no zone label.
    #[serde(default)]
    pub zone_scope: ZoneScope,

    /// The alert label holding the zone, for zoneScope RolloutZone. Default "zone".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_label: Option<String>,

    /// How often the alerts are read while a rollout is in progress: a duration from 1s to 5m.
    /// Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<String>,

    /// How long one request may take, at most pollInterval. Default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A Service whose endpoints serve the alerts API.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateService {
    /// Default: the ZoneAwareUpdate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The Service's name; its EndpointSlices give the ready addresses dialled.
    pub name: String,

    /// The port, by number (dialled on the endpoint addresses) or by name (looked up in the
    /// EndpointSlices' ports).
    pub port: IntOrString,
}

/// The scheme of a Service's endpoints.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateScheme {
    #[default]
    Http,
    Https,
}

/// Which matching alerts pause a rollout.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ZoneScope {
    /// Any matching alert.
    #[default]
    Any,
    /// Matching alerts of the zone being rolled out, and those without a zone label.
    RolloutZone,
}

/// TLS of an https alerts endpoint.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateTlsConfig {
    /// PEM CA bundle (a Secret key in the ZoneAwareUpdate's namespace) the server's certificate
    /// is verified against. Default: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretKeyRef>,

    /// The name the certificate is verified for (and sent as SNI). Default: the url's host, or
    /// <name>.<namespace>.svc for a service (its endpoints are dialled by IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,

    /// Do not verify the server's certificate (testing only: anyone on the path can read the
    /// token and forge the answer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

/// A key of a Secret in the ZoneAwareUpdate's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key of its data holding the value.
    pub key: String,
}

/// On `spec.alertGate`: it names one place to ask.
pub fn alert_gate_one_target() -> Rule {
    Rule::new("has(self.url) != has(self.service)").message(crate::zau::cel::ALERT_GATE_ONE_TARGET)
}

fn default_exponential_factor() -> String {
    zone_topology::rollout::DEFAULT_EXPONENTIAL_FACTOR.to_string()
}

/// One StatefulSet of a rollout group, in the status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetProgress {
    /// The StatefulSet's name (in the ZoneAwareUpdate's namespace).
    pub name: String,

    /// The StatefulSet's revision its old pods run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,

    /// The StatefulSet's revision being rolled out.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,

    /// `spec.replicas`.
    #[serde(default)]
    pub replicas: i32,

    /// Its pods not on the update revision yet.
    #[serde(default)]
    pub old_replicas: i32,
}

/// Observed state. The first six fields are the Go controller's, unchanged. For a rollout group
/// (spec.selector), the revisions are each StatefulSet's `name=revision`, comma-joined, and
/// statefulSets has each one's.
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

    /// Whether the rollout is paused, by any source (see pausedBy).
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub paused_rollout: bool,

    /// What holds the rollout, comma-joined in this order: Zone, Alarm, Alert, Manual, Bake; empty
    /// when nothing does.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub paused_by: String,

    /// While baking after a completed zone: when the next zone may start.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub next_zone_not_before: Option<Time>,

    /// The zone being updated.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_zone: Option<String>,

    /// A rollout group's StatefulSets, by name (empty for spec.statefulset).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stateful_sets: Vec<StatefulSetProgress>,

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

    /// Progressing, Paused, Complete, Invalid; and Ready, Reconciling, Stalled, the summary
    /// GitOps tools read (kstatus): Ready once complete, Reconciling while rolling or paused.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    // One condition per type: a map keyed by `type`, so that server-side apply merges them.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl ZoneAwareUpdateStatus {
    /// Where the rollout stands for GitOps tools ([`crate::conditions::Summary`]): Stalled while
    /// the spec is invalid, Ready once complete, else Reconciling, with the pause's reason while
    /// one holds it (a paused rollout is not Ready).
    pub fn summary(&self) -> crate::conditions::Summary {
        use crate::conditions::{Conditions, Summary};
        let holding = |type_: &str| self.condition(type_).filter(|c| c.status == "True");
        if let Some(invalid) = holding(condition::INVALID) {
            return Summary::Stalled {
                reason: invalid.reason.clone(),
                message: invalid.message.clone(),
            };
        }
        if let Some(complete) = holding(condition::COMPLETE) {
            return Summary::Ready {
                reason: complete.reason.clone(),
                message: complete.message.clone(),
            };
        }
        match holding(condition::PAUSED) {
            Some(paused) => Summary::reconciling_from(Some(paused), reason::PAUSED),
            None => Summary::reconciling_from(
                self.condition(condition::PROGRESSING),
                reason::IN_PROGRESS,
            ),
        }
    }
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
