//! **apply**: ask the alarm, remove one batch through the Eviction API (or report it in a dry
//! run), or record a finished rollout on the StatefulSet.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use zone_api::ZoneAwareUpdateStatus;
use zone_api::conditions::Conditions;
use zone_api::zau::{condition, reason};
use zone_operator::status::{self, StatusError};
use zone_topology::rollout::{Batch, Plan, RolloutPod};

use super::context::Expected;
use super::observe::Observed;
use super::{Draft, ReconcileError, Step, plan, status as record};
use crate::alarm::AlarmState;
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
                    plan::alarm_decision(&self.zau.spec, self.previous, &alarm, draft, poll.clone())
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
            record::record_batch(batch, planned, &removed, zone_changed, draft);
        }
        match outcome? {
            None => Ok(Action::requeue(self.ctx.settings.alarm_poll_interval)),
            Some(message) => {
                tracing::info!(zau = %self.zau.name_any(), zone = %batch.zone, "eviction refused: {message}");
                record::record_refusal(batch, removed.len(), &message, draft);
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
