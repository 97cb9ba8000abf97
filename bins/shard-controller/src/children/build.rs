//! The build step (pure): from a valid ShardedPrometheus, the children every shard needs — a
//! Secret with its own `prometheus.yml` (it may hold credentials), a StatefulSet pinned to its
//! zone and a headless Service — all named `<name>-shard-<i>` and labelled so the controller
//! finds its own; and the ConfigMaps `<name>-rulefiles-<i>` of the rule files made from
//! PrometheusRules, shared by every shard.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource,
    ObjectFieldSelector, PersistentVolumeClaim, PodSecurityContext, PodSpec, PodTemplateSpec,
    Probe, SeccompProfile, Secret, SecretVolumeSource, SecurityContext, Service, ServicePort,
    ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use zone_api::sprom::PrometheusMode;
use zone_api::sprom::contract::{
    INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SHARD_POD_LABEL, ZONE_POD_LABEL, shard_name,
};
use zone_api::sprom::{PROMETHEUS_CONTAINER, PodOptions, ShardStorage, ValidSprom};

use crate::children::config::{self, CONFIG_DIR, CONFIG_KEY, ConfigError, POD_NAME_ENV, RULES_DIR};
use crate::children::{http_probe, thanos};
use crate::monitoring::Monitoring;

/// A ConfigMap holds at most 1 MiB; rule files are split over ConfigMaps of at most this many
/// bytes each, leaving room for the object's metadata.
pub const RULE_CONFIG_MAP_BUDGET: usize = 512 * 1024;

/// Annotation on every child: a digest of what the controller applied, so a reconcile that
/// would apply the same again (a readiness change of a pod, say) skips the write.
pub const APPLIED_HASH_ANNOTATION: &str = "zonecontrol.k8s.aws/applied-hash";
/// On every Prometheus pod: the digest of the configuration Secret its shard was last given
/// (written by the apply step, which nudges the pods whose digest differs).
pub const CONFIG_DIGEST_ANNOTATION: &str = "zonecontrol.k8s.aws/config-digest";
/// Annotation on a Topology shard's StatefulSet: the shard's zone (its pods carry it as the
/// label [`ZONE_POD_LABEL`], of the same name).
pub const ZONE_ANNOTATION: &str = ZONE_POD_LABEL;
/// How often Prometheus checks its configuration and rule files for a change.
pub const AUTO_RELOAD_INTERVAL: &str = "10s";
/// Prometheus listens here in every pod.
pub const WEB_PORT: i32 = 9090;
/// The name of Prometheus 2's reloader sidecar, and its port (its own metrics and health).
pub const RELOADER_CONTAINER: &str = "config-reloader";
const RELOADER_PORT: i32 = 8080;
/// The Prometheus image's `nobody` user, which owns the data directory.
const PROMETHEUS_UID: i64 = 65534;
pub(crate) const DATA_VOLUME: &str = "data";

pub(crate) const DATA_DIR: &str = "/prometheus";

/// What the build step needs besides the resource's spec.
#[derive(Debug, Clone)]
pub struct BuildInput<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub valid: &'a ValidSprom,
    /// What the selected monitoring objects add.
    pub monitoring: &'a Monitoring,
}

/// The children of one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardChildren {
    pub index: u32,
    /// The shard's `prometheus.yml`, in a Secret: monitors' credentials are inlined in it.
    pub config: Secret,
    pub stateful_set: StatefulSet,
    pub service: Service,
}

/// Everything the resource wants, and what building found out.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub shards: Vec<ShardChildren>,
    /// The rule files made from PrometheusRules, shared by every active shard.
    pub rule_config_maps: Vec<ConfigMap>,
    /// Scrape jobs (and roles) where the user turned node metadata off explicitly.
    pub node_metadata_disabled: Vec<String>,
    /// The headless Service of every shard's Thanos sidecar (`spec.thanos`).
    pub thanos_service: Option<Service>,
}

/// Builds the children of every active shard.
pub fn build(input: &BuildInput<'_>) -> Result<Built, ConfigError> {
    let mut built = Built {
        shards: Vec::with_capacity(input.valid.shards() as usize),
        rule_config_maps: rule_config_maps(input),
        node_metadata_disabled: Vec::new(),
        thanos_service: input.valid.thanos.as_ref().map(|_| {
            with_applied_hash(thanos::service(
                input.name,
                input.namespace,
                &instance_labels(input.name),
            ))
        }),
    };
    for index in 0..input.valid.shards() {
        let (shard, disabled) = shard_children(input, index)?;
        if index == 0 {
            built.node_metadata_disabled = disabled;
        }
        built.shards.push(shard);
    }
    Ok(built)
}

/// The children of active shard `index`.
pub fn shard_children(
    input: &BuildInput<'_>,
    index: u32,
) -> Result<(ShardChildren, Vec<String>), ConfigError> {
    let rule_files = rule_files(input);
    let (config, disabled) = config_secret(input, index, None, &rule_files)?;
    let name = shard_name(input.name, index);
    let labels = shard_labels(input.name, index);
    let mut meta = child_meta(input, index);
    let service = Service {
        metadata: meta.clone(),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels.clone()),
            ports: Some(vec![ServicePort {
                name: Some("web".into()),
                port: WEB_PORT,
                target_port: Some(IntOrString::String("web".into())),
                ..ServicePort::default()
            }]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    // The zone stays readable on the StatefulSet after a scale-down has removed the shard from
    // the layout: a retained shard's series keep their zone label.
    if let Some(zone) = input.valid.layout.zone(index) {
        meta.annotations = Some(BTreeMap::from([(
            ZONE_ANNOTATION.to_string(),
            zone.to_string(),
        )]));
    }
    let stateful_set = StatefulSet {
        metadata: meta,
        spec: Some(stateful_set_spec(input, index, &name, &labels, &rule_files)),
        ..StatefulSet::default()
    };
    Ok((
        ShardChildren {
            index,
            config,
            stateful_set: with_applied_hash(stateful_set),
            service: with_applied_hash(service),
        },
        disabled,
    ))
}

/// The configuration of retained shard `index`, whose zone was `zone`: one that scrapes,
/// evaluates and alerts nothing (remote write stays, so the WAL drains). Its StatefulSet and
/// Service are left as they were.
pub fn retained_config(
    input: &BuildInput<'_>,
    index: u32,
    zone: Option<&str>,
) -> Result<Secret, ConfigError> {
    config_secret(input, index, Some(zone), &[]).map(|(config, _)| config)
}

/// The name of the `index`th ConfigMap of rule files made from PrometheusRules.
pub fn rule_config_map_name(name: &str, index: usize) -> String {
    format!("{name}-rulefiles-{index}")
}

/// The name of the `index`th ConfigMap of the Thanos Ruler's rule files (global
/// PrometheusRules). The Ruler mounts them; `config/thanos` names `-0` to `-3`.
pub fn global_rule_config_map_name(name: &str, index: usize) -> String {
    format!("{name}-global-rulefiles-{index}")
}

/// The ConfigMaps of the rule files made from PrometheusRules: the shards', then the Thanos
/// Ruler's (with `spec.thanos`: at least one, empty without global rules, so the Ruler's
/// volume exists and removing the last global rule empties it); as few as fit
/// [`RULE_CONFIG_MAP_BUDGET`] each.
fn rule_config_maps(input: &BuildInput<'_>) -> Vec<ConfigMap> {
    let shards = rule_chunks(input)
        .into_iter()
        .enumerate()
        .map(|(index, chunk)| {
            rule_config_map(input, rule_config_map_name(input.name, index), &chunk)
        });
    let global = input
        .monitoring
        .global_rule_files
        .iter()
        .flat_map(|files| zone_monitoring::rules::chunks(files, RULE_CONFIG_MAP_BUDGET))
        .enumerate()
        .map(|(index, chunk)| {
            rule_config_map(
                input,
                global_rule_config_map_name(input.name, index),
                &chunk,
            )
        });
    shards.chain(global).collect()
}

/// One ConfigMap of rule files, a key each.
fn rule_config_map(
    input: &BuildInput<'_>,
    name: String,
    files: &[&zone_monitoring::rules::RuleFile],
) -> ConfigMap {
    let data = files
        .iter()
        .map(|file| (file.name.clone(), file.content.clone()))
        .collect();
    with_applied_hash(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(input.namespace.to_string()),
            labels: Some(instance_labels(input.name)),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// The rule files from PrometheusRules, packed into ConfigMap-sized chunks; none without rule
/// files (a ShardedPrometheus selecting no rule gets no rule ConfigMap).
fn rule_chunks<'a>(input: &BuildInput<'a>) -> Vec<Vec<&'a zone_monitoring::rules::RuleFile>> {
    let files = &input.monitoring.rule_files;
    if files.is_empty() {
        return Vec::new();
    }
    zone_monitoring::rules::chunks(files, RULE_CONFIG_MAP_BUDGET)
}

/// The rule files every active shard loads: the spec's ConfigMap keys, then the ConfigMaps of
/// rule files made from PrometheusRules (every key).
fn rule_files(input: &BuildInput<'_>) -> Vec<(String, Option<String>)> {
    let chunks = rule_chunks(input).len();
    input
        .valid
        .rule_files
        .iter()
        .map(|rule| (rule.config_map.clone(), rule.key.clone()))
        .chain((0..chunks).map(|index| (rule_config_map_name(input.name, index), None)))
        .collect()
}

/// The name, namespace and labels of shard `index`'s children (its Secret, Service,
/// StatefulSet, PodDisruptionBudget).
pub(crate) fn child_meta(input: &BuildInput<'_>, index: u32) -> ObjectMeta {
    ObjectMeta {
        name: Some(shard_name(input.name, index)),
        namespace: Some(input.namespace.to_string()),
        labels: Some(shard_labels(input.name, index)),
        ..ObjectMeta::default()
    }
}

/// Shard `index`'s configuration as rendered; `retained` (with the shard's former zone) one
/// that scrapes nothing.
pub(crate) fn shard_config<'a>(
    input: &BuildInput<'a>,
    index: u32,
    retained: Option<Option<&'a str>>,
    rule_files: &'a [(String, Option<String>)],
) -> config::ShardConfig<'a> {
    let valid = input.valid;
    config::ShardConfig {
        layout: &valid.layout,
        shard: index,
        scrape_configs: &valid.scrape_configs,
        monitor_jobs: &input.monitoring.jobs,
        global: config::Global::of(&valid.monitoring),
        external_labels: &valid.external_labels,
        zone_external_label: valid.zone_external_label.as_deref(),
        remote_write: &input.monitoring.remote_write,
        alerting: input.monitoring.alerting.as_ref(),
        rule_files,
        retained: retained.is_some(),
        retained_zone: retained.flatten(),
    }
}

/// Shard `index`'s configuration Secret; `retained` (with the shard's former zone) renders
/// one that scrapes nothing.
fn config_secret(
    input: &BuildInput<'_>,
    index: u32,
    retained: Option<Option<&str>>,
    rule_files: &[(String, Option<String>)],
) -> Result<(Secret, Vec<String>), ConfigError> {
    let rendered = config::render(&shard_config(input, index, retained, rule_files))?;
    let secret = Secret {
        metadata: child_meta(input, index),
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            ByteString(rendered.yaml.into_bytes()),
        )])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    Ok((with_applied_hash(secret), rendered.node_metadata_disabled))
}

/// `child` annotated with the digest of itself (as built, before the annotation).
fn with_applied_hash<K: kube::Resource + serde::Serialize>(mut child: K) -> K {
    use md5::{Digest, Md5};
    let digest = serde_json::to_vec(&child)
        .map(|bytes| Md5::digest(&bytes))
        .map(|digest| {
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .unwrap_or_default();
    child
        .meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(APPLIED_HASH_ANNOTATION.to_string(), digest);
    child
}

/// The digest a child carries, if any.
pub fn applied_hash<K: kube::Resource>(child: &K) -> Option<&str> {
    child
        .meta()
        .annotations
        .as_ref()?
        .get(APPLIED_HASH_ANNOTATION)
        .map(String::as_str)
}

/// The labels of shard `index`'s children and pods: what its StatefulSet selects.
pub(crate) fn shard_labels(name: &str, index: u32) -> BTreeMap<String, String> {
    let mut labels = instance_labels(name);
    labels.insert(SHARD_POD_LABEL.to_string(), index.to_string());
    labels
}

/// The labels of every child of the ShardedPrometheus `name`.
pub(crate) fn instance_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "prometheus".to_string(),
        ),
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ])
}

fn stateful_set_spec(
    input: &BuildInput<'_>,
    index: u32,
    name: &str,
    labels: &BTreeMap<String, String>,
    rule_files: &[(String, Option<String>)],
) -> StatefulSetSpec {
    let valid = input.valid;
    let selector_labels = BTreeMap::from([
        (INSTANCE_LABEL.to_string(), input.name.to_string()),
        (SHARD_POD_LABEL.to_string(), index.to_string()),
    ]);
    let pod = &valid.pod;
    let storage = Storage::of(name, rule_files, &valid.storage, &pod.volumes);
    let node_selector = valid.layout.node_selector(index, &valid.node_selector);
    StatefulSetSpec {
        replicas: Some(i32::try_from(valid.replicas).unwrap_or(i32::MAX)),
        service_name: Some(name.to_string()),
        // Replicas are independent copies: start and stop them all at once.
        pod_management_policy: Some("Parallel".into()),
        selector: LabelSelector {
            match_labels: Some(selector_labels.clone()),
            ..LabelSelector::default()
        },
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(
                    pod.pod_metadata
                        .labels
                        .clone()
                        .into_iter()
                        .chain(labels.clone())
                        .chain(
                            valid
                                .layout
                                .zone(index)
                                .map(|zone| (ZONE_POD_LABEL.to_string(), zone.to_string())),
                        )
                        .collect(),
                ),
                annotations: (!pod.pod_metadata.annotations.is_empty())
                    .then(|| pod.pod_metadata.annotations.clone()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: containers(valid, storage.mounts),
                init_containers: non_empty(pod.init_containers.clone()),
                volumes: Some(storage.volumes),
                node_selector: (!node_selector.is_empty()).then_some(node_selector),
                tolerations: (!valid.tolerations.is_empty()).then(|| valid.tolerations.clone()),
                service_account_name: Some(valid.service_account_name.clone()),
                termination_grace_period_seconds: Some(valid.termination_grace_period_seconds),
                security_context: Some(
                    pod.security_context
                        .clone()
                        .unwrap_or_else(restricted_pod_security_context),
                ),
                affinity: pod.affinity.clone(),
                priority_class_name: pod.priority_class_name.clone(),
                image_pull_secrets: non_empty(pod.image_pull_secrets.clone()),
                topology_spread_constraints: Some(spread(selector_labels, pod)),
                ..PodSpec::default()
            }),
        },
        volume_claim_templates: storage.claims,
        persistent_volume_claim_retention_policy: pod.pvc_retention.clone(),
        // A new pod counts as available once it has had a scrape interval to scrape its targets
        // (and the prober to judge its configuration): a rollout takes its twin down only then.
        min_ready_seconds: Some(min_ready_seconds(&valid.monitoring.scrape_interval)),
        // Zone by zone: the ZoneAwareUpdate `<name>-shards` replaces the pods
        // (children::rollout); else the StatefulSet controller does, every shard at once.
        update_strategy: valid.rollout.is_some().then(|| StatefulSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        }),
        ..StatefulSetSpec::default()
    }
}

/// The replicas of a shard (`selector_labels`) on different nodes of its zone, where there are
/// any; then the user's constraints.
fn spread(
    selector_labels: BTreeMap<String, String>,
    pod: &PodOptions,
) -> Vec<TopologySpreadConstraint> {
    std::iter::once(TopologySpreadConstraint {
        max_skew: 1,
        topology_key: "kubernetes.io/hostname".into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(selector_labels),
            ..LabelSelector::default()
        }),
        ..TopologySpreadConstraint::default()
    })
    .chain(pod.topology_spread_constraints.iter().cloned())
    .collect()
}

/// How long a shard pod is Ready before it counts as available: the global scrape interval (a
/// new Prometheus scrapes each target once within an interval of starting), at least a probe
/// round of the configuration prober, at most 5 minutes.
fn min_ready_seconds(scrape_interval: &str) -> i32 {
    let interval = zone_api::parse_prometheus_duration(scrape_interval).unwrap_or_default();
    let seconds = interval.as_secs() + u64::from(interval.subsec_nanos() > 0);
    let floor = crate::health::PROBE_INTERVAL.as_secs();
    i32::try_from(seconds.clamp(floor, 300)).unwrap_or(300)
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

/// Pod Security "restricted" at the pod level: non-root as the image's nobody user (which
/// owns the data directory), the runtime's default seccomp profile.
fn restricted_pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(PROMETHEUS_UID),
        run_as_group: Some(PROMETHEUS_UID),
        run_as_non_root: Some(true),
        fs_group: Some(PROMETHEUS_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// Pod Security "restricted" for the Prometheus container: no privilege escalation, every
/// capability dropped, a read-only root filesystem (Prometheus writes to its data volume only).
fn restricted_container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// The Prometheus container, with the user's container of the same name merged into it, then
/// the Thanos sidecar, then the user's other containers in their order.
fn containers(valid: &ValidSprom, mounts: Vec<VolumeMount>) -> Vec<Container> {
    let reloader = valid
        .version
        .is_v2()
        .then(|| config_reloader(valid, &mounts));
    let mut prometheus = prometheus_container(valid, mounts);
    let mut others: Vec<Container> = reloader.into_iter().collect();
    others.extend(valid.thanos.iter().map(|sidecar| {
        let data = VolumeMount {
            name: DATA_VOLUME.into(),
            mount_path: DATA_DIR.into(),
            ..VolumeMount::default()
        };
        thanos::sidecar(sidecar, WEB_PORT, data, container_security_context(valid))
    }));
    for container in &valid.pod.containers {
        if container.name == PROMETHEUS_CONTAINER {
            prometheus = merge_container(prometheus, container);
        } else {
            others.push(container.clone());
        }
    }
    std::iter::once(prometheus).chain(others).collect()
}

/// Prometheus 2's reloader (prometheus-operator's `prometheus-config-reloader`): it watches the
/// mounted configuration and rule files (`mounts`, read-only) and asks Prometheus to reload
/// (`POST /-/reload`) when they change, as Prometheus 3 does by itself.
fn config_reloader(valid: &ValidSprom, mounts: &[VolumeMount]) -> Container {
    let watched: Vec<VolumeMount> = mounts
        .iter()
        .filter(|mount| mount.read_only == Some(true))
        .cloned()
        .collect();
    let mut args = vec![
        format!("--listen-address=:{RELOADER_PORT}"),
        format!("--reload-url=http://127.0.0.1:{WEB_PORT}/-/reload"),
        format!("--watch-interval={AUTO_RELOAD_INTERVAL}"),
    ];
    args.extend(
        watched
            .iter()
            .map(|m| format!("--watched-dir={}", m.mount_path)),
    );
    Container {
        name: RELOADER_CONTAINER.into(),
        image: Some(valid.config_reloader_image.clone()),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("reloader-web".into()),
            container_port: RELOADER_PORT,
            ..ContainerPort::default()
        }]),
        volume_mounts: Some(watched),
        security_context: Some(container_security_context(valid)),
        ..Container::default()
    }
}

/// `ours` with the fields `theirs` sets replacing ours, except the lists that Kubernetes merges
/// by key (env and ports by name, volumeMounts by mountPath): there an entry of theirs replaces
/// ours of the same key and the others are appended.
fn merge_container(ours: Container, theirs: &Container) -> Container {
    let (Ok(Value::Object(mut merged)), Ok(Value::Object(overrides))) =
        (serde_json::to_value(&ours), serde_json::to_value(theirs))
    else {
        return ours;
    };
    for (field, value) in overrides {
        let key = match field.as_str() {
            "env" | "ports" => Some("name"),
            "volumeMounts" => Some("mountPath"),
            _ => None,
        };
        let merged_value = match (key, merged.remove(&field), value) {
            (Some(key), Some(Value::Array(mut items)), Value::Array(additions)) => {
                for addition in additions {
                    let same = items.iter().position(|item| {
                        item.get(key).is_some() && item.get(key) == addition.get(key)
                    });
                    match same {
                        Some(index) => items[index] = addition,
                        None => items.push(addition),
                    }
                }
                Value::Array(items)
            }
            (_, _, value) => value,
        };
        merged.insert(field, merged_value);
    }
    serde_json::from_value(Value::Object(merged)).unwrap_or(ours)
}

/// A shard pod's volumes: its configuration, the rule ConfigMaps and its data.
struct Storage {
    volumes: Vec<Volume>,
    /// The Prometheus container's mounts of them.
    mounts: Vec<VolumeMount>,
    /// The data volume's claim template, when the data is on a persistent volume.
    claims: Option<Vec<PersistentVolumeClaim>>,
}

impl Storage {
    fn of(
        name: &str,
        rule_files: &[(String, Option<String>)],
        data: &ShardStorage,
        extra: &[Volume],
    ) -> Storage {
        let mut storage = Storage {
            volumes: Vec::new(),
            mounts: Vec::new(),
            claims: None,
        };
        storage.secret("config", name, CONFIG_DIR);
        // One volume per ConfigMap, however many of its keys are listed.
        let config_maps: std::collections::BTreeSet<&String> = rule_files
            .iter()
            .map(|(config_map, _)| config_map)
            .collect();
        for (i, config_map) in config_maps.into_iter().enumerate() {
            let mount_path = format!("{RULES_DIR}/{config_map}");
            storage.config_map(&format!("rules-{i}"), config_map, &mount_path);
        }
        storage.mounts.push(VolumeMount {
            name: DATA_VOLUME.into(),
            mount_path: DATA_DIR.into(),
            ..VolumeMount::default()
        });
        match data {
            ShardStorage::EmptyDir(empty_dir) => storage.volumes.push(Volume {
                name: DATA_VOLUME.into(),
                empty_dir: Some(empty_dir.clone()),
                ..Volume::default()
            }),
            ShardStorage::VolumeClaim(spec) => {
                storage.claims = Some(vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some(DATA_VOLUME.into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some((**spec).clone()),
                    ..PersistentVolumeClaim::default()
                }]);
            }
        }
        storage.volumes.extend(extra.iter().cloned());
        storage
    }

    /// Secret `secret` as volume `volume`, mounted read-only at `mount_path`.
    fn secret(&mut self, volume: &str, secret: &str, mount_path: &str) {
        self.volumes.push(Volume {
            name: volume.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_string()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        self.mount(volume, mount_path);
    }

    /// ConfigMap `config_map` as volume `volume`, mounted read-only at `mount_path`.
    fn config_map(&mut self, volume: &str, config_map: &str, mount_path: &str) {
        self.volumes.push(Volume {
            name: volume.to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.to_string(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
        self.mount(volume, mount_path);
    }

    fn mount(&mut self, volume: &str, mount_path: &str) {
        self.mounts.push(VolumeMount {
            name: volume.to_string(),
            mount_path: mount_path.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
}

/// The flags of Prometheus as the version the image runs spells them: Prometheus 3 re-reads its
/// configuration with `--config.auto-reload` and runs as an agent with `--agent`; Prometheus 2
/// is asked to reload by the reloader sidecar (`--web.enable-lifecycle`) and turns agent mode and
/// external labels' expansion on as features, beside the user's.
fn prometheus_args(valid: &ValidSprom) -> Vec<String> {
    let v2 = valid.version.is_v2();
    let mut features: Vec<String> = Vec::new();
    let mut args = vec![format!("--config.file={CONFIG_DIR}/{CONFIG_KEY}")];
    if v2 {
        // Prometheus 2 re-reads nothing by itself: the reloader sidecar asks it to
        // (`POST /-/reload`); and it expands `${POD_NAME}` in external labels only as a feature.
        args.push("--web.enable-lifecycle".into());
        features.push("expand-external-labels".into());
    } else {
        // Prometheus 3 re-reads the mounted Secret itself: no sidecar, no restart. It checks the
        // files every 10 s (its default is 30 s): a changed configuration is live sooner.
        args.push("--config.auto-reload".into());
        args.push(format!(
            "--config.auto-reload-interval={AUTO_RELOAD_INTERVAL}"
        ));
    }
    args.push(format!("--web.listen-address=:{WEB_PORT}"));
    match valid.mode {
        PrometheusMode::Server => {
            // scrape_body_size_bytes per target: what the traffic ledger sums (traffic.rs).
            // The flag, not the `extra_scrape_metrics` setting: Prometheus 2 and 3.0 to 3.9 know
            // only the flag, which every 3.x still honours.
            features.push("extra-scrape-metrics".into());
            args.push(format!("--storage.tsdb.path={DATA_DIR}"));
            if let Some(time) = &valid.retention_time {
                args.push(format!("--storage.tsdb.retention.time={time}"));
            }
            if let Some(size) = &valid.retention_size {
                args.push(format!("--storage.tsdb.retention.size={size}"));
            }
        }
        PrometheusMode::Agent if v2 => {
            features.push("agent".into());
            args.push(format!("--storage.agent.path={DATA_DIR}"));
        }
        PrometheusMode::Agent => {
            args.push("--agent".to_string());
            args.push(format!("--storage.agent.path={DATA_DIR}"));
        }
    }
    for feature in &valid.pod.enable_features {
        if !features.contains(feature) {
            features.push(feature.clone());
        }
    }
    if !features.is_empty() {
        args.push(format!("--enable-feature={}", features.join(",")));
    }
    args
}

fn prometheus_container(valid: &ValidSprom, mounts: Vec<VolumeMount>) -> Container {
    let mut args = prometheus_args(valid);
    if let Some(sidecar) = &valid.thanos {
        args.extend(thanos::prometheus_args(sidecar));
    }
    args.extend(valid.pod.additional_args.iter().cloned());
    let mut mounts = mounts;
    mounts.extend(valid.pod.volume_mounts.iter().cloned());
    let probe = |path: &str| http_probe(path, "web");
    Container {
        name: PROMETHEUS_CONTAINER.into(),
        image: Some(valid.image.clone()),
        args: Some(args),
        env: Some(vec![EnvVar {
            name: POD_NAME_ENV.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("web".into()),
            container_port: WEB_PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(probe("/-/ready")),
        liveness_probe: Some(Probe {
            failure_threshold: Some(6),
            ..probe("/-/healthy")
        }),
        resources: valid.resources.clone(),
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context(valid)),
        ..Container::default()
    }
}

/// The security context of the containers the controller adds: the user's, else "restricted".
pub(crate) fn container_security_context(valid: &ValidSprom) -> SecurityContext {
    valid
        .pod
        .container_security_context
        .clone()
        .unwrap_or_else(restricted_container_security_context)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_new_pod_counts_available_after_a_scrape_interval() {
        let cases = [
            ("30s", 30),
            ("5s", 15),
            ("1m30s", 90),
            ("2h", 300),
            ("1500ms", 15),
        ];
        for (interval, seconds) in cases {
            assert_eq!(super::min_ready_seconds(interval), seconds, "{interval}");
        }
    }
}
