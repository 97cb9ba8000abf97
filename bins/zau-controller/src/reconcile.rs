//! One reconcile of a ZoneAwareUpdate: validate → read the StatefulSet and its pods (from the
//! caches) → plan (`zone_topology::rollout`) → alarm → remove a batch → status, events, metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::zau::condition;
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_operator::{ControllerMetrics, EventPublisher, LeaderError, LeaderHandle};
use zone_topology::Zone;
use zone_topology::rollout::{self, Batch, Plan, RolloutInput};

use crate::alarm::{AlarmChecker, AlarmState};
use crate::cli::PodRemoval;
use crate::metrics::ZauMetrics;
use crate::pods;
use crate::removal::{self, Removal, RemovalError};
use crate::status::{self, ALARM_REASONS, StatusError, reason};
use crate::watches::Caches;

/// After a removal, the cache must show the pod terminating (or replaced) before the next plan;
/// if it does not within this time (a lost watch event), plan anyway: the eviction was answered,
/// so the API server has the pod terminating.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// A budget refused an eviction (429): try again after this long. Disruption budgets are not
/// watched (the controller works with or without the ZoneDisruptionBudget CRD).
const BUDGET_RETRY: Duration = Duration::from_secs(5);

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(5);

/// Settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub alarm_poll_interval: Duration,
    pub pod_removal: PodRemoval,
    pub zone_label: String,
    pub field_manager: String,
}

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub zaus: Store<ZoneAwareUpdate>,
    pub caches: Caches,
    pub alarms: AlarmChecker,
    pub events: EventPublisher,
    pub leader: LeaderHandle,
    pub metrics: ControllerMetrics,
    pub zau_metrics: ZauMetrics,
    pub settings: Settings,
    memory: Mutex<HashMap<String, Memory>>,
}

/// What the controller remembers of a ZoneAwareUpdate between reconciles (keyed by UID).
#[derive(Default, Clone)]
struct Memory {
    /// The status last written, with the object's resourceVersion after the write: the cache may
    /// not have seen the write yet, and a stale `updateStep` would size the next batch wrongly.
    written: Option<(u64, ZoneAwareUpdateStatus)>,
    /// Pods removed and not yet seen terminating in the cache: no new plan until they are, so a
    /// stale cache can never produce a second batch.
    expected: Vec<Expected>,
    /// Zone of the last batch (for the zone-change event).
    last_batch_zone: Option<String>,
    /// Last dry-run batch reported (one event per distinct plan).
    last_dry_run: Option<Vec<String>>,
    namespace: String,
    name: String,
}

#[derive(Clone)]
struct Expected {
    name: String,
    uid: String,
    at: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ZoneAwareUpdate {0} has no namespace or UID")]
    Incomplete(String),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error("cannot read StatefulSet {namespace}/{name}")]
    ReadStatefulSet {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot set status.currentRevision of StatefulSet {namespace}/{name}")]
    CompleteStatefulSet {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Remove(#[from] RemovalError),
    #[error("cannot confirm leadership before a batch")]
    Leader(#[source] LeaderError),
}

impl ReconcileError {
    /// Bounded label for the failures metric.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::ReadStatefulSet { .. } => "ReadStatefulSet",
            ReconcileError::CompleteStatefulSet { .. } => "CompleteStatefulSet",
            ReconcileError::Remove(_) => "RemovePod",
            ReconcileError::Leader(_) => "Leader",
        }
    }
}

/// An event to publish once the status is written.
struct Note {
    warning: bool,
    reason: &'static str,
    action: &'static str,
    message: String,
}

fn note(reason: &'static str, action: &'static str, message: impl Into<String>) -> Note {
    Note {
        warning: false,
        reason,
        action,
        message: message.into(),
    }
}

fn warning(reason: &'static str, action: &'static str, message: impl Into<String>) -> Note {
    Note {
        warning: true,
        reason,
        action,
        message: message.into(),
    }
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        zaus: Store<ZoneAwareUpdate>,
        caches: Caches,
        alarms: AlarmChecker,
        events: EventPublisher,
        leader: LeaderHandle,
        metrics: ControllerMetrics,
        zau_metrics: ZauMetrics,
        settings: Settings,
    ) -> Self {
        Self {
            client,
            zaus,
            caches,
            alarms,
            events,
            leader,
            metrics,
            zau_metrics,
            settings,
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn remember<T>(&self, uid: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut memory = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(memory.entry(uid.to_string()).or_default())
    }

    /// Forgets ZoneAwareUpdates that no longer exist (and their metric series).
    fn forget_deleted(&self) {
        let live: std::collections::HashSet<String> = self
            .zaus
            .state()
            .iter()
            .filter_map(|zau| zau.uid())
            .collect();
        let mut memory = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memory.retain(|uid, remembered| {
            let keep = live.contains(uid);
            if !keep {
                let zones: Vec<String> = remembered
                    .written
                    .as_ref()
                    .map(|(_, s)| s.old_replicas.keys().cloned().collect())
                    .unwrap_or_default();
                self.zau_metrics
                    .forget(&remembered.namespace, &remembered.name, &zones);
            }
            keep
        });
    }
}

fn resource_version(zau: &ZoneAwareUpdate) -> u64 {
    zau.resource_version()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// Entry point for the kube Controller.
pub async fn reconcile(
    zau: Arc<ZoneAwareUpdate>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.reconcile_timer();
    let (Some(namespace), Some(uid)) = (zau.namespace(), zau.uid()) else {
        return Err(ReconcileError::Incomplete(zau.name_any()));
    };
    let name = zau.name_any();
    ctx.forget_deleted();

    // The status this reconcile starts from: our last write unless the cache has a newer one.
    let cached = zau.status.clone().unwrap_or_default();
    let previous = ctx.remember(&uid, |m| {
        m.namespace.clone_from(&namespace);
        m.name.clone_from(&name);
        match &m.written {
            Some((rv, written)) if *rv >= resource_version(&zau) => written.clone(),
            _ => cached,
        }
    });
    let mut next = previous.clone();
    next.observed_generation = zau.metadata.generation;
    let mut notes = Vec::new();

    // Even when deciding failed half-way (an API error after part of a batch was removed), what
    // was done is recorded: the status carries the step.
    let outcome = decide(&zau, &ctx, &uid, &previous, &mut next, &mut notes).await;

    let api: Api<ZoneAwareUpdate> = Api::namespaced(ctx.client.clone(), &namespace);
    if next != previous {
        match status::write(&api, &zau, &ctx.settings.field_manager, &next).await {
            Ok(stored) => ctx.remember(&uid, |m| {
                m.written = Some((resource_version(&stored), next.clone()));
            }),
            Err(error) => {
                // The decision error (if any) is the more useful one to report.
                outcome?;
                return Err(error.into());
            }
        }
    }
    ctx.zau_metrics.observe(&namespace, &name, &next);
    let regarding = zau.object_ref(&());
    for note in notes {
        if note.warning {
            ctx.events
                .warning(&regarding, note.reason, note.action, &note.message)
                .await;
        } else {
            ctx.events
                .normal(&regarding, note.reason, note.action, &note.message)
                .await;
        }
    }
    outcome
}

/// Marks the rollout as not actionable: Invalid condition, one Warning event per generation and
/// message, then wait for a change of the spec (or of the StatefulSet, which is watched).
fn invalid(
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
    why: &'static str,
    message: String,
) -> Action {
    if !status::already_reported(next, condition::INVALID, why, &message) {
        notes.push(warning(why, "Validate", message.clone()));
    }
    status::set(next, condition::INVALID, true, why, message.clone());
    status::set(
        next,
        condition::PROGRESSING,
        false,
        why,
        "nothing is removed until this is fixed",
    );
    Action::await_change()
}

async fn decide(
    zau: &ZoneAwareUpdate,
    ctx: &Context,
    uid: &str,
    previous: &ZoneAwareUpdateStatus,
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) -> Result<Action, ReconcileError> {
    let namespace = zau.namespace().unwrap_or_default();
    let valid = match zau.spec.validate() {
        Ok(valid) => valid,
        Err(error) => {
            return Ok(invalid(
                next,
                notes,
                reason::INVALID_SPEC,
                error.to_string(),
            ));
        }
    };
    let Some(set) = ctx
        .caches
        .statefulsets
        .get(&ObjectRef::new(&valid.statefulset).within(&namespace))
    else {
        let message = format!(
            "StatefulSet {namespace}/{} does not exist",
            valid.statefulset
        );
        return Ok(invalid(next, notes, reason::STATEFULSET_NOT_FOUND, message));
    };
    let spec = set.spec.clone().unwrap_or_default();
    let strategy = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".to_string());
    if strategy != "OnDelete" {
        let message = format!(
            "StatefulSet {} has updateStrategy {strategy}: set it to OnDelete, or the StatefulSet controller and this rollout would both replace pods",
            valid.statefulset
        );
        return Ok(invalid(next, notes, reason::NOT_ON_DELETE, message));
    }
    let replicas = u32::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let max_unavailable = match rollout::resolve_max_unavailable(valid.max_unavailable, replicas) {
        Ok(max) => max,
        Err(error) => {
            return Ok(invalid(
                next,
                notes,
                reason::INVALID_SPEC,
                format!("spec.maxUnavailable: {error}"),
            ));
        }
    };
    status::set(next, condition::INVALID, false, reason::VALID, "");

    let sts_status = set.status.clone().unwrap_or_default();
    let update_revision = sts_status.update_revision.clone().unwrap_or_default();
    if sts_status.observed_generation < set.metadata.generation || update_revision.is_empty() {
        // The StatefulSet controller has not processed the latest template yet: its
        // updateRevision is stale. Its status update will trigger the next reconcile.
        status::set(
            next,
            condition::PROGRESSING,
            true,
            reason::WAITING_FOR_STATEFULSET,
            "waiting for the StatefulSet controller to observe the latest spec",
        );
        return Ok(Action::await_change());
    }

    // Pods of the StatefulSet, as the planner sees them.
    let now = Timestamp::now();
    let min_ready = u32::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0);
    let set_name = set.name_any();
    let cached_pods: Vec<Arc<Pod>> = ctx.caches.pods.state_filter(|pod| {
        pod.metadata.namespace.as_deref() == Some(namespace.as_str())
            && pods::owner_statefulset(pod) == Some(set_name.as_str())
    });
    let mut planned = Vec::with_capacity(cached_pods.len());
    let mut soonest_available: Option<Duration> = None;
    for pod in &cached_pods {
        let zone = pods::zone_of(pod, &ctx.caches.nodes, &ctx.settings.zone_label);
        if let Some(p) = pods::rollout_pod(pod, zone, min_ready, now) {
            if let Some(rest) = p.available_in {
                soonest_available = Some(soonest_available.map_or(rest, |s| s.min(rest)));
            }
            planned.push(p.pod);
        }
    }

    let last_zone = previous.current_zone.as_deref().map(zone_from_status);
    let input = RolloutInput {
        replicas,
        update_revision: &update_revision,
        last_update_revision: Some(previous.update_revision.as_str()).filter(|r| !r.is_empty()),
        step: u32::try_from(previous.update_step).unwrap_or(0),
        last_zone: last_zone.as_ref(),
        max_unavailable,
        exponential_factor: valid.exponential_factor,
        pods: &planned,
    };
    let (progress, plan) = rollout::plan(&input);

    // The parts of the status every outcome shares.
    let new_revision = previous.update_revision != update_revision;
    if new_revision {
        next.deleted_replicas = 0;
        if !previous.update_revision.is_empty() && progress.total_old() > 0 {
            notes.push(note(
                "NewRevision",
                "Plan",
                format!(
                    "rolling out revision {update_revision} (was {}): batches start again at one pod",
                    previous.update_revision
                ),
            ));
        }
    }
    next.update_revision.clone_from(&update_revision);
    next.current_revision = sts_status.current_revision.clone().unwrap_or_default();
    next.old_replicas = progress
        .old_replicas
        .iter()
        .map(|(zone, old)| (zone.to_string(), i32::try_from(*old).unwrap_or(i32::MAX)))
        .collect();
    next.total_old_replicas = i32::try_from(progress.total_old()).unwrap_or(i32::MAX);
    next.current_zone = progress.current_zone.as_ref().map(ToString::to_string);
    next.update_step = i32::try_from(progress.step).unwrap_or(i32::MAX);

    // Pods removed earlier must show up as terminating (or replaced) before planning again.
    let pending = ctx.remember(uid, |m| {
        m.expected.retain(|expected| {
            let current = cached_pods
                .iter()
                .find(|pod| pod.metadata.name.as_deref() == Some(expected.name.as_str()));
            let unchanged = current.is_some_and(|pod| {
                pod.metadata.uid.as_deref() == Some(expected.uid.as_str())
                    && pod.metadata.deletion_timestamp.is_none()
            });
            unchanged && expected.at.elapsed() < EXPECTATION_TIMEOUT
        });
        m.expected
            .iter()
            .map(|e| e.name.clone())
            .collect::<Vec<_>>()
    });
    if !pending.is_empty() {
        status::set(
            next,
            condition::PROGRESSING,
            true,
            reason::WAITING,
            format!(
                "waiting for removed pods to terminate: {}",
                pending.join(", ")
            ),
        );
        return Ok(Action::requeue(EXPECTATION_TIMEOUT));
    }

    let in_progress = progress.total_old() > 0;
    let poll = Action::requeue(ctx.settings.alarm_poll_interval);
    match plan {
        Plan::Complete => Ok(complete(zau, ctx, &set, previous, next, notes).await?),
        Plan::Wait(why) => {
            status::set(
                next,
                condition::PROGRESSING,
                true,
                reason::WAITING,
                why.to_string(),
            );
            status::set(
                next,
                condition::COMPLETE,
                false,
                reason::IN_PROGRESS,
                "old-revision or unready pods remain",
            );
            if !zau.spec.dry_run && status::paused_reason(next) == Some(reason::DRY_RUN) {
                status::set(next, condition::PAUSED, false, reason::NOT_PAUSED, "");
            }
            Ok(match soonest_available {
                Some(rest) => Action::requeue(rest),
                None if in_progress => poll,
                None => Action::await_change(),
            })
        }
        Plan::Remove(batch) => {
            status::set(
                next,
                condition::COMPLETE,
                false,
                reason::IN_PROGRESS,
                "old-revision pods remain",
            );
            if let Some(action) = alarm_gate(zau, ctx, previous, next, notes).await {
                return Ok(action);
            }
            if zau.spec.dry_run {
                dry_run(ctx, uid, &batch, next, notes);
                return Ok(if zau.spec.pause_rollout_alarm.is_empty() {
                    Action::await_change()
                } else {
                    poll
                });
            }
            if status::paused_reason(next) == Some(reason::DRY_RUN) {
                status::set(next, condition::PAUSED, false, reason::NOT_PAUSED, "");
            }
            remove_batch(zau, ctx, uid, &batch, &planned, next, notes).await
        }
    }
}

/// Checks the pause alarm before a batch. `Some(action)` when the rollout must wait.
async fn alarm_gate(
    zau: &ZoneAwareUpdate,
    ctx: &Context,
    previous: &ZoneAwareUpdateStatus,
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) -> Option<Action> {
    let alarm = zau.spec.pause_rollout_alarm.trim();
    let was_paused = status::paused_reason(previous).is_some_and(|r| ALARM_REASONS.contains(&r));
    let state = if alarm.is_empty() || zau.spec.ignore_alarm {
        AlarmState::Clear
    } else {
        ctx.alarms.state(alarm).await
    };
    let (why, message) = match state {
        AlarmState::Clear => {
            next.paused_rollout = false;
            if was_paused || status::paused_reason(next).is_none() {
                let message = if zau.spec.ignore_alarm && !alarm.is_empty() {
                    format!("ignoreAlarm is set: alarm {alarm} is not consulted")
                } else {
                    String::new()
                };
                status::set(next, condition::PAUSED, false, reason::NOT_PAUSED, message);
            }
            if was_paused {
                notes.push(note(
                    "RolloutResumed",
                    "Resume",
                    format!("alarm {alarm} no longer blocks the rollout"),
                ));
            }
            return None;
        }
        AlarmState::Firing { reason: why } => (
            reason::ALARM_FIRING,
            format!("alarm {alarm} is in ALARM: {why}"),
        ),
        AlarmState::NotFound => (
            reason::ALARM_NOT_FOUND,
            format!(
                "alarm {alarm} does not exist in CloudWatch (neither a metric nor a composite alarm); the rollout waits until it exists"
            ),
        ),
        AlarmState::Unavailable { error } => (
            reason::ALARM_UNAVAILABLE,
            format!("alarm {alarm} cannot be read, pausing to be safe: {error}"),
        ),
    };
    tracing::info!(zau = %zau.name_any(), reason = why, "rollout paused");
    if status::paused_reason(previous) != Some(why) {
        notes.push(warning("RolloutPaused", "Pause", message.clone()));
    }
    next.paused_rollout = true;
    status::set(next, condition::PAUSED, true, why, message);
    status::set(
        next,
        condition::PROGRESSING,
        true,
        reason::PAUSED,
        "a batch is due but the rollout is paused",
    );
    Some(Action::requeue(ctx.settings.alarm_poll_interval))
}

fn batch_text(batch: &Batch) -> String {
    format!(
        "{}: {} (step {}, batch of {})",
        batch.zone,
        batch.pods.join(", "),
        batch.step,
        batch.pods.len()
    )
}

fn dry_run(
    ctx: &Context,
    uid: &str,
    batch: &Batch,
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) {
    let message = format!("dry run: would remove {}", batch_text(batch));
    let first = ctx.remember(uid, |m| {
        let first = m.last_dry_run.as_ref() != Some(&batch.pods);
        m.last_dry_run = Some(batch.pods.clone());
        first
    });
    if first {
        notes.push(note("DryRunBatch", "Plan", message.clone()));
    }
    status::set(
        next,
        condition::PAUSED,
        true,
        reason::DRY_RUN,
        message.clone(),
    );
    status::set(next, condition::PROGRESSING, true, reason::DRY_RUN, message);
}

async fn remove_batch(
    zau: &ZoneAwareUpdate,
    ctx: &Context,
    uid: &str,
    batch: &Batch,
    planned: &[zone_topology::rollout::RolloutPod],
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) -> Result<Action, ReconcileError> {
    let namespace = zau.namespace().unwrap_or_default();
    let poll = Action::requeue(ctx.settings.alarm_poll_interval);
    // A Lease is not a fence: read it fresh right before acting.
    if !ctx.leader.confirm().await.map_err(ReconcileError::Leader)? {
        tracing::warn!(zau = %zau.name_any(), "not the leader any more; batch not removed");
        return Ok(poll);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut removed = Vec::new();
    let mut refused = None;
    for name in &batch.pods {
        let Some(pod) = ctx
            .caches
            .pods
            .get(&ObjectRef::new(name).within(&namespace))
        else {
            continue;
        };
        let pod_uid = pod.uid().unwrap_or_default();
        match removal::remove(&api, ctx.settings.pod_removal, name, &pod_uid).await {
            Ok(Removal::Removed) => {
                tracing::info!(zau = %zau.name_any(), pod = %name, zone = %batch.zone, "pod removed");
                ctx.remember(uid, |m| {
                    m.expected.push(Expected {
                        name: name.clone(),
                        uid: pod_uid.clone(),
                        at: Instant::now(),
                    });
                });
                removed.push(name.clone());
            }
            Ok(Removal::AlreadyGone) => {}
            Ok(Removal::Refused { message }) => {
                refused = Some(message);
                break;
            }
            Err(error) => {
                // Count what was removed before the failure, then report it.
                record_batch(zau, ctx, uid, batch, planned, &removed, next, notes);
                return Err(error.into());
            }
        }
    }
    record_batch(zau, ctx, uid, batch, planned, &removed, next, notes);
    if let Some(message) = refused {
        let text = format!(
            "eviction refused by a disruption budget after {} of {} pods in {}: {message}",
            removed.len(),
            batch.pods.len(),
            batch.zone
        );
        tracing::info!(zau = %zau.name_any(), zone = %batch.zone, "eviction refused: {message}");
        notes.push(note(reason::BUDGET_EXHAUSTED, "Evict", text.clone()));
        status::set(
            next,
            condition::PROGRESSING,
            true,
            reason::BUDGET_EXHAUSTED,
            text,
        );
        // Retry soon: budgets are not watched.
        return Ok(Action::requeue(BUDGET_RETRY));
    }
    Ok(poll)
}

#[allow(clippy::too_many_arguments)]
fn record_batch(
    zau: &ZoneAwareUpdate,
    ctx: &Context,
    uid: &str,
    batch: &Batch,
    planned: &[zone_topology::rollout::RolloutPod],
    removed: &[String],
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) {
    if removed.is_empty() {
        return;
    }
    let removed_healthy = planned
        .iter()
        .any(|pod| pod.ready && removed.contains(&pod.name));
    let step = if removed_healthy {
        batch.next_step
    } else {
        batch.step
    };
    next.update_step = i32::try_from(step).unwrap_or(i32::MAX);
    next.deleted_replicas = i32::try_from(removed.len()).unwrap_or(i32::MAX);
    ctx.zau_metrics.removed(
        &zau.namespace().unwrap_or_default(),
        &zau.name_any(),
        removed.len(),
    );
    let zone = batch.zone.to_string();
    let zone_changed = ctx.remember(uid, |m| {
        let changed = m.last_batch_zone.as_deref() != Some(zone.as_str());
        m.last_batch_zone = Some(zone.clone());
        changed
    });
    if zone_changed {
        notes.push(note(
            "ZoneStarted",
            "Rollout",
            format!("rolling out zone {zone}"),
        ));
    }
    let shown = Batch {
        pods: removed.to_vec(),
        ..batch.clone()
    };
    notes.push(note(
        "BatchRemoved",
        "Remove",
        format!("removed {}", batch_text(&shown)),
    ));
    status::set(
        next,
        condition::PROGRESSING,
        true,
        reason::BATCH_REMOVED,
        format!("removed {}", batch_text(&shown)),
    );
}

/// Every pod runs the update revision and is Ready: record it on the StatefulSet (OnDelete never
/// moves `status.currentRevision`) and in the status.
async fn complete(
    zau: &ZoneAwareUpdate,
    ctx: &Context,
    set: &StatefulSet,
    previous: &ZoneAwareUpdateStatus,
    next: &mut ZoneAwareUpdateStatus,
    notes: &mut Vec<Note>,
) -> Result<Action, ReconcileError> {
    let namespace = zau.namespace().unwrap_or_default();
    let name = set.name_any();
    let update_revision = next.update_revision.clone();
    let current = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref());
    if current != Some(update_revision.as_str()) && !zau.spec.dry_run {
        let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
        // Fresh read (the cache holds a stripped copy); the resourceVersion it carries makes the
        // replace fail with 409 rather than overwrite a newer status. The StatefulSet controller
        // writes this status often, so a conflict is re-read and retried a few times at once.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut fresh =
                api.get(&name)
                    .await
                    .map_err(|source| ReconcileError::ReadStatefulSet {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })?;
            let fresh_update = fresh
                .status
                .as_ref()
                .and_then(|s| s.update_revision.clone());
            let Some(status) = fresh.status.as_mut() else {
                break;
            };
            if fresh_update.as_deref() != Some(update_revision.as_str()) {
                break;
            }
            status.current_revision = Some(update_revision.clone());
            match api
                .replace_status(&name, &PostParams::default(), &fresh)
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(response)) if response.code == 409 && attempt < 5 => {}
                Err(source) => {
                    return Err(ReconcileError::CompleteStatefulSet {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
        next.current_revision.clone_from(&update_revision);
    }
    let was_complete = status::find(previous, condition::COMPLETE)
        .is_some_and(|c| c.status == "True" && previous.update_revision == update_revision);
    if !was_complete {
        notes.push(note(
            "RolloutComplete",
            "Complete",
            format!("every pod runs revision {update_revision} and is ready"),
        ));
    }
    next.paused_rollout = false;
    status::set(
        next,
        condition::COMPLETE,
        true,
        reason::ROLLOUT_COMPLETE,
        format!("every pod runs revision {update_revision} and is ready"),
    );
    status::set(
        next,
        condition::PROGRESSING,
        false,
        reason::ROLLOUT_COMPLETE,
        "",
    );
    status::set(next, condition::PAUSED, false, reason::NOT_PAUSED, "");
    Ok(Action::await_change())
}

/// What the Controller does after a failed reconcile.
pub fn error_policy(
    zau: Arc<ZoneAwareUpdate>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.reconcile_failure(error.kind());
    let causes = {
        let mut chain = Vec::new();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        chain
    };
    tracing::warn!(zau = %zau.name_any(), namespace = ?zau.namespace(), error = %error, causes = ?causes, "reconcile failed");
    Action::requeue(ERROR_RETRY)
}

/// A zone as the status records it (`Zone`'s display form).
fn zone_from_status(name: &str) -> Zone {
    if name == Zone::Unknown.to_string() {
        Zone::Unknown
    } else {
        Zone::known(name)
    }
}
