//! Group commit, the pure part: the evictions of one budget waiting to be recorded are decided
//! together, in the order they arrived, on **one** version of the budget, each seeing the
//! records of those before it; one status write then records every allowed one.
//!
//! Folding the decisions over one status is what keeps a batch within the budget: the second
//! eviction is decided on the status that already holds the first one's record (its pod moved
//! from healthy to unhealthy, its zone disrupted), exactly as if the two had been written one
//! after the other. So a batch can never allow pods of two zones, nor more than maxUnavailable
//! in one, whatever its size; and the write over the version the batch was decided on (a PUT
//! carrying its resourceVersion) lets the batch count only if no other writer came in between.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};
use zone_topology::Zone;
use zone_topology::budget::{Decision, Denial, EvictedPod, PodCondition};

use super::{reason, view};

/// An eviction as a batch decides it: the pod as its request read it fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub pod: String,
    /// The zone of the pod's node (unknown while unscheduled).
    pub zone: Zone,
    pub condition: PodCondition,
    pub created_ms: i64,
    /// `kubectl drain --dry-run=server`: decided like a real eviction, recorded nowhere.
    pub dry_run: bool,
    /// The ZoneAwareUpdate controller's eviction for the rollout in progress in the pod's zone
    /// (see `EvictedPod::rollout`).
    pub rollout: bool,
}

/// What one version of a budget says of one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Allowed without a record (metric reason).
    Allow(&'static str),
    /// Refused (or, in shadow mode, allowed with a warning: the caller decides).
    Refuse {
        reason: &'static str,
        message: String,
    },
    /// Allowed once the status holding its record (in `zone`) is written.
    Record { zone: Zone },
}

/// One batch decided on one version of the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// One per candidate, in order.
    pub outcomes: Vec<Assessment>,
    /// The status to write when at least one outcome is [`Assessment::Record`].
    pub status: Option<ZoneDisruptionBudgetStatus>,
}

#[cfg(test)]
impl Folded {
    pub fn records(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o, Assessment::Record { .. }))
            .count()
    }
}

/// The newest of the versions of one budget at hand (the members' own fresh reads, this
/// replica's last write, its watch's copy), by resourceVersion: what a batch is decided on.
///
/// resourceVersions are opaque to clients and compared here only to choose, never to decide: a
/// batch decided on a version that is not the latest fails its write with a conflict and is
/// decided again on a fresh read, so a wrong choice costs a round trip, never a violation. The
/// API server's are etcd revisions, and the highest is the latest nearly always; one that does
/// not parse ranks last.
pub fn newest<I>(versions: I) -> Option<std::sync::Arc<ZoneDisruptionBudget>>
where
    I: IntoIterator<Item = std::sync::Arc<ZoneDisruptionBudget>>,
{
    versions.into_iter().max_by_key(|zdb| {
        zdb.metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok())
    })
}

/// Decides `candidates` in order on budget `zdb` (named `name`), each on the status holding the
/// records of those allowed before it; `at` is the time of the records.
///
/// A pod named twice in a batch (a client that resent its eviction before the first answer) is
/// recorded once, and the second request rides on the same record: it too is allowed only once
/// the write has stored it. Answered at once as a retry of a recorded eviction, it would be
/// allowed on a record that a failed write never stored.
pub fn fold(name: &str, zdb: &ZoneDisruptionBudget, candidates: &[Candidate], at: &Time) -> Folded {
    let mut status = zdb.status.clone().unwrap_or_default();
    // Pods recorded by this batch, and where.
    let mut recorded: Vec<(&str, Zone)> = Vec::new();
    let outcomes = candidates
        .iter()
        .map(|candidate| {
            let earlier = recorded
                .iter()
                .find(|(pod, _)| *pod == candidate.pod)
                .map(|(_, zone)| zone.clone());
            if let Some(zone) = earlier
                && !candidate.dry_run
            {
                return Assessment::Record { zone };
            }
            let outcome = assess(name, zdb, &mut status, candidate, at);
            if let Assessment::Record { zone } = &outcome {
                recorded.push((&candidate.pod, zone.clone()));
            }
            outcome
        })
        .collect();
    Folded {
        outcomes,
        status: (!recorded.is_empty()).then_some(status),
    }
}

/// What `status` (the status of `zdb`, with the records of a batch so far) says of one
/// eviction; an eviction to record is recorded in `status`.
pub fn assess(
    name: &str,
    zdb: &ZoneDisruptionBudget,
    status: &mut ZoneDisruptionBudgetStatus,
    candidate: &Candidate,
    at: &Time,
) -> Assessment {
    let Ok(valid) = zdb.spec.validate() else {
        // The controller reports it (condition, event); an unenforceable budget must not block
        // every drain of the namespace.
        return Assessment::Allow(reason::INVALID_BUDGET);
    };
    let generation = zdb.metadata.generation.unwrap_or(0);
    if status.observed_generation != generation {
        return Assessment::Refuse {
            reason: reason::NOT_OBSERVED,
            message: format!(
                "cannot evict pod {}: ZoneDisruptionBudget {name} generation {generation} is not computed yet (status is for {}); retry",
                candidate.pod, status.observed_generation
            ),
        };
    }
    let budget = view::from_status(status, valid.policy);
    let decision = budget.decide(&EvictedPod {
        name: &candidate.pod,
        zone: candidate.zone.clone(),
        condition: candidate.condition,
        created_ms: candidate.created_ms,
        rollout: candidate.rollout,
    });
    match decision {
        Decision::Allow { record: false, .. } => {
            Assessment::Allow(if candidate.condition == PodCondition::Healthy {
                reason::ALREADY_RECORDED
            } else {
                reason::POD_UNAVAILABLE
            })
        }
        Decision::Allow { .. } if candidate.dry_run => Assessment::Allow(reason::DRY_RUN),
        Decision::Allow { zone, record: true } => {
            view::record(status, &candidate.pod, &zone, at.clone(), valid.policy);
            Assessment::Record { zone }
        }
        Decision::Deny(denial) => Assessment::Refuse {
            reason: denial_reason(&denial),
            message: denial_message(name, &candidate.pod, &denial),
        },
    }
}

/// The denial, naming the zone and what blocks it.
pub fn denial_message(budget: &str, pod: &str, denial: &Denial) -> String {
    let why = match denial {
        Denial::OtherZoneDisrupted {
            zone,
            disrupted,
            blocking: b,
        } => format!(
            "zone {disrupted} is disrupted ({}): evictions in zone {zone} must wait until it recovers",
            view::blocking(b)
        ),
        Denial::ZoneBudgetExhausted {
            zone,
            limit,
            blocking: b,
        } => format!("zone {zone} {} ({})", limit.exhausted(b), view::blocking(b)),
        Denial::Frozen { limit, .. } => {
            let field = limit.thawed_when();
            format!(
                "the budget is frozen ({limit}): no voluntary eviction of its pods is allowed until {field}"
            )
        }
    };
    format!("cannot evict pod {pod}: ZoneDisruptionBudget {budget}: {why}")
}

pub fn denial_reason(denial: &Denial) -> &'static str {
    match denial {
        Denial::OtherZoneDisrupted { .. } => reason::OTHER_ZONE_DISRUPTED,
        Denial::ZoneBudgetExhausted { .. } => reason::ZONE_BUDGET_EXHAUSTED,
        Denial::Frozen { .. } => reason::FROZEN,
    }
}

/// Budgets and candidates for the tests of the batches (here and in the zdb-controller).
#[cfg(any(test, feature = "testing"))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod testing {
    use super::*;
    use zone_topology::IntOrPercent;

    pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
    /// Pods per zone in the budgets below: more than a batch of the tests evicts in one zone.
    pub const PER_ZONE: i32 = 8;

    /// A computed budget of 3 x 8 pods: `unhealthy[i]` pods of zone i unavailable, of which
    /// `recorded[i]` by recorded evictions (named `old-<zone>-<n>`).
    pub fn budget(
        max_unavailable: IntOrPercent,
        unhealthy: [i32; 3],
        recorded: [i32; 3],
    ) -> ZoneDisruptionBudget {
        let spec = serde_json::json!({
            "selector": {"matchLabels": {"app": "web"}},
            "maxUnavailable": match max_unavailable {
                IntOrPercent::Int(n) => serde_json::json!(n),
                IntOrPercent::Percent(p) => serde_json::json!(format!("{p}%")),
            },
        });
        let mut status = ZoneDisruptionBudgetStatus {
            observed_generation: 1,
            ..ZoneDisruptionBudgetStatus::default()
        };
        for (i, zone) in ZONES.iter().enumerate() {
            status.expected_pods.insert((*zone).to_string(), PER_ZONE);
            status
                .current_healthy
                .insert((*zone).to_string(), PER_ZONE - unhealthy[i]);
            for n in 0..recorded[i] {
                let pod = format!("old-{zone}-{n}");
                status
                    .disrupted_pods
                    .insert(pod.clone(), view::time_of_ms(1_000));
                status.disrupted_pod_zones.insert(pod, (*zone).to_string());
            }
        }
        let mut zdb: ZoneDisruptionBudget = serde_json::from_value(serde_json::json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneDisruptionBudget",
            "metadata": {"name": "web", "namespace": "apps", "generation": 1, "resourceVersion": "7"},
            "spec": spec,
        }))
        .unwrap();
        zdb.status = Some(status);
        zdb
    }

    pub fn healthy(pod: &str, zone: &str) -> Candidate {
        Candidate {
            pod: pod.to_string(),
            zone: Zone::known(zone),
            condition: PodCondition::Healthy,
            created_ms: 500,
            dry_run: false,
            rollout: false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::testing::*;
    use super::*;
    use std::collections::BTreeSet;
    use zone_topology::IntOrPercent;
    use zone_topology::budget::{Limit, Policy, ZoneLimit};

    fn at() -> Time {
        view::time_of_ms(2_000_000)
    }

    /// Every sequence of zone indices of length `len`.
    fn sequences(len: u32) -> impl Iterator<Item = Vec<usize>> {
        (0..3usize.pow(len)).map(move |mut code| {
            (0..len)
                .map(|_| {
                    let zone = code % 3;
                    code /= 3;
                    zone
                })
                .collect()
        })
    }

    /// Property, over every batch of up to 6 evictions of healthy pods (every order of zones),
    /// every budget state with at most one disrupted zone (0..=2 pods unavailable, some of them
    /// by recorded evictions) and maxUnavailable 1, 2, 3, 20% and 100%: the evictions a batch
    /// records are all in one zone, that zone is the one already disrupted (if any), and the
    /// zone's unavailable pods never exceed maxUnavailable. And a batch is no more timid than
    /// the evictions one by one: it records as many as the room left in the first candidate's
    /// zone allows.
    #[test]
    fn a_batch_never_exceeds_the_budget() {
        let limits = [
            (IntOrPercent::Int(1), 1),
            (IntOrPercent::Int(2), 2),
            (IntOrPercent::Int(3), 3),
            // Of the 24 expected pods, rounded up.
            (IntOrPercent::Percent(20), 5),
            (IntOrPercent::Percent(100), 24),
        ];
        let mut batches = 0;
        for (max_unavailable, limit) in limits {
            // Zone-a as the disrupted one is no loss: the batches cover every order of zones.
            let disrupted = 0;
            for unavailable in 0..=2 {
                for recorded in 0..=unavailable {
                    let mut unhealthy = [0; 3];
                    let mut records = [0; 3];
                    unhealthy[disrupted] = unavailable;
                    records[disrupted] = recorded;
                    let zdb = budget(max_unavailable, unhealthy, records);
                    for len in 1..=6 {
                        for zones in sequences(len) {
                            let candidates: Vec<Candidate> = zones
                                .iter()
                                .enumerate()
                                .map(|(i, z)| healthy(&format!("p{i}"), ZONES[*z]))
                                .collect();
                            let folded = fold("web", &zdb, &candidates, &at());
                            batches += 1;
                            let allowed: BTreeSet<&Zone> = folded
                                .outcomes
                                .iter()
                                .filter_map(|o| match o {
                                    Assessment::Record { zone } => Some(zone),
                                    _ => None,
                                })
                                .collect();
                            let case = format!(
                                "maxUnavailable {max_unavailable:?}, unhealthy {unhealthy:?}, recorded {records:?}, batch {zones:?}: {:?}",
                                folded.outcomes
                            );
                            assert!(allowed.len() <= 1, "two zones: {case}");
                            let already = usize::try_from(unavailable).unwrap();
                            let zone = if already > 0 { disrupted } else { zones[0] };
                            if let Some(allowed_zone) = allowed.first() {
                                assert_eq!(**allowed_zone, Zone::known(ZONES[zone]), "{case}");
                            }
                            // (A budget may start past its limit: pods fail on their own.)
                            assert!(
                                folded.records() == 0 || already + folded.records() <= limit,
                                "over maxUnavailable: {case}"
                            );
                            // As many as fit: the room left, or every candidate of the zone.
                            let in_zone = zones.iter().filter(|z| **z == zone).count();
                            assert_eq!(
                                folded.records(),
                                in_zone.min(limit.saturating_sub(already)),
                                "{case}"
                            );
                            // The written status agrees: one zone disrupted, within the limit.
                            if let Some(status) = &folded.status {
                                let after = view::from_status(
                                    status,
                                    Policy::max_unavailable(max_unavailable),
                                );
                                let disrupted_after = after.disrupted_zones();
                                assert_eq!(disrupted_after.len(), 1, "{case}");
                                let unhealthy = after.zones[disrupted_after[0]].unhealthy;
                                assert!(unhealthy <= u32::try_from(limit).unwrap(), "{case}");
                            } else {
                                assert_eq!(folded.records(), 0, "{case}");
                            }
                        }
                    }
                }
            }
        }
        assert!(batches > 30_000, "{batches} batches");
    }

    /// Each candidate sees the records of those before it: the same pod twice is recorded
    /// once, and the second waits for the same write (it is not a retry of a stored record);
    /// a pod already down is allowed unrecorded; a dry run is decided on the batch's records
    /// and records nothing.
    #[test]
    fn later_candidates_see_the_earlier_records() {
        let zdb = budget(IntOrPercent::Int(2), [0; 3], [0; 3]);
        let mut down = healthy("down", "zone-c");
        down.condition = PodCondition::NotReady;
        let mut dry = healthy("dry", "zone-b");
        dry.dry_run = true;
        let candidates = [
            healthy("p0", "zone-a"),
            healthy("p0", "zone-a"),
            dry.clone(),
            down,
            healthy("p1", "zone-a"),
            healthy("p2", "zone-a"),
        ];
        let folded = fold("web", &zdb, &candidates, &at());
        let a = Zone::known("zone-a");
        assert_eq!(folded.outcomes[0], Assessment::Record { zone: a.clone() });
        assert_eq!(folded.outcomes[1], Assessment::Record { zone: a.clone() });
        assert!(
            matches!(&folded.outcomes[2], Assessment::Refuse { reason, .. } if *reason == reason::OTHER_ZONE_DISRUPTED),
            "{:?}",
            folded.outcomes[2]
        );
        assert_eq!(
            folded.outcomes[3],
            Assessment::Allow(reason::POD_UNAVAILABLE)
        );
        assert_eq!(folded.outcomes[4], Assessment::Record { zone: a });
        assert!(
            matches!(&folded.outcomes[5], Assessment::Refuse { reason, message } if *reason == reason::ZONE_BUDGET_EXHAUSTED && message.contains("p0, p1 evicted")),
            "{:?}",
            folded.outcomes[5]
        );
        let status = folded.status.unwrap();
        assert_eq!(
            status.disrupted_pods.keys().collect::<Vec<_>>(),
            ["p0", "p1"]
        );
        assert_eq!(status.current_healthy["zone-a"], PER_ZONE - 2);

        // Alone on an undisrupted budget, the dry run is allowed and writes nothing.
        let folded = fold("web", &zdb, &[dry], &at());
        assert_eq!(folded.outcomes, [Assessment::Allow(reason::DRY_RUN)]);
        assert!(folded.status.is_none());
    }

    #[test]
    fn the_newest_version_at_hand_is_decided_on() {
        use std::sync::Arc;
        let version = |rv: &str| {
            let mut zdb = budget(IntOrPercent::Int(1), [0; 3], [0; 3]);
            zdb.metadata.resource_version = Some(rv.to_string());
            Arc::new(zdb)
        };
        let newest_of = |rvs: &[&str]| {
            newest(rvs.iter().map(|rv| version(rv)))
                .and_then(|zdb| zdb.metadata.resource_version.clone())
        };
        assert_eq!(newest_of(&["9", "10", "8"]).as_deref(), Some("10"));
        assert_eq!(newest_of(&["opaque", "3"]).as_deref(), Some("3"));
        assert_eq!(newest_of(&["opaque"]).as_deref(), Some("opaque"));
        assert_eq!(newest_of(&[]), None);
    }

    /// A status not computed for the budget's generation refuses the whole batch.
    #[test]
    fn an_unobserved_generation_refuses_every_candidate() {
        let mut zdb = budget(IntOrPercent::Int(2), [0; 3], [0; 3]);
        zdb.metadata.generation = Some(2);
        let folded = fold(
            "web",
            &zdb,
            &[healthy("p0", "zone-a"), healthy("p1", "zone-a")],
            &at(),
        );
        assert!(folded.status.is_none());
        for outcome in folded.outcomes {
            assert!(
                matches!(outcome, Assessment::Refuse { reason, .. } if reason == reason::NOT_OBSERVED)
            );
        }
    }

    #[test]
    fn denials_name_the_zone_and_the_blocking_pods() {
        let blocking = zone_topology::budget::ZoneBudget {
            expected: 3,
            healthy: 0,
            unhealthy: 3,
            blocking_pods: vec!["web-0".into(), "web-3".into()],
            ..zone_topology::budget::ZoneBudget::default()
        };
        let message = denial_message(
            "web",
            "web-4",
            &Denial::OtherZoneDisrupted {
                zone: Zone::known("zone-b"),
                disrupted: Zone::known("zone-a"),
                blocking: blocking.clone(),
            },
        );
        assert_eq!(
            message,
            "cannot evict pod web-4: ZoneDisruptionBudget web: zone zone-a is disrupted (web-0, web-3 evicted; 1 other pod(s) unavailable or missing): evictions in zone zone-b must wait until it recovers"
        );
        let message = denial_message(
            "web",
            "web-6",
            &Denial::ZoneBudgetExhausted {
                zone: Zone::known("zone-a"),
                limit: ZoneLimit::MaxUnavailable(2),
                blocking: blocking.clone(),
            },
        );
        assert!(
            message.contains("zone zone-a already has 3 of maxUnavailable 2"),
            "{message}"
        );
        let message = denial_message(
            "web",
            "web-6",
            &Denial::ZoneBudgetExhausted {
                zone: Zone::known("zone-a"),
                limit: ZoneLimit::MinAvailable(3),
                blocking,
            },
        );
        assert!(
            message.contains("zone zone-a has 0 healthy pod(s), minAvailable 3 (web-0, web-3"),
            "{message}"
        );
        let frozen = Denial::Frozen {
            zone: Zone::known("zone-a"),
            limit: Limit::MaxUnavailable(IntOrPercent::Int(0)),
        };
        assert_eq!(
            denial_message("web", "web-6", &frozen),
            "cannot evict pod web-6: ZoneDisruptionBudget web: the budget is frozen (maxUnavailable 0): no voluntary eviction of its pods is allowed until maxUnavailable is raised"
        );
        assert_eq!(denial_reason(&frozen), reason::FROZEN);
    }
}
