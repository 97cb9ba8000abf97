//! **plan** (pure): what the rollout's progress means for the status, and what the alarm's
//! state means for a batch that is due.

use kube::runtime::controller::Action;
use zone_api::ZoneAwareUpdateStatus;
use zone_api::conditions::Conditions;
use zone_api::zau::{ALARM_REASONS, condition, reason};
use zone_topology::Zone;
use zone_topology::rollout::{self, Plan, Progress, RolloutInput};

use super::Draft;
use super::observe::Observed;
use crate::alarm::AlarmState;

/// The rollout's progress and what is due next (`zone_topology::rollout`), from the status the
/// reconcile started from and what was observed.
pub(super) fn rollout(
    previous: &ZoneAwareUpdateStatus,
    observed: &Observed,
    update_revision: &str,
) -> (Progress, Plan) {
    let last_zone = previous.current_zone.as_deref().map(zone_from_status);
    let input = RolloutInput {
        replicas: observed.target.replicas,
        update_revision,
        last_update_revision: Some(previous.update_revision.as_str()).filter(|r| !r.is_empty()),
        step: u32::try_from(previous.update_step).unwrap_or(0),
        last_zone: last_zone.as_ref(),
        max_unavailable: observed.target.max_unavailable,
        exponential_factor: observed.valid.exponential_factor,
        pods: &observed.planned,
    };
    rollout::plan(&input)
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
    use std::time::Duration;
    use zone_api::ZoneAwareUpdateSpec;

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
}
