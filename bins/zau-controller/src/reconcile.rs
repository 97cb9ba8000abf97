//! One reconcile of a ZoneAwareUpdate, as a pipeline:
//!
//! 1. **observe**: validate the spec, read the StatefulSet and its pods from the caches
//!    ([`Step::observe`], with the pure check [`target`]);
//! 2. **plan** (pure): `zone_topology::rollout` and the status it implies ([`record_progress`]),
//!    the pause the alarm's state implies ([`alarm_decision`]), what a removed batch changes
//!    ([`record_batch`]);
//! 3. **act**: ask the alarm, remove one batch through the Eviction API, or record completion on
//!    the StatefulSet ([`Step::act`]);
//! 4. **status**: written when it changed, then the events and metrics ([`reconcile`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::conditions::Conditions;
use zone_api::zau::{ALARM_REASONS, condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_operator::controller::{Failure, ReconcileContext};
use zone_operator::metrics::ObjectSeries;
use zone_operator::status::{self, StatusError};
use zone_operator::{
    Blocked, ControllerMetrics, EventPublisher, Invalid, LeaderError, LeaderHandle,
};
use zone_topology::Zone;
use zone_topology::rollout::{self, Batch, Plan, Progress, RolloutInput, RolloutPod};

use crate::alarm::{AlarmSource, AlarmState};
use crate::cli::PodRemoval;
use crate::metrics::ZauMetrics;
use crate::pods;
use crate::removal::{self, Removal, RemovalError};
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

/// The StatefulSet controller writes a StatefulSet's status often: completing one is re-read
/// and retried this many times on conflict.
const COMPLETE_ATTEMPTS: usize = 5;

/// Settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub alarm_poll_interval: Duration,
    pub pod_removal: PodRemoval,
    pub field_manager: String,
}

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub zaus: Store<ZoneAwareUpdate>,
    pub caches: Caches,
    pub alarms: Arc<dyn AlarmSource>,
    pub events: EventPublisher,
    pub leader: LeaderHandle,
    pub metrics: ControllerMetrics,
    pub zau_metrics: ZauMetrics,
    pub settings: Settings,
    /// Per ZoneAwareUpdate UID, what the controller remembers between reconciles.
    pub memory: Mutex<HashMap<String, Memory>>,
    /// The objects (and zones) with metric series, to drop those of deleted ones.
    pub series: ObjectSeries,
}

/// What the controller remembers of a ZoneAwareUpdate between reconciles (keyed by UID).
#[derive(Default, Clone)]
pub struct Memory {
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
    #[error("cannot set status.currentRevision of StatefulSet {namespace}/{name}")]
    CompleteStatefulSet {
        namespace: String,
        name: String,
        #[source]
        source: StatusError,
    },
    #[error(transparent)]
    Remove(#[from] RemovalError),
    #[error("cannot confirm leadership before a batch")]
    Leader(#[source] LeaderError),
}

impl Failure for ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::CompleteStatefulSet {
                source: StatusError::Reread { .. },
                ..
            } => "ReadStatefulSet",
            ReconcileError::CompleteStatefulSet { .. } => "CompleteStatefulSet",
            ReconcileError::Remove(_) => "RemovePod",
            ReconcileError::Leader(_) => "Leader",
        }
    }
}

impl ReconcileContext for Context {
    fn failure_policy(&self) -> (&ControllerMetrics, Duration) {
        (&self.metrics, ERROR_RETRY)
    }
}

impl Context {
    fn remember<T>(&self, uid: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        f(memory.entry(uid.to_string()).or_default())
    }

    /// Forgets ZoneAwareUpdates that no longer exist (and their metric series).
    fn forget_deleted(&self) {
        let state = self.zaus.state();
        let uids: BTreeSet<String> = state.iter().filter_map(|zau| zau.uid()).collect();
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|uid, _| uids.contains(uid));
        let live = state
            .iter()
            .map(|zau| (zau.namespace().unwrap_or_default(), zau.name_any()))
            .collect();
        self.series.forget_deleted(&live, |namespace, name, zones| {
            self.zau_metrics.forget(namespace, name, zones);
        });
    }

    /// The status a reconcile starts from: our last write unless the cache has a newer one.
    fn starting_status(&self, zau: &ZoneAwareUpdate, uid: &str) -> ZoneAwareUpdateStatus {
        let cached = zau.status.clone().unwrap_or_default();
        self.remember(uid, |m| match &m.written {
            Some((rv, written)) if *rv >= resource_version(zau) => written.clone(),
            _ => cached,
        })
    }
}

fn resource_version(zau: &ZoneAwareUpdate) -> u64 {
    zau.resource_version()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// The status being built by one reconcile and the events it will publish once written.
pub type Draft = zone_operator::Draft<ZoneAwareUpdateStatus>;

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

    let previous = ctx.starting_status(&zau, &uid);
    let mut draft = Draft::new(ZoneAwareUpdateStatus {
        observed_generation: zau.metadata.generation,
        ..previous.clone()
    });
    let step = Step {
        zau: &zau,
        ctx: &ctx,
        uid: &uid,
        namespace: &namespace,
        previous: &previous,
    };
    // Even when deciding failed half-way (an API error after part of a batch was removed), what
    // was done is recorded: the status carries the step.
    let outcome = step.run(&mut draft).await;

    if draft.status != previous {
        let api: Api<ZoneAwareUpdate> = Api::namespaced(ctx.client.clone(), &namespace);
        match status::apply_status(&api, &zau, &ctx.settings.field_manager, &draft.status).await {
            Ok(stored) => ctx.remember(&uid, |m| {
                m.written = Some((resource_version(&stored), draft.status.clone()));
            }),
            Err(error) => {
                // The decision error (if any) is the more useful one to report.
                outcome?;
                return Err(error.into());
            }
        }
    }
    ctx.zau_metrics.observe(&namespace, &name, &draft.status);
    ctx.series.note(
        &namespace,
        &name,
        draft.status.old_replicas.keys().map(String::as_str),
    );
    draft
        .events
        .publish(&ctx.events, &zau.object_ref(&()))
        .await;
    outcome
}

/// What one reconcile works on.
struct Step<'a> {
    zau: &'a ZoneAwareUpdate,
    ctx: &'a Context,
    uid: &'a str,
    namespace: &'a str,
    previous: &'a ZoneAwareUpdateStatus,
}

/// What an invalid spec stops: the reconcile waits for a change of the spec (or of the
/// StatefulSet, which is watched).
const BLOCKED: Blocked = Blocked {
    condition: condition::PROGRESSING,
    consequence: "nothing is removed until this is fixed",
};

/// The StatefulSet as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub replicas: u32,
    pub max_unavailable: u32,
    pub min_ready_seconds: u32,
    /// `None` while the StatefulSet controller has not observed the latest spec (its
    /// updateRevision is stale).
    pub update_revision: Option<String>,
    pub current_revision: String,
}

/// Checks the StatefulSet a valid spec names (pure): it must use `OnDelete`, and the spec's
/// maxUnavailable must resolve against its replicas.
pub fn target(valid: &ValidZau, set: &StatefulSet) -> Result<Target, Invalid> {
    let spec = set.spec.clone().unwrap_or_default();
    let strategy = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".to_string());
    if strategy != "OnDelete" {
        return Err(Invalid {
            reason: reason::NOT_ON_DELETE,
            message: format!(
                "StatefulSet {} has updateStrategy {strategy}: set it to OnDelete, or the StatefulSet controller and this rollout would both replace pods",
                valid.statefulset
            ),
        });
    }
    let replicas = u32::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let max_unavailable = rollout::resolve_max_unavailable(valid.max_unavailable, replicas)
        .map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: format!("spec.maxUnavailable: {error}"),
        })?;
    let status = set.status.clone().unwrap_or_default();
    let update_revision = status.update_revision.clone().unwrap_or_default();
    let observed = status.observed_generation >= set.metadata.generation;
    Ok(Target {
        replicas,
        max_unavailable,
        min_ready_seconds: u32::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0),
        update_revision: Some(update_revision).filter(|r| observed && !r.is_empty()),
        current_revision: status.current_revision.unwrap_or_default(),
    })
}

/// What observing found: the StatefulSet and its pods as the planner sees them.
struct Observed {
    valid: ValidZau,
    set: Arc<StatefulSet>,
    target: Target,
    /// The StatefulSet's pods in the cache.
    cached: Vec<Arc<Pod>>,
    planned: Vec<RolloutPod>,
    /// When the first Ready-but-not-yet-available pod turns available.
    soonest_available: Option<Duration>,
}

impl Step<'_> {
    async fn run(&self, draft: &mut Draft) -> Result<Action, ReconcileError> {
        let observed = match self.observe() {
            Ok(observed) => observed,
            Err(invalid) => return Ok(draft.refuse(invalid, BLOCKED)),
        };
        draft
            .status
            .set_condition(condition::INVALID, false, reason::VALID, "");
        let Some(update_revision) = observed.target.update_revision.clone() else {
            // Its status update will trigger the next reconcile.
            draft.status.set_condition(
                condition::PROGRESSING,
                true,
                reason::WAITING_FOR_STATEFULSET,
                "waiting for the StatefulSet controller to observe the latest spec",
            );
            return Ok(Action::await_change());
        };
        let last_zone = self.previous.current_zone.as_deref().map(zone_from_status);
        let input = RolloutInput {
            replicas: observed.target.replicas,
            update_revision: &update_revision,
            last_update_revision: Some(self.previous.update_revision.as_str())
                .filter(|r| !r.is_empty()),
            step: u32::try_from(self.previous.update_step).unwrap_or(0),
            last_zone: last_zone.as_ref(),
            max_unavailable: observed.target.max_unavailable,
            exponential_factor: observed.valid.exponential_factor,
            pods: &observed.planned,
        };
        let (progress, plan) = rollout::plan(&input);
        record_progress(
            self.previous,
            &update_revision,
            &observed.target.current_revision,
            &progress,
            draft,
        );
        if let Some(action) = self.pending_removals(&observed.cached, &mut draft.status) {
            return Ok(action);
        }
        self.act(&observed, plan, progress.total_old() > 0, draft)
            .await
    }

    /// Reads the caches: the spec must be valid and name an OnDelete StatefulSet.
    fn observe(&self) -> Result<Observed, Invalid> {
        let valid = self.zau.spec.validate().map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: error.to_string(),
        })?;
        let set = self
            .ctx
            .caches
            .statefulsets
            .get(&ObjectRef::new(&valid.statefulset).within(self.namespace))
            .ok_or_else(|| Invalid {
                reason: reason::STATEFULSET_NOT_FOUND,
                message: format!(
                    "StatefulSet {}/{} does not exist",
                    self.namespace, valid.statefulset
                ),
            })?;
        let target = target(&valid, &set)?;
        let set_name = set.name_any();
        let cached = self.ctx.caches.pods.state_filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(self.namespace)
                && pods::owner_statefulset(pod) == Some(set_name.as_str())
        });
        let now = Timestamp::now();
        let mut planned = Vec::with_capacity(cached.len());
        let mut soonest_available: Option<Duration> = None;
        for pod in &cached {
            let zone = self.ctx.caches.zones.zone_of(pod);
            if let Some(p) = pods::rollout_pod(pod, zone, target.min_ready_seconds, now) {
                if let Some(rest) = p.available_in {
                    soonest_available = Some(soonest_available.map_or(rest, |s| s.min(rest)));
                }
                planned.push(p.pod);
            }
        }
        Ok(Observed {
            valid,
            set,
            target,
            cached,
            planned,
            soonest_available,
        })
    }

    /// Pods removed earlier must show up as terminating (or replaced) before planning again.
    fn pending_removals(
        &self,
        cached: &[Arc<Pod>],
        status: &mut ZoneAwareUpdateStatus,
    ) -> Option<Action> {
        let pending = self.ctx.remember(self.uid, |m| {
            m.expected.retain(|expected| {
                let current = cached
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
        if pending.is_empty() {
            return None;
        }
        status.set_condition(
            condition::PROGRESSING,
            true,
            reason::WAITING,
            format!(
                "waiting for removed pods to terminate: {}",
                pending.join(", ")
            ),
        );
        Some(Action::requeue(EXPECTATION_TIMEOUT))
    }

    async fn act(
        &self,
        observed: &Observed,
        plan: Plan,
        in_progress: bool,
        draft: &mut Draft,
    ) -> Result<Action, ReconcileError> {
        let poll = Action::requeue(self.ctx.settings.alarm_poll_interval);
        let status = &mut draft.status;
        match plan {
            Plan::Complete => self.complete(&observed.set, draft).await,
            Plan::Wait(why) => {
                status.set_condition(
                    condition::PROGRESSING,
                    true,
                    reason::WAITING,
                    why.to_string(),
                );
                status.set_condition(
                    condition::COMPLETE,
                    false,
                    reason::IN_PROGRESS,
                    "old-revision or unready pods remain",
                );
                self.leave_dry_run(status);
                Ok(match observed.soonest_available {
                    Some(rest) => Action::requeue(rest),
                    None if in_progress => poll,
                    None => Action::await_change(),
                })
            }
            Plan::Remove(batch) => {
                status.set_condition(
                    condition::COMPLETE,
                    false,
                    reason::IN_PROGRESS,
                    "old-revision pods remain",
                );
                let alarm = self.alarm_state().await;
                if let Some(action) =
                    alarm_decision(&self.zau.spec, self.previous, &alarm, draft, poll.clone())
                {
                    tracing::info!(zau = %self.zau.name_any(), reason = ?draft.status.true_reason(condition::PAUSED), "rollout paused");
                    return Ok(action);
                }
                if self.zau.spec.dry_run {
                    self.dry_run(&batch, draft);
                    return Ok(if self.zau.spec.pause_rollout_alarm.is_empty() {
                        Action::await_change()
                    } else {
                        poll
                    });
                }
                self.leave_dry_run(&mut draft.status);
                self.remove_batch(&batch, &observed.planned, draft).await
            }
        }
    }

    /// A rollout that is not (or no longer) a dry run drops the dry run's pause.
    fn leave_dry_run(&self, status: &mut ZoneAwareUpdateStatus) {
        if !self.zau.spec.dry_run && status.true_reason(condition::PAUSED) == Some(reason::DRY_RUN)
        {
            status.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, "");
        }
    }

    /// The pause alarm's state; not asked when there is none or it is ignored.
    async fn alarm_state(&self) -> AlarmState {
        let alarm = self.zau.spec.pause_rollout_alarm.trim();
        if alarm.is_empty() || self.zau.spec.ignore_alarm {
            AlarmState::Clear
        } else {
            self.ctx.alarms.alarm_state(alarm).await
        }
    }

    fn dry_run(&self, batch: &Batch, draft: &mut Draft) {
        let message = format!("dry run: would remove {}", batch_text(batch));
        let first = self.ctx.remember(self.uid, |m| {
            let first = m.last_dry_run.as_ref() != Some(&batch.pods);
            m.last_dry_run = Some(batch.pods.clone());
            first
        });
        if first {
            draft.events.normal("DryRunBatch", "Plan", message.clone());
        }
        let status = &mut draft.status;
        status.set_condition(condition::PAUSED, true, reason::DRY_RUN, message.clone());
        status.set_condition(condition::PROGRESSING, true, reason::DRY_RUN, message);
    }

    async fn remove_batch(
        &self,
        batch: &Batch,
        planned: &[RolloutPod],
        draft: &mut Draft,
    ) -> Result<Action, ReconcileError> {
        // A Lease is not a fence: read it fresh right before acting.
        if !self
            .ctx
            .leader
            .confirm()
            .await
            .map_err(ReconcileError::Leader)?
        {
            tracing::warn!(zau = %self.zau.name_any(), "not the leader any more; batch not removed");
            return Ok(Action::requeue(self.ctx.settings.alarm_poll_interval));
        }
        let (removed, outcome) = self.remove_pods(batch).await;
        if !removed.is_empty() {
            let zone = batch.zone.to_string();
            let zone_changed = self.ctx.remember(self.uid, |m| {
                let changed = m.last_batch_zone.as_deref() != Some(zone.as_str());
                m.last_batch_zone = Some(zone.clone());
                changed
            });
            self.ctx
                .zau_metrics
                .removed(self.namespace, &self.zau.name_any(), removed.len());
            record_batch(batch, planned, &removed, zone_changed, draft);
        }
        match outcome? {
            None => Ok(Action::requeue(self.ctx.settings.alarm_poll_interval)),
            Some(message) => {
                tracing::info!(zau = %self.zau.name_any(), zone = %batch.zone, "eviction refused: {message}");
                record_refusal(batch, removed.len(), &message, draft);
                // Retry soon: budgets are not watched.
                Ok(Action::requeue(BUDGET_RETRY))
            }
        }
    }

    /// Removes the batch's pods in order until one is refused or fails: the names removed, and
    /// the refusal's message (`Ok(None)` when none was refused).
    async fn remove_pods(
        &self,
        batch: &Batch,
    ) -> (Vec<String>, Result<Option<String>, ReconcileError>) {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let mut removed = Vec::new();
        for name in &batch.pods {
            let Some(pod) = self
                .ctx
                .caches
                .pods
                .get(&ObjectRef::new(name).within(self.namespace))
            else {
                continue;
            };
            let pod_uid = pod.uid().unwrap_or_default();
            match removal::remove(&api, self.ctx.settings.pod_removal, name, &pod_uid).await {
                Ok(Removal::Removed) => {
                    tracing::info!(zau = %self.zau.name_any(), pod = %name, zone = %batch.zone, "pod removed");
                    self.ctx.remember(self.uid, |m| {
                        m.expected.push(Expected {
                            name: name.clone(),
                            uid: pod_uid.clone(),
                            at: Instant::now(),
                        });
                    });
                    removed.push(name.clone());
                }
                Ok(Removal::AlreadyGone) => {}
                Ok(Removal::Refused { message }) => return (removed, Ok(Some(message))),
                // What was removed before the failure is still recorded.
                Err(error) => return (removed, Err(error.into())),
            }
        }
        (removed, Ok(None))
    }

    /// Every pod runs the update revision and is Ready: record it on the StatefulSet (OnDelete
    /// never moves `status.currentRevision`) and in the status.
    async fn complete(
        &self,
        set: &StatefulSet,
        draft: &mut Draft,
    ) -> Result<Action, ReconcileError> {
        let update_revision = draft.status.update_revision.clone();
        let current = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_deref());
        if current != Some(update_revision.as_str()) && !self.zau.spec.dry_run {
            self.complete_statefulset(&set.name_any(), &update_revision)
                .await?;
            draft.status.current_revision.clone_from(&update_revision);
        }
        record_complete(self.previous, draft);
        Ok(Action::await_change())
    }

    /// Sets the StatefulSet's `status.currentRevision` to `update_revision`, from a fresh read
    /// (the cache holds a stripped copy) whose resourceVersion makes the write fail with 409
    /// rather than overwrite a newer status.
    async fn complete_statefulset(
        &self,
        name: &str,
        update_revision: &str,
    ) -> Result<(), ReconcileError> {
        let api: Api<StatefulSet> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let error = |source| ReconcileError::CompleteStatefulSet {
            namespace: self.namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        let fresh = api.get(name).await.map_err(|source| {
            error(StatusError::Reread {
                kind: "StatefulSet".into(),
                namespace: self.namespace.to_owned(),
                name: name.to_owned(),
                source,
            })
        })?;
        let update = |mut fresh: StatefulSet| async move {
            let Some(status) = fresh.status.as_mut() else {
                return Ok::<_, std::convert::Infallible>(status::Update::Keep(()));
            };
            // A newer revision appeared meanwhile: the next reconcile rolls it out.
            if status.update_revision.as_deref() != Some(update_revision) {
                return Ok(status::Update::Keep(()));
            }
            status.current_revision = Some(update_revision.to_owned());
            Ok(status::Update::Write(fresh, ()))
        };
        match status::replace_status(
            &api,
            fresh,
            &self.ctx.settings.field_manager,
            COMPLETE_ATTEMPTS,
            update,
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(status::ReplaceError::Status(source)) => Err(error(source)),
            Err(status::ReplaceError::Update(never)) => match never {},
        }
    }
}

/// The parts of the status every outcome shares (pure): revisions, old replicas per zone, the
/// current zone and step as the planner sees them; a NewRevision event when a rollout restarts.
pub fn record_progress(
    previous: &ZoneAwareUpdateStatus,
    update_revision: &str,
    current_revision: &str,
    progress: &Progress,
    draft: &mut Draft,
) {
    let next = &mut draft.status;
    if previous.update_revision != update_revision {
        next.deleted_replicas = 0;
        if !previous.update_revision.is_empty() && progress.total_old() > 0 {
            draft.events.normal(
                "NewRevision",
                "Plan",
                format!(
                    "rolling out revision {update_revision} (was {}): batches start again at one pod",
                    previous.update_revision
                ),
            );
        }
    }
    next.update_revision = update_revision.to_owned();
    next.current_revision = current_revision.to_owned();
    next.old_replicas = progress
        .old_replicas
        .iter()
        .map(|(zone, old)| (zone.to_string(), i32::try_from(*old).unwrap_or(i32::MAX)))
        .collect();
    next.total_old_replicas = i32::try_from(progress.total_old()).unwrap_or(i32::MAX);
    next.current_zone = progress.current_zone.as_ref().map(ToString::to_string);
    next.update_step = i32::try_from(progress.step).unwrap_or(i32::MAX);
}

/// What the alarm's state means for a batch that is due (pure): `None` to go on, or the action
/// while paused. Sets the Paused condition and `pausedRollout`; a Warning event when a pause
/// starts or changes reason, a Normal one when it ends.
pub fn alarm_decision(
    spec: &zone_api::ZoneAwareUpdateSpec,
    previous: &ZoneAwareUpdateStatus,
    state: &AlarmState,
    draft: &mut Draft,
    poll: Action,
) -> Option<Action> {
    let alarm = spec.pause_rollout_alarm.trim();
    let was_paused = previous
        .true_reason(condition::PAUSED)
        .is_some_and(|r| ALARM_REASONS.contains(&r));
    let next = &mut draft.status;
    let (why, message) = match state {
        AlarmState::Clear => {
            next.paused_rollout = false;
            if was_paused || next.true_reason(condition::PAUSED).is_none() {
                let message = if spec.ignore_alarm && !alarm.is_empty() {
                    format!("ignoreAlarm is set: alarm {alarm} is not consulted")
                } else {
                    String::new()
                };
                next.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, message);
            }
            if was_paused {
                draft.events.normal(
                    "RolloutResumed",
                    "Resume",
                    format!("alarm {alarm} no longer blocks the rollout"),
                );
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
    if previous.true_reason(condition::PAUSED) != Some(why) {
        draft
            .events
            .warning("RolloutPaused", "Pause", message.clone());
    }
    next.paused_rollout = true;
    next.set_condition(condition::PAUSED, true, why, message);
    next.set_condition(
        condition::PROGRESSING,
        true,
        reason::PAUSED,
        "a batch is due but the rollout is paused",
    );
    Some(poll)
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

/// What removing `removed` (a non-empty prefix of the batch) changes (pure): the step advances
/// only when a Ready pod was removed (replacing unready pods is repair, not progress).
pub fn record_batch(
    batch: &Batch,
    planned: &[RolloutPod],
    removed: &[String],
    zone_changed: bool,
    draft: &mut Draft,
) {
    let removed_healthy = planned
        .iter()
        .any(|pod| pod.ready && removed.contains(&pod.name));
    let step = if removed_healthy {
        batch.next_step
    } else {
        batch.step
    };
    let next = &mut draft.status;
    next.update_step = i32::try_from(step).unwrap_or(i32::MAX);
    next.deleted_replicas = i32::try_from(removed.len()).unwrap_or(i32::MAX);
    if zone_changed {
        draft.events.normal(
            "ZoneStarted",
            "Rollout",
            format!("rolling out zone {}", batch.zone),
        );
    }
    let shown = Batch {
        pods: removed.to_vec(),
        ..batch.clone()
    };
    let text = format!("removed {}", batch_text(&shown));
    draft.events.normal("BatchRemoved", "Remove", text.clone());
    next.set_condition(condition::PROGRESSING, true, reason::BATCH_REMOVED, text);
}

/// A disruption budget refused an eviction after `removed` pods of the batch (pure).
pub fn record_refusal(batch: &Batch, removed: usize, message: &str, draft: &mut Draft) {
    let text = format!(
        "eviction refused by a disruption budget after {removed} of {} pods in {}: {message}",
        batch.pods.len(),
        batch.zone
    );
    draft
        .events
        .normal(reason::BUDGET_EXHAUSTED, "Evict", text.clone());
    draft
        .status
        .set_condition(condition::PROGRESSING, true, reason::BUDGET_EXHAUSTED, text);
}

/// Every pod runs the update revision and is Ready (pure): the Complete condition, and its event
/// the first time for this revision.
pub fn record_complete(previous: &ZoneAwareUpdateStatus, draft: &mut Draft) {
    let update_revision = draft.status.update_revision.clone();
    let was_complete = previous
        .condition(condition::COMPLETE)
        .is_some_and(|c| c.status == "True" && previous.update_revision == update_revision);
    let message = format!("every pod runs revision {update_revision} and is ready");
    if !was_complete {
        draft
            .events
            .normal("RolloutComplete", "Complete", message.clone());
    }
    let next = &mut draft.status;
    next.paused_rollout = false;
    next.set_condition(condition::COMPLETE, true, reason::ROLLOUT_COMPLETE, message);
    next.set_condition(condition::PROGRESSING, false, reason::ROLLOUT_COMPLETE, "");
    next.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, "");
}

/// A zone as the status records it (`Zone`'s display form).
fn zone_from_status(name: &str) -> Zone {
    if name == Zone::Unknown.to_string() {
        Zone::Unknown
    } else {
        Zone::known(name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use zone_api::ZoneAwareUpdateSpec;
    use zone_topology::IntOrPercent;

    fn spec(alarm: &str, ignore_alarm: bool) -> ZoneAwareUpdateSpec {
        serde_json::from_value(json!({
            "statefulset": "web", "pauseRolloutAlarm": alarm, "ignoreAlarm": ignore_alarm
        }))
        .unwrap()
    }

    fn paused(reason: &str) -> ZoneAwareUpdateStatus {
        let mut status = ZoneAwareUpdateStatus::default();
        status.set_condition(condition::PAUSED, true, reason, "x");
        status
    }

    fn valid(max_unavailable: IntOrPercent) -> ValidZau {
        ValidZau {
            statefulset: "web".into(),
            exponential_factor: 2.0,
            max_unavailable,
        }
    }

    fn set(value: serde_json::Value) -> StatefulSet {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn target_checks_the_statefulset() {
        let on_delete = json!({"type": "OnDelete"});
        let cases: Vec<(&str, serde_json::Value, IntOrPercent, Result<Target, &str>)> = vec![
            (
                "observed OnDelete set",
                json!({"metadata": {"generation": 2},
                    "spec": {"replicas": 6, "minReadySeconds": 3, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 6, "observedGeneration": 2, "updateRevision": "web-2", "currentRevision": "web-1"}}),
                IntOrPercent::Percent(50),
                Ok(Target {
                    replicas: 6,
                    max_unavailable: 3,
                    min_ready_seconds: 3,
                    update_revision: Some("web-2".into()),
                    current_revision: "web-1".into(),
                }),
            ),
            (
                "spec not observed yet: no update revision",
                json!({"metadata": {"generation": 3},
                    "spec": {"replicas": 2, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 2, "observedGeneration": 2, "updateRevision": "web-2"}}),
                IntOrPercent::Int(1),
                Ok(Target {
                    replicas: 2,
                    max_unavailable: 1,
                    min_ready_seconds: 0,
                    update_revision: None,
                    current_revision: String::new(),
                }),
            ),
            (
                "RollingUpdate (the default) is refused",
                json!({"spec": {"replicas": 2, "selector": {}, "template": {}}}),
                IntOrPercent::Int(1),
                Err(reason::NOT_ON_DELETE),
            ),
            (
                "maxUnavailable 0 is refused",
                json!({"spec": {"replicas": 2, "updateStrategy": on_delete, "selector": {}, "template": {}}}),
                IntOrPercent::Int(0),
                Err(reason::INVALID_SPEC),
            ),
        ];
        for (name, value, max_unavailable, expected) in cases {
            let got = target(&valid(max_unavailable), &set(value)).map_err(|i| i.reason);
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_alarm_decides_whether_a_due_batch_waits() {
        let firing = AlarmState::Firing {
            reason: "errors > 5".into(),
        };
        let unavailable = AlarmState::Unavailable {
            error: "timeout".into(),
        };
        // (case, spec, previous, state, paused reason after, pausedRollout, events)
        let cases = [
            (
                "clear",
                spec("a", false),
                ZoneAwareUpdateStatus::default(),
                AlarmState::Clear,
                None,
                false,
                vec![],
            ),
            (
                "firing",
                spec("a", false),
                ZoneAwareUpdateStatus::default(),
                firing.clone(),
                Some(reason::ALARM_FIRING),
                true,
                vec!["RolloutPaused"],
            ),
            (
                "still firing: no second event",
                spec("a", false),
                paused(reason::ALARM_FIRING),
                firing,
                Some(reason::ALARM_FIRING),
                true,
                vec![],
            ),
            (
                "firing becomes unreadable",
                spec("a", false),
                paused(reason::ALARM_FIRING),
                unavailable,
                Some(reason::ALARM_UNAVAILABLE),
                true,
                vec!["RolloutPaused"],
            ),
            (
                "missing",
                spec("a", false),
                ZoneAwareUpdateStatus::default(),
                AlarmState::NotFound,
                Some(reason::ALARM_NOT_FOUND),
                true,
                vec!["RolloutPaused"],
            ),
            (
                "cleared after a pause",
                spec("a", false),
                paused(reason::ALARM_FIRING),
                AlarmState::Clear,
                None,
                false,
                vec!["RolloutResumed"],
            ),
        ];
        for (name, spec, previous, state, paused_by, paused_rollout, events) in cases {
            let mut draft = Draft {
                status: previous.clone(),
                ..Draft::default()
            };
            let poll = Action::requeue(Duration::from_secs(15));
            let action = alarm_decision(&spec, &previous, &state, &mut draft, poll.clone());
            assert_eq!(action.is_some(), paused_by.is_some(), "{name}: waits");
            assert_eq!(
                draft.status.true_reason(condition::PAUSED),
                paused_by,
                "{name}"
            );
            assert_eq!(draft.status.paused_rollout, paused_rollout, "{name}");
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, events, "{name}: events");
        }
    }

    #[test]
    fn an_ignored_alarm_says_so() {
        let mut draft = Draft::default();
        let spec = spec("a", true);
        let action = alarm_decision(
            &spec,
            &ZoneAwareUpdateStatus::default(),
            &AlarmState::Clear,
            &mut draft,
            Action::await_change(),
        );
        assert!(action.is_none());
        let paused = draft.status.condition(condition::PAUSED).unwrap();
        assert_eq!(
            paused.message,
            "ignoreAlarm is set: alarm a is not consulted"
        );
    }

    fn pod(name: &str, ready: bool) -> RolloutPod {
        RolloutPod {
            name: name.into(),
            ordinal: 0,
            zone: Zone::known("zone-a"),
            revision: "web-1".into(),
            ready,
            terminating: false,
        }
    }

    #[test]
    fn a_removed_batch_advances_the_step_only_for_ready_pods() {
        let batch = Batch {
            zone: Zone::known("zone-a"),
            pods: vec!["web-3".into(), "web-2".into()],
            step: 1,
            next_step: 2,
        };
        let planned = [pod("web-3", false), pod("web-2", true)];
        // (case, removed, zone changed, step after, events)
        type Case<'a> = (&'a str, &'a [&'a str], bool, i32, &'a [&'a str]);
        let cases: [Case; 3] = [
            (
                "a ready pod removed",
                &["web-3", "web-2"],
                true,
                2,
                &["ZoneStarted", "BatchRemoved"],
            ),
            (
                "only the unready pod",
                &["web-3"],
                false,
                1,
                &["BatchRemoved"],
            ),
            (
                "a ready pod, same zone",
                &["web-2"],
                false,
                2,
                &["BatchRemoved"],
            ),
        ];
        for (name, removed, zone_changed, step, events) in cases {
            let removed: Vec<String> = removed.iter().map(ToString::to_string).collect();
            let mut draft = Draft::default();
            record_batch(&batch, &planned, &removed, zone_changed, &mut draft);
            assert_eq!(draft.status.update_step, step, "{name}");
            assert_eq!(
                draft.status.deleted_replicas,
                removed.len() as i32,
                "{name}"
            );
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, events, "{name}");
            let progressing = draft.status.condition(condition::PROGRESSING).unwrap();
            assert_eq!(progressing.reason, reason::BATCH_REMOVED, "{name}");
            assert!(progressing.message.contains(&removed.join(", ")), "{name}");
        }
        let mut draft = Draft::default();
        record_refusal(&batch, 1, "budget", &mut draft);
        assert_eq!(
            draft.status.true_reason(condition::PROGRESSING),
            Some(reason::BUDGET_EXHAUSTED)
        );
    }

    #[test]
    fn progress_restarts_with_a_new_revision() {
        let progress = Progress {
            old_replicas: [(Zone::known("zone-a"), 2), (Zone::known("zone-b"), 0)].into(),
            current_zone: Some(Zone::known("zone-a")),
            step: 0,
        };
        // (case, previous revision, new revision, deleted replicas after, events)
        let cases = [
            ("same revision", "web-2", "web-2", 3, vec![]),
            ("first rollout", "", "web-2", 0, vec![]),
            (
                "new revision mid-rollout",
                "web-2",
                "web-3",
                0,
                vec!["NewRevision"],
            ),
        ];
        for (name, before, after, deleted, events) in cases {
            let previous = ZoneAwareUpdateStatus {
                update_revision: before.into(),
                deleted_replicas: 3,
                update_step: 4,
                ..ZoneAwareUpdateStatus::default()
            };
            let mut draft = Draft {
                status: previous.clone(),
                ..Draft::default()
            };
            record_progress(&previous, after, "web-1", &progress, &mut draft);
            let status = &draft.status;
            assert_eq!(status.deleted_replicas, deleted, "{name}");
            assert_eq!(status.update_revision, after, "{name}");
            assert_eq!(status.update_step, 0, "{name}: the planner's step");
            assert_eq!(status.total_old_replicas, 2, "{name}");
            assert_eq!(status.current_zone.as_deref(), Some("zone-a"), "{name}");
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, events, "{name}");
        }
    }

    #[test]
    fn completion_is_announced_once_per_revision() {
        for (name, previous_complete, previous_revision, events) in [
            ("first time", false, "web-2", vec!["RolloutComplete"]),
            ("already complete", true, "web-2", vec![]),
            (
                "complete for an older revision",
                true,
                "web-1",
                vec!["RolloutComplete"],
            ),
        ] {
            let mut previous = ZoneAwareUpdateStatus {
                update_revision: previous_revision.into(),
                ..ZoneAwareUpdateStatus::default()
            };
            previous.set_condition(condition::COMPLETE, previous_complete, "x", "");
            let mut draft = Draft {
                status: ZoneAwareUpdateStatus {
                    update_revision: "web-2".into(),
                    paused_rollout: true,
                    ..previous.clone()
                },
                ..Draft::default()
            };
            record_complete(&previous, &mut draft);
            assert!(!draft.status.paused_rollout, "{name}");
            assert_eq!(
                draft.status.true_reason(condition::COMPLETE),
                Some(reason::ROLLOUT_COMPLETE),
                "{name}"
            );
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, events, "{name}");
        }
    }
}
