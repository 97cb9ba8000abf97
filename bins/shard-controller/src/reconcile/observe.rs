//! The observe step: everything a reconcile reads besides the resource itself — the caches of
//! the shards' children and of the nodes, and the access review of the Prometheus
//! ServiceAccount — in one place, before anything is decided.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use kube::api::ListParams;
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use zone_api::ValidSprom;
use zone_api::sprom::contract::{self, INSTANCE_LABEL};
use zone_api::{ShardedPrometheus, ZoneAwareUpdate};
use zone_operator::children;

use crate::children::build::{ZONE_ANNOTATION, applied_hash};
use crate::children::retention::{self, DELETION_DEADLINE_ANNOTATION, RETAINED_SINCE_ANNOTATION};
use crate::context::{Context, FullApplies, RESYNC};
use crate::final_upload::pods;
use crate::health::ConfigObservation;
use crate::monitoring::Monitoring;
use crate::monitoring::error::ObserveError;
use crate::monitoring::translate::MonitoringRead;

mod refusals;

/// The kinds of a shard's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChildKind {
    ConfigMap,
    Secret,
    Service,
    StatefulSet,
    /// Not cached: written and pruned on full applies only.
    PodDisruptionBudget,
    /// Not cached, as PodDisruptionBudget; its CRD may not be installed.
    ZoneDisruptionBudget,
    /// Read by name each reconcile (children::rollout); its CRD may not be installed.
    ZoneAwareUpdate,
}

impl ChildKind {
    /// The order children of shards no longer wanted are deleted in: the pods first.
    pub const PRUNE_ORDER: [ChildKind; 7] = [
        ChildKind::StatefulSet,
        ChildKind::Service,
        ChildKind::Secret,
        ChildKind::ConfigMap,
        ChildKind::PodDisruptionBudget,
        ChildKind::ZoneDisruptionBudget,
        ChildKind::ZoneAwareUpdate,
    ];

    /// Whether no cache shows this kind: its children are written and pruned on full applies
    /// only.
    pub fn uncached(self) -> bool {
        matches!(
            self,
            ChildKind::PodDisruptionBudget
                | ChildKind::ZoneDisruptionBudget
                | ChildKind::ZoneAwareUpdate
        )
    }
}

/// What the caches and the API server show of one ShardedPrometheus's world.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The StatefulSets the resource controls, by shard index.
    pub stateful_sets: BTreeMap<u32, ObservedStatefulSet>,
    /// The children labelled with the resource's name: kind and name → the hash they were
    /// applied with.
    pub children: BTreeMap<(ChildKind, String), Option<String>>,
    /// Zones with at least one node.
    pub zones_with_nodes: BTreeSet<String>,
    /// What the Prometheus ServiceAccount may not do (empty: all it needs).
    pub forbidden: Vec<String>,
    /// Every child is applied again: a new generation, or [`RESYNC`] passed since the last
    /// full apply.
    pub full_apply: bool,
    /// What the selected monitoring.coreos.com objects add to the shards (translated by the
    /// plan step from what was read).
    pub monitoring: Monitoring,
    /// The configurations applied to the shards, and what their Prometheus pods answered.
    pub config: ConfigObservation,
    /// The pods of every shard, by shard index, with what they show of a final upload.
    pub uploads: BTreeMap<u32, Vec<pods::PodUpload>>,
    /// The shards short of pods whose StatefulSet the API server refuses pods, by shard index:
    /// the refusal, as its latest `FailedCreate` event quotes it.
    pub pods_refused: BTreeMap<u32, String>,
    /// The ZoneAwareUpdate rolling the shards, as read now.
    pub rollout: ObservedRollout,
    /// `status.traffic`, as the traffic ledger measured it.
    pub traffic: Option<zone_api::sprom::ShardTrafficStatus>,
}

/// The shards' ZoneAwareUpdate (children::rollout), read by name each reconcile: no cache
/// watches the kind, whose CRD may not be installed, and its status is mirrored.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ObservedRollout {
    /// There is none.
    #[default]
    Absent,
    Found(Box<ZoneAwareUpdate>),
    /// The API server serves no ZoneAwareUpdate (its CRD is not installed): the shards roll
    /// as with strategy RollingUpdate.
    NoApi,
    /// No zau-controller runs (`--zone-aware-rollouts=false`): as without the API.
    Disabled,
}

impl ObservedRollout {
    pub fn found(&self) -> Option<&ZoneAwareUpdate> {
        match self {
            ObservedRollout::Found(zau) => Some(zau),
            _ => None,
        }
    }
}

/// A shard's StatefulSet, as the cache holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObservedStatefulSet {
    pub ready_replicas: i32,
    /// The pods it has (`status.replicas`).
    pub pods: i32,
    /// The pods it should have (`spec.replicas`; None: not said).
    pub replicas: Option<u32>,
    /// The zone it was built for ([`ZONE_ANNOTATION`]).
    pub zone: Option<String>,
    /// The raw retention marks.
    pub retained_since: Option<String>,
    pub deletion_deadline: Option<String>,
    /// Its spec still has `updateStrategy.rollingUpdate` (defaulted while `RollingUpdate`).
    pub rolling_update: bool,
    /// Its `updateStrategy.type` is `OnDelete`.
    pub on_delete: bool,
}

impl ObservedStatefulSet {
    fn short_of_pods(&self) -> bool {
        self.replicas
            .is_some_and(|wanted| i64::from(self.pods) < i64::from(wanted))
    }
}

impl Observed {
    /// The shards' StatefulSets with their retention marks, as the retention plan reads them.
    pub fn existing_shards(&self) -> Vec<retention::ExistingShard> {
        self.stateful_sets
            .iter()
            .map(|(index, sts)| retention::ExistingShard {
                index: *index,
                retained_since: sts.retained_since.clone(),
                deletion_deadline: sts.deletion_deadline.clone(),
            })
            .collect()
    }

    /// Whether a shard's StatefulSet has fewer pods than it should: the StatefulSet controller
    /// is creating them, or cannot (what tells why is an event, which nothing watches).
    pub fn short_of_pods(&self) -> bool {
        self.stateful_sets
            .values()
            .any(ObservedStatefulSet::short_of_pods)
    }

    /// Whether the cached `kind` child `name` carries `hash`.
    pub fn unchanged(&self, kind: ChildKind, name: &str, hash: Option<&str>) -> bool {
        self.children
            .get(&(kind, name.to_string()))
            .is_some_and(|cached| cached.as_deref() == hash)
    }

    /// Whether a child of `kind` exists that is not `wanted`.
    pub fn has_unwanted(&self, kind: ChildKind, wanted: &BTreeSet<String>) -> bool {
        self.children
            .keys()
            .any(|(k, name)| *k == kind && !wanted.contains(name))
    }
}

/// Reads what `sprom` (valid as `valid`) needs from the caches, the access review and the
/// monitoring objects it selects (with the Secrets they reference). Only reads: the monitoring
/// read is translated by the plan step, which fills [`Observed::monitoring`].
pub async fn observe(
    ctx: &Context,
    sprom: &ShardedPrometheus,
    valid: &ValidSprom,
) -> Result<(Observed, MonitoringRead), ObserveError> {
    let sources = crate::monitoring::observe::Sources::of(ctx);
    let monitoring = crate::monitoring::observe::observe(sources, sprom, valid).await?;
    let namespace = sprom.namespace().unwrap_or_default();
    let name = sprom.name_any();
    let mut observed = Observed {
        stateful_sets: stateful_sets(&ctx.stateful_sets, sprom),
        zones_with_nodes: ctx.zones.zones_present(),
        full_apply: resync_due(&ctx.memory.applied, sprom),
        config: ctx.config_health.observe(&namespace, &name),
        uploads: uploads(&ctx.pods, &namespace, &name),
        traffic: ctx.traffic.observe(&namespace, &name),
        ..Observed::default()
    };
    let children = &mut observed.children;
    children_of(
        &ctx.config_maps,
        ChildKind::ConfigMap,
        &namespace,
        &name,
        children,
    );
    children_of(&ctx.secrets, ChildKind::Secret, &namespace, &name, children);
    children_of(
        &ctx.services,
        ChildKind::Service,
        &namespace,
        &name,
        children,
    );
    children_of(
        &ctx.stateful_sets,
        ChildKind::StatefulSet,
        &namespace,
        &name,
        children,
    );
    observed.pods_refused =
        refusals::read(&ctx.client, &namespace, &name, &observed.stateful_sets).await;
    observed.rollout = rollout(ctx, valid, &namespace, &name).await?;
    let needed = crate::reconcile::access::needed(&valid.scrape_configs, &namespace);
    observed.forbidden = ctx
        .memory
        .access
        .missing(
            &ctx.client,
            &namespace,
            &valid.service_account_name,
            &needed,
        )
        .await;
    Ok((observed, monitoring))
}

/// The ZoneAwareUpdate `<name>-shards`, listed by name: a list answers 404 only where the kind
/// is not served, where a get answers 404 for a missing object too. None is read with strategy
/// RollingUpdate (a left-over one is pruned on the full apply the strategy's change makes, by a
/// list of its own), nor without a zau-controller.
async fn rollout(
    ctx: &Context,
    valid: &ValidSprom,
    namespace: &str,
    name: &str,
) -> Result<ObservedRollout, ObserveError> {
    if !ctx.zone_aware_rollouts {
        return Ok(ObservedRollout::Disabled);
    }
    if valid.rollout.is_none() {
        return Ok(ObservedRollout::Absent);
    }
    let api: Api<ZoneAwareUpdate> = Api::namespaced(ctx.client.clone(), namespace);
    let zau = crate::children::rollout::name(name);
    let params = ListParams::default().fields(&format!("metadata.name={zau}"));
    match api.list(&params).await {
        Ok(list) => Ok(list
            .items
            .into_iter()
            .next()
            .map_or(ObservedRollout::Absent, |found| {
                ObservedRollout::Found(Box::new(found))
            })),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(ObservedRollout::NoApi),
        Err(source) => Err(ObserveError::Read {
            kind: "ZoneAwareUpdate",
            namespace: namespace.to_string(),
            name: zau,
            source,
        }),
    }
}

/// Whether every child must be applied again, whatever the cache shows (`applied`: when each
/// resource was last applied in full, and at which generation).
fn resync_due(applied: &Mutex<FullApplies>, sprom: &ShardedPrometheus) -> bool {
    let key = (sprom.namespace().unwrap_or_default(), sprom.name_any());
    let generation = sprom.metadata.generation.unwrap_or(0);
    let applied = applied.lock().unwrap_or_else(PoisonError::into_inner);
    applied
        .get(&key)
        .is_none_or(|(seen, at)| *seen != generation || at.elapsed() >= RESYNC)
}

/// The StatefulSets controlled by `sprom`, by the shard index they are labelled with.
fn stateful_sets(
    store: &Store<k8s_openapi::api::apps::v1::StatefulSet>,
    sprom: &ShardedPrometheus,
) -> BTreeMap<u32, ObservedStatefulSet> {
    let namespace = sprom.namespace();
    let uid = sprom.uid().unwrap_or_default();
    store
        .state()
        .iter()
        .filter(|sts| {
            sts.namespace() == namespace && children::is_controlled_by(sts.as_ref(), &uid)
        })
        .filter_map(|sts| {
            let index = contract::shard_of(sts.labels())?;
            let annotation = |key: &str| sts.annotations().get(key).cloned();
            let strategy = sts
                .spec
                .as_ref()
                .and_then(|spec| spec.update_strategy.as_ref());
            let observed = ObservedStatefulSet {
                replicas: sts
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.replicas)
                    .and_then(|replicas| u32::try_from(replicas).ok()),
                ready_replicas: sts
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0),
                pods: sts.status.as_ref().map_or(0, |s| s.replicas),
                zone: annotation(ZONE_ANNOTATION),
                retained_since: annotation(RETAINED_SINCE_ANNOTATION),
                deletion_deadline: annotation(DELETION_DEADLINE_ANNOTATION),
                rolling_update: strategy.is_some_and(|s| s.rolling_update.is_some()),
                on_delete: strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete"),
            };
            Some((index, observed))
        })
        .collect()
}

/// The pods of `name`'s shards in `namespace`, by shard index, as the final upload reads them.
fn uploads(
    pods: &Store<k8s_openapi::api::core::v1::Pod>,
    namespace: &str,
    name: &str,
) -> BTreeMap<u32, Vec<pods::PodUpload>> {
    let mut by_shard: BTreeMap<u32, Vec<pods::PodUpload>> = BTreeMap::new();
    for pod in pods.state() {
        let labels = pod.labels();
        let ours = pod.metadata.namespace.as_deref() == Some(namespace)
            && labels.get(INSTANCE_LABEL).map(String::as_str) == Some(name);
        if let (true, Some(index)) = (ours, contract::shard_of(labels)) {
            by_shard.entry(index).or_default().push(pods::read(&pod));
        }
    }
    by_shard
}

/// Adds the children of `kind` in `namespace` labelled as `name`'s, with their applied hashes.
fn children_of<K>(
    store: &Store<K>,
    kind: ChildKind,
    namespace: &str,
    name: &str,
    into: &mut BTreeMap<(ChildKind, String), Option<String>>,
) where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    for child in store.state() {
        let meta = child.meta();
        let ours = meta.namespace.as_deref() == Some(namespace)
            && meta
                .labels
                .as_ref()
                .and_then(|l| l.get(INSTANCE_LABEL))
                .map(String::as_str)
                == Some(name);
        if let (true, Some(child_name)) = (ours, meta.name.as_ref()) {
            let hash = applied_hash(child.as_ref()).map(str::to_string);
            into.insert((kind, child_name.clone()), hash);
        }
    }
}
