//! One reconcile of a ShardedPrometheus, as a pipeline:
//!
//! 1. **validate** (pure): the spec, the shard layout and the user's scrape configs
//!    ([`validate`]); an invalid spec sets `Invalid` with the reason, publishes one event and
//!    changes no child;
//! 2. **build** (pure): every shard's ConfigMap, StatefulSet and Service ([`crate::build`]);
//! 3. **apply**: server-side apply of every child with a controller reference, then the prune of
//!    the children of shards no longer wanted;
//! 4. **status** (pure, then written): observed from the StatefulSets ([`crate::status`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_api::sprom::{
    self, RetainedShard, ShardedPrometheusStatus, WhenScaled, condition, reason,
};
use zone_api::validation::ValidSprom;
use zone_operator::children::{self, ChildError};
use zone_operator::controller::{Failure, ReconcileContext};
use zone_operator::metrics::ObjectSeries;
use zone_operator::status::{self, StatusError};
use zone_operator::{ControllerMetrics, EventPublisher, NodeZones, PendingEvents};
use zone_topology::sharding::{self, ShardLayout};

use crate::access::AccessCache;
use crate::build::{self, BuildInput, INSTANCE_LABEL, SHARD_LABEL, applied_hash};
use crate::config;
use crate::metrics::SpromMetrics;
use crate::retention;
use crate::status::{Observation, ObservedShard};

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);
/// Children are watched; this only bounds how long a drift nobody told us about can last.
pub const RESYNC: Duration = Duration::from_secs(600);

pub struct Context {
    pub client: Client,
    pub sproms: Store<ShardedPrometheus>,
    pub stateful_sets: Store<StatefulSet>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub services: Store<PartialObjectMeta<Service>>,
    /// Per resource, the generation and time of the last apply of every child: until the
    /// generation changes or [`RESYNC`] passes, children whose applied hash is unchanged are
    /// not written again.
    pub applied: Mutex<HashMap<(String, String), (i64, Instant)>>,
    pub zones: NodeZones,
    pub events: EventPublisher,
    pub metrics: ControllerMetrics,
    pub sprom_metrics: SpromMetrics,
    pub field_manager: String,
    /// The node label that carries zones (`--zone-label`).
    pub zone_key: String,
    pub access: AccessCache,
    /// The resources with metric series, to drop those of deleted ones.
    pub series: ObjectSeries,
}

impl Context {
    fn forget_deleted(&self) {
        let live = self
            .sproms
            .state()
            .iter()
            .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
            .collect();
        self.series.forget_deleted(&live, |namespace, name, _| {
            self.sprom_metrics.forget(namespace, name);
        });
    }
}

impl ReconcileContext for Context {
    fn failure_policy(&self) -> (&ControllerMetrics, Duration) {
        (&self.metrics, ERROR_RETRY)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ShardedPrometheus {0} has no namespace")]
    Incomplete(String),
    #[error(transparent)]
    Child(#[from] ChildError),
    #[error(transparent)]
    Status(#[from] StatusError),
}

impl Failure for ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Child(ChildError::Apply { .. }) => "ApplyChild",
            ReconcileError::Child(_) => "PruneChildren",
            ReconcileError::Status(_) => "WriteStatus",
        }
    }
}

/// Why a ShardedPrometheus cannot be acted on: the reason and message of its Invalid condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

/// A spec that can be built.
#[derive(Debug, Clone)]
pub struct Valid {
    pub spec: ValidSprom,
    pub layout: ShardLayout,
}

/// The validate step; targets' zones are read from nodes and pods labelled `zone_label`.
pub fn validate(sprom: &ShardedPrometheus, zone_label: &str) -> Result<Valid, Invalid> {
    let invalid_spec = |message: String| Invalid {
        reason: reason::INVALID_SPEC,
        message,
    };
    let spec = sprom
        .spec
        .validate()
        .map_err(|error| invalid_spec(error.to_string()))?;
    let layout = match spec.sharding_mode {
        sprom::ShardingMode::Classic => ShardLayout::classic(spec.shards),
        sprom::ShardingMode::Topology => {
            let zoneless = match spec.zoneless_targets {
                sprom::ZonelessTargets::Spread => sharding::ZonelessTargets::Spread,
                sprom::ZonelessTargets::Drop => sharding::ZonelessTargets::Drop,
            };
            ShardLayout::topology(spec.shards, spec.zones.clone(), zoneless)
                .map(|layout| layout.with_zone_label(zone_label))
        }
    }
    .map_err(|error| invalid_spec(format!("spec.shardingStrategy: {error}")))?;
    config::check_scrape_configs(&spec.scrape_configs).map_err(|error| Invalid {
        reason: reason::INVALID_SCRAPE_CONFIG,
        message: error.to_string(),
    })?;
    Ok(Valid { spec, layout })
}

/// Entry point for the kube Controller.
pub async fn reconcile(
    sprom: Arc<ShardedPrometheus>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.reconcile_timer();
    let Some(namespace) = sprom.namespace() else {
        return Err(ReconcileError::Incomplete(sprom.name_any()));
    };
    let name = sprom.name_any();
    ctx.forget_deleted();
    let api: Api<ShardedPrometheus> = Api::namespaced(ctx.client.clone(), &namespace);
    let previous = sprom.status.clone().unwrap_or_default();
    let generation = sprom.metadata.generation.unwrap_or(0);

    let valid = match validate(&sprom, &ctx.zone_key) {
        Ok(valid) => valid,
        Err(invalid) => {
            return refuse(&ctx, &api, &sprom, &previous, generation, &invalid).await;
        }
    };
    let input = BuildInput {
        name: &name,
        namespace: &namespace,
        valid: &valid.spec,
        layout: &valid.layout,
        zone_key: &ctx.zone_key,
    };
    let built = match build::build(&input) {
        Ok(built) => built,
        Err(error) => {
            let invalid = Invalid {
                reason: reason::INVALID_SCRAPE_CONFIG,
                message: error.to_string(),
            };
            return refuse(&ctx, &api, &sprom, &previous, generation, &invalid).await;
        }
    };

    let now = Timestamp::now();
    let (existing, zones_of) = existing_shards(&ctx.stateful_sets, &sprom);
    let policy = retention::Policy {
        when_scaled: valid.spec.when_scaled,
        period: valid.spec.retained_shard_period,
    };
    let plan = retention::plan(valid.spec.shards, policy, &existing, now);
    let retained = match plan
        .retained
        .iter()
        .map(|r| {
            build::retained_config_map(&input, r.index, zones_of.get(&r.index).map(String::as_str))
                .map(|config_map| (r.clone(), config_map))
        })
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(retained) => retained,
        Err(error) => {
            let invalid = Invalid {
                reason: reason::INVALID_SCRAPE_CONFIG,
                message: error.to_string(),
            };
            return refuse(&ctx, &api, &sprom, &previous, generation, &invalid).await;
        }
    };

    // A child the API server refuses (422: e.g. a storage change a StatefulSet cannot take) is a
    // spec problem: say so in the status, once, and wait for a change instead of retrying.
    let children = Children {
        built: &built,
        retained: &retained,
        reused: &plan.reused,
    };
    if let Err(rejected) = apply(&ctx, &sprom, &namespace, &name, &children).await {
        let Some(message) = rejected_child(&rejected) else {
            return Err(rejected);
        };
        let invalid = Invalid {
            reason: reason::CHILD_REJECTED,
            message,
        };
        return refuse(&ctx, &api, &sprom, &previous, generation, &invalid).await;
    }

    let needed = crate::access::needed(&valid.spec.scrape_configs, &namespace);
    let forbidden = ctx
        .access
        .missing(
            &ctx.client,
            &namespace,
            &valid.spec.service_account_name,
            &needed,
        )
        .await;
    let zones_with_nodes = ctx.zones.zones_present();
    let observation = Observation {
        name: &name,
        generation,
        layout: &valid.layout,
        replicas: valid.spec.replicas,
        shards: observed_shards(&ctx.stateful_sets, &sprom, valid.layout.shards()),
        zones_with_nodes: Some(zones_with_nodes),
        node_metadata_disabled: &built.node_metadata_disabled,
        forbidden: &forbidden,
        retained: plan
            .retained
            .iter()
            .map(|r| RetainedShard {
                index: i32::try_from(r.index).unwrap_or(i32::MAX),
                deletion_deadline: r.deadline.map(retention::format),
            })
            .collect(),
    };
    let (status, mut events) = crate::status::compute(&previous, &observation);
    retention_events(
        &plan,
        policy,
        previous.observed_generation != generation,
        &mut events,
    );
    ctx.sprom_metrics
        .observe(&namespace, &name, &status, plan.next_deadline());
    ctx.series.note(&namespace, &name, []);
    write_status(&ctx, &api, &sprom, &previous, status, events).await?;
    // Nothing is watched that tells of an RBAC fix: look again once the answer expires. A
    // retained shard's deadline is a wake-up of its own: no polling for it.
    let next = match forbidden.is_empty() {
        true => RESYNC,
        false => crate::access::CACHE_FOR,
    };
    Ok(Action::requeue(
        plan.requeue_after.map_or(next, |due| due.min(next)),
    ))
}

/// The events the retention plan deserves: shards retained, reused, deleted when due, and, on
/// a new generation under Delete, the retained shards that keep their deadline.
fn retention_events(
    plan: &retention::Plan,
    policy: retention::Policy,
    new_generation: bool,
    events: &mut PendingEvents,
) {
    let list = |indices: &[u32]| {
        indices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let until = |deadline: Option<k8s_openapi::jiff::Timestamp>| match deadline {
        Some(deadline) => format!("until {}", retention::format(deadline)),
        None => "until you delete them (the retention is by size only)".to_string(),
    };
    let mut newly: BTreeMap<Option<k8s_openapi::jiff::Timestamp>, Vec<u32>> = BTreeMap::new();
    for r in plan.retained.iter().filter(|r| r.mark) {
        newly.entry(r.deadline).or_default().push(r.index);
    }
    for (deadline, indices) in newly {
        events.normal(
            reason::SHARDS_RETAINED,
            "ScaleDown",
            format!(
                "shard(s) {} retained {}: they scrape, evaluate and alert nothing and keep serving their data",
                list(&indices),
                until(deadline)
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
        let deadline = kept.iter().filter_map(|r| r.deadline).max();
        events.normal(
            reason::SHARDS_RETAINED,
            "PolicyChange",
            format!(
                "whenScaled is Delete, but retained shard(s) {} keep their deadline: deleted {}; delete their StatefulSets to remove them sooner",
                list(&indices),
                match deadline {
                    Some(deadline) => format!("at the latest at {}", retention::format(deadline)),
                    None => "only when you delete them".to_string(),
                }
            ),
        );
    }
}

/// The shards' StatefulSets controlled by `sprom`, with their retention marks, and the zone
/// each was built for.
fn existing_shards(
    stateful_sets: &Store<StatefulSet>,
    sprom: &ShardedPrometheus,
) -> (Vec<retention::ExistingShard>, BTreeMap<u32, String>) {
    let namespace = sprom.namespace();
    let uid = sprom.uid().unwrap_or_default();
    let mut shards = Vec::new();
    let mut zones = BTreeMap::new();
    for sts in stateful_sets.state() {
        if sts.namespace() != namespace || !children::is_controlled_by(sts.as_ref(), &uid) {
            continue;
        }
        let Some(index) = sts.labels().get(SHARD_LABEL).and_then(|i| i.parse().ok()) else {
            continue;
        };
        let annotation = |key: &str| sts.annotations().get(key).cloned();
        if let Some(zone) = annotation(build::ZONE_ANNOTATION) {
            zones.insert(index, zone);
        }
        shards.push(retention::ExistingShard {
            index,
            retained_since: annotation(retention::RETAINED_SINCE_ANNOTATION),
            deletion_deadline: annotation(retention::DELETION_DEADLINE_ANNOTATION),
        });
    }
    (shards, zones)
}

/// What the API server said when it refused a child as invalid (HTTP 422), if it did.
fn rejected_child(error: &ReconcileError) -> Option<String> {
    match error {
        ReconcileError::Child(ChildError::Apply {
            kind,
            name,
            source: kube::Error::Api(status),
        }) if status.code == 422 => Some(format!("{kind} {name}: {}", status.message)),
        _ => None,
    }
}

/// The status of an invalid spec: everything observed before stays, `Invalid` says why.
fn invalid_status(
    previous: &ShardedPrometheusStatus,
    generation: i64,
    invalid: &Invalid,
) -> (ShardedPrometheusStatus, PendingEvents) {
    let mut status = ShardedPrometheusStatus {
        observed_generation: generation,
        ..previous.clone()
    };
    let mut events = PendingEvents::default();
    let new = status.record_invalid(
        invalid.reason,
        &invalid.message,
        condition::AVAILABLE,
        "the spec is invalid: no shard was changed",
    );
    if new {
        events.warning(invalid.reason, "Validate", invalid.message.clone());
    }
    (status, events)
}

/// Reports `invalid` (status and one event) and waits for the next change of the spec: nothing
/// is retried until the user fixes it.
async fn refuse(
    ctx: &Context,
    api: &Api<ShardedPrometheus>,
    sprom: &ShardedPrometheus,
    previous: &ShardedPrometheusStatus,
    generation: i64,
    invalid: &Invalid,
) -> Result<Action, ReconcileError> {
    let (status, events) = invalid_status(previous, generation, invalid);
    write_status(ctx, api, sprom, previous, status, events).await?;
    Ok(Action::await_change())
}

async fn write_status(
    ctx: &Context,
    api: &Api<ShardedPrometheus>,
    sprom: &ShardedPrometheus,
    previous: &ShardedPrometheusStatus,
    status: ShardedPrometheusStatus,
    events: PendingEvents,
) -> Result<(), ReconcileError> {
    if &status == previous {
        return Ok(());
    }
    let stored = status::apply_status(api, sprom, &ctx.field_manager, &status).await?;
    events.publish(&ctx.events, &stored.object_ref(&())).await;
    Ok(())
}

/// Applies every shard's children (the ConfigMap first, so a new pod starts with its
/// configuration) and prunes the children of shards no longer wanted. Between changes of the
/// spec, children whose applied hash is what the cache shows are not written again (a pod
/// turning Ready reconciles the resource, and must not cost 3 writes per shard); a full apply
/// still happens every [`RESYNC`], correcting hand edits.
/// Everything [`apply`] writes.
struct Children<'a> {
    built: &'a build::Built,
    /// Retained shards and their ConfigMaps.
    retained: &'a [(retention::Retained, ConfigMap)],
    /// Active shards whose retention marks are removed.
    reused: &'a [u32],
}

async fn apply(
    ctx: &Context,
    sprom: &ShardedPrometheus,
    namespace: &str,
    name: &str,
    children: &Children<'_>,
) -> Result<(), ReconcileError> {
    let built = children.built;
    let owner = children::controller_reference(sprom)?;
    let generation = sprom.metadata.generation.unwrap_or(0);
    let key = (namespace.to_string(), name.to_string());
    let full = {
        let applied = ctx.applied.lock().unwrap_or_else(PoisonError::into_inner);
        applied
            .get(&key)
            .is_none_or(|(seen, at)| *seen != generation || at.elapsed() >= RESYNC)
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let stateful_sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let field_manager = &ctx.field_manager;
    let mut written = 0usize;
    for shard in &built.shards {
        let name = build::shard_name(name, shard.index);
        if full
            || !unchanged(
                ctx.config_maps
                    .get(&ObjectRef::new(&name).within(namespace)),
                &shard.config_map,
            )
        {
            children::apply_child(
                &config_maps,
                &owner,
                shard.config_map.clone(),
                field_manager,
            )
            .await?;
            written += 1;
        }
        if full
            || !unchanged(
                ctx.services.get(&ObjectRef::new(&name).within(namespace)),
                &shard.service,
            )
        {
            children::apply_child(&services, &owner, shard.service.clone(), field_manager).await?;
            written += 1;
        }
        if full
            || !unchanged(
                ctx.stateful_sets
                    .get(&ObjectRef::new(&name).within(namespace)),
                &shard.stateful_set,
            )
        {
            children::apply_child(
                &stateful_sets,
                &owner,
                shard.stateful_set.clone(),
                field_manager,
            )
            .await?;
            written += 1;
        }
    }
    for index in children.reused {
        let shard = build::shard_name(name, *index);
        mark(&stateful_sets, &shard, None, field_manager).await?;
        written += 1;
    }
    for (retained, config_map) in children.retained {
        let shard = build::shard_name(name, retained.index);
        if full
            || !unchanged(
                ctx.config_maps
                    .get(&ObjectRef::new(&shard).within(namespace)),
                config_map,
            )
        {
            children::apply_child(&config_maps, &owner, config_map.clone(), field_manager).await?;
            written += 1;
        }
        if retained.mark {
            mark(&stateful_sets, &shard, Some(retained), field_manager).await?;
            written += 1;
        }
    }
    let wanted: BTreeSet<String> = built
        .shards
        .iter()
        .map(|shard| shard.index)
        .chain(children.retained.iter().map(|(r, _)| r.index))
        .map(|index| build::shard_name(name, index))
        .collect();
    let selector = build::children_selector(name);
    let uid = owner.uid.as_str();
    let mut pruned = Vec::new();
    if full || unwanted(&ctx.stateful_sets, namespace, name, &wanted) {
        pruned.extend(children::prune_children(&stateful_sets, &selector, uid, &wanted).await?);
    }
    if full || unwanted(&ctx.services, namespace, name, &wanted) {
        pruned.extend(children::prune_children(&services, &selector, uid, &wanted).await?);
    }
    if full || unwanted(&ctx.config_maps, namespace, name, &wanted) {
        pruned.extend(children::prune_children(&config_maps, &selector, uid, &wanted).await?);
    }
    if !pruned.is_empty() {
        tracing::info!(namespace, name, pruned = ?pruned, "removed the children of shards no longer wanted");
    }
    tracing::debug!(namespace, name, full, written, "children applied");
    if full {
        ctx.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (generation, Instant::now()));
    }
    Ok(())
}

/// Writes (`Some`) or removes (`None`) the retention marks on a shard's StatefulSet. A merge
/// patch of two annotations: the StatefulSet's spec, applied while the shard was active, stays
/// as it was (its pods are not restarted, its volumes stay where they are).
async fn mark(
    stateful_sets: &Api<StatefulSet>,
    name: &str,
    retained: Option<&retention::Retained>,
    field_manager: &str,
) -> Result<(), ReconcileError> {
    let (since, deadline) = match retained {
        Some(r) => (
            serde_json::Value::from(retention::format(r.since)),
            r.deadline
                .map(retention::format)
                .map_or(serde_json::Value::Null, serde_json::Value::from),
        ),
        None => (serde_json::Value::Null, serde_json::Value::Null),
    };
    let patch = serde_json::json!({"metadata": {"annotations": {
        retention::RETAINED_SINCE_ANNOTATION: since,
        retention::DELETION_DEADLINE_ANNOTATION: deadline,
    }}});
    stateful_sets
        .patch(
            name,
            &PatchParams {
                field_manager: Some(field_manager.to_string()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|source| ChildError::Apply {
            kind: "StatefulSet".to_string(),
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// Whether the cached child carries the hash of `desired`.
fn unchanged<C: kube::Resource, D: kube::Resource>(cached: Option<Arc<C>>, desired: &D) -> bool {
    cached.is_some_and(|cached| applied_hash(cached.as_ref()) == applied_hash(desired))
}

/// Whether the cache holds a child of `name` that is not wanted.
fn unwanted<K: kube::Resource + Clone + Debug>(
    store: &Store<K>,
    namespace: &str,
    name: &str,
    wanted: &BTreeSet<String>,
) -> bool
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store.state().iter().any(|child| {
        let meta = child.meta();
        meta.namespace.as_deref() == Some(namespace)
            && meta
                .labels
                .as_ref()
                .and_then(|l| l.get(INSTANCE_LABEL))
                .map(String::as_str)
                == Some(name)
            && !wanted.contains(meta.name.as_deref().unwrap_or_default())
    })
}

/// The active shards (index < `shards`) whose StatefulSet exists, controlled by `sprom`.
fn observed_shards(
    stateful_sets: &Store<StatefulSet>,
    sprom: &ShardedPrometheus,
    shards: u32,
) -> BTreeMap<u32, ObservedShard> {
    let namespace = sprom.namespace();
    let uid = sprom.uid().unwrap_or_default();
    stateful_sets
        .state()
        .iter()
        .filter(|sts| {
            sts.namespace() == namespace && children::is_controlled_by(sts.as_ref(), &uid)
        })
        .filter_map(|sts| {
            let index: u32 = sts.labels().get(SHARD_LABEL)?.parse().ok()?;
            let ready_replicas = sts
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            (index < shards).then_some((index, ObservedShard { ready_replicas }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn sprom_with(spec: serde_json::Value) -> ShardedPrometheus {
        serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "generation": 2},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn bad_specs_are_invalid_with_the_reason() {
        let cases = [
            (
                json!({"shards": 3, "shardingStrategy": {"mode": "Topology", "topology": {"values": []}}}),
                reason::INVALID_SPEC,
                "zone",
            ),
            (
                json!({"shards": 3, "shardingStrategy": {"topology": {"values": ["a", "a"]}}}),
                reason::INVALID_SPEC,
                "\"a\"",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": [{"regex": "(", "action": "keep"}]}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": relabel_configs[0]",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": {"action": "keep"}}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "must be a list",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": [{"action": "explode"}]}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "explode",
            ),
        ];
        for (spec, reason, needle) in cases {
            let invalid = validate(&sprom_with(spec.clone()), ZONE).unwrap_err();
            assert_eq!(invalid.reason, reason, "{spec}");
            assert!(
                invalid.message.contains(needle),
                "{needle:?} in {}",
                invalid.message
            );
        }
    }

    #[test]
    fn an_invalid_spec_warns_once_per_generation_and_keeps_what_was_observed() {
        let invalid = Invalid {
            reason: reason::INVALID_SPEC,
            message: "spec.shards is 0".into(),
        };
        let previous = ShardedPrometheusStatus {
            shards: 3,
            ..ShardedPrometheusStatus::default()
        };
        let (status, events) = invalid_status(&previous, 2, &invalid);
        assert_eq!(status.shards, 3, "observed shards stay as they were");
        assert_eq!(
            status.true_reason(condition::INVALID),
            Some(reason::INVALID_SPEC)
        );
        assert_eq!(events.events().len(), 1);
        let (again, events) = invalid_status(&status, 2, &invalid);
        assert_eq!(again, status);
        assert!(events.is_empty(), "no second event for the same complaint");
    }

    #[test]
    fn valid_specs_give_the_layout_of_their_mode() {
        let valid = validate(
            &sprom_with(json!({"shards": 5, "shardingStrategy": {"mode": "Classic"}})),
            ZONE,
        )
        .unwrap();
        assert!(!valid.layout.is_topology());
        let valid = validate(&sprom_with(json!({"shards": 5, "shardingStrategy": {"topology": {"values": ["a", "b"]}, "zonelessTargets": "Drop"}})), ZONE).unwrap();
        assert_eq!(
            valid.layout.per_zone(),
            vec![("a".into(), 3), ("b".into(), 2)]
        );
    }
}
