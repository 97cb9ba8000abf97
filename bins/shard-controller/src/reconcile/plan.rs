//! The plan step (pure): from a valid spec, what was observed and the clock, everything a
//! reconcile does — the children to write (only those the cache does not already show, between
//! full applies), the retention marks, what to prune, the status, its events and when to look
//! again. Nothing here touches the API.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use zone_api::sprom::contract::shard_name;
use zone_api::sprom::{RetainedShard, ShardedPrometheusStatus};
use zone_api::sprom::{ValidSprom, ValidThanos};
use zone_operator::{Invalid, PendingEvents};

use crate::children::build::{self, BuildInput};
use crate::children::{budgets, retention, thanos};
use crate::context::RESYNC;
use crate::final_upload::plan::Uploads;
use crate::health::AppliedConfig;
use crate::health::verdict;
use crate::reconcile::observe::{ChildKind, Observed};
use crate::reconcile::validate::invalid_scrape_config;
use crate::status::{Observation, ObservedShard};

/// The resource a plan is for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub generation: i64,
    pub previous: &'a ShardedPrometheusStatus,
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
    /// The names of the disruption budgets wanted (PodDisruptionBudgets and the
    /// ZoneDisruptionBudget: a PodDisruptionBudget takes its shard's name, wanted or not).
    pub wanted_budgets: BTreeSet<String>,
    /// The name of the rollout's ZoneAwareUpdate, when one is wanted.
    pub wanted_rollout: BTreeSet<String>,
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
    /// How long a zone's shards are all unready before its zoneless buckets fail over (None:
    /// never).
    pub zone_failover_after: Option<Duration>,
}

/// Plans the reconcile of `target`, whose spec is `valid`, given what was `observed` at `now`.
pub fn plan(
    target: &Target<'_>,
    valid: &ValidSprom,
    observed: &Observed,
    now: Timestamp,
) -> Result<Plan, Invalid> {
    let failover = failover::decide(valid, observed, &target.previous.unready_zones, now);
    // The shards are built with the failed-over zones' zoneless buckets on the other zones.
    let failed_over = rollout::without_api(failover.valid(valid), observed);
    let valid: &ValidSprom = &failed_over;
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
    let uploads = Uploads::plan(target.name, valid, observed, &mut fate, now);
    let node_metadata_disabled = built.node_metadata_disabled.clone();
    let wanted_config_maps: BTreeSet<String> = built
        .rule_config_maps
        .iter()
        .filter_map(|config_map| config_map.metadata.name.clone())
        .collect();
    let configs = health::applied_configs(&built, observed);
    let config_loaded = health::config_verdicts(&configs, &observed.config);
    let (mut writes, wanted) = writes(&input, built, &fate, &uploads, observed)?;
    let (budget_writes, wanted_budgets) = budgets(&input, &fate, observed.full_apply);
    writes.extend(budget_writes);
    let rollout = rollout::plan(&input, observed, config_loaded.as_deref());
    if let Some(zau) = rollout.write {
        // Before the first StatefulSet write: a StatefulSet turned OnDelete with no
        // ZoneAwareUpdate to roll it (one the API server refuses, e.g. under a CRD not yet
        // upgraded) would never have its pods replaced.
        let first_set = writes.iter().position(Write::is_stateful_set);
        writes.insert(first_set.unwrap_or(writes.len()), zau);
    }
    let prune = prune(observed, [&wanted, &wanted_config_maps]);

    let next_config_check = config_loaded.as_deref().and_then(verdict::next_change);
    let mut observation = observation(target, valid, observed, &fate, &node_metadata_disabled);
    observation.config = config_loaded;
    observation.uploads = valid
        .thanos
        .as_ref()
        .is_some_and(ValidThanos::final_upload)
        .then(|| uploads.observations());
    observation.unready_zones = failover.unready;
    let (mut status, mut events) = crate::status::compute(target.previous, &observation);
    status.rollout = rollout.status;
    status.traffic = observed.traffic.clone();
    transition_events(target, &status, (&fate, policy), &uploads, &mut events);
    let next_looks = [
        uploads.next_look(now),
        failover.next_look,
        rollout.look_again,
    ];
    let resync = resync(observed, next_config_check, next_looks);
    Ok(Plan {
        writes,
        wanted,
        wanted_config_maps,
        wanted_budgets,
        wanted_rollout: rollout.wanted.into_iter().collect(),
        prune,
        full_apply: observed.full_apply,
        status,
        events,
        requeue_after: fate.requeue_after.map_or(resync, |due| due.min(resync)),
        next_deletion: fate.next_deadline(),
        configs,
        uploading: uploads.draining.len(),
        zone_failover_after: valid.zone_failover_after,
    })
}

/// The events of what changed since the `target`'s previous status besides the conditions':
/// shards retained or deleted, final uploads, zones failed over and back, the rollout held.
fn transition_events(
    target: &Target<'_>,
    status: &ShardedPrometheusStatus,
    (fate, policy): (&retention::Plan, retention::Policy),
    uploads: &Uploads,
    events: &mut PendingEvents,
) {
    let previous = target.previous;
    let new_generation = previous.observed_generation != target.generation;
    events::retention(fate, policy, new_generation, events);
    uploads.events(events);
    failover::events(&previous.unready_zones, &status.unready_zones, events);
    rollout::events(previous.rollout.as_ref(), status.rollout.as_ref(), events);
}

/// How soon a reconcile looks again while a shard's StatefulSet has fewer pods than it should.
const SHORT_OF_PODS_LOOK: Duration = Duration::from_secs(15);

/// When to look again, deadlines of retained shards aside (a wake-up of their own: no polling
/// for them): after [`RESYNC`], or sooner when nothing watched would tell of a change.
fn resync(
    observed: &Observed,
    next_config_check: Option<Duration>,
    [next_upload_look, next_failover_look, next_rollout_look]: [Option<Duration>; 3],
) -> Duration {
    // Nothing is watched that tells of an RBAC change (a fix, a consent given or revoked): look
    // again once the answer expires (a second after, so it has).
    let reviewed = !observed.forbidden.is_empty()
        || observed.monitoring.access_denied
        || observed.monitoring.consented;
    let mut resync = match reviewed {
        true => crate::reconcile::access::CACHE_FOR + Duration::from_secs(1),
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
    // A zone's failover grace ends with no event to tell: look again then (a second later).
    if let Some(left) = next_failover_look {
        resync = resync.min(left + Duration::from_secs(1));
    }
    // The shards roll: their ZoneAwareUpdate's progress is mirrored (nothing watches it).
    if let Some(next) = next_rollout_look {
        resync = resync.min(next);
    }
    resync
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
    let (upload_writes, uploading) = uploads.writes(input, observed)?;
    writes.extend(upload_writes);
    wanted.extend(uploading);
    Ok((writes, wanted))
}

/// The kinds whose unwanted children are deleted: every kind on a full apply, else those the
/// cache shows one of (`wanted` are the names of shards' children and of the rule ConfigMaps).
fn prune(
    observed: &Observed,
    [wanted, wanted_config_maps]: [&BTreeSet<String>; 2],
) -> Vec<ChildKind> {
    ChildKind::PRUNE_ORDER
        .into_iter()
        .filter(|kind| {
            let wanted = match kind {
                ChildKind::ConfigMap => wanted_config_maps,
                _ => wanted,
            };
            observed.full_apply || (!kind.uncached() && observed.has_unwanted(*kind, wanted))
        })
        .collect()
}

/// The disruption budgets of the active and retained shards: written on a full apply (no cache
/// shows them), and the names of those wanted.
fn budgets(
    input: &BuildInput<'_>,
    fate: &retention::Plan,
    full_apply: bool,
) -> (Vec<Write>, BTreeSet<String>) {
    let retained = fate.retained.iter().map(|retained| retained.index);
    let indices = (0..input.valid.shards()).chain(retained);
    let built = budgets::build(input, indices);
    let children: Vec<Child> = built
        .zone
        .map(|zdb| Child::ZoneDisruptionBudget(Box::new(zdb)))
        .into_iter()
        .chain(
            built
                .shards
                .into_iter()
                .map(|pdb| Child::PodDisruptionBudget(Box::new(pdb))),
        )
        .collect();
    let wanted = children
        .iter()
        .map(|child| child.name().to_string())
        .collect();
    let writes = match full_apply {
        true => children.into_iter().map(Write::Apply).collect(),
        false => Vec::new(),
    };
    (writes, wanted)
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
        unready_zones: Vec::new(),
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

pub(crate) mod events;
pub(crate) mod failover;
mod health;
mod rollout;
pub(crate) mod write;

pub use write::{Child, Write, changed};

#[cfg(test)]
mod tests;
