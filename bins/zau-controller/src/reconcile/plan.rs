//! **plan** (pure): what the rollout's progress means for the status.

use zone_api::ZoneAwareUpdateStatus;
use zone_api::zau::StatefulSetProgress;
use zone_topology::rollout::{self, Plan, Progress};
use zone_views::rollout::zone_from_status;

use super::Draft;
use super::observe::Observed;

/// The rollout's progress and what is due next (`zone_topology::rollout`), from the status the
/// reconcile started from and what was observed.
pub(super) fn rollout(
    previous: &ZoneAwareUpdateStatus,
    observed: &Observed,
    update_revision: &str,
) -> (Progress, Plan) {
    let last_zone = previous.current_zone.as_deref().map(zone_from_status);
    let input = zone_views::rollout::input(
        previous,
        &observed.valid,
        &observed.target,
        update_revision,
        &observed.planned,
        last_zone.as_ref(),
    );
    rollout::plan(&input)
}

/// What is rolled out, and from what.
pub struct Revisions<'a> {
    /// The StatefulSet's update revision (a group's, joined).
    pub update: &'a str,
    pub current: &'a str,
    /// A rollout group's StatefulSets (none for one StatefulSet).
    pub group: &'a [StatefulSetProgress],
}

/// The parts of the status every outcome shares (pure): revisions, old replicas per zone, the
/// current zone and step as the planner sees them, a group's StatefulSets; a NewRevision event
/// when a rollout restarts.
pub fn record_progress(
    previous: &ZoneAwareUpdateStatus,
    revisions: &Revisions<'_>,
    progress: &Progress,
    draft: &mut Draft,
) {
    let update_revision = revisions.update;
    let next = &mut draft.status;
    if previous.update_revision != update_revision {
        next.deleted_replicas = 0;
        // A bake belongs to the rollout that completed the zone.
        next.next_zone_not_before = None;
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
    revisions.current.clone_into(&mut next.current_revision);
    revisions.group.clone_into(&mut next.stateful_sets);
    next.old_replicas = progress
        .old_replicas
        .iter()
        .map(|(zone, old)| (zone.to_string(), i32::try_from(*old).unwrap_or(i32::MAX)))
        .collect();
    next.total_old_replicas = i32::try_from(progress.total_old()).unwrap_or(i32::MAX);
    next.current_zone = progress.current_zone.as_ref().map(ToString::to_string);
    next.update_step = i32::try_from(progress.step).unwrap_or(i32::MAX);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_topology::Zone;

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
            let revisions = Revisions {
                update: after,
                current: "web-1",
                group: &[],
            };
            record_progress(&previous, &revisions, &progress, &mut draft);
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
