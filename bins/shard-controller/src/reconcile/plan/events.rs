//! The events of the retention plan: shards retained, reused, deleted when due, and the
//! retained shards that keep their deadline under a new policy.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use zone_api::sprom::{WhenScaled, reason};
use zone_operator::PendingEvents;

use crate::children::retention;

/// The events the retention plan deserves: shards retained, reused, deleted when due, and, on
/// a new generation under Delete, the retained shards that keep their deadline.
pub fn retention(
    plan: &retention::Plan,
    policy: retention::Policy,
    new_generation: bool,
    events: &mut PendingEvents,
) {
    let mut newly: BTreeMap<Option<Timestamp>, Vec<u32>> = BTreeMap::new();
    for r in plan.retained.iter().filter(|r| r.mark) {
        newly.entry(r.deadline).or_default().push(r.index);
    }
    for (deadline, indices) in newly {
        let until = match deadline {
            Some(deadline) => format!("until {}", retention::format(deadline)),
            None => "until you delete them (the retention is by size only)".to_string(),
        };
        events.normal(
            reason::SHARDS_RETAINED,
            "ScaleDown",
            format!(
                "shard(s) {} retained {until}: they scrape, evaluate and alert nothing and keep serving their data",
                list(&indices),
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
        let deleted = match kept.iter().filter_map(|r| r.deadline).max() {
            Some(deadline) => format!("at the latest at {}", retention::format(deadline)),
            None => "only when you delete them".to_string(),
        };
        events.normal(
            reason::SHARDS_RETAINED,
            "PolicyChange",
            format!(
                "whenScaled is Delete, but retained shard(s) {} keep their deadline: deleted {deleted}; delete their StatefulSets to remove them sooner",
                list(&indices),
            ),
        );
    }
}

pub(crate) fn list(indices: &[u32]) -> String {
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
