//! The plan step (pure): from a valid spec, what was observed and the clock, everything a
//! reconcile does — the children to write (only those the cache does not already show, between
//! full applies), the retention marks, what to prune, the status, its events and when to look
//! again. Nothing here touches the API.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, EphemeralContainer, Secret, Service};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use zone_api::sprom::contract::shard_name;
use zone_api::sprom::{RetainedShard, ShardedPrometheusStatus, WhenScaled, reason};
use zone_api::sprom::{ValidSprom, ValidThanos};
use zone_operator::{Invalid, PendingEvents};

use crate::children::build::{self, BuildInput, applied_hash};
use crate::children::config::CONFIG_KEY;
use crate::children::{retention, thanos, upload};
use crate::context::RESYNC;
use crate::health::verdict::{self, ShardConfig};
use crate::health::{AppliedConfig, ConfigObservation, Fingerprint};
use crate::observe::{ChildKind, Observed};
use crate::status::{Observation, ObservedShard, UploadingShard};
use crate::validate::invalid_scrape_config;

/// The resource a plan is for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub generation: i64,
    pub previous: &'a ShardedPrometheusStatus,
}

/// A child of a shard, as built (boxed: a StatefulSet is kilobytes).
#[derive(Debug, Clone, PartialEq)]
pub enum Child {
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    Service(Box<Service>),
    StatefulSet(Box<StatefulSet>),
}

impl Child {
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::ConfigMap(_) => ChildKind::ConfigMap,
            Child::Secret(_) => ChildKind::Secret,
            Child::Service(_) => ChildKind::Service,
            Child::StatefulSet(_) => ChildKind::StatefulSet,
        }
    }

    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Child::ConfigMap(child) => child.meta(),
            Child::Secret(child) => child.meta(),
            Child::Service(child) => child.meta(),
            Child::StatefulSet(child) => child.meta(),
        }
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// The digest it was built with.
    fn hash(&self) -> Option<&str> {
        match self {
            Child::ConfigMap(child) => applied_hash(&**child),
            Child::Secret(child) => applied_hash(&**child),
            Child::Service(child) => applied_hash(&**child),
            Child::StatefulSet(child) => applied_hash(&**child),
        }
    }
}

/// One write of the apply step, in the order they are made.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Server-side apply of a child, with a controller reference.
    Apply(Child),
    /// The retention marks of a shard's StatefulSet: written (`Some`) or removed (`None`).
    Mark {
        stateful_set: String,
        retained: Option<retention::Retained>,
    },
    /// An attempt at a removed shard's final upload in pod `pod` (at `ip`): the ephemeral
    /// `container` over the snapshot `path`, or over one taken first (None) once the pod runs
    /// the retired configuration.
    StartUpload {
        pod: String,
        ip: String,
        path: Option<String>,
        container: Box<EphemeralContainer>,
    },
}

/// Everything one reconcile does.
#[derive(Debug)]
pub struct Plan {
    pub writes: Vec<Write>,
    /// The names of every child wanted (active and retained shards).
    pub wanted: BTreeSet<String>,
    /// The names of the ConfigMaps wanted: the rule files'. A shard's own name is not one: a
    /// ConfigMap of that name is a configuration from before configurations were Secrets.
    pub wanted_config_maps: BTreeSet<String>,
    /// The kinds whose unwanted children are deleted, in that order.
    pub prune: Vec<ChildKind>,
    /// Every child is written: remember when, so the next reconciles may skip unchanged ones.
    pub full_apply: bool,
    pub status: ShardedPrometheusStatus,
    pub events: PendingEvents,
    pub requeue_after: Duration,
    /// The earliest deadline of a retained shard.
    pub next_deletion: Option<Timestamp>,
    /// The configuration of each active shard, for the prober to compare with what its pods
    /// run (recorded once applied).
    pub configs: BTreeMap<u32, AppliedConfig>,
    /// Removed shards kept until their final upload is done.
    pub uploading: usize,
}

/// Plans the reconcile of `target`, whose spec is `valid`, given what was `observed` at `now`.
pub fn plan(
    target: &Target<'_>,
    valid: &ValidSprom,
    observed: &Observed,
    now: Timestamp,
) -> Result<Plan, Invalid> {
    let input = BuildInput {
        name: target.name,
        namespace: target.namespace,
        valid,
        monitoring: &observed.monitoring,
    };
    let built = build::build(&input).map_err(|error| invalid_scrape_config(&error))?;
    let policy = retention::Policy {
        when_scaled: valid.when_scaled,
        period: valid.retained_shard_period,
    };
    let mut fate = retention::plan(valid.shards(), policy, &observed.existing_shards(), now);
    let uploads = final_uploads(target.name, valid, observed, &mut fate, now);
    let node_metadata_disabled = built.node_metadata_disabled.clone();
    let wanted_config_maps: BTreeSet<String> = built
        .rule_config_maps
        .iter()
        .filter_map(|config_map| config_map.metadata.name.clone())
        .collect();
    let configs = applied_configs(&built, observed);
    let config_loaded = config_verdicts(&configs, &observed.config);
    let (writes, wanted) = writes(&input, built, &fate, &uploads, observed)?;
    let prune = ChildKind::PRUNE_ORDER
        .into_iter()
        .filter(|kind| {
            let wanted = match kind {
                ChildKind::ConfigMap => &wanted_config_maps,
                _ => &wanted,
            };
            observed.full_apply || observed.has_unwanted(*kind, wanted)
        })
        .collect();

    let next_config_check = config_loaded.as_deref().and_then(verdict::next_change);
    let mut observation = observation(target, valid, observed, &fate, &node_metadata_disabled);
    observation.config = config_loaded;
    observation.uploads = valid
        .thanos
        .as_ref()
        .is_some_and(ValidThanos::final_upload)
        .then(|| uploads.draining.iter().map(upload_observation).collect());
    let (status, mut events) = crate::status::compute(target.previous, &observation);
    let new_generation = target.previous.observed_generation != target.generation;
    retention_events(&fate, policy, new_generation, &mut events);
    upload_events(&uploads, &mut events);
    let resync = resync(observed, next_config_check, uploads.next_look(now));
    Ok(Plan {
        writes,
        wanted,
        wanted_config_maps,
        prune,
        full_apply: observed.full_apply,
        status,
        events,
        requeue_after: fate.requeue_after.map_or(resync, |due| due.min(resync)),
        next_deletion: fate.next_deadline(),
        configs,
        uploading: uploads.draining.len(),
    })
}

/// How soon a reconcile looks again while a shard's StatefulSet has fewer pods than it should.
const SHORT_OF_PODS_LOOK: Duration = Duration::from_secs(15);

/// When to look again, deadlines of retained shards aside (a wake-up of their own: no polling
/// for them): after [`RESYNC`], or sooner when nothing watched would tell of a change.
fn resync(
    observed: &Observed,
    next_config_check: Option<Duration>,
    next_upload_look: Option<Duration>,
) -> Duration {
    // Nothing is watched that tells of an RBAC change (a fix, a consent given or revoked): look
    // again once the answer expires (a second after, so it has).
    let reviewed = !observed.forbidden.is_empty()
        || observed.monitoring.access_denied
        || observed.monitoring.consented;
    let mut resync = match reviewed {
        true => crate::access::CACHE_FOR + Duration::from_secs(1),
        false => RESYNC,
    };
    // A StatefulSet short of pods: what says why (an event) is not watched, and what fixes it
    // (a ServiceAccount made, a quota raised) neither; the pods' creation is.
    if observed.short_of_pods() {
        resync = resync.min(SHORT_OF_PODS_LOOK);
    }
    // A pod still on the previous configuration turns into ConfigNotLoaded when the grace ends,
    // with no event to tell: look again then (a second later, past the boundary).
    if let Some(left) = next_config_check {
        resync = resync.min(left + Duration::from_secs(1));
    }
    // A shard waiting for its final upload: an attempt's end reconciles (its pod is watched);
    // a retry is due at its time; a pod not yet on the retired configuration, soon.
    if let Some(next) = next_upload_look {
        resync = resync.min(next);
    }
    resync
}

/// The final uploads of the shards the retention plan deletes now.
#[derive(Debug, Default)]
struct Uploads {
    /// Not done yet: the shard stays (taken out of the plan's deletions).
    draining: Vec<upload::ShardUpload>,
    /// Done: the shards are deleted now.
    done: Vec<u32>,
}

impl Uploads {
    /// When to look again at the shards still uploading.
    fn next_look(&self, now: Timestamp) -> Option<Duration> {
        if self.draining.is_empty() {
            return None;
        }
        let retry = self
            .draining
            .iter()
            .filter_map(upload::ShardUpload::next_retry)
            .min()
            .map(|at| Duration::try_from(now.duration_until(at)).unwrap_or_default());
        Some(retry.map_or(UPLOAD_LOOK_AGAIN, |retry| {
            retry.min(UPLOAD_LOOK_AGAIN) + Duration::from_millis(1)
        }))
    }
}

/// While a removed shard waits for its final upload, it is looked at again at least this often
/// (its pods turning to the retired configuration are not watched).
const UPLOAD_LOOK_AGAIN: Duration = Duration::from_secs(10);

/// With `spec.thanos` uploading and the final upload not opted out: the shards `fate` deletes
/// now, pod by pod; those not done are kept (removed from `fate.deleted`).
fn final_uploads(
    name: &str,
    valid: &ValidSprom,
    observed: &Observed,
    fate: &mut retention::Plan,
    now: Timestamp,
) -> Uploads {
    let mut uploads = Uploads::default();
    if !valid.thanos.as_ref().is_some_and(ValidThanos::final_upload) {
        return uploads;
    }
    fate.deleted.retain(|(index, _)| {
        let replicas = observed
            .stateful_sets
            .get(index)
            .and_then(|sts| sts.replicas)
            .unwrap_or(valid.replicas);
        let pods = observed
            .uploads
            .get(index)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let shard = upload::ShardUpload::of(*index, &shard_name(name, *index), replicas, pods, now);
        if shard.done() {
            uploads.done.push(*index);
            return true;
        }
        uploads.draining.push(shard);
        false
    });
    uploads
}

/// What the status says of a shard still uploading.
fn upload_observation(shard: &upload::ShardUpload) -> UploadingShard {
    UploadingShard {
        index: shard.index,
        waiting_on: shard.waiting_on(),
        failing: shard.failing(),
    }
}

/// Events: each attempt started (after a failed one, with its error), and the shards deleted
/// once uploaded.
fn upload_events(uploads: &Uploads, events: &mut PendingEvents) {
    for shard in &uploads.draining {
        for (pod, step) in &shard.pods {
            match step {
                upload::Step::Start { number: 1, .. } => events.normal(
                    reason::SHARD_UPLOAD_STARTED,
                    "Upload",
                    format!(
                        "shard {}: pod {pod} snapshots its TSDB and uploads it before the shard is deleted",
                        shard.index
                    ),
                ),
                upload::Step::Start { number, .. } => events.warning(
                    reason::SHARD_UPLOAD_FAILED,
                    "Upload",
                    format!(
                        "shard {}: pod {pod}'s upload attempt {} failed; attempt {number} starts",
                        shard.index,
                        number - 1
                    ),
                ),
                upload::Step::GaveUp(why) => {
                    events.warning(reason::SHARD_UPLOAD_FAILED, "Upload", why.clone())
                }
                upload::Step::Wait { .. } | upload::Step::Uploaded => {}
            }
        }
    }
    if !uploads.done.is_empty() {
        events.normal(
            reason::SHARDS_UPLOADED,
            "Delete",
            format!(
                "shard(s) {} deleted: every pod's TSDB, its head included, is in the object store",
                list(&uploads.done)
            ),
        );
    }
}

/// The fingerprint of each active shard's configuration as built, and whether its Secret in
/// the cluster differs.
fn applied_configs(built: &build::Built, observed: &Observed) -> BTreeMap<u32, AppliedConfig> {
    built
        .shards
        .iter()
        .map(|shard| {
            let yaml = shard
                .config
                .data
                .as_ref()
                .and_then(|data| data.get(CONFIG_KEY))
                .and_then(|bytes| std::str::from_utf8(&bytes.0).ok());
            let name = shard.config.metadata.name.as_deref().unwrap_or_default();
            let config = AppliedConfig {
                fingerprint: yaml.and_then(|yaml| Fingerprint::of_yaml(yaml).ok()),
                secret_changed: !observed.unchanged(
                    ChildKind::Secret,
                    name,
                    applied_hash(&shard.config),
                ),
            };
            (shard.index, config)
        })
        .collect()
}

/// The verdict on every probed pod of every active shard; `None` until the prober has asked
/// them all once (the condition stays as it was).
fn config_verdicts(
    configs: &BTreeMap<u32, AppliedConfig>,
    observation: &ConfigObservation,
) -> Option<Vec<ShardConfig>> {
    if !observation.probed {
        return None;
    }
    let verdicts = configs
        .iter()
        .map(|(index, config)| {
            let recorded = observation
                .applied
                .get(index)
                .map(|(fingerprint, age)| (fingerprint, *age));
            let built = config.fingerprint.as_ref();
            let since = verdict::since_change(recorded, built, config.secret_changed);
            let pods = observation
                .pods
                .get(index)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            ShardConfig {
                index: *index,
                pods: pods
                    .iter()
                    .map(|probe| {
                        let verdict =
                            verdict::pod_verdict(&probe.answer, built, since, observation.grace);
                        (probe.pod.clone(), verdict)
                    })
                    .collect(),
            }
        })
        .collect();
    Some(verdicts)
}

/// The writes of the active shards' children, then the retention marks and the retained
/// shards' configurations; and the names of every child wanted.
fn writes(
    input: &BuildInput<'_>,
    built: build::Built,
    fate: &retention::Plan,
    uploads: &Uploads,
    observed: &Observed,
) -> Result<(Vec<Write>, BTreeSet<String>), Invalid> {
    let mut wanted = BTreeSet::new();
    let mut children = Vec::new();
    for config_map in built.rule_config_maps {
        children.push(Child::ConfigMap(Box::new(config_map)));
    }
    if let Some(service) = built.thanos_service {
        wanted.insert(thanos::service_name(input.name));
        children.push(Child::Service(Box::new(service)));
    }
    for shard in built.shards {
        wanted.insert(shard_name(input.name, shard.index));
        children.push(Child::Secret(Box::new(shard.config)));
        children.push(Child::Service(Box::new(shard.service)));
        children.push(Child::StatefulSet(Box::new(shard.stateful_set)));
    }
    let mut writes = changed(children, observed);
    writes.extend(fate.reused.iter().map(|index| Write::Mark {
        stateful_set: shard_name(input.name, *index),
        retained: None,
    }));
    for retained in &fate.retained {
        let zone = observed
            .stateful_sets
            .get(&retained.index)
            .and_then(|sts| sts.zone.as_deref());
        let config = build::retained_config(input, retained.index, zone)
            .map_err(|error| invalid_scrape_config(&error))?;
        let name = shard_name(input.name, retained.index);
        wanted.insert(name.clone());
        writes.extend(changed([Child::Secret(Box::new(config))], observed));
        if retained.mark {
            writes.push(Write::Mark {
                stateful_set: name,
                retained: Some(retained.clone()),
            });
        }
    }
    for shard in &uploads.draining {
        let zone = observed
            .stateful_sets
            .get(&shard.index)
            .and_then(|sts| sts.zone.as_deref());
        // Retired, as a retained shard is: it scrapes nothing more while it uploads.
        let config = build::retained_config(input, shard.index, zone)
            .map_err(|error| invalid_scrape_config(&error))?;
        wanted.insert(shard_name(input.name, shard.index));
        writes.extend(changed([Child::Secret(Box::new(config))], observed));
        for (pod, step) in &shard.pods {
            let upload::Step::Start {
                number,
                path,
                ip,
                image,
            } = step
            else {
                continue;
            };
            let image = image.as_deref();
            let Some(container) =
                build::upload_container(input, shard.index, zone, pod, *number, image)
            else {
                continue;
            };
            writes.push(Write::StartUpload {
                pod: pod.clone(),
                ip: ip.clone(),
                path: path.clone(),
                container: Box::new(container),
            });
        }
    }
    Ok((writes, wanted))
}

/// What the status is computed from: the active shards' StatefulSets, the zones with nodes,
/// what the ServiceAccount lacks, the retained shards.
fn observation<'a>(
    target: &Target<'a>,
    valid: &'a ValidSprom,
    observed: &'a Observed,
    fate: &retention::Plan,
    node_metadata_disabled: &'a [String],
) -> Observation<'a> {
    Observation {
        name: target.name,
        generation: target.generation,
        layout: &valid.layout,
        replicas: valid.replicas,
        shards: observed
            .stateful_sets
            .iter()
            .filter(|(index, _)| **index < valid.shards())
            .map(|(index, sts)| {
                let shard = ObservedShard {
                    ready_replicas: sts.ready_replicas,
                    pods_refused: observed.pods_refused.get(index).cloned(),
                };
                (*index, shard)
            })
            .collect(),
        zones_with_nodes: Some(observed.zones_with_nodes.clone()),
        node_metadata_disabled,
        forbidden: &observed.forbidden,
        monitoring: &observed.monitoring,
        config: None,
        uploads: None,
        retained: fate
            .retained
            .iter()
            .map(|r| RetainedShard {
                index: i32::try_from(r.index).unwrap_or(i32::MAX),
                deletion_deadline: r.deadline.map(retention::format),
            })
            .collect(),
    }
}

/// The applies of `children` that are needed: all of them on a full apply, else those whose
/// cached copy does not carry the hash they were built with (a pod turning Ready reconciles the
/// resource, and must not cost 3 writes per shard).
fn changed(children: impl IntoIterator<Item = Child>, observed: &Observed) -> Vec<Write> {
    children
        .into_iter()
        .filter(|child| {
            observed.full_apply || !observed.unchanged(child.kind(), child.name(), child.hash())
        })
        .map(Write::Apply)
        .collect()
}

/// The events the retention plan deserves: shards retained, reused, deleted when due, and, on
/// a new generation under Delete, the retained shards that keep their deadline.
fn retention_events(
    plan: &retention::Plan,
    policy: retention::Policy,
    new_generation: bool,
    events: &mut PendingEvents,
) {
    let mut newly: BTreeMap<Option<Timestamp>, Vec<u32>> = BTreeMap::new();
    for r in plan.retained.iter().filter(|r| r.mark) {
        newly.entry(r.deadline).or_default().push(r.index);
    }
    for (deadline, indices) in newly {
        let until = match deadline {
            Some(deadline) => format!("until {}", retention::format(deadline)),
            None => "until you delete them (the retention is by size only)".to_string(),
        };
        events.normal(
            reason::SHARDS_RETAINED,
            "ScaleDown",
            format!(
                "shard(s) {} retained {until}: they scrape, evaluate and alert nothing and keep serving their data",
                list(&indices),
            ),
        );
    }
    if !plan.reused.is_empty() {
        events.normal(
            reason::RETAINED_SHARDS_REUSED,
            "ScaleUp",
            format!(
                "retained shard(s) {} active again, with their data",
                list(&plan.reused)
            ),
        );
    }
    let due: Vec<u32> = plan
        .deleted
        .iter()
        .filter(|(_, why)| *why == retention::Deletion::Due)
        .map(|(index, _)| *index)
        .collect();
    if !due.is_empty() {
        events.normal(
            reason::RETAINED_SHARDS_DELETED,
            "Delete",
            format!(
                "retained shard(s) {} deleted: their deadline passed",
                list(&due)
            ),
        );
    }
    let kept: Vec<&retention::Retained> = plan.retained.iter().filter(|r| !r.mark).collect();
    if new_generation && policy.when_scaled == WhenScaled::Delete && !kept.is_empty() {
        let indices: Vec<u32> = kept.iter().map(|r| r.index).collect();
        let deleted = match kept.iter().filter_map(|r| r.deadline).max() {
            Some(deadline) => format!("at the latest at {}", retention::format(deadline)),
            None => "only when you delete them".to_string(),
        };
        events.normal(
            reason::SHARDS_RETAINED,
            "PolicyChange",
            format!(
                "whenScaled is Delete, but retained shard(s) {} keep their deadline: deleted {deleted}; delete their StatefulSets to remove them sooner",
                list(&indices),
            ),
        );
    }
}

fn list(indices: &[u32]) -> String {
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
