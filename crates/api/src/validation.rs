//! Checks a spec before a controller acts on it. Errors are written to an `Invalid` condition and
//! an event, so the messages speak to the person who wrote the manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, LocalObjectReference, PersistentVolumeClaimSpec,
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_topology::rollout::{RolloutError, parse_exponential_factor};
use zone_topology::{IntOrPercent, IntOrPercentError};

use zone_topology::sharding::{self, ShardLayout, ShardingError};

use crate::sprom::monitoring::{self, Selectors, ValidMonitoring};
use crate::sprom::{
    self, PrometheusMode, PrometheusStorage, RuleFileRef, ShardingMode, WhenScaled,
    ZonelessTargets, contract,
};
use crate::units::{UnitError, parse_prometheus_duration, parse_prometheus_size};
use crate::zau::{AlertGate, GateScheme, GateTlsConfig, SecretKeyRef, ZoneScope};
use crate::{ShardedPrometheusSpec, ZoneAwareUpdateSpec, ZoneDisruptionBudgetSpec};

/// When `maxUnavailable` is not set: one pod, the most careful budget that still makes progress.
pub const DEFAULT_MAX_UNAVAILABLE: IntOrPercent = IntOrPercent::Int(1);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.statefulset is empty: name the StatefulSet to roll out")]
    MissingStatefulSet,
    #[error("spec.alertGate: set exactly one of url and service")]
    GateTarget,
    #[error("spec.alertGate.url {url:?}: {why}")]
    GateUrl { url: String, why: &'static str },
    #[error("spec.alertGate.scheme {scheme} contradicts spec.alertGate.url {url:?}")]
    GateScheme { scheme: &'static str, url: String },
    #[error("spec.alertGate.service.name is empty: name the Service serving the alerts API")]
    GateServiceName,
    #[error("spec.alertGate.service.port {0}: a port number from 1 to 65535, or a port name")]
    GateServicePort(String),
    #[error("spec.alertGate.pathPrefix {0:?} must start with \"/\" and hold no '?' or '#'")]
    GatePathPrefix(String),
    #[error(
        "spec.alertGate.tlsConfig is set but the endpoint is http: use scheme https (or an \
         https:// url)"
    )]
    GateTlsOverHttp,
    #[error("{field}: name and key are both required")]
    GateSecretRef { field: &'static str },
    #[error(
        "spec.alertGate.matchers is empty: give a PromQL selector with at least one matcher, \
         e.g. {{severity=\"critical\"}}"
    )]
    GateMatchersEmpty,
    #[error(
        "spec.alertGate.zoneLabel {0:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"
    )]
    GateZoneLabel(String),
    #[error("{field} {value:?} must be from {min} to {max}")]
    DurationRange {
        field: &'static str,
        value: String,
        min: &'static str,
        max: &'static str,
    },
    #[error(
        "spec.alertGate.timeout {timeout:?} is longer than spec.alertGate.pollInterval {interval:?}"
    )]
    GateTimeout { timeout: String, interval: String },
    #[error("spec.exponentialFactor: {0}")]
    ExponentialFactor(#[source] RolloutError),
    #[error("spec.maxUnavailable: {0}")]
    MaxUnavailable(#[source] IntOrPercentError),
    #[error(
        "spec.maxUnavailable must be at least 1 or 1%: a rollout that can remove no pod cannot \
         progress"
    )]
    MaxUnavailableZero,
    #[error("spec.selector is missing or empty: it would select every pod of the namespace")]
    EmptySelector,
    #[error(
        "spec.selector: operator {operator:?} of key {key:?} is not In, NotIn, Exists or DoesNotExist"
    )]
    SelectorOperator { key: String, operator: String },
    #[error("spec.selector: key {key:?} with operator {operator} needs {needs}")]
    SelectorValues {
        key: String,
        operator: String,
        needs: &'static str,
    },
    #[error("spec.shards is {0}: it must be between 1 and {max}", max = contract::MAX_SHARDS)]
    Shards(i32),
    #[error("spec.shardingStrategy: {0}")]
    Layout(#[source] ShardingError),
    #[error("spec.replicas is {0}: every shard needs at least 1 replica")]
    Replicas(i32),
    #[error(
        "spec.shardingStrategy.topology.values is empty: Topology sharding needs at least one zone \
         (or set shardingStrategy.mode to Classic)"
    )]
    NoZones,
    #[error("spec.shardingStrategy.topology.values[{0}] is empty: name a zone")]
    EmptyZone(usize),
    #[error(
        "spec.shardingStrategy.topology.values: zone {0:?} is not a valid label value \
         (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    ZoneNotLabelValue(String),
    #[error("spec.shardingStrategy.topology.values lists zone {0:?} more than once")]
    DuplicateZone(String),
    #[error(
        "spec.shardingStrategy.topology.externalLabelName {0:?} is not a Prometheus label name \
         ([a-zA-Z_][a-zA-Z0-9_]*); \"\" adds no zone label"
    )]
    ZoneLabelName(String),
    #[error(
        "spec.shardingStrategy.topology.externalLabelName {0:?} is also set by the controller \
         (shard, prometheus_replica): choose another name"
    )]
    ZoneLabelNameReserved(String),
    #[error("spec.externalLabels: {0:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")]
    ExternalLabelName(String),
    #[error(
        "spec.externalLabels: {0:?} is set by the controller on every shard (shard, \
         prometheus_replica and the zone label are reserved): choose another name"
    )]
    ReservedExternalLabel(String),
    #[error("spec.scrapeConfigs[{0}] is not an object: each entry is one Prometheus scrape_config")]
    ScrapeConfigNotObject(usize),
    #[error("spec.scrapeConfigs[{0}] has no job_name: Prometheus needs a non-empty string")]
    ScrapeConfigJobName(usize),
    #[error("spec.scrapeConfigs: job_name {0:?} is used more than once: job names must be unique")]
    DuplicateJobName(String),
    #[error(
        "spec.remoteWrite[{0}] is not an object with a url: each entry is one Prometheus \
         remote_write"
    )]
    RemoteWriteUrl(usize),
    #[error(
        "spec.remoteWrite is empty: mode Agent keeps no data locally and forwards everything \
         through remote write, so it needs at least one target"
    )]
    AgentWithoutRemoteWrite,
    #[error(
        "spec.ruleFiles is set but mode is Agent: agents do not evaluate rules; remove \
         ruleFiles or use mode Server"
    )]
    AgentWithRuleFiles,
    #[error("spec.ruleFiles[{0}].configMap is empty: name the ConfigMap holding the rules")]
    RuleFileConfigMap(usize),
    #[error(
        "spec.ruleFiles[{index}].key is empty (ConfigMap {config_map:?}): name a key, or leave \
         key out to load every key"
    )]
    RuleFileKey { index: usize, config_map: String },
    #[error("{field}: {value:?} is not a Prometheus duration: {source}")]
    Duration {
        field: &'static str,
        value: String,
        #[source]
        source: UnitError,
    },
    #[error("spec.retention.size: {value:?} is not a Prometheus size: {source}")]
    RetentionSize {
        value: String,
        #[source]
        source: UnitError,
    },
    #[error("spec.storage sets both volumeClaimTemplate and emptyDir: choose one")]
    StorageBoth,
    #[error("spec.terminationGracePeriodSeconds is {0}: it must be 0 or more")]
    TerminationGracePeriod(i64),
    #[error(
        "spec.ruleSelector is set but mode is Agent: agents do not evaluate rules; remove \
         ruleSelector or use mode Server"
    )]
    AgentWithRuleSelector,
    #[error("{field}: {source}")]
    Selector {
        field: &'static str,
        #[source]
        source: Box<SpecError>,
    },
    #[error("{field} is {value}: it must be 0 or more")]
    NegativeLimit { field: &'static str, value: i64 },
    #[error("spec.enforcedBodySizeLimit: {value:?} is not a Prometheus size: {source}")]
    BodySizeLimit {
        value: String,
        #[source]
        source: UnitError,
    },
    #[error(
        "spec.scrapeTimeout {timeout} is longer than the scrape interval {interval}: Prometheus \
         would refuse the configuration"
    )]
    ScrapeTimeout { timeout: String, interval: String },
    #[error("spec.enforcedNamespaceLabel: {0:?} is not a valid label name")]
    EnforcedNamespaceLabel(String),
    #[error(
        "spec.additionalArgs: --{0} is set by the controller; use its field instead (see the \
         ShardedPrometheus reference)"
    )]
    ReservedArgument(String),
    #[error(
        "spec.additionalArgs[{0}]: the name is empty or starts with '-': give it without dashes"
    )]
    ArgumentName(usize),
    #[error("spec.enableFeatures[{0}] is empty or contains a comma: one feature per entry")]
    FeatureName(usize),
    #[error("spec.podMetadata.labels: {0:?} is set by the controller and cannot be overridden")]
    ReservedPodLabel(String),
    #[error("spec.volumes: {0:?} is a volume name of the controller's: choose another name")]
    ReservedVolume(String),
    #[error("spec.{field}[{index}] has no name")]
    ContainerName { field: &'static str, index: usize },
    #[error(
        "spec.containers: the \"prometheus\" entry sets args or command, which the controller \
         owns: use additionalArgs and enableFeatures"
    )]
    PrometheusContainerArgs,
    #[error("spec.{field}: container {name:?} is listed twice")]
    DuplicateContainer { field: &'static str, name: String },
    #[error("spec.persistentVolumeClaimRetentionPolicy.{field} is {value:?}: Retain or Delete")]
    PvcRetention { field: &'static str, value: String },
    #[error("spec.alerting is set but mode is Agent: agents evaluate no rules and send no alerts")]
    AgentWithAlerting,
    #[error("spec.alerting.alertmanagers[{index}]: {message}")]
    Alertmanager { index: usize, message: String },
}

/// A ZoneAwareUpdate spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZau {
    pub statefulset: String,
    pub exponential_factor: f64,
    /// Resolved against spec.replicas by the controller (`rollout::resolve_max_unavailable`).
    pub max_unavailable: IntOrPercent,
    /// The alert gate, every default applied; its matchers are parsed by the controller.
    pub alert_gate: Option<ValidAlertGate>,
    /// The wait between a completed zone and the next zone's first removal; None when unset or
    /// zero.
    pub bake_time: Option<Duration>,
    /// `spec.paused`.
    pub paused: bool,
}

/// `spec.alertGate` ready to act on, every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidAlertGate {
    pub target: GateTarget,
    /// The path between the base and `api/v1/alerts`: starts and ends with '/'.
    pub path_prefix: String,
    /// Only for an https endpoint.
    pub tls: Option<GateTlsConfig>,
    pub bearer_token_secret: Option<SecretKeyRef>,
    /// The selector as written (the controller parses it with its PromQL parser).
    pub matchers: String,
    pub include_pending: bool,
    pub zone_scope: ZoneScope,
    pub zone_label: String,
    pub poll_interval: Duration,
    pub timeout: Duration,
}

/// Where the alerts are asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum GateTarget {
    /// `scheme://host[:port][/path]`, without a trailing '/'.
    Url(String),
    Service {
        /// None: the ZoneAwareUpdate's namespace.
        namespace: Option<String>,
        name: String,
        port: IntOrString,
        scheme: GateScheme,
    },
}

impl GateTarget {
    /// Whether the endpoint speaks TLS.
    pub fn is_https(&self) -> bool {
        match self {
            GateTarget::Url(url) => url.starts_with("https://"),
            GateTarget::Service { scheme, .. } => *scheme == GateScheme::Https,
        }
    }
}

/// `alertGate.pollInterval` when unset.
pub const DEFAULT_GATE_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// `alertGate.timeout` when unset (at most the poll interval).
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(5);
/// `alertGate.zoneLabel` when unset.
pub const DEFAULT_GATE_ZONE_LABEL: &str = "zone";
const GATE_POLL_MIN: Duration = Duration::from_secs(1);
const GATE_POLL_MAX: Duration = Duration::from_secs(300);

/// A ZoneDisruptionBudget spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZdb {
    pub selector: LabelSelector,
    /// 0 (or 0%) is valid and means frozen: no running pod it selects may be evicted, as with a
    /// PodDisruptionBudget of maxUnavailable 0.
    pub max_unavailable: IntOrPercent,
}

/// A ShardedPrometheus spec ready to act on, every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSprom {
    /// The shards and their zones: the one holder of the shard count (1 to
    /// [`contract::MAX_SHARDS`]) and of the sharding mode.
    pub layout: ShardLayout,
    /// Prometheus pods per shard, at least 1.
    pub replicas: u32,
    pub mode: PrometheusMode,
    pub image: String,
    /// The external label carrying a shard's zone; None in Classic sharding or when disabled.
    pub zone_external_label: Option<String>,
    /// The user's scrape_config objects, each with a unique non-empty `job_name`.
    pub scrape_configs: Vec<serde_json::Map<String, serde_json::Value>>,
    /// The user's external labels (none of the reserved names).
    pub external_labels: BTreeMap<String, String>,
    /// The user's remote_write objects, each with a `url`; at least one in Agent mode.
    pub remote_write: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Empty in Agent mode.
    pub rule_files: Vec<RuleFileRef>,
    /// `--storage.tsdb.retention.time`, a valid Prometheus duration, as written.
    pub retention_time: Option<String>,
    /// `--storage.tsdb.retention.size`, a valid Prometheus size, as written.
    pub retention_size: Option<String>,
    /// The scale-down policy in effect: always Delete in Agent mode.
    pub when_scaled: WhenScaled,
    /// How long a retained shard is kept: `retain.retentionPeriod`, else `retention.time`, else
    /// [`sprom::DEFAULT_RETAINED_SHARD_PERIOD`]; None (kept until the user deletes it) when only
    /// `retention.size` is set.
    pub retained_shard_period: Option<Duration>,
    pub storage: ShardStorage,
    pub resources: Option<ResourceRequirements>,
    /// The user's node selector; the controller adds the shard's zone.
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub service_account_name: String,
    pub termination_grace_period_seconds: i64,
    /// Monitor and rule selectors, and the knobs of the jobs made from monitors.
    pub monitoring: ValidMonitoring,
    /// Where the shards send alerts; None when no Alertmanager is given (or in Agent mode).
    pub alerting: Option<sprom::AlertingSpec>,
    /// Nothing is changed while set.
    pub paused: bool,
    /// The pod template options, checked (reserved flags, labels, volume and container names).
    pub pod: PodOptions,
}

/// The pod template options of a ShardedPrometheus, as given (each checked).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodOptions {
    pub security_context: Option<PodSecurityContext>,
    pub container_security_context: Option<SecurityContext>,
    pub affinity: Option<Affinity>,
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    pub priority_class_name: Option<String>,
    pub image_pull_secrets: Vec<LocalObjectReference>,
    pub pod_metadata: sprom::PodMetadata,
    /// `--name[=value]` flags, none of [`RESERVED_FLAGS`].
    pub additional_args: Vec<String>,
    pub enable_features: Vec<String>,
    pub containers: Vec<Container>,
    pub init_containers: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub volume_mounts: Vec<VolumeMount>,
    pub pvc_retention: Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
}

/// The name of the Prometheus container: a `spec.containers` entry of this name is merged into
/// it.
pub const PROMETHEUS_CONTAINER: &str = "prometheus";

/// Prometheus flags the controller sets itself; `additionalArgs` may not name them.
pub const RESERVED_FLAGS: &[&str] = &[
    "config.file",
    "config.auto-reload",
    "config.auto-reload-interval",
    "web.listen-address",
    "storage.tsdb.path",
    "storage.tsdb.retention.time",
    "storage.tsdb.retention.size",
    "storage.agent.path",
    "agent",
    "enable-feature",
];

/// Pod labels the controller sets; `podMetadata.labels` may not name them.
pub const RESERVED_POD_LABELS: &[&str] = &[
    "app.kubernetes.io/name",
    contract::INSTANCE_LABEL,
    contract::MANAGED_BY_LABEL,
    contract::SHARD_POD_LABEL,
];

/// Volume names the controller gives the pods' own volumes (and the prefix of the rule
/// ConfigMaps' volumes).
pub const RESERVED_VOLUMES: &[&str] = &["config", "data"];
pub const RULE_VOLUME_PREFIX: &str = "rules-";

impl ValidSprom {
    /// The number of active shards.
    pub fn shards(&self) -> u32 {
        self.layout.shards()
    }
}

/// The data volume of every Prometheus pod.
#[derive(Debug, Clone, PartialEq)]
pub enum ShardStorage {
    EmptyDir(EmptyDirVolumeSource),
    VolumeClaim(Box<PersistentVolumeClaimSpec>),
}

/// `IntOrString` as the budget helpers understand it.
pub fn int_or_percent(value: &IntOrString) -> Result<IntOrPercent, IntOrPercentError> {
    match value {
        IntOrString::Int(number) => IntOrPercent::int(i64::from(*number)),
        IntOrString::String(text) => IntOrPercent::parse(text),
    }
}

fn max_unavailable(value: Option<&IntOrString>) -> Result<IntOrPercent, SpecError> {
    match value {
        None => Ok(DEFAULT_MAX_UNAVAILABLE),
        Some(value) => int_or_percent(value).map_err(SpecError::MaxUnavailable),
    }
}

impl ZoneAwareUpdateSpec {
    pub fn validate(&self) -> Result<ValidZau, SpecError> {
        if self.statefulset.trim().is_empty() {
            return Err(SpecError::MissingStatefulSet);
        }
        let exponential_factor = parse_exponential_factor(&self.exponential_factor)
            .map_err(SpecError::ExponentialFactor)?;
        let max_unavailable = match max_unavailable(self.max_unavailable.as_ref())? {
            IntOrPercent::Int(0) | IntOrPercent::Percent(0) => {
                return Err(SpecError::MaxUnavailableZero);
            }
            max_unavailable => max_unavailable,
        };
        let alert_gate = self.alert_gate.as_ref().map(alert_gate).transpose()?;
        let bake_time = match self.bake_time.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(duration("spec.bakeTime", text)?).filter(|d| !d.is_zero()),
        };
        Ok(ValidZau {
            statefulset: self.statefulset.clone(),
            exponential_factor,
            max_unavailable,
            alert_gate,
            bake_time,
            paused: self.paused,
        })
    }
}

fn alert_gate(gate: &AlertGate) -> Result<ValidAlertGate, SpecError> {
    let target = match (&gate.url, &gate.service) {
        (Some(url), None) => GateTarget::Url(gate_url(url, gate.scheme)?),
        (None, Some(service)) => {
            if service.name.trim().is_empty() {
                return Err(SpecError::GateServiceName);
            }
            let port = match &service.port {
                IntOrString::Int(number) if (1..=65535).contains(number) => service.port.clone(),
                IntOrString::String(name) if !name.trim().is_empty() => {
                    IntOrString::String(name.trim().to_string())
                }
                IntOrString::Int(number) => {
                    return Err(SpecError::GateServicePort(number.to_string()));
                }
                IntOrString::String(name) => {
                    return Err(SpecError::GateServicePort(format!("{name:?}")));
                }
            };
            GateTarget::Service {
                namespace: service
                    .namespace
                    .as_deref()
                    .map(str::trim)
                    .filter(|ns| !ns.is_empty())
                    .map(str::to_string),
                name: service.name.trim().to_string(),
                port,
                scheme: gate.scheme.unwrap_or_default(),
            }
        }
        _ => return Err(SpecError::GateTarget),
    };
    let path_prefix = gate_path_prefix(gate.path_prefix.as_deref())?;
    let tls = match &gate.tls_config {
        Some(_) if !target.is_https() => return Err(SpecError::GateTlsOverHttp),
        Some(tls) => {
            if let Some(ca) = &tls.ca_secret {
                secret_ref("spec.alertGate.tlsConfig.caSecret", ca)?;
            }
            Some(tls.clone())
        }
        None => None,
    };
    if let Some(token) = &gate.bearer_token_secret {
        secret_ref("spec.alertGate.bearerTokenSecret", token)?;
    }
    let matchers = gate.matchers.trim();
    if matchers.is_empty()
        || matchers
            .chars()
            .all(|c| c == '{' || c == '}' || c.is_whitespace())
    {
        return Err(SpecError::GateMatchersEmpty);
    }
    let zone_label = non_empty_or(gate.zone_label.as_deref(), DEFAULT_GATE_ZONE_LABEL);
    if !is_label_name(&zone_label) {
        return Err(SpecError::GateZoneLabel(zone_label));
    }
    let poll_text = gate.poll_interval.as_deref().map(str::trim).unwrap_or("");
    let poll_interval = if poll_text.is_empty() {
        DEFAULT_GATE_POLL_INTERVAL
    } else {
        duration("spec.alertGate.pollInterval", poll_text)?
    };
    if !(GATE_POLL_MIN..=GATE_POLL_MAX).contains(&poll_interval) {
        return Err(SpecError::DurationRange {
            field: "spec.alertGate.pollInterval",
            value: poll_text.to_string(),
            min: "1s",
            max: "5m",
        });
    }
    let timeout_text = gate.timeout.as_deref().map(str::trim).unwrap_or("");
    let timeout = if timeout_text.is_empty() {
        DEFAULT_GATE_TIMEOUT.min(poll_interval)
    } else {
        duration("spec.alertGate.timeout", timeout_text)?
    };
    if timeout.is_zero() {
        return Err(SpecError::DurationRange {
            field: "spec.alertGate.timeout",
            value: timeout_text.to_string(),
            min: "1ms",
            max: "pollInterval",
        });
    }
    if timeout > poll_interval {
        return Err(SpecError::GateTimeout {
            timeout: timeout_text.to_string(),
            interval: if poll_text.is_empty() {
                "10s"
            } else {
                poll_text
            }
            .to_string(),
        });
    }
    Ok(ValidAlertGate {
        target,
        path_prefix,
        tls,
        bearer_token_secret: gate.bearer_token_secret.clone(),
        matchers: matchers.to_string(),
        include_pending: gate.include_pending,
        zone_scope: gate.zone_scope,
        zone_label,
        poll_interval,
        timeout,
    })
}

/// `url` checked: http:// or https://, a host, no query or fragment; without trailing '/'.
fn gate_url(url: &str, scheme: Option<GateScheme>) -> Result<String, SpecError> {
    let error = |why| SpecError::GateUrl {
        url: url.to_string(),
        why,
    };
    let trimmed = url.trim();
    let (url_scheme, rest) = if let Some(rest) = trimmed.strip_prefix("http://") {
        (GateScheme::Http, rest)
    } else if let Some(rest) = trimmed.strip_prefix("https://") {
        (GateScheme::Https, rest)
    } else {
        return Err(error("it must start with http:// or https://"));
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(error("it has no host"));
    }
    if rest.contains(['?', '#']) || rest.contains(char::is_whitespace) || host.contains('@') {
        return Err(error(
            "only scheme, host, port and path are allowed (no query, fragment, credentials or \
             spaces)",
        ));
    }
    if let Some(scheme) = scheme.filter(|s| *s != url_scheme) {
        return Err(SpecError::GateScheme {
            scheme: match scheme {
                GateScheme::Http => "http",
                GateScheme::Https => "https",
            },
            url: url.to_string(),
        });
    }
    Ok(trimmed.trim_end_matches('/').to_string())
}

/// The path prefix as `/…/` (default `/`).
fn gate_path_prefix(prefix: Option<&str>) -> Result<String, SpecError> {
    let prefix = prefix.map(str::trim).unwrap_or("/");
    if prefix.is_empty() {
        return Ok("/".to_string());
    }
    if !prefix.starts_with('/')
        || prefix.contains(['?', '#'])
        || prefix.contains(char::is_whitespace)
    {
        return Err(SpecError::GatePathPrefix(prefix.to_string()));
    }
    let inner = prefix.trim_matches('/');
    Ok(if inner.is_empty() {
        "/".to_string()
    } else {
        format!("/{inner}/")
    })
}

fn secret_ref(field: &'static str, secret: &SecretKeyRef) -> Result<(), SpecError> {
    if secret.name.trim().is_empty() || secret.key.trim().is_empty() {
        return Err(SpecError::GateSecretRef { field });
    }
    Ok(())
}

impl ZoneDisruptionBudgetSpec {
    pub fn validate(&self) -> Result<ValidZdb, SpecError> {
        let selector = self.selector.clone().unwrap_or_default();
        let labels = selector
            .match_labels
            .as_ref()
            .is_some_and(|l| !l.is_empty());
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if !labels && expressions.is_empty() {
            return Err(SpecError::EmptySelector);
        }
        check_selector(&selector)?;
        Ok(ValidZdb {
            selector,
            max_unavailable: max_unavailable(self.max_unavailable.as_ref())?,
        })
    }
}

/// The operators and values of a label selector's expressions, as the API server checks them
/// for a Deployment's selector (a custom resource's is not checked for us).
pub fn check_selector(selector: &LabelSelector) -> Result<(), SpecError> {
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    {
        for expression in expressions {
            let values = expression.values.as_deref().unwrap_or_default();
            let needs = match expression.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => Some("at least one value"),
                "Exists" | "DoesNotExist" if !values.is_empty() => Some("no values"),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
                other => {
                    return Err(SpecError::SelectorOperator {
                        key: expression.key.clone(),
                        operator: other.to_string(),
                    });
                }
            };
            if let Some(needs) = needs {
                return Err(SpecError::SelectorValues {
                    key: expression.key.clone(),
                    operator: expression.operator.clone(),
                    needs,
                });
            }
        }
        Ok(())
    }
}

impl ShardedPrometheusSpec {
    /// The spec ready to act on; in Topology sharding, targets' zones are read from nodes and
    /// pods labelled `zone_label` (the controller's `--zone-label`).
    pub fn validate(&self, zone_label: &str) -> Result<ValidSprom, SpecError> {
        let layout = self.layout(zone_label)?;
        if self.replicas < 1 {
            return Err(SpecError::Replicas(self.replicas));
        }
        let strategy = &self.sharding_strategy;
        let zone_external_label = match strategy.mode {
            ShardingMode::Classic => None,
            ShardingMode::Topology => {
                zone_external_label(strategy.topology.external_label_name.as_deref())?
            }
        };
        for name in self.external_labels.keys() {
            if !is_label_name(name) {
                return Err(SpecError::ExternalLabelName(name.clone()));
            }
            if [
                contract::SHARD_EXTERNAL_LABEL,
                contract::REPLICA_EXTERNAL_LABEL,
            ]
            .contains(&name.as_str())
                || zone_external_label.as_ref() == Some(name)
            {
                return Err(SpecError::ReservedExternalLabel(name.clone()));
            }
        }
        let scrape_configs = scrape_configs(&self.scrape_configs)?;
        let remote_write = remote_write(&self.remote_write)?;
        if self.mode == PrometheusMode::Agent {
            if remote_write.is_empty() {
                return Err(SpecError::AgentWithoutRemoteWrite);
            }
            if !self.rule_files.is_empty() {
                return Err(SpecError::AgentWithRuleFiles);
            }
        }
        rule_files(&self.rule_files)?;
        let retention = self.retention.clone().unwrap_or_default();
        let retention_duration = retention
            .time
            .as_deref()
            .map(|time| duration("spec.retention.time", time))
            .transpose()?;
        if let Some(size) = &retention.size {
            parse_prometheus_size(size).map_err(|source| SpecError::RetentionSize {
                value: size.clone(),
                source,
            })?;
        }
        let policy = self.shard_retention_policy.clone().unwrap_or_default();
        let retention_period = policy
            .retain
            .and_then(|retain| retain.retention_period)
            .map(|period| duration("spec.shardRetentionPolicy.retain.retentionPeriod", &period))
            .transpose()?;
        let retained_shard_period = match (retention_period, retention_duration) {
            (Some(period), _) | (None, Some(period)) => Some(period),
            (None, None) if retention.size.is_some() => None,
            (None, None) => Some(sprom::DEFAULT_RETAINED_SHARD_PERIOD),
        };
        let storage = storage(self.storage.clone().unwrap_or_default())?;
        let termination_grace_period_seconds =
            match (self.termination_grace_period_seconds, self.mode) {
                (Some(seconds), _) if seconds < 0 => {
                    return Err(SpecError::TerminationGracePeriod(seconds));
                }
                (Some(seconds), _) => seconds,
                (None, PrometheusMode::Agent) => sprom::DEFAULT_AGENT_GRACE_PERIOD_SECONDS,
                (None, PrometheusMode::Server) => sprom::DEFAULT_SERVER_GRACE_PERIOD_SECONDS,
            };
        Ok(ValidSprom {
            layout,
            replicas: self.replicas.unsigned_abs(),
            mode: self.mode,
            image: non_empty_or(self.image.as_deref(), sprom::DEFAULT_IMAGE),
            zone_external_label,
            scrape_configs,
            external_labels: self.external_labels.clone(),
            remote_write,
            rule_files: self.rule_files.clone(),
            retention_time: retention.time,
            retention_size: retention.size,
            when_scaled: match self.mode {
                PrometheusMode::Agent => WhenScaled::Delete,
                PrometheusMode::Server => policy.when_scaled,
            },
            retained_shard_period,
            storage,
            resources: self.resources.clone(),
            node_selector: self.node_selector.clone(),
            tolerations: self.tolerations.clone(),
            service_account_name: non_empty_or(
                self.service_account_name.as_deref(),
                sprom::DEFAULT_SERVICE_ACCOUNT,
            ),
            termination_grace_period_seconds,
            monitoring: self.monitoring()?,
            alerting: self.alerting()?,
            paused: self.paused,
            pod: self.pod_options()?,
        })
    }
}

impl ShardedPrometheusSpec {
    /// The alerting section, each Alertmanager entry checked: a Service (name and port) or
    /// static addresses, scheme http or https, API version V2, a valid timeout.
    fn alerting(&self) -> Result<Option<sprom::AlertingSpec>, SpecError> {
        let Some(alerting) = &self.alerting else {
            return Ok(None);
        };
        if alerting.alertmanagers.is_empty() {
            return Ok(None);
        }
        if self.mode == PrometheusMode::Agent {
            return Err(SpecError::AgentWithAlerting);
        }
        for (index, am) in alerting.alertmanagers.iter().enumerate() {
            let bad = |message: String| SpecError::Alertmanager { index, message };
            match (&am.name, am.static_addresses.is_empty()) {
                (Some(name), true) if !name.is_empty() => {
                    if am.port.is_none() {
                        return Err(bad("name is set without port: name the Service port".into()));
                    }
                }
                (None, false) => {
                    for address in &am.static_addresses {
                        if address.is_empty() || address.contains('/') {
                            return Err(bad(format!(
                                "staticAddresses: {address:?} is not host:port (scheme and \
                                 pathPrefix are fields of their own)"
                            )));
                        }
                    }
                }
                (Some(_), false) => {
                    return Err(bad(
                        "set either name (a Service) or staticAddresses, not both".into(),
                    ));
                }
                _ => {
                    return Err(bad(
                        "set name and port (a Service) or staticAddresses".into()
                    ));
                }
            }
            if let Some(scheme) = &am.scheme
                && !["http", "https", "HTTP", "HTTPS"].contains(&scheme.as_str())
            {
                return Err(bad(format!("scheme {scheme:?} is not http or https")));
            }
            if let Some(version) = &am.api_version
                && !version.eq_ignore_ascii_case("v2")
            {
                return Err(bad(format!(
                    "apiVersion {version:?}: Prometheus 3 speaks the Alertmanager API V2 only"
                )));
            }
            if let Some(timeout) = &am.timeout {
                parse_prometheus_duration(timeout)
                    .map_err(|error| bad(format!("timeout {timeout:?}: {error}")))?;
            }
        }
        Ok(Some(alerting.clone()))
    }

    /// The pod template options, checked.
    fn pod_options(&self) -> Result<PodOptions, SpecError> {
        let mut additional_args = Vec::with_capacity(self.additional_args.len());
        for (index, argument) in self.additional_args.iter().enumerate() {
            let name = argument.name.as_str();
            if name.is_empty() || name.starts_with('-') || name.contains('=') {
                return Err(SpecError::ArgumentName(index));
            }
            let flag = name.strip_prefix("no-").unwrap_or(name);
            if RESERVED_FLAGS.contains(&flag) {
                return Err(SpecError::ReservedArgument(name.to_string()));
            }
            additional_args.push(match &argument.value {
                Some(value) if !value.is_empty() => format!("--{name}={value}"),
                _ => format!("--{name}"),
            });
        }
        for (index, feature) in self.enable_features.iter().enumerate() {
            if feature.trim().is_empty() || feature.contains(',') {
                return Err(SpecError::FeatureName(index));
            }
        }
        let pod_metadata = self.pod_metadata.clone().unwrap_or_default();
        for label in pod_metadata.labels.keys() {
            if RESERVED_POD_LABELS.contains(&label.as_str()) {
                return Err(SpecError::ReservedPodLabel(label.clone()));
            }
        }
        for volume in &self.volumes {
            if RESERVED_VOLUMES.contains(&volume.name.as_str())
                || volume.name.starts_with(RULE_VOLUME_PREFIX)
            {
                return Err(SpecError::ReservedVolume(volume.name.clone()));
            }
        }
        for (field, containers) in [
            ("containers", &self.containers),
            ("initContainers", &self.init_containers),
        ] {
            let mut names = BTreeSet::new();
            for (index, container) in containers.iter().enumerate() {
                if container.name.is_empty() {
                    return Err(SpecError::ContainerName { field, index });
                }
                if field == "containers"
                    && container.name == PROMETHEUS_CONTAINER
                    && (container.args.is_some() || container.command.is_some())
                {
                    return Err(SpecError::PrometheusContainerArgs);
                }
                if !names.insert(container.name.as_str()) {
                    return Err(SpecError::DuplicateContainer {
                        field,
                        name: container.name.clone(),
                    });
                }
            }
        }
        if let Some(policy) = &self.persistent_volume_claim_retention_policy {
            for (field, value) in [
                ("whenDeleted", &policy.when_deleted),
                ("whenScaled", &policy.when_scaled),
            ] {
                if let Some(value) = value
                    && value != "Retain"
                    && value != "Delete"
                {
                    return Err(SpecError::PvcRetention {
                        field,
                        value: value.clone(),
                    });
                }
            }
        }
        Ok(PodOptions {
            security_context: self.security_context.clone(),
            container_security_context: self.container_security_context.clone(),
            affinity: self.affinity.clone(),
            topology_spread_constraints: self.topology_spread_constraints.clone(),
            priority_class_name: self
                .priority_class_name
                .clone()
                .filter(|name| !name.is_empty()),
            image_pull_secrets: self.image_pull_secrets.clone(),
            pod_metadata,
            additional_args,
            enable_features: self.enable_features.clone(),
            containers: self.containers.clone(),
            init_containers: self.init_containers.clone(),
            volumes: self.volumes.clone(),
            volume_mounts: self.volume_mounts.clone(),
            pvc_retention: self.persistent_volume_claim_retention_policy.clone(),
        })
    }

    /// The selectors of monitoring.coreos.com objects and the knobs of the jobs made from them.
    fn monitoring(&self) -> Result<ValidMonitoring, SpecError> {
        let selectors = |field: &'static str,
                         namespace_field: &'static str,
                         selector: &Option<LabelSelector>,
                         namespaces: &Option<LabelSelector>|
         -> Result<Selectors, SpecError> {
            for (field, selector) in [(field, selector), (namespace_field, namespaces)] {
                if let Some(selector) = selector {
                    check_selector(selector).map_err(|source| SpecError::Selector {
                        field,
                        source: Box::new(source),
                    })?;
                }
            }
            Ok(Selectors {
                selector: selector.clone(),
                namespaces: namespaces.clone(),
            })
        };
        if self.mode == PrometheusMode::Agent && self.rule_selector.is_some() {
            return Err(SpecError::AgentWithRuleSelector);
        }
        let limit = |field: &'static str, value: Option<i64>| -> Result<Option<u64>, SpecError> {
            value
                .map(|value| {
                    u64::try_from(value).map_err(|_| SpecError::NegativeLimit { field, value })
                })
                .transpose()
        };
        let interval = |field: &'static str, value: &Option<String>| match value {
            Some(value) => duration(field, value).map(|_| value.clone()),
            None => Ok(monitoring::DEFAULT_INTERVAL.to_string()),
        };
        if let Some(timeout) = &self.scrape_timeout {
            let timeout_duration = duration("spec.scrapeTimeout", timeout)?;
            let interval = match &self.scrape_interval {
                Some(interval) => duration("spec.scrapeInterval", interval)?,
                None => Duration::from_secs(30),
            };
            // Prometheus refuses the whole configuration otherwise.
            if timeout_duration > interval {
                return Err(SpecError::ScrapeTimeout {
                    timeout: timeout.clone(),
                    interval: self
                        .scrape_interval
                        .clone()
                        .unwrap_or_else(|| monitoring::DEFAULT_INTERVAL.to_string()),
                });
            }
        }
        if let Some(size) = &self.enforced_body_size_limit {
            parse_prometheus_size(size).map_err(|source| SpecError::BodySizeLimit {
                value: size.clone(),
                source,
            })?;
        }
        if let Some(label) = &self.enforced_namespace_label
            && !is_label_name(label)
        {
            return Err(SpecError::EnforcedNamespaceLabel(label.clone()));
        }
        Ok(ValidMonitoring {
            service_monitors: selectors(
                "spec.serviceMonitorSelector",
                "spec.serviceMonitorNamespaceSelector",
                &self.service_monitor_selector,
                &self.service_monitor_namespace_selector,
            )?,
            pod_monitors: selectors(
                "spec.podMonitorSelector",
                "spec.podMonitorNamespaceSelector",
                &self.pod_monitor_selector,
                &self.pod_monitor_namespace_selector,
            )?,
            scrape_configs: selectors(
                "spec.scrapeConfigSelector",
                "spec.scrapeConfigNamespaceSelector",
                &self.scrape_config_selector,
                &self.scrape_config_namespace_selector,
            )?,
            rules: selectors(
                "spec.ruleSelector",
                "spec.ruleNamespaceSelector",
                &self.rule_selector,
                &self.rule_namespace_selector,
            )?,
            service_discovery_role: self.service_discovery_role.unwrap_or_default(),
            scrape_interval: interval("spec.scrapeInterval", &self.scrape_interval)?,
            scrape_timeout: self.scrape_timeout.clone(),
            evaluation_interval: interval("spec.evaluationInterval", &self.evaluation_interval)?,
            ignore_namespace_selectors: self.ignore_namespace_selectors,
            override_honor_labels: self.override_honor_labels,
            override_honor_timestamps: self.override_honor_timestamps,
            enforced_namespace_label: self.enforced_namespace_label.clone(),
            enforced_sample_limit: limit("spec.enforcedSampleLimit", self.enforced_sample_limit)?,
            enforced_target_limit: limit("spec.enforcedTargetLimit", self.enforced_target_limit)?,
            enforced_label_limit: limit("spec.enforcedLabelLimit", self.enforced_label_limit)?,
            enforced_label_name_length_limit: limit(
                "spec.enforcedLabelNameLengthLimit",
                self.enforced_label_name_length_limit,
            )?,
            enforced_label_value_length_limit: limit(
                "spec.enforcedLabelValueLengthLimit",
                self.enforced_label_value_length_limit,
            )?,
            enforced_keep_dropped_targets: limit(
                "spec.enforcedKeepDroppedTargets",
                self.enforced_keep_dropped_targets,
            )?,
            enforced_body_size_limit: self.enforced_body_size_limit.clone(),
        })
    }

    /// The shard layout: the shard count is range-checked here, once, by the layout itself.
    fn layout(&self, zone_label: &str) -> Result<ShardLayout, SpecError> {
        let shards = u32::try_from(self.shards).map_err(|_| SpecError::Shards(self.shards))?;
        let strategy = &self.sharding_strategy;
        let layout = match strategy.mode {
            ShardingMode::Classic => ShardLayout::classic(shards),
            ShardingMode::Topology => {
                let zoneless = match strategy.zoneless_targets {
                    ZonelessTargets::Spread => sharding::ZonelessTargets::Spread,
                    ZonelessTargets::Drop => sharding::ZonelessTargets::Drop,
                };
                ShardLayout::topology(shards, zones(&strategy.topology.values)?, zoneless)
                    .map(|layout| layout.with_zone_label(zone_label))
            }
        };
        layout.map_err(|error| match error {
            ShardingError::ShardCount(_) => SpecError::Shards(self.shards),
            other => SpecError::Layout(other),
        })
    }
}

fn zones(values: &[String]) -> Result<Vec<String>, SpecError> {
    if values.is_empty() {
        return Err(SpecError::NoZones);
    }
    let mut seen = BTreeSet::new();
    for (index, zone) in values.iter().enumerate() {
        if zone.is_empty() {
            return Err(SpecError::EmptyZone(index));
        }
        if !is_label_value(zone) {
            return Err(SpecError::ZoneNotLabelValue(zone.clone()));
        }
        if !seen.insert(zone.as_str()) {
            return Err(SpecError::DuplicateZone(zone.clone()));
        }
    }
    Ok(values.to_vec())
}

/// None ⇒ the default name; "" ⇒ no zone label.
fn zone_external_label(name: Option<&str>) -> Result<Option<String>, SpecError> {
    match name.unwrap_or(contract::DEFAULT_ZONE_EXTERNAL_LABEL) {
        "" => Ok(None),
        name if !is_label_name(name) => Err(SpecError::ZoneLabelName(name.to_string())),
        name if name == contract::SHARD_EXTERNAL_LABEL
            || name == contract::REPLICA_EXTERNAL_LABEL =>
        {
            Err(SpecError::ZoneLabelNameReserved(name.to_string()))
        }
        name => Ok(Some(name.to_string())),
    }
}

fn scrape_configs(
    configs: &[serde_json::Value],
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, SpecError> {
    let mut job_names = BTreeSet::new();
    let mut objects = Vec::with_capacity(configs.len());
    for (index, config) in configs.iter().enumerate() {
        let object = config
            .as_object()
            .ok_or(SpecError::ScrapeConfigNotObject(index))?;
        let job_name = object
            .get("job_name")
            .and_then(serde_json::Value::as_str)
            .filter(|name| !name.is_empty())
            .ok_or(SpecError::ScrapeConfigJobName(index))?;
        if !job_names.insert(job_name) {
            return Err(SpecError::DuplicateJobName(job_name.to_string()));
        }
        objects.push(object.clone());
    }
    Ok(objects)
}

fn remote_write(
    entries: &[serde_json::Value],
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, SpecError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| match entry.as_object() {
            Some(object) if object.get("url").is_some_and(is_non_empty_string) => {
                Ok(object.clone())
            }
            _ => Err(SpecError::RemoteWriteUrl(index)),
        })
        .collect()
}

fn rule_files(rule_files: &[RuleFileRef]) -> Result<(), SpecError> {
    for (index, rule_file) in rule_files.iter().enumerate() {
        if rule_file.config_map.trim().is_empty() {
            return Err(SpecError::RuleFileConfigMap(index));
        }
        if rule_file.key.as_deref().is_some_and(str::is_empty) {
            return Err(SpecError::RuleFileKey {
                index,
                config_map: rule_file.config_map.clone(),
            });
        }
    }
    Ok(())
}

/// Nothing set ⇒ an emptyDir.
fn storage(storage: PrometheusStorage) -> Result<ShardStorage, SpecError> {
    match (storage.volume_claim_template, storage.empty_dir) {
        (Some(_), Some(_)) => Err(SpecError::StorageBoth),
        (Some(template), None) => Ok(ShardStorage::VolumeClaim(Box::new(template.spec))),
        (None, empty_dir) => Ok(ShardStorage::EmptyDir(empty_dir.unwrap_or_default())),
    }
}

fn duration(field: &'static str, value: &str) -> Result<Duration, SpecError> {
    parse_prometheus_duration(value).map_err(|source| SpecError::Duration {
        field,
        value: value.to_string(),
        source,
    })
}

fn is_non_empty_string(value: &serde_json::Value) -> bool {
    value.as_str().is_some_and(|text| !text.is_empty())
}

fn non_empty_or(value: Option<&str>, default: &str) -> String {
    value
        .filter(|value| !value.is_empty())
        .unwrap_or(default)
        .to_string()
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A non-empty Kubernetes label value: at most 63 characters of `[A-Za-z0-9_.-]`, starting and
/// ending with a letter or digit.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= 63
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
