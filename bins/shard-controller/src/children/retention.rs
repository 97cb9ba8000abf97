//! What happens to shards a scale-down removed (pure): from the spec's shard count and policy,
//! the shards' StatefulSets as observed and the clock, which shards are active, which are
//! retained (and until when), which are deleted now, and when to look again.
//!
//! A retained shard is marked on its StatefulSet: [`RETAINED_SINCE_ANNOTATION`] (always) and
//! [`DELETION_DEADLINE_ANNOTATION`] (unless it is kept until the user deletes it). The marks are
//! the state: a controller restart, a policy change or a change of the retention period finds
//! the deadline where it was set and keeps it. A retained shard is deleted when its deadline
//! passes, whatever the policy is by then; a shard that is not marked and no longer wanted is
//! deleted at once under Delete and marked under Retain.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use zone_api::sprom::WhenScaled;

/// On a retained shard's StatefulSet: when it is deleted (RFC 3339).
pub const DELETION_DEADLINE_ANNOTATION: &str = "zonecontrol.k8s.aws/deletion-deadline";
/// On a retained shard's StatefulSet: since when it is retained (RFC 3339); its presence is what
/// tells a retained shard from one just scaled away.
pub const RETAINED_SINCE_ANNOTATION: &str = "zonecontrol.k8s.aws/retained-since";

/// A shard's StatefulSet as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExistingShard {
    pub index: u32,
    /// The raw [`RETAINED_SINCE_ANNOTATION`], if set.
    pub retained_since: Option<String>,
    /// The raw [`DELETION_DEADLINE_ANNOTATION`], if set.
    pub deletion_deadline: Option<String>,
}

/// What the spec says of removed shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub when_scaled: WhenScaled,
    /// How long a newly retained shard is kept (None: until the user deletes it).
    pub period: Option<Duration>,
}

/// A shard kept after a scale-down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    pub index: u32,
    pub since: Timestamp,
    /// None: kept until the user deletes it.
    pub deadline: Option<Timestamp>,
    /// The marks on its StatefulSet must be (re)written: newly retained, or a mark was unreadable.
    pub mark: bool,
}

/// Why a shard is deleted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Its deletion deadline has passed.
    Due,
    /// Removed by a scale-down under the Delete policy.
    Scaled,
}

/// The fate of every shard beyond the active ones, and when to look again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// By index.
    pub retained: Vec<Retained>,
    /// Active shards whose StatefulSet still carries a retention mark: a scale-up reuses a
    /// retained shard, and the marks are removed.
    pub reused: Vec<u32>,
    /// Shards whose children are deleted now, by index.
    pub deleted: Vec<(u32, Deletion)>,
    /// The time to the earliest deadline of a retained shard: reconcile again then.
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// The earliest deadline of a retained shard.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.retained.iter().filter_map(|r| r.deadline).min()
    }
}

/// A timestamp as the marks write it: RFC 3339 to the second, UTC.
pub fn format(at: Timestamp) -> String {
    Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string()
}

fn parse(raw: Option<&str>) -> Option<Timestamp> {
    raw?.trim().parse().ok()
}

fn plus(at: Timestamp, period: Duration) -> Timestamp {
    SignedDuration::try_from(period)
        .ok()
        .and_then(|period| at.checked_add(period).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Decides, for `shards` active shards under `policy`, what becomes of every observed shard.
pub fn plan(shards: u32, policy: Policy, existing: &[ExistingShard], now: Timestamp) -> Plan {
    let mut result = Plan::default();
    let by_index: BTreeMap<u32, &ExistingShard> = existing.iter().map(|s| (s.index, s)).collect();
    for (index, shard) in by_index {
        let marked = shard.retained_since.is_some() || shard.deletion_deadline.is_some();
        if index < shards {
            if marked {
                result.reused.push(index);
            }
            continue;
        }
        if !marked {
            match policy.when_scaled {
                WhenScaled::Delete => result.deleted.push((index, Deletion::Scaled)),
                WhenScaled::Retain => result.retained.push(Retained {
                    index,
                    since: now,
                    deadline: policy.period.map(|period| plus(now, period)),
                    mark: true,
                }),
            }
            continue;
        }
        // Already retained: its marks decide, not today's policy. A mark that does not parse
        // (edited by hand) is rewritten from what can be read, never read as "delete now".
        let since = parse(shard.retained_since.as_deref());
        let deadline = parse(shard.deletion_deadline.as_deref());
        let unreadable =
            since.is_none() || (shard.deletion_deadline.is_some() && deadline.is_none());
        let since = since.unwrap_or(now);
        let deadline = match (shard.deletion_deadline.as_deref(), deadline) {
            (None, _) => None,
            (Some(_), Some(deadline)) => Some(deadline),
            (Some(_), None) => Some(plus(
                since,
                policy
                    .period
                    .unwrap_or(zone_api::sprom::DEFAULT_RETAINED_SHARD_PERIOD),
            )),
        };
        if deadline.is_some_and(|deadline| deadline <= now) {
            result.deleted.push((index, Deletion::Due));
            continue;
        }
        result.retained.push(Retained {
            index,
            since,
            deadline,
            mark: unreadable,
        });
    }
    result.requeue_after = result.next_deadline().map(|deadline| {
        let left = now.duration_until(deadline);
        // Rounded up to the millisecond: waking a hair early would find nothing due.
        Duration::try_from(left)
            .unwrap_or_default()
            .saturating_add(Duration::from_millis(1))
    });
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const NOW: &str = "2026-11-25T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn at(raw: &str) -> Timestamp {
        raw.parse().unwrap()
    }

    fn plain(index: u32) -> ExistingShard {
        ExistingShard {
            index,
            ..ExistingShard::default()
        }
    }

    fn marked(index: u32, since: &str, deadline: Option<&str>) -> ExistingShard {
        ExistingShard {
            index,
            retained_since: Some(since.to_string()),
            deletion_deadline: deadline.map(str::to_string),
        }
    }

    const RETAIN_20S: Policy = Policy {
        when_scaled: WhenScaled::Retain,
        period: Some(Duration::from_secs(20)),
    };
    const DELETE: Policy = Policy {
        when_scaled: WhenScaled::Delete,
        period: Some(Duration::from_secs(20)),
    };

    #[test]
    fn a_scale_down_under_retain_marks_the_removed_shards_with_one_deadline() {
        let existing: Vec<_> = (0..6).map(plain).collect();
        let plan = plan(3, RETAIN_20S, &existing, now());
        let deadline = at("2026-11-25T12:00:20Z");
        assert_eq!(
            plan.retained,
            (3..6)
                .map(|index| Retained {
                    index,
                    since: now(),
                    deadline: Some(deadline),
                    mark: true,
                })
                .collect::<Vec<_>>()
        );
        assert!(plan.deleted.is_empty() && plan.reused.is_empty());
        assert_eq!(plan.requeue_after, Some(Duration::from_millis(20_001)));
    }

    #[test]
    fn a_scale_down_under_delete_deletes_at_once() {
        let existing: Vec<_> = (0..4).map(plain).collect();
        let plan = plan(1, DELETE, &existing, now());
        assert!(plan.retained.is_empty());
        assert_eq!(
            plan.deleted,
            vec![
                (1, Deletion::Scaled),
                (2, Deletion::Scaled),
                (3, Deletion::Scaled)
            ]
        );
        assert_eq!(plan.requeue_after, None);
    }

    #[test]
    fn retained_shards_are_deleted_when_due_and_the_requeue_is_at_the_next_deadline() {
        let existing = vec![
            plain(0),
            marked(1, "2026-11-25T11:00:00Z", Some("2026-11-25T12:00:00Z")),
            marked(2, "2026-11-25T11:00:00Z", Some("2026-11-25T12:00:05Z")),
            marked(3, "2026-11-25T11:00:00Z", Some("2026-11-25T12:01:00Z")),
        ];
        let plan = plan(1, RETAIN_20S, &existing, now());
        assert_eq!(
            plan.deleted,
            vec![(1, Deletion::Due)],
            "a deadline equal to now is due"
        );
        assert_eq!(
            plan.retained
                .iter()
                .map(|r| (r.index, r.mark))
                .collect::<Vec<_>>(),
            vec![(2, false), (3, false)],
            "existing marks are kept, not rewritten"
        );
        assert_eq!(plan.requeue_after, Some(Duration::from_millis(5_001)));
        assert_eq!(plan.next_deadline(), Some(at("2026-11-25T12:00:05Z")));
    }

    #[test]
    fn switching_to_delete_keeps_the_deadlines_of_retained_shards() {
        let existing = vec![
            plain(0),
            marked(1, "2026-11-25T11:59:00Z", Some("2026-11-25T12:10:00Z")),
            plain(2),
        ];
        let plan = plan(1, DELETE, &existing, now());
        assert_eq!(plan.retained.len(), 1);
        assert_eq!(plan.retained[0].deadline, Some(at("2026-11-25T12:10:00Z")));
        assert_eq!(
            plan.deleted,
            vec![(2, Deletion::Scaled)],
            "only the unmarked shard goes at once"
        );
    }

    #[test]
    fn a_longer_period_does_not_move_an_existing_deadline() {
        let existing = vec![marked(
            4,
            "2026-11-25T11:59:00Z",
            Some("2026-11-25T12:00:30Z"),
        )];
        let long = Policy {
            when_scaled: WhenScaled::Retain,
            period: Some(Duration::from_secs(86_400)),
        };
        let plan = plan(2, long, &existing, now());
        assert_eq!(plan.retained[0].deadline, Some(at("2026-11-25T12:00:30Z")));
    }

    #[test]
    fn size_only_retention_keeps_until_the_user_deletes() {
        let keep = Policy {
            when_scaled: WhenScaled::Retain,
            period: None,
        };
        let plan1 = plan(1, keep, &[plain(0), plain(1)], now());
        assert_eq!(plan1.retained[0].deadline, None);
        assert!(plan1.retained[0].mark);
        assert_eq!(plan1.requeue_after, None, "nothing to wake up for");
        // Marked without a deadline: kept under either policy.
        let existing = [marked(1, NOW, None)];
        assert_eq!(plan(0, DELETE, &existing, now()).retained.len(), 1);
    }

    #[test]
    fn a_scale_up_reuses_retained_shards() {
        let existing = vec![
            plain(0),
            marked(1, "2026-11-25T11:59:00Z", Some("2026-11-25T12:00:30Z")),
            marked(2, "2026-11-25T11:59:00Z", Some("2026-11-25T12:00:30Z")),
        ];
        let plan = plan(3, RETAIN_20S, &existing, now());
        assert_eq!(plan.reused, vec![1, 2]);
        assert!(plan.retained.is_empty() && plan.deleted.is_empty());
        assert_eq!(plan.requeue_after, None);
    }

    #[test]
    fn unreadable_marks_are_rewritten_never_read_as_due() {
        let existing = vec![
            marked(1, "yesterday", Some("2026-11-25T12:00:30Z")),
            marked(2, "2026-11-25T11:59:50Z", Some("soon")),
        ];
        let plan = plan(1, RETAIN_20S, &existing, now());
        assert!(plan.deleted.is_empty(), "{plan:?}");
        assert_eq!(
            plan.retained,
            vec![
                Retained {
                    index: 1,
                    since: now(),
                    deadline: Some(at("2026-11-25T12:00:30Z")),
                    mark: true,
                },
                Retained {
                    index: 2,
                    since: at("2026-11-25T11:59:50Z"),
                    deadline: Some(at("2026-11-25T12:00:10Z")),
                    mark: true,
                },
            ]
        );
    }

    #[test]
    fn marks_are_rfc3339_to_the_second() {
        let at = Timestamp::from_millisecond(1_795_000_000_123).unwrap();
        let text = format(at);
        assert!(text.ends_with('Z') && !text.contains('.'), "{text}");
        assert_eq!(
            parse(Some(&text)),
            Timestamp::from_second(1_795_000_000).ok()
        );
    }
}
