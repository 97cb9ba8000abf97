//! **apply**: ask the alarm, remove one batch through the Eviction API (or report it in a dry
//! run), or record a finished rollout on the StatefulSet.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use zone_api::ZoneAwareUpdateStatus;
use zone_api::conditions::Conditions;
use zone_api::zau::{StatefulSetProgress, condition, pause_source, reason};
use zone_operator::status::{self, StatusError};
use zone_topology::rollout::{Batch, Plan, RolloutPod, WaitReason};

use super::context::Expected;
use super::observe::Observed;
use super::validate::Target;
use super::{Draft, ReconcileError, Step, pause, status as record};
use crate::removal::{self, Removal};

/// A budget refused an eviction (429): try again after this long. Disruption budgets are not
/// watched (the controller works with or without the ZoneDisruptionBudget CRD).
const BUDGET_RETRY: Duration = Duration::from_secs(5);

/// The StatefulSet controller writes a StatefulSet's status often: completing one is re-read
/// and retried this many times on conflict.
const COMPLETE_ATTEMPTS: usize = 5;

impl Step<'_> {
    pub(super) async fn act(
        &self,
        observed: &Observed,
        plan: Plan,
        in_progress: bool,
        draft: &mut Draft,
    ) -> Result<Action, ReconcileError> {
        let poll = Action::requeue(self.poll_interval(observed));
        match plan {
            Plan::Complete => {
                self.ctx.gates.forget(&ObjectRef::from_obj(self.zau));
                self.complete(&observed.target, draft).await
            }
            Plan::Wait(why) => Ok(self.wait(observed, &why, in_progress, poll, draft).await),
            Plan::Remove(batch) => self.remove(observed, batch, poll, draft).await,
        }
    }

    /// No pod may go yet (`why`): the status says so, and what would hold the next batch
    /// while pods are being replaced.
    async fn wait(
        &self,
        observed: &Observed,
        why: &WaitReason,
        in_progress: bool,
        poll: Action,
        draft: &mut Draft,
    ) -> Action {
        let status = &mut draft.status;
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
        if in_progress {
            // Pods are being replaced: what would hold the next batch is recorded now,
            // so a pause shows as soon as its cause does. A bake under way stays.
            let now = Timestamp::now();
            let zone = draft.status.current_zone.clone();
            let bake = draft
                .status
                .next_zone_not_before
                .as_ref()
                .and_then(|until| {
                    pause::bake_hold(zone.as_deref().unwrap_or_default(), until.0, now)
                });
            let zones = pause::scope_zones(zone.as_deref(), bake.is_some(), &draft.status);
            let holds = self
                .holds(observed, zones, false, bake.map(|(hold, _)| hold))
                .await;
            pause::record(&self.zau.spec, self.previous, &holds, false, draft);
        }
        self.leave_dry_run(&mut draft.status);
        match observed.soonest_available {
            Some(rest) => Action::requeue(rest),
            None if in_progress => poll,
            None => Action::await_change(),
        }
    }

    /// The next batch goes, unless a pause holds it or the rollout is a dry run.
    async fn remove(
        &self,
        observed: &Observed,
        batch: Batch,
        poll: Action,
        draft: &mut Draft,
    ) -> Result<Action, ReconcileError> {
        draft.status.set_condition(
            condition::COMPLETE,
            false,
            reason::IN_PROGRESS,
            "old-revision pods remain",
        );
        let (bake, bake_left) = self.bake(observed, &batch, &mut draft.status);
        let zones = pause::scope_zones(
            Some(&batch.zone.to_string()),
            draft.status.next_zone_not_before.is_some(),
            &draft.status,
        );
        let holds = self.holds(observed, zones, true, bake).await;
        if pause::record(&self.zau.spec, self.previous, &holds, true, draft) {
            if holds.iter().any(|h| h.source == pause_source::ZONE) {
                // The planner turns to the dark zone's pods (down, and old): not a zone the
                // rollout has started. It goes on where it was once the zone is back.
                draft
                    .status
                    .current_zone
                    .clone_from(&self.previous.current_zone);
            }
            tracing::info!(zau = %self.zau.name_any(), paused_by = %draft.status.paused_by, "rollout paused");
            let wait = bake_left.map_or(self.poll_interval(observed), |left| {
                // Just past the bake's end (the status stores it to the second).
                left.saturating_add(Duration::from_millis(100))
                    .min(self.poll_interval(observed))
            });
            return Ok(Action::requeue(wait));
        }
        if self.zau.spec.dry_run {
            self.dry_run(&batch, draft);
            return Ok(
                if self.zau.spec.pause_rollout_alarm.is_empty()
                    && observed.valid.alert_gate.is_none()
                {
                    Action::await_change()
                } else {
                    poll
                },
            );
        }
        self.leave_dry_run(&mut draft.status);
        self.remove_batch(&batch, &observed.planned, poll, draft)
            .await
    }

    /// The bake before `batch`: `status.nextZoneNotBefore` set when the batch starts a zone
    /// after another completed (kept from the status when the bake began earlier), cleared
    /// otherwise; the hold and the time left while it runs.
    fn bake(
        &self,
        observed: &Observed,
        batch: &Batch,
        status: &mut ZoneAwareUpdateStatus,
    ) -> (Option<pause::Hold>, Option<Duration>) {
        let bake_time = observed.valid.bake_time;
        let due = pause::bake_due(bake_time, batch, &observed.planned);
        let Some(bake_time) = bake_time.filter(|_| due) else {
            status.next_zone_not_before = None;
            return (None, None);
        };
        let now = Timestamp::now();
        // The draft's: the previous status's, unless a new revision cleared it.
        let until = pause::bake_until(status.next_zone_not_before.as_ref(), now, bake_time);
        status.next_zone_not_before = Some(Time(until));
        match pause::bake_hold(&batch.zone.to_string(), until, now) {
            Some((hold, left)) => (Some(hold), Some(left)),
            None => (None, None),
        }
    }

    /// A rollout that is not (or no longer) a dry run drops the dry run's pause.
    fn leave_dry_run(&self, status: &mut ZoneAwareUpdateStatus) {
        if !self.zau.spec.dry_run && status.true_reason(condition::PAUSED) == Some(reason::DRY_RUN)
        {
            status.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, "");
        }
    }

    fn dry_run(&self, batch: &Batch, draft: &mut Draft) {
        let message = format!("dry run: would remove {}", record::batch_text(batch));
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
        poll: Action,
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
            return Ok(poll);
        }
        self.announce(batch, draft).await?;
        let (removed, outcome) = self.remove_pods(batch).await;
        if !removed.is_empty() {
            // The zone has started: its bake (if any) is over.
            draft.status.next_zone_not_before = None;
            let zone = batch.zone.to_string();
            let zone_changed = self.ctx.remember(self.uid, |m| {
                let changed = m.last_batch_zone.as_deref() != Some(zone.as_str());
                m.last_batch_zone = Some(zone.clone());
                changed
            });
            self.ctx.zau_metrics.removed(
                self.namespace,
                &self.zau.name_any(),
                removed.len(),
                Timestamp::now().as_second(),
            );
            record::record_batch(batch, planned, &removed, zone_changed, draft);
        }
        match outcome? {
            None => Ok(poll),
            Some(message) => {
                tracing::info!(zau = %self.zau.name_any(), zone = %batch.zone, "eviction refused: {message}");
                record::record_refusal(batch, removed.len(), &message, draft);
                // Retry soon: budgets are not watched.
                Ok(Action::requeue(BUDGET_RETRY))
            }
        }
    }

    /// Writes the stored status with the batch's zone and the update revision (a group's
    /// StatefulSets with theirs) first, when it names others (a new zone, a new revision): a ZoneDisruptionBudget's webhook recognises
    /// this rollout's evictions by them (docs/zdb.md), from the zone's first. The rest of the
    /// draft is written after the batch, as always.
    async fn announce(&self, batch: &Batch, draft: &Draft) -> Result<(), ReconcileError> {
        let zone = batch.zone.to_string();
        let next = &draft.status;
        if self.previous.current_zone.as_deref() == Some(zone.as_str())
            && self.previous.update_revision == next.update_revision
            && rolled(&self.previous.stateful_sets).eq(rolled(&next.stateful_sets))
        {
            return Ok(());
        }
        let mut announced = self.previous.clone();
        announced.current_zone = Some(zone);
        announced.update_revision.clone_from(&next.update_revision);
        // A group's StatefulSets, with the revision each rolls out.
        announced.stateful_sets.clone_from(&next.stateful_sets);
        record::write(self.ctx, self.zau, self.uid, self.previous, &announced).await?;
        Ok(())
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

    /// Every pod runs the update revision and is Ready: record it on each StatefulSet (OnDelete
    /// never moves `status.currentRevision`) and in the status.
    async fn complete(&self, target: &Target, draft: &mut Draft) -> Result<Action, ReconcileError> {
        if !self.zau.spec.dry_run {
            for set in &target.sets {
                let Some(update_revision) = set.update_revision.as_deref() else {
                    continue;
                };
                if set.current_revision != update_revision {
                    self.complete_statefulset(&set.name, update_revision)
                        .await?;
                }
                if let Some(progress) = draft
                    .status
                    .stateful_sets
                    .iter_mut()
                    .find(|progress| progress.name == set.name)
                {
                    update_revision.clone_into(&mut progress.current_revision);
                }
            }
            draft.status.current_revision = draft.status.update_revision.clone();
        }
        record::record_complete(self.previous, draft);
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

/// A group's StatefulSets and the revision each rolls out, as the zdb webhook reads them.
fn rolled(sets: &[StatefulSetProgress]) -> impl Iterator<Item = (&str, &str)> {
    sets.iter()
        .map(|set| (set.name.as_str(), set.update_revision.as_str()))
}
