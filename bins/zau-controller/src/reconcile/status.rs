//! **status** (pure, then written): what a removed batch, a refused eviction or a finished
//! rollout change in the status, and the write of the status with its metrics and events.

use k8s_openapi::jiff::Timestamp;
use kube::{Api, Resource, ResourceExt};
use zone_api::conditions::Conditions;
use zone_api::zau::{condition, reason};
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus};
use zone_operator::status::{self, StatusError};
use zone_topology::rollout::{Batch, RolloutPod};

use super::Draft;
use super::context::{Context, resource_version};

/// Writes `next` as the status when it differs from `previous`, and remembers what was written:
/// the cache may not show the write yet.
pub(super) async fn write(
    ctx: &Context,
    zau: &ZoneAwareUpdate,
    uid: &str,
    previous: &ZoneAwareUpdateStatus,
    next: &ZoneAwareUpdateStatus,
) -> Result<(), StatusError> {
    if next == previous {
        return Ok(());
    }
    let namespace = zau.namespace().unwrap_or_default();
    let api: Api<ZoneAwareUpdate> = Api::namespaced(ctx.client.clone(), &namespace);
    let stored = status::apply_status(&api, zau, &ctx.settings.field_manager, next).await?;
    ctx.remember(uid, |m| {
        m.written = Some((resource_version(&stored), next.clone()));
    });
    Ok(())
}

/// The metrics of the status (reached from `previous`), then the events of the reconcile (once
/// its status is written, or did not change).
pub(super) async fn publish(
    ctx: &Context,
    zau: &ZoneAwareUpdate,
    namespace: &str,
    previous: &ZoneAwareUpdateStatus,
    draft: Draft,
) {
    let name = zau.name_any();
    let now = Timestamp::now().as_second();
    ctx.zau_metrics
        .observe(namespace, &name, previous, &draft.status, now);
    ctx.series.note(
        namespace,
        &name,
        draft.status.old_replicas.keys().map(String::as_str),
    );
    draft
        .events
        .publish(&ctx.events, &zau.object_ref(&()))
        .await;
}

pub(super) fn batch_text(batch: &Batch) -> String {
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
    next.paused_by.clear();
    next.next_zone_not_before = None;
    next.set_condition(condition::COMPLETE, true, reason::ROLLOUT_COMPLETE, message);
    next.set_condition(condition::PROGRESSING, false, reason::ROLLOUT_COMPLETE, "");
    next.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, "");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_topology::Zone;

    fn pod(name: &str, ready: bool) -> RolloutPod {
        RolloutPod {
            name: name.into(),
            ordinal: 0,
            zone: Zone::known("zone-a"),
            revision: "web-1".into(),
            update_revision: "web-2".into(),
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
