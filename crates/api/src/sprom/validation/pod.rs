//! The pod template options of a ShardedPrometheus: flags, features, labels, volumes and
//! containers the controller does not own.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
use k8s_openapi::api::core::v1::{
    Affinity, Container, LocalObjectReference, PodSecurityContext, SecurityContext,
    TopologySpreadConstraint, Volume, VolumeMount,
};

use super::SpromError;
use crate::sprom::{self, ShardedPrometheusSpec, contract};

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

impl ShardedPrometheusSpec {
    /// The pod template options, checked.
    pub(super) fn pod_options(&self) -> Result<PodOptions, SpromError> {
        let additional_args = self.additional_args()?;
        for (index, feature) in self.enable_features.iter().enumerate() {
            if feature.trim().is_empty() || feature.contains(',') {
                return Err(SpromError::FeatureName(index));
            }
        }
        let pod_metadata = self.pod_metadata.clone().unwrap_or_default();
        for label in pod_metadata.labels.keys() {
            if RESERVED_POD_LABELS.contains(&label.as_str()) {
                return Err(SpromError::ReservedPodLabel(label.clone()));
            }
        }
        for volume in &self.volumes {
            if RESERVED_VOLUMES.contains(&volume.name.as_str())
                || volume.name.starts_with(RULE_VOLUME_PREFIX)
            {
                return Err(SpromError::ReservedVolume(volume.name.clone()));
            }
        }
        check_containers("containers", &self.containers)?;
        check_containers("initContainers", &self.init_containers)?;
        self.check_pvc_retention()?;
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

    /// `additionalArgs` as `--name[=value]` flags, none of [`RESERVED_FLAGS`].
    fn additional_args(&self) -> Result<Vec<String>, SpromError> {
        flags(&self.additional_args, RESERVED_FLAGS).map_err(|error| match error {
            FlagError::Name(index) => SpromError::ArgumentName(index),
            FlagError::Reserved(name) => SpromError::ReservedArgument(name),
        })
    }

    /// `persistentVolumeClaimRetentionPolicy`: Retain or Delete.
    fn check_pvc_retention(&self) -> Result<(), SpromError> {
        let Some(policy) = &self.persistent_volume_claim_retention_policy else {
            return Ok(());
        };
        for (field, value) in [
            ("whenDeleted", &policy.when_deleted),
            ("whenScaled", &policy.when_scaled),
        ] {
            if let Some(value) = value
                && value != "Retain"
                && value != "Delete"
            {
                return Err(SpromError::PvcRetention {
                    field,
                    value: value.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Why an `{name, value}` argument is not a flag that may be passed.
pub(super) enum FlagError {
    /// The index of a name that is empty, starts with a dash or holds '='.
    Name(usize),
    /// A name of the reserved flags (or its `no-` form).
    Reserved(String),
}

/// `arguments` as `--name[=value]` flags (`--name` without a value), none of `reserved`.
pub(super) fn flags(
    arguments: &[sprom::Argument],
    reserved: &[&str],
) -> Result<Vec<String>, FlagError> {
    let mut flags = Vec::with_capacity(arguments.len());
    for (index, argument) in arguments.iter().enumerate() {
        let name = argument.name.as_str();
        if name.is_empty() || name.starts_with('-') || name.contains('=') {
            return Err(FlagError::Name(index));
        }
        let flag = name.strip_prefix("no-").unwrap_or(name);
        if reserved.contains(&flag) {
            return Err(FlagError::Reserved(name.to_string()));
        }
        flags.push(match &argument.value {
            Some(value) if !value.is_empty() => format!("--{name}={value}"),
            _ => format!("--{name}"),
        });
    }
    Ok(flags)
}

/// The containers of `field`: named, each once; the "prometheus" entry leaves args and command
/// to the controller.
fn check_containers(field: &'static str, containers: &[Container]) -> Result<(), SpromError> {
    let mut names = BTreeSet::new();
    for (index, container) in containers.iter().enumerate() {
        if container.name.is_empty() {
            return Err(SpromError::ContainerName { field, index });
        }
        if field == "containers"
            && container.name == PROMETHEUS_CONTAINER
            && (container.args.is_some() || container.command.is_some())
        {
            return Err(SpromError::PrometheusContainerArgs);
        }
        if !names.insert(container.name.as_str()) {
            return Err(SpromError::DuplicateContainer {
                field,
                name: container.name.clone(),
            });
        }
    }
    Ok(())
}
