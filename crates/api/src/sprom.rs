//! `ShardedPrometheus`: Prometheus (server or agent) as N shards pinned to zones, each scraping only
//! the targets of its own zone; autoscalable through the scale subresource, with graceful
//! (retained) scale-down.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, LocalObjectReference, PersistentVolumeClaimSpec,
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{lenient, patterns, schema};

pub mod alerting;
pub mod cel;
pub mod contract;
pub mod monitoring;
pub mod thanos;
pub mod validation;

pub use validation::{
    AlertmanagerTarget, ObjectStorage, PROMETHEUS_CONTAINER, PodOptions, RESERVED_FLAGS,
    RESERVED_POD_LABELS, RESERVED_VOLUMES, RULE_VOLUME_PREFIX, ServicePort, ShardStorage,
    SpromError, THANOS_SIDECAR_CONTAINER, THANOS_UPLOAD_CONTAINER_PREFIX, ThanosError,
    ValidAlerting, ValidAlertmanager, ValidSprom, ValidThanos,
};

pub use alerting::{AlertingSpec, AlertmanagerEndpoints};
pub use thanos::{ThanosSpec, ThanosTlsConfig};

pub use monitoring::{
    ExcludedObject, JobSettings, MONITORING_GROUP, Selectors, ServiceDiscoveryRole, ValidMonitoring,
};
/// Classic, or Topology (the zones of `topology.values`); Spread or Drop: the sharding
/// layout's own types, with their schemas.
pub use zone_topology::sharding::{ShardingMode, ZonelessTargets};

/// The image when neither `spec.image` nor `spec.version` is set.
pub const DEFAULT_IMAGE: &str = "quay.io/prometheus/prometheus:v3.16.0";
/// The reloader sidecar of Prometheus 2 when `spec.configReloaderImage` is not set.
pub const DEFAULT_CONFIG_RELOADER_IMAGE: &str =
    "quay.io/prometheus-operator/prometheus-config-reloader:v0.85.0";
/// Prometheus's own images, of the version `spec.version` names when `spec.image` is not set.
pub const PROMETHEUS_REPOSITORY: &str = "quay.io/prometheus/prometheus";
/// The ServiceAccount of the Prometheus pods when `spec.serviceAccountName` is not set.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "prometheus";
/// Grace period of a pod in Agent mode when `terminationGracePeriodSeconds` is not set: time to
/// flush the remote-write queue.
pub const DEFAULT_AGENT_GRACE_PERIOD_SECONDS: i64 = 600;
/// Grace period of a pod in Server mode when `terminationGracePeriodSeconds` is not set.
pub const DEFAULT_SERVER_GRACE_PERIOD_SECONDS: i64 = 30;
/// How long a retained shard is kept when neither `retain.retentionPeriod` nor `retention.time`
/// says.
pub const DEFAULT_RETAINED_SHARD_PERIOD: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);
/// How long every shard of a zone is unready before its zoneless targets fail over, when
/// `shardingStrategy.zoneFailoverAfter` does not say.
pub const DEFAULT_ZONE_FAILOVER_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// Condition types of a ShardedPrometheus.
pub mod condition {
    /// Every active shard has at least one ready replica.
    pub const AVAILABLE: &str = "Available";
    /// Working, but not as well as it could: uneven zones, zones without a shard, unready shards,
    /// a ServiceAccount that cannot discover targets.
    pub const DEGRADED: &str = "Degraded";
    /// The spec cannot be acted on; the shards keep their last good configuration.
    pub const INVALID: &str = crate::conditions::INVALID;
    /// Every selected ServiceMonitor, PodMonitor, ScrapeConfig and PrometheusRule is in the
    /// shards' configuration; False lists those left out, and why.
    pub const MONITORING_OBJECTS_ACCEPTED: &str = "MonitoringObjectsAccepted";
    /// Every ready Prometheus pod of every active shard runs the configuration the controller
    /// applied; False names the shards whose Prometheus refused it or still runs an older one.
    pub const CONFIG_LOADED: &str = "ConfigLoaded";
    /// spec.paused is set: nothing is changed until it is cleared.
    pub const PAUSED: &str = "Paused";
    /// With spec.thanos uploading: every shard a scale-down removed has uploaded everything it
    /// held (its head included) and is deleted; False names the shards kept until theirs is
    /// done, and why. Absent without the final upload.
    pub const REMOVED_SHARDS_UPLOADED: &str = "RemovedShardsUploaded";
}

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const INVALID_SCRAPE_CONFIG: &str = "InvalidScrapeConfig";
    /// A remoteWrite credential reference that cannot be resolved (a Secret or key missing).
    pub const INVALID_REMOTE_WRITE: &str = "InvalidRemoteWrite";
    /// An Alertmanager entry of spec.alerting that cannot be translated: a credential reference
    /// that cannot be resolved (a Secret or key missing), malformed credentials or relabel rules.
    pub const INVALID_ALERTING: &str = "InvalidAlerting";
    /// The API server refused a child built from the spec (e.g. a storage change, which a
    /// StatefulSet's volumeClaimTemplates cannot take).
    pub const CHILD_REJECTED: &str = "ChildRejected";
    pub const SHARDS_READY: &str = "ShardsReady";
    pub const SHARDS_NOT_READY: &str = "ShardsNotReady";
    /// Available False and Degraded True (and a Warning event): the API server refuses a
    /// shard's pods (a missing ServiceAccount, a ResourceQuota, Pod Security admission); the
    /// message names the shard and quotes the refusal.
    pub const PODS_NOT_CREATED: &str = "PodsNotCreated";
    pub const UNEVEN_ZONES: &str = "UnevenZones";
    pub const ZONES_WITHOUT_SHARD: &str = "ZonesWithoutShard";
    pub const ZONES_WITHOUT_NODES: &str = "ZonesWithoutNodes";
    /// Degraded: every shard of a zone has been unready for `zoneFailoverAfter`; its zoneless
    /// targets are scraped by the other zones' shards (also the Warning event's reason).
    pub const ZONE_FAILED_OVER: &str = "ZoneFailedOver";
    /// The Normal event when a failed-over zone has a ready shard again and its zoneless
    /// targets return to it.
    pub const ZONE_RETURNED: &str = "ZoneReturned";
    /// The Warning event when the shard-controller pauses the shards' rollout: a shard of the
    /// zone being rolled does not load its configuration.
    pub const ROLLOUT_HELD: &str = "RolloutHeld";
    /// The Normal event when that hold ends.
    pub const ROLLOUT_RESUMED: &str = "RolloutResumed";
    pub const NODE_METADATA_DISABLED: &str = "NodeMetadataDisabled";
    /// Degraded: a rule file of a `spec.ruleFiles` ConfigMap has a problem Prometheus would
    /// refuse (it then keeps its whole previous configuration), or the ConfigMap or key is
    /// missing.
    pub const INVALID_RULE_FILES: &str = "InvalidRuleFiles";
    pub const SERVICE_ACCOUNT_FORBIDDEN: &str = "ServiceAccountForbidden";
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Events: shards kept after a scale-down (or kept past a switch to Delete).
    pub const SHARDS_RETAINED: &str = "ShardsRetained";
    /// Event: a scale-up made retained shards active again.
    pub const RETAINED_SHARDS_REUSED: &str = "RetainedShardsReused";
    /// Event: retained shards deleted at their deadline.
    pub const RETAINED_SHARDS_DELETED: &str = "RetainedShardsDeleted";
    /// MonitoringObjectsAccepted: every selected object is in the configuration (or none is
    /// selected).
    pub const ALL_ACCEPTED: &str = "AllAccepted";
    /// MonitoringObjectsAccepted False, and an event per object: objects left out.
    pub const OBJECTS_REJECTED: &str = "ObjectsRejected";
    /// MonitoringObjectsAccepted False: a selector is set but the API server does not serve
    /// that monitoring.coreos.com kind (prometheus-operator's CRDs are not installed).
    pub const KINDS_NOT_SERVED: &str = "KindsNotServed";
    /// ConfigLoaded True: every probed pod runs the applied configuration.
    pub const CONFIG_LOADED: &str = "Loaded";
    /// ConfigLoaded False: a shard's Prometheus refused the configuration (its last reload
    /// failed); it keeps running the previous one.
    pub const RELOAD_FAILED: &str = "ReloadFailed";
    /// ConfigLoaded False: a shard's Prometheus still runs another configuration than the one
    /// applied, longer than the time a mounted Secret takes to reach a pod.
    pub const CONFIG_NOT_LOADED: &str = "ConfigNotLoaded";
    /// ConfigLoaded Unknown: no pod could be asked (none running, or none answered).
    pub const NOT_PROBED: &str = "NotProbed";
    /// Paused True.
    pub const PAUSED: &str = "Paused";
    /// Paused False.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// RemovedShardsUploaded True: no removed shard waits for its final upload.
    pub const NONE_PENDING: &str = "NonePending";
    /// RemovedShardsUploaded False: a removed shard's pods are snapshotting or uploading.
    pub const UPLOAD_IN_PROGRESS: &str = "UploadInProgress";
    /// RemovedShardsUploaded False (and a Warning event): an upload attempt failed; the shard
    /// is kept and the attempt retried.
    pub const UPLOAD_FAILED: &str = "UploadFailed";
    /// Event: a pod of a removed shard starts its final upload.
    pub const SHARD_UPLOAD_STARTED: &str = "ShardUploadStarted";
    /// Warning event: an attempt at a removed shard's final upload failed.
    pub const SHARD_UPLOAD_FAILED: &str = "ShardUploadFailed";
    /// Event: removed shards deleted once everything they held was uploaded.
    pub const SHARDS_UPLOADED: &str = "ShardsUploaded";
}

/// Runs Prometheus as `shards` StatefulSets of `replicas` pods. In Topology sharding, shard i
/// runs in zone `values[i % len(values)]` and scrapes only the targets of that zone (targets
/// without a usable zone are spread over all shards, or dropped); every target is scraped by
/// exactly one shard. Scale `shards` by hand or with a HorizontalPodAutoscaler (scale
/// subresource).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "zonecontrol.k8s.aws",
    version = "v1",
    kind = "ShardedPrometheus",
    doc = "Prometheus sharded over zones: each shard scrapes the targets of its own zone (see spec).",
    plural = "shardedprometheuses",
    shortname = "sprom",
    category = "zone-aware",
    namespaced,
    status = "ShardedPrometheusStatus",
    scale(
        spec_replicas_path = ".spec.shards",
        status_replicas_path = ".status.shards",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Shards","type":"integer","jsonPath":".status.shards"}"#,
    printcolumn = r#"{"name":"Zones","type":"string","jsonPath":".spec.shardingStrategy.topology.values"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyShards"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = crate::sprom::cel::zones_listed(),
    validation = crate::sprom::cel::external_labels_not_reserved(),
    validation = crate::sprom::cel::external_labels_leave_the_zone_label(),
    validation = crate::sprom::cel::agent_remote_writes(),
    validation = crate::sprom::cel::agent_has_no_rule_files()
)]
pub struct ShardedPrometheusSpec {
    /// Number of shards (1 to 1024). Each shard is a StatefulSet "<name>-shard-<i>" with its own
    /// configuration. Best a multiple of the number of zones: otherwise the zones with one shard
    /// more give each shard a smaller share (condition Degraded, reason UnevenZones). Fewer
    /// shards than zones is valid: the zones without a shard are scraped from another zone.
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = contract::MAX_SHARDS))]
    pub shards: i32,

    /// Prometheus pods per shard, identical copies scraping the same targets (told apart by the
    /// external label prometheus_replica).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,

    /// Server: scrape, store, evaluate rules and answer queries. Agent: scrape and forward
    /// through remoteWrite only (needs remoteWrite; no ruleFiles).
    #[serde(default)]
    pub mode: PrometheusMode,

    /// Prometheus image, of Prometheus 2 or 3 (see `version`). Default
    /// quay.io/prometheus/prometheus:v<version>, v3.16.0 without a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// The Prometheus version the image runs (as prometheus-operator's `version`): `v2.55.1`,
    /// `3.16.0`. Its major chooses the shards' flags: Prometheus 2 re-reads its configuration and
    /// runs as an agent through feature flags (`auto-reload-config`, `agent`), Prometheus 3
    /// through `--config.auto-reload` and `--agent`. Default: the image's tag when it is a
    /// version, else 3.16.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// With Prometheus 2 only: the image of the sidecar that asks Prometheus to reload when its
    /// configuration or rule files change (prometheus-operator's `prometheus-config-reloader`).
    /// Default quay.io/prometheus-operator/prometheus-config-reloader:v0.85.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_reloader_image: Option<String>,

    /// How targets are split between shards.
    #[serde(default)]
    pub sharding_strategy: ShardingStrategy,

    /// Prometheus scrape_config objects, as in prometheus.yml (snake_case keys, job_name
    /// required and unique). The sharding rules are appended to each job's relabel_configs,
    /// after the job's own; a job may set __tmp_hash (what targets are hashed by, default
    /// __address__) or __tmp_topology (a target's zone) itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "scrape_configs_schema")]
    pub scrape_configs: Vec<serde_json::Value>,

    /// ServiceMonitors (monitoring.coreos.com/v1) to scrape, as prometheus-operator's
    /// Prometheus selects them: unset selects none, {} selects all. Each becomes the same jobs
    /// and target labels as upstream, with the sharding rules appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor_selector: Option<LabelSelector>,

    /// Namespaces to select ServiceMonitors from: unset: this namespace only; {}: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor_namespace_selector: Option<LabelSelector>,

    /// PodMonitors (monitoring.coreos.com/v1) to scrape: unset selects none, {} selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_monitor_selector: Option<LabelSelector>,

    /// Namespaces to select PodMonitors from: unset: this namespace only; {}: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_monitor_namespace_selector: Option<LabelSelector>,

    /// ScrapeConfigs (monitoring.coreos.com/v1alpha1) to scrape: unset selects none, {} all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_config_selector: Option<LabelSelector>,

    /// Namespaces to select ScrapeConfigs from: unset: this namespace only; {}: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_config_namespace_selector: Option<LabelSelector>,

    /// PrometheusRules (monitoring.coreos.com/v1) every shard evaluates: unset selects none,
    /// {} selects all. A rule that does not parse leaves its object out (condition + event).
    /// Not allowed in Agent mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_selector: Option<LabelSelector>,

    /// Namespaces to select PrometheusRules from: unset: this namespace only; {}: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_namespace_selector: Option<LabelSelector>,

    /// The Kubernetes discovery role of ServiceMonitor jobs: Endpoints (default) or
    /// EndpointSlice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_discovery_role: Option<ServiceDiscoveryRole>,

    /// How often targets are scraped when a job does not say, a Prometheus duration. Default
    /// 30s, as prometheus-operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration("spec.scrapeInterval"))]
    pub scrape_interval: Option<String>,

    /// How long a scrape may take when a job does not say (at most scrapeInterval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration("spec.scrapeTimeout"))]
    pub scrape_timeout: Option<String>,

    /// How often rules are evaluated. Default 30s, as prometheus-operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration("spec.evaluationInterval"))]
    pub evaluation_interval: Option<String>,

    /// Monitors scrape their own namespace only, whatever their namespaceSelector says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_namespace_selectors: bool,

    /// honor_labels is false on every monitor job, whatever the monitor says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub override_honor_labels: bool,

    /// honor_timestamps is false on every monitor job, whatever the monitor says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub override_honor_timestamps: bool,

    /// A label set to the monitor's namespace on every target and series of the jobs made from
    /// monitors, which no monitor can override. Not yet applied to PrometheusRules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforced_namespace_label: Option<String>,

    /// The most samples per scrape any monitor job may take (the lower of this and its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_sample_limit: Option<i64>,

    /// The most targets any monitor job may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_target_limit: Option<i64>,

    /// The most labels per sample any monitor job may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_label_limit: Option<i64>,

    /// The longest label name any monitor job may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_label_name_length_limit: Option<i64>,

    /// The longest label value any monitor job may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_label_value_length_limit: Option<i64>,

    /// The most dropped targets any monitor job keeps in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub enforced_keep_dropped_targets: Option<i64>,

    /// The largest uncompressed scrape body any monitor job accepts ("10MB").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_size("spec.enforcedBodySizeLimit"))]
    pub enforced_body_size_limit: Option<String>,

    /// Labels added to every series and alert leaving Prometheus (remote write, federation,
    /// alerts). The controller sets shard, prometheus_replica and the zone label itself: those
    /// names are refused here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = crate::sprom::cel::external_labels_are_label_names())]
    pub external_labels: BTreeMap<String, String>,

    /// Prometheus remote_write objects, as in prometheus.yml (url required). Required in Agent
    /// mode. Credentials may be references to Secrets (and ConfigMaps) of this namespace, with
    /// prometheus-operator's keys: basicAuth {username, password}, authorization {type,
    /// credentials}, bearerTokenSecret, oauth2 {clientId, clientSecret, tokenUrl, ...},
    /// tlsConfig {ca, cert, keySecret, serverName, ...}; they are resolved into the shards'
    /// configuration Secrets and never copied into a ConfigMap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "remote_write_schema")]
    pub remote_write: Vec<serde_json::Value>,

    /// Recording and alerting rule files, from ConfigMaps of this namespace. Every shard
    /// evaluates every rule over its own series. Not allowed in Agent mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_files: Vec<RuleFileRef>,

    /// How long and how much the local storage keeps (Server mode). Default: Prometheus's, 15d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,

    /// Where each Prometheus pod stores its data. Default: an emptyDir (lost with the pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<PrometheusStorage>,

    /// Resources of the Prometheus container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Node labels the Prometheus pods must match. In Topology sharding the controller sets
    /// topology.kubernetes.io/zone to the shard's zone, replacing any value given here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the Prometheus pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// ServiceAccount of the Prometheus pods; it needs to list and watch what the scrape configs
    /// discover (pods, nodes, endpoints…). Default "prometheus".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// What happens to the shards removed by a scale-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_retention_policy: Option<ShardRetentionPolicy>,

    /// Seconds a Prometheus pod is given to stop. Default 600 in Agent mode (time to flush the
    /// remote-write queue), 30 in Server mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub termination_grace_period_seconds: Option<i64>,

    /// Where the shards send their alerts (Server mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerting: Option<AlertingSpec>,

    /// A Thanos sidecar in every shard pod (Server mode): the shards' data served to a Thanos
    /// Querier and uploaded to object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thanos: Option<ThanosSpec>,

    /// Nothing is changed while set: the shards keep running as they are, a changed spec
    /// (shards included) is applied once unpaused; condition Paused says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// The budgets that hold evictions of the shards' pods (a node drain, a rollout that
    /// evicts): the shards of one zone at a time, one replica of a shard at a time. Both on by
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budgets: Option<DisruptionBudgets>,

    /// How a change to the shards' pods (image, flags, sidecars, any pod-template field) rolls
    /// out. Default: zone by zone (strategy ZoneAware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<ShardRollout>,

    /// The pods' security context. Default: Pod Security "restricted" (non-root as the image's
    /// nobody user, seccomp RuntimeDefault); given, it replaces the default whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,

    /// The Prometheus container's security context. Default: "restricted" (no privilege
    /// escalation, every capability dropped, read-only root filesystem); given, it replaces the
    /// default whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,

    /// The pods' affinity. In Topology sharding the shard's zone stays pinned by nodeSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Added to the controller's own constraint (a shard's replicas on different nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// The pods' priority class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Secrets to pull the images with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Labels and annotations added to the pods. The controller's own labels
    /// (app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by,
    /// zonecontrol.k8s.aws/shard) cannot be overridden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_metadata: Option<PodMetadata>,

    /// Extra Prometheus flags ("--name=value"). Flags the controller sets (config file,
    /// auto-reload, listen address, storage path and retention, agent, features) are refused:
    /// use their fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_args: Vec<Argument>,

    /// Prometheus feature flags (--enable-feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1)))]
    pub enable_features: Vec<String>,

    /// Containers added to the pods (a Thanos sidecar, an authentication proxy); one named
    /// "prometheus" is merged into the controller's Prometheus container instead (fields given
    /// replace the controller's; env, ports and volumeMounts are merged by name/path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,

    /// Init containers of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,

    /// Volumes added to the pods (names "config", "data" and "rules-*" are the controller's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,

    /// Mounts added to the Prometheus container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,

    /// What happens to the PersistentVolumeClaims of storage.volumeClaimTemplate when a
    /// shard's StatefulSet is deleted (whenDeleted: a shard removed by a Delete scale-down, or
    /// the ShardedPrometheus deleted) or scaled (whenScaled: replicas reduced). Retain (the
    /// default) or Delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_retention_policy:
        Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
}

/// Labels and annotations of the pods.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadata {
    /// Labels added to every shard pod (the controller's own labels win on a clash).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every shard pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One extra command-line flag of Prometheus.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// The flag without its dashes, e.g. "query.max-concurrency".
    #[schemars(length(min = 1))]
    pub name: String,
    /// Its value; empty for a flag that takes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

fn default_shards() -> i32 {
    1
}

fn default_replicas() -> i32 {
    1
}

/// An array of free-form objects, kept as written (the API server prunes nothing inside), each
/// with the string `key` that `rule` requires (declared, so the rule can read it).
fn raw_objects(key: &str, description: &str, rule: kube::core::Rule) -> Schema {
    let mut item = serde_json::json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {}
    });
    item["properties"][key] = serde_json::json!({"type": "string", "description": description});
    schema::add_rules(&mut item, [rule]);
    json_schema!({
        "type": "array",
        "items": item
    })
}

fn scrape_configs_schema(_: &mut SchemaGenerator) -> Schema {
    raw_objects(
        "job_name",
        "The job's name, unique among the scrape configs (the job label of its series).",
        crate::sprom::cel::scrape_config_job_name(),
    )
}

fn remote_write_schema(_: &mut SchemaGenerator) -> Schema {
    raw_objects(
        "url",
        "The URL series are sent to (http or https).",
        crate::sprom::cel::remote_write_url(),
    )
}

/// What a Prometheus pod does: Server or Agent.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PrometheusMode {
    #[default]
    Server,
    Agent,
}

/// How targets are split between shards.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = crate::sprom::cel::zones_are_label_values(),
    validation = crate::sprom::cel::zones_unique(),
    validation = crate::sprom::cel::zone_label_is_label_name(),
    validation = crate::sprom::cel::zone_label_not_reserved()
)]
pub struct ShardingStrategy {
    /// Topology: shard i runs in zone values[i % len(values)] and scrapes the targets of that
    /// zone. Classic (alias Address): targets are spread over all shards by hash, whatever their
    /// zone.
    #[serde(default)]
    pub mode: ShardingMode,

    /// The zones of Topology sharding.
    #[serde(default)]
    pub topology: TopologySharding,

    /// Targets without a usable zone (no zone, a zone not listed, a zone without a shard, or a
    /// job that is not Kubernetes discovery). Spread: scraped by exactly one of all shards,
    /// across zones. Drop: not scraped at all.
    #[serde(default)]
    pub zoneless_targets: ZonelessTargets,

    /// Topology with Spread: how long every shard of a zone must be unready before the zoneless
    /// targets its shards scrape move to the other zones' shards (a zone failover), as a
    /// Prometheus duration. Default 5m. They move back as soon as a shard of the zone is ready.
    /// The zone's own targets never move: they are in the zone that is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration(
        "spec.shardingStrategy.zoneFailoverAfter"
    ))]
    pub zone_failover_after: Option<String>,

    /// Topology with Spread: Enabled (the default) moves a down zone's zoneless targets after
    /// zoneFailoverAfter; Disabled keeps them on the zone's shards, unscraped while the zone is
    /// down (when the other zones' shards have no room for them, or their samples must come from
    /// one place).
    #[serde(default, skip_serializing_if = "ZoneFailover::is_enabled")]
    pub zone_failover: ZoneFailover,
}

/// Whether a down zone's zoneless targets fail over.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ZoneFailover {
    #[default]
    Enabled,
    Disabled,
}

impl ZoneFailover {
    /// Whether it is the default, Enabled.
    pub fn is_enabled(&self) -> bool {
        *self == ZoneFailover::Enabled
    }
}

/// The zones of Topology sharding.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologySharding {
    /// The zones (values of the nodes' topology.kubernetes.io/zone label), in shard order:
    /// shard i runs in values[i % len(values)]. Required in Topology mode; ignored in Classic.
    /// Changing the list (even appending to it) moves shards to other zones. At most 64 zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = patterns::MAX_ZONES),
        inner(length(max = patterns::LABEL_VALUE_MAX_LENGTH))
    )]
    pub values: Vec<String>,

    /// The external label carrying the shard's zone. Default "zone"; "" adds no zone label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_label_name: Option<String>,
}

/// One ConfigMap key (or all keys of a ConfigMap) holding Prometheus rule files.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleFileRef {
    /// Name of a ConfigMap in this namespace.
    #[x_kube(validation = crate::sprom::cel::rule_file_config_map())]
    pub config_map: String,

    /// The key holding a rule file. Default: every key of the ConfigMap is a rule file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::rule_file_key())]
    pub key: Option<String>,
}

/// Limits of the local storage; the oldest blocks go first when either is reached.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// How long samples are kept, as a Prometheus duration: "15d", "1d12h", "6h".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration("spec.retention.time"))]
    pub time: Option<String>,

    /// How many bytes of blocks are kept, powers of 1024: "10GB", "512MiB".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_size("spec.retention.size"))]
    pub size: Option<String>,
}

/// Where each Prometheus pod stores its data: one of volumeClaimTemplate or emptyDir.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::sprom::cel::storage_one_kind())]
pub struct PrometheusStorage {
    /// A PersistentVolumeClaim per Prometheus pod, kept across restarts and re-scheduling (and by
    /// a retained shard that is scaled up again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<VolumeClaimTemplate>,

    /// A volume that lives as long as the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
}

/// The claim each Prometheus pod gets.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimTemplate {
    /// As a PersistentVolumeClaim's spec (storage class, access modes, size).
    pub spec: PersistentVolumeClaimSpec,
}

/// The budgets the controller keeps for the shards' pods. Evictions are what they hold: `kubectl
/// drain`, the Eviction API, a ZoneAwareUpdate's removals; a plain delete is not held.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudgets {
    /// A ZoneDisruptionBudget `<name>-shards` over every pod of the shards, applied by the
    /// zdb-controller's eviction webhook: pods of one zone evicted at a time, none while a shard
    /// pod of another zone is unready or being evicted. Inert where the zdb-controller does not
    /// run; skipped where its CRD is not installed. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<bool>,

    /// A PodDisruptionBudget per shard of two or more replicas (named as the shard,
    /// maxUnavailable 1): never both replicas of a shard evicted at once. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<bool>,
}

/// `spec.rollout`: how the shards' pods are replaced when their template changes.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardRollout {
    /// ZoneAware (default): the shards' StatefulSets are `OnDelete` and a ZoneAwareUpdate
    /// `<name>-shards`, owned by the ShardedPrometheus, rolls their pods zone by zone (the
    /// zau-controller's planner: batches of 1, 2, 4, … up to maxUnavailable, evicting, so the
    /// shards' disruption budgets hold it too), held while a shard of the zone being rolled
    /// does not load its configuration. Needs the zau-controller; where its CRD is not
    /// installed the shards roll as with RollingUpdate. RollingUpdate: each StatefulSet rolls
    /// its own pods, every zone at once.
    #[serde(default)]
    pub strategy: ShardRolloutStrategy,

    /// ZoneAware: pods replaced at once, a number or a percentage of every shard's replicas
    /// summed (rounded up). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::shared::cel::rollout_max_unavailable_form())]
    pub max_unavailable: Option<IntOrString>,

    /// ZoneAware: growth rate of the batches, as a ZoneAwareUpdate's. Default "2.0".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential_factor: Option<String>,

    /// ZoneAware: how long a completed zone runs before the next zone starts (a Prometheus
    /// duration). Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_time: Option<String>,

    /// ZoneAware: alerts that hold the rollout while they fire (a ZoneAwareUpdate's
    /// `alertGate`: the shards' Thanos Querier, the rules-federator or any alerts API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_gate: Option<crate::zau::AlertGate>,
}

/// How the shards' pods are replaced.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ShardRolloutStrategy {
    #[default]
    ZoneAware,
    RollingUpdate,
}

/// `status.rollout`: the shards' zone-by-zone rollout, as its ZoneAwareUpdate reports it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardRolloutStatus {
    /// The ZoneAwareUpdate rolling the shards.
    #[serde(default)]
    pub zone_aware_update: String,

    /// The zone being rolled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_zone: Option<String>,

    /// Shard pods not yet at their StatefulSet's update revision.
    #[serde(default)]
    pub old_replicas: i32,

    /// What holds the rollout (Zone, Alarm, Alert, Manual, Bake), comma-joined; empty: nothing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub paused_by: String,

    /// Why the shard-controller holds it (spec.paused of the ZoneAwareUpdate): a shard of the
    /// zone being rolled does not load its configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,

    /// The ZoneAwareUpdate's own account: its Paused condition's message while paused, else
    /// its Progressing one's; absent until the zau-controller has seen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `status.traffic`: the bytes the shards' Prometheus pods scrape (the bodies of the targets'
/// answers), by where the target is from the pod, per day at the rate of the last hour.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardTrafficStatus {
    /// The seconds of scraping the figures are projected from: up to an hour, since the spec
    /// last changed (its generation).
    #[serde(default)]
    pub measured_seconds: i64,

    /// When the last measured window ended (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub measured_at: String,

    /// The shards' totals.
    #[serde(default, flatten)]
    pub total: TrafficBytes,

    /// What Classic sharding of the same targets would scrape across zones with the shards'
    /// pods where they are: each zoned target's bytes times the share of the pods outside its
    /// zone.
    #[serde(default)]
    pub classic_cross_zone_bytes_per_day: i64,

    /// Per active shard, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardTraffic>,
}

/// Bytes scraped per day, by where the target is from the scraping pod.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficBytes {
    /// From targets in the pod's own zone.
    #[serde(default)]
    pub same_zone_bytes_per_day: i64,

    /// From targets in another zone: what a cloud bills as inter-zone transfer.
    #[serde(default)]
    pub cross_zone_bytes_per_day: i64,

    /// From targets with no zone (static, DNS or file discovery, no zone label), or scraped by
    /// a pod whose node has no zone.
    #[serde(default)]
    pub zoneless_bytes_per_day: i64,
}

/// One shard's scrape traffic.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardTraffic {
    /// The shard's index.
    #[serde(default)]
    pub index: i32,

    #[serde(default, flatten)]
    pub bytes: TrafficBytes,
}

/// What happens to the shards removed by a scale-down.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardRetentionPolicy {
    /// Delete: removed shards are deleted at once. Retain: they keep running, scraping nothing,
    /// so their data can still be queried, until their deletion deadline; a scale-up before then
    /// reuses them. Agents are always deleted.
    #[serde(default)]
    pub when_scaled: WhenScaled,

    /// How long retained shards are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain: Option<RetainPolicy>,
}

/// Retain or Delete.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WhenScaled {
    Retain,
    #[default]
    Delete,
}

/// How long retained shards are kept.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetainPolicy {
    /// A Prometheus duration ("7d"). Default: retention.time; without it 24h, but with only
    /// retention.size set, retained shards are kept until you delete them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::sprom::cel::prometheus_duration(
        "spec.shardRetentionPolicy.retain.retentionPeriod"
    ))]
    pub retention_period: Option<String>,
}

/// Observed state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardedPrometheusStatus {
    /// The generation of the spec this status reflects.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub observed_generation: i64,

    /// Active shards whose StatefulSet exists (what the scale subresource reports).
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub shards: i32,

    /// Active shards whose every replica is ready.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub ready_shards: i32,

    /// Label selector matching one pod per active shard (never a retained shard's), for
    /// autoscalers averaging a per-shard metric.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub selector: String,

    /// One entry per active shard, by index.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub shard_statuses: Vec<ShardStatus>,

    /// Shards removed by a scale-down and kept (policy Retain), by index.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub retained_shards: Vec<RetainedShard>,

    /// With `spec.thanos`: the rule groups of global PrometheusRules (label
    /// `zonecontrol.k8s.aws/scope: global`), which no shard loads; they are in the ConfigMaps
    /// `<name>-global-rulefiles-<n>` for a Thanos Ruler.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "is_zero"
    )]
    pub global_rule_groups: i32,

    /// The zones whose shards are all unready (Topology), with since when; once that has
    /// lasted `zoneFailoverAfter`, their zoneless targets are scraped by the other zones'
    /// shards (`failedOver`).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub unready_zones: Vec<UnreadyZone>,

    /// The shards' zone-by-zone rollout (strategy ZoneAware).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub rollout: Option<ShardRolloutStatus>,

    /// The shards' scrape traffic by zone, projected to a day from the last hour measured
    /// (docs/sharding.md, "What the shards cost"); absent until the first measurement (every
    /// minute; agents are not measured).
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub traffic: Option<ShardTrafficStatus>,

    /// Available, Degraded, Invalid, ConfigLoaded, MonitoringObjectsAccepted, Paused,
    /// RemovedShardsUploaded; and Ready, Reconciling, Stalled, the summary GitOps tools read
    /// (kstatus): Ready when every shard serves the applied configuration.
    #[serde(
        default,
        deserialize_with = "lenient::or_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    // One condition per type: a map keyed by `type`, so that server-side apply merges them.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A zone whose shards are all unready.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnreadyZone {
    /// The zone, one of topology.values.
    #[serde(default)]
    pub zone: String,

    /// When the controller first saw none of its shards ready (RFC 3339).
    #[serde(default)]
    pub since: String,

    /// Its zoneless targets are scraped by the other zones' shards.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_over: bool,
}

/// One active shard.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// The shard's index, 0 to shards - 1.
    #[serde(default)]
    pub index: i32,

    /// The shard's zone (empty in Classic sharding).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,

    /// The shard's index among the shards of its zone.
    #[serde(default)]
    pub in_zone: i32,

    /// Ready Prometheus pods of the shard.
    #[serde(default)]
    pub ready_replicas: i32,

    /// The shard's StatefulSet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stateful_set: String,

    /// ServiceMonitors, PodMonitors and ScrapeConfigs in the shard's configuration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub monitors: i32,

    /// Rule groups the shard evaluates from PrometheusRules.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rule_groups: i32,

    /// Selected objects left out of the shard's configuration (see condition
    /// MonitoringObjectsAccepted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejected_objects: i32,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// A shard kept after a scale-down.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetainedShard {
    /// The shard's index.
    #[serde(default)]
    pub index: i32,

    /// When the shard is deleted (RFC 3339); absent: kept until you delete it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_deadline: Option<String>,
}

impl ShardedPrometheusStatus {
    /// Where the shards stand for GitOps tools ([`crate::conditions::Summary`]): Stalled while
    /// the spec is invalid; Ready when every shard has a ready Prometheus running the applied
    /// configuration (Degraded, which says how well, is its own condition); else Reconciling with
    /// the reason of what is missing.
    pub fn summary(&self) -> crate::conditions::Summary {
        use crate::conditions::{Conditions, Summary};
        let with = |type_: &str, status: &str| self.condition(type_).filter(|c| c.status == status);
        if let Some(invalid) = with(condition::INVALID, "True") {
            return Summary::Stalled {
                reason: invalid.reason.clone(),
                message: invalid.message.clone(),
            };
        }
        let unloaded = with(condition::CONFIG_LOADED, "False");
        match (with(condition::AVAILABLE, "True"), unloaded) {
            (Some(available), None) => Summary::Ready {
                reason: available.reason.clone(),
                message: available.message.clone(),
            },
            (Some(_), Some(unloaded)) => Summary::reconciling_from(Some(unloaded), ""),
            (None, _) => Summary::reconciling_from(
                self.condition(condition::AVAILABLE),
                reason::SHARDS_NOT_READY,
            ),
        }
    }
}

impl crate::conditions::Conditions for ShardedPrometheusStatus {
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

#[cfg(test)]
mod tests;
