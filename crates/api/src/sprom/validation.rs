//! The checks of a ShardedPrometheus spec, and the spec ready to act on: the layout, labels,
//! scrape and remote-write objects, rule files, retention and storage here; the monitoring
//! selectors, the alerting section and the pod template options in modules of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PersistentVolumeClaimSpec, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use zone_topology::sharding::{ShardLayout, ShardingError};

use super::cel;
use crate::patterns::{LABEL_NAME_FORM, LABEL_VALUE_FORM};
use crate::shared::{
    DurationError, SelectorError, duration, is_label_name, is_label_value, non_empty_or,
};
use crate::sprom::monitoring::ValidMonitoring;
use crate::sprom::{
    self, PrometheusMode, PrometheusStorage, RuleFileRef, ShardRolloutStrategy,
    ShardedPrometheusSpec, ShardingMode, WhenScaled, contract,
};
use crate::units::{UnitError, parse_prometheus_size};
use crate::zau::ZoneAwareUpdateSpec;

mod alerting;
mod monitoring;
mod pod;
mod thanos;
pub mod version;

pub use alerting::{AlertmanagerTarget, ServicePort, ValidAlerting, ValidAlertmanager};
pub use pod::{
    PROMETHEUS_CONTAINER, PodOptions, RESERVED_FLAGS, RESERVED_POD_LABELS, RESERVED_VOLUMES,
    RULE_VOLUME_PREFIX,
};
pub use thanos::{
    BLOCK_DURATION_FLAGS, ObjectStorage, RESERVED_SIDECAR_FLAGS, THANOS_SIDECAR_CONTAINER,
    THANOS_UPLOAD_CONTAINER_PREFIX, ThanosError, ValidThanos,
};

/// Why a ShardedPrometheus spec cannot be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpromError {
    #[error("spec.version {0:?} is not a Prometheus version: write it as v2.55.1 or 3.16.0")]
    Version(String),
    #[error(
        "spec.version: Prometheus {0} is not supported: the shards' flags are written for Prometheus 2 and 3"
    )]
    Major(version::PrometheusVersion),
    #[error("spec.shards is {0}: it must be between 1 and {max}", max = contract::MAX_SHARDS)]
    Shards(i32),
    #[error("spec.shardingStrategy: {0}")]
    Layout(#[source] ShardingError),
    /// `spec.rollout`, as the ZoneAwareUpdate it becomes would be refused (its fields named
    /// as the ShardedPrometheus's).
    #[error("{0}")]
    Rollout(String),
    #[error("spec.replicas is {0}: every shard needs at least 1 replica")]
    Replicas(i32),
    #[error("{}", cel::ZONES_LISTED)]
    NoZones,
    #[error("spec.shardingStrategy.topology.values[{0}] is empty: name a zone")]
    EmptyZone(usize),
    #[error(
        "spec.shardingStrategy.topology.values: zone {0:?} is not a valid label value \
         (at most 63 {form})",
        form = LABEL_VALUE_FORM
    )]
    ZoneNotLabelValue(String),
    #[error("spec.shardingStrategy.topology.values lists zone {0:?} more than once")]
    DuplicateZone(String),
    #[error(
        "spec.shardingStrategy.topology.externalLabelName {0:?} is not {form}; \"\" adds no zone \
         label",
        form = LABEL_NAME_FORM
    )]
    ZoneLabelName(String),
    #[error(
        "spec.shardingStrategy.topology.externalLabelName {0:?} {why}",
        why = cel::zone_label_set_by_controller()
    )]
    ZoneLabelNameReserved(String),
    #[error("spec.externalLabels: {0:?} is not {form}", form = LABEL_NAME_FORM)]
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
        "spec.remoteWrite[{0}] is not an object with a url: {why}",
        why = cel::REMOTE_WRITE_ENTRY
    )]
    RemoteWriteUrl(usize),
    #[error("{}", cel::AGENT_REMOTE_WRITES)]
    AgentWithoutRemoteWrite,
    #[error("{}", cel::AGENT_HAS_NO_RULE_FILES)]
    AgentWithRuleFiles,
    #[error("spec.ruleFiles[{0}].configMap {why}", why = cel::RULE_FILE_CONFIG_MAP)]
    RuleFileConfigMap(usize),
    #[error(
        "spec.ruleFiles[{index}].key is empty (ConfigMap {config_map:?}): {why}",
        why = cel::RULE_FILE_KEY
    )]
    RuleFileKey { index: usize, config_map: String },
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Thanos(#[from] ThanosError),
    #[error("spec.retention.size: {value:?} is not a Prometheus size: {source}")]
    RetentionSize {
        value: String,
        #[source]
        source: UnitError,
    },
    #[error("{}", cel::STORAGE_ONE_KIND)]
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
        source: SelectorError,
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
    #[error("spec.alerting.alertmanagers[{index}]{field}: {message}")]
    Alertmanager {
        index: usize,
        /// The entry's field at fault (`.port`), empty for the entry as a whole.
        field: &'static str,
        message: String,
    },
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
    /// The Prometheus version the image runs (2 or 3), which chooses the flags.
    pub version: version::PrometheusVersion,
    /// The reloader sidecar's image, used with Prometheus 2.
    pub config_reloader_image: String,
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
    /// How long every shard of a zone is unready before its zoneless buckets fail over; None:
    /// they never do (`zoneFailover: Disabled`).
    pub zone_failover_after: Option<Duration>,
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
    pub alerting: Option<ValidAlerting>,
    /// Nothing is changed while set.
    pub paused: bool,
    /// The pod template options, checked (reserved flags, labels, volume and container names).
    pub pod: PodOptions,
    /// The Thanos sidecar of every shard pod; None without `spec.thanos`.
    pub thanos: Option<ValidThanos>,
    /// A ZoneDisruptionBudget over the shards' pods (`disruptionBudgets.zones`).
    pub zone_budget: bool,
    /// A PodDisruptionBudget per shard of two or more replicas (`disruptionBudgets.shards`).
    pub shard_budgets: bool,
    /// Strategy ZoneAware: the spec of the ZoneAwareUpdate rolling the shards, but its
    /// selector (the controller's to write) and `paused`; None: RollingUpdate.
    pub rollout: Option<ZoneAwareUpdateSpec>,
}

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

/// The retention settings, checked, and what they mean for a shard scaled away.
struct RetentionSettings {
    time: Option<String>,
    size: Option<String>,
    when_scaled: WhenScaled,
    retained_shard_period: Option<Duration>,
}

impl ShardedPrometheusSpec {
    /// The spec ready to act on; in Topology sharding, targets' zones are read from nodes and
    /// pods labelled `zone_label` (the controller's `--zone-label`).
    pub fn validate(&self, zone_label: &str) -> Result<ValidSprom, SpromError> {
        let layout = self.layout(zone_label)?;
        if self.replicas < 1 {
            return Err(SpromError::Replicas(self.replicas));
        }
        let zone_external_label = self.zone_external_label()?;
        self.check_external_labels(zone_external_label.as_deref())?;
        let scrape_configs = scrape_configs(&self.scrape_configs)?;
        let remote_write = remote_write(&self.remote_write)?;
        self.check_agent(&remote_write)?;
        rule_files(&self.rule_files)?;
        let retention = self.retention_settings()?;
        let storage = storage(self.storage.clone().unwrap_or_default())?;
        let termination_grace_period_seconds = self.termination_grace_period()?;
        let (image, version) = self.image_and_version()?;
        let budgets = self.disruption_budgets.as_ref();
        Ok(ValidSprom {
            layout,
            replicas: self.replicas.unsigned_abs(),
            mode: self.mode,
            image,
            version,
            config_reloader_image: non_empty_or(
                self.config_reloader_image.as_deref(),
                sprom::DEFAULT_CONFIG_RELOADER_IMAGE,
            ),
            zone_external_label,
            scrape_configs,
            external_labels: self.external_labels.clone(),
            remote_write,
            rule_files: self.rule_files.clone(),
            retention_time: retention.time,
            retention_size: retention.size,
            when_scaled: retention.when_scaled,
            retained_shard_period: retention.retained_shard_period,
            zone_failover_after: self.zone_failover_after()?,
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
            thanos: self.thanos()?,
            zone_budget: budgets.and_then(|b| b.zones).unwrap_or(true),
            shard_budgets: budgets.and_then(|b| b.shards).unwrap_or(true),
            rollout: self.rollout()?,
        })
    }

    /// `spec.rollout` as the ZoneAwareUpdate it becomes, checked as one (with a selector in
    /// place of the controller's).
    fn rollout(&self) -> Result<Option<ZoneAwareUpdateSpec>, SpromError> {
        let rollout = self.rollout.clone().unwrap_or_default();
        if rollout.strategy == ShardRolloutStrategy::RollingUpdate {
            return Ok(None);
        }
        let spec = ZoneAwareUpdateSpec {
            max_unavailable: rollout.max_unavailable,
            exponential_factor: rollout
                .exponential_factor
                .filter(|factor| !factor.trim().is_empty())
                .unwrap_or_else(|| zone_topology::rollout::DEFAULT_EXPONENTIAL_FACTOR.to_string()),
            alert_gate: rollout.alert_gate,
            bake_time: rollout.bake_time.filter(|bake| !bake.trim().is_empty()),
            ..ZoneAwareUpdateSpec::default()
        };
        let checked = ZoneAwareUpdateSpec {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    contract::INSTANCE_LABEL.to_string(),
                    "checked".to_string(),
                )])),
                ..LabelSelector::default()
            }),
            ..spec.clone()
        };
        match checked.validate() {
            Ok(_) => Ok(Some(spec)),
            Err(error) => Err(SpromError::Rollout(
                error.to_string().replace("spec.", "spec.rollout."),
            )),
        }
    }

    /// The image and the Prometheus version it runs: `version`, else the image's tag, else the
    /// default; without `image`, Prometheus's own image of that version.
    fn image_and_version(&self) -> Result<(String, version::PrometheusVersion), SpromError> {
        use version::{DEFAULT_VERSION, PrometheusVersion, SUPPORTED_MAJORS};
        let written = self.version.as_deref().filter(|v| !v.is_empty());
        let given = match written {
            Some(text) => Some(
                PrometheusVersion::parse(text)
                    .ok_or_else(|| SpromError::Version(text.to_string()))?,
            ),
            None => None,
        };
        let image = self.image.as_deref().filter(|image| !image.is_empty());
        let version = given
            .or_else(|| image.and_then(PrometheusVersion::of_image))
            .unwrap_or(DEFAULT_VERSION);
        if !SUPPORTED_MAJORS.contains(&version.major) {
            return Err(SpromError::Major(version));
        }
        let image = match (image, given) {
            (Some(image), _) => image.to_string(),
            (None, Some(version)) => format!("{}:v{version}", sprom::PROMETHEUS_REPOSITORY),
            (None, None) => sprom::DEFAULT_IMAGE.to_string(),
        };
        Ok((image, version))
    }

    /// The shard layout: the shard count is range-checked here, once, by the layout itself.
    fn layout(&self, zone_label: &str) -> Result<ShardLayout, SpromError> {
        let shards = u32::try_from(self.shards).map_err(|_| SpromError::Shards(self.shards))?;
        let strategy = &self.sharding_strategy;
        let layout = match strategy.mode {
            ShardingMode::Classic => ShardLayout::classic(shards),
            ShardingMode::Topology => {
                let zoneless = strategy.zoneless_targets;
                ShardLayout::topology(shards, zones(&strategy.topology.values)?, zoneless)
                    .map(|layout| layout.with_zone_label(zone_label))
            }
        };
        layout.map_err(|error| match error {
            ShardingError::ShardCount(_) => SpromError::Shards(self.shards),
            other => SpromError::Layout(other),
        })
    }

    /// The external label of a shard's zone: None in Classic sharding; in Topology, None ⇒ the
    /// default name, "" ⇒ no zone label.
    fn zone_external_label(&self) -> Result<Option<String>, SpromError> {
        let strategy = &self.sharding_strategy;
        if matches!(strategy.mode, ShardingMode::Classic) {
            return Ok(None);
        }
        let name = strategy.topology.external_label_name.as_deref();
        match name.unwrap_or(contract::DEFAULT_ZONE_EXTERNAL_LABEL) {
            "" => Ok(None),
            name if !is_label_name(name) => Err(SpromError::ZoneLabelName(name.to_string())),
            name if name == contract::SHARD_EXTERNAL_LABEL
                || name == contract::REPLICA_EXTERNAL_LABEL =>
            {
                Err(SpromError::ZoneLabelNameReserved(name.to_string()))
            }
            name => Ok(Some(name.to_string())),
        }
    }

    /// The user's external labels: label names, none of those the controller sets.
    fn check_external_labels(&self, zone_label: Option<&str>) -> Result<(), SpromError> {
        for name in self.external_labels.keys() {
            if !is_label_name(name) {
                return Err(SpromError::ExternalLabelName(name.clone()));
            }
            if [
                contract::SHARD_EXTERNAL_LABEL,
                contract::REPLICA_EXTERNAL_LABEL,
            ]
            .contains(&name.as_str())
                || zone_label == Some(name.as_str())
            {
                return Err(SpromError::ReservedExternalLabel(name.clone()));
            }
        }
        Ok(())
    }

    /// An agent forwards through remote write and evaluates no rule file.
    fn check_agent(
        &self,
        remote_write: &[serde_json::Map<String, serde_json::Value>],
    ) -> Result<(), SpromError> {
        if self.mode == PrometheusMode::Agent {
            if remote_write.is_empty() {
                return Err(SpromError::AgentWithoutRemoteWrite);
            }
            if !self.rule_files.is_empty() {
                return Err(SpromError::AgentWithRuleFiles);
            }
        }
        Ok(())
    }

    /// `shardingStrategy.zoneFailoverAfter`, or its default (checked even when the failover is
    /// disabled); None with `zoneFailover: Disabled`.
    fn zone_failover_after(&self) -> Result<Option<Duration>, SpromError> {
        let after = match &self.sharding_strategy.zone_failover_after {
            Some(after) => duration("spec.shardingStrategy.zoneFailoverAfter", after)?,
            None => sprom::DEFAULT_ZONE_FAILOVER_AFTER,
        };
        Ok(self
            .sharding_strategy
            .zone_failover
            .is_enabled()
            .then_some(after))
    }

    /// `retention` and `shardRetentionPolicy`, checked.
    fn retention_settings(&self) -> Result<RetentionSettings, SpromError> {
        let retention = self.retention.clone().unwrap_or_default();
        let retention_duration = retention
            .time
            .as_deref()
            .map(|time| duration("spec.retention.time", time))
            .transpose()?;
        if let Some(size) = &retention.size {
            parse_prometheus_size(size).map_err(|source| SpromError::RetentionSize {
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
        Ok(RetentionSettings {
            time: retention.time,
            size: retention.size,
            when_scaled: match self.mode {
                PrometheusMode::Agent => WhenScaled::Delete,
                PrometheusMode::Server => policy.when_scaled,
            },
            retained_shard_period,
        })
    }

    /// `terminationGracePeriodSeconds`, 0 or more; the mode's default when unset.
    fn termination_grace_period(&self) -> Result<i64, SpromError> {
        match (self.termination_grace_period_seconds, self.mode) {
            (Some(seconds), _) if seconds < 0 => Err(SpromError::TerminationGracePeriod(seconds)),
            (Some(seconds), _) => Ok(seconds),
            (None, PrometheusMode::Agent) => Ok(sprom::DEFAULT_AGENT_GRACE_PERIOD_SECONDS),
            (None, PrometheusMode::Server) => Ok(sprom::DEFAULT_SERVER_GRACE_PERIOD_SECONDS),
        }
    }
}

fn zones(values: &[String]) -> Result<Vec<String>, SpromError> {
    if values.is_empty() {
        return Err(SpromError::NoZones);
    }
    let mut seen = BTreeSet::new();
    for (index, zone) in values.iter().enumerate() {
        if zone.is_empty() {
            return Err(SpromError::EmptyZone(index));
        }
        if !is_label_value(zone) {
            return Err(SpromError::ZoneNotLabelValue(zone.clone()));
        }
        if !seen.insert(zone.as_str()) {
            return Err(SpromError::DuplicateZone(zone.clone()));
        }
    }
    Ok(values.to_vec())
}

fn scrape_configs(
    configs: &[serde_json::Value],
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, SpromError> {
    let mut job_names = BTreeSet::new();
    let mut objects = Vec::with_capacity(configs.len());
    for (index, config) in configs.iter().enumerate() {
        let object = config
            .as_object()
            .ok_or(SpromError::ScrapeConfigNotObject(index))?;
        let job_name = object
            .get("job_name")
            .and_then(serde_json::Value::as_str)
            .filter(|name| !name.is_empty())
            .ok_or(SpromError::ScrapeConfigJobName(index))?;
        if !job_names.insert(job_name) {
            return Err(SpromError::DuplicateJobName(job_name.to_string()));
        }
        objects.push(object.clone());
    }
    Ok(objects)
}

fn remote_write(
    entries: &[serde_json::Value],
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, SpromError> {
    let has_url = |object: &serde_json::Map<String, serde_json::Value>| {
        object
            .get("url")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|url| !url.is_empty())
    };
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| match entry.as_object() {
            Some(object) if has_url(object) => Ok(object.clone()),
            _ => Err(SpromError::RemoteWriteUrl(index)),
        })
        .collect()
}

fn rule_files(rule_files: &[RuleFileRef]) -> Result<(), SpromError> {
    for (index, rule_file) in rule_files.iter().enumerate() {
        if rule_file.config_map.trim().is_empty() {
            return Err(SpromError::RuleFileConfigMap(index));
        }
        if rule_file.key.as_deref().is_some_and(str::is_empty) {
            return Err(SpromError::RuleFileKey {
                index,
                config_map: rule_file.config_map.clone(),
            });
        }
    }
    Ok(())
}

/// Nothing set ⇒ an emptyDir.
fn storage(storage: PrometheusStorage) -> Result<ShardStorage, SpromError> {
    match (storage.volume_claim_template, storage.empty_dir) {
        (Some(_), Some(_)) => Err(SpromError::StorageBoth),
        (Some(template), None) => Ok(ShardStorage::VolumeClaim(Box::new(template.spec))),
        (None, empty_dir) => Ok(ShardStorage::EmptyDir(empty_dir.unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests;
