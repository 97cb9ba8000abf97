//! The ZoneDisruptionBudget status as the budget math sees it, and back.
//!
//! The status is the shared state of the controller and every webhook replica: per-zone counts
//! (written by the controller from the pods it watches) and the disruptions the webhook recorded.
//! Both writers keep one invariant: **every recorded pod is already subtracted from
//! `currentHealthy`** of its zone. The controller computes the counts with the records; the
//! webhook, when it records, moves the pod from healthy to unhealthy itself. So the webhook can
//! rebuild the budget from the status alone ([`from_status`]) without double-counting a record
//! the controller has already seen.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use zone_api::ZoneDisruptionBudgetStatus;
use zone_api::conditions::Conditions;
use zone_api::zdb::{condition, reason};
use zone_topology::Zone;
use zone_topology::budget::{self, Budget, BudgetInput, BudgetPod, Disruption, Policy};
use zone_topology::zone::UNKNOWN_ZONE;

pub fn time_of_ms(at_ms: i64) -> Time {
    Time(Timestamp::from_millisecond(at_ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The key of a zone in the status maps.
pub fn zone_key(zone: &Zone) -> String {
    zone.to_string()
}

pub fn zone_from_key(key: &str) -> Zone {
    if key == UNKNOWN_ZONE || key.is_empty() {
        Zone::Unknown
    } else {
        Zone::known(key)
    }
}

/// The recorded disruptions of a status.
pub fn records(status: &ZoneDisruptionBudgetStatus) -> Vec<Disruption> {
    status
        .disrupted_pods
        .iter()
        .map(|(pod, at)| Disruption {
            pod: pod.clone(),
            zone: status
                .disrupted_pod_zones
                .get(pod)
                .map_or(Zone::Unknown, |z| zone_from_key(z)),
            at_ms: at.0.as_millisecond(),
        })
        .collect()
}

pub fn previous_expected(status: &ZoneDisruptionBudgetStatus) -> BTreeMap<Zone, u32> {
    status
        .expected_pods
        .iter()
        .map(|(zone, n)| (zone_from_key(zone), u32::try_from(*n).unwrap_or(0)))
        .collect()
}

/// The zones the controller's next computation starts from: those of `status.expectedPods`
/// except "unknown". A zone stays even when all its pods vanish, but "unknown" is where a pod
/// waits to be scheduled, not a place: it stays in the status only while a pod is there (or a
/// missing pod cannot be placed), instead of lingering with zero pods once they are scheduled.
pub fn remembered_expected(status: &ZoneDisruptionBudgetStatus) -> BTreeMap<Zone, u32> {
    previous_expected(status)
        .into_iter()
        .filter(|(zone, _)| zone.is_known())
        .collect()
}

/// Whether the owners have every pod they want: they are seen (they want at least the pods the
/// last computation expected, `previous_expected`) and no pod is missing. A gone pod's record
/// may then end (see [`settle_records`]).
pub fn replaced(expected_total: u32, previous_expected: &BTreeMap<Zone, u32>, pods: usize) -> bool {
    let owners_seen = expected_total
        >= previous_expected
            .values()
            .fold(0u32, |a, n| a.saturating_add(*n));
    owners_seen && u32::try_from(pods).unwrap_or(u32::MAX) >= expected_total
}

/// The records the controller keeps, after [`budget::prune`]: a record without a zone (the Go
/// controller stored none) takes its pod's zone while the pod is there, and is dropped once the
/// pod is gone. A zoneless record cannot place a missing pod (the zones that lost pods do that
/// better, see `budget::compute`), and the webhook, which rebuilds the budget from the status,
/// would count it as an evicted pod in the unknown zone and refuse every eviction until it
/// expired.
///
/// A record with a zone is dropped once its pod is gone and `replaced` (see [`replaced`]): the
/// owners have every pod they want again, so the evicted pod's replacement is there (under
/// another name: a ReplicaSet's), counted unhealthy in its zone until it is Ready, as a PDB
/// counts it. Without this the record would hold its zone until it expired (2 minutes per
/// eviction in a drain). While a pod is missing the record stays: it is what places the missing
/// pod, and a StatefulSet's replacement comes back under the recorded name (kept by
/// [`budget::prune`] until it is scheduled). When every pod of an owner is gone the owner is not
/// seen: the record stays and is what keeps the zone disrupted.
pub fn settle_records(
    records: Vec<Disruption>,
    pods: &[BudgetPod],
    replaced: bool,
) -> Vec<Disruption> {
    records
        .into_iter()
        .filter_map(|mut record| {
            let pod = pods.iter().find(|p| p.name == record.pod);
            if record.zone.is_known() {
                return (pod.is_some() || !replaced).then_some(record);
            }
            let pod = pod?;
            if pod.zone.is_known() {
                record.zone = pod.zone.clone();
            }
            Some(record)
        })
        .collect()
}

fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Writes the budget's numbers and the records into the status (conditions and
/// observedGeneration are the caller's).
pub fn apply(budget: &Budget, records: &[Disruption], status: &mut ZoneDisruptionBudgetStatus) {
    let per_zone = |f: &dyn Fn(&budget::ZoneBudget) -> u32| -> BTreeMap<String, i32> {
        budget
            .zones
            .iter()
            .map(|(zone, b)| (zone_key(zone), count(f(b))))
            .collect()
    };
    status.expected_pods = per_zone(&|b| b.expected);
    status.current_healthy = per_zone(&|b| b.healthy);
    status.current_unhealthy = per_zone(&|b| b.unhealthy);
    status.desired_healthy = per_zone(&|b| b.desired_healthy);
    status.disruptions_allowed = per_zone(&|b| b.disruptions_allowed);
    status.disrupted_zones = budget.disrupted_zones().into_iter().map(zone_key).collect();
    // Keep a record's stored time as it was (it may be finer than a second if another writer
    // stored it so); only new records get a new time.
    let previous = std::mem::take(&mut status.disrupted_pods);
    status.disrupted_pods = records
        .iter()
        .map(|r| {
            let at = previous
                .get(&r.pod)
                .filter(|t| t.0.as_millisecond() == r.at_ms)
                .cloned()
                .unwrap_or_else(|| time_of_ms(r.at_ms));
            (r.pod.clone(), at)
        })
        .collect();
    status.disrupted_pod_zones = records
        .iter()
        .map(|r| (r.pod.clone(), zone_key(&r.zone)))
        .collect();
}

/// Rebuilds the budget from the status alone (see the module comment): per zone, `currentHealthy`
/// healthy pods, the recorded pods by name, and the rest of `expectedPods` unhealthy.
pub fn from_status(status: &ZoneDisruptionBudgetStatus, policy: Policy) -> Budget {
    let records = records(status);
    let previous = previous_expected(status);
    // Healthy pods are known by number only; recorded ones by name.
    let healthy_unnamed: BTreeMap<Zone, u32> = status
        .current_healthy
        .iter()
        .map(|(zone, healthy)| (zone_from_key(zone), u32::try_from(*healthy).unwrap_or(0)))
        .collect();
    let pods: Vec<BudgetPod> = records
        .iter()
        .map(|record| BudgetPod {
            name: record.pod.clone(),
            zone: record.zone.clone(),
            healthy: false,
            created_ms: 0,
        })
        .collect();
    let expected_total = previous
        .values()
        .fold(0u32, |sum, n| sum.saturating_add(*n));
    budget::compute(&BudgetInput {
        expected_total,
        pods: &pods,
        healthy_unnamed: &healthy_unnamed,
        previous_expected: &previous,
        disruptions: &records,
        policy,
    })
}

/// "zone: …" for each zone of `budget` with unavailable pods, `describe` saying what blocks it.
pub fn unavailable_zones(
    budget: &Budget,
    describe: fn(&budget::ZoneBudget) -> String,
) -> Vec<String> {
    budget
        .zones
        .iter()
        .filter(|(_, b)| b.unhealthy > 0)
        .map(|(zone, b)| format!("{zone}: {}", describe(b)))
        .collect()
}

/// What blocks a zone of a budget rebuilt from its status ([`from_status`]): the recorded pods by
/// name, the others by number. "web-1, web-2 evicted; 1 other pod(s) unavailable or missing".
pub fn blocking(budget: &budget::ZoneBudget) -> String {
    let mut parts = Vec::new();
    if !budget.blocking_pods.is_empty() {
        parts.push(format!("{} evicted", budget.blocking_pods.join(", ")));
    }
    let others = budget
        .unhealthy
        .saturating_sub(u32::try_from(budget.blocking_pods.len()).unwrap_or(u32::MAX));
    if others > 0 {
        parts.push(format!("{others} other pod(s) unavailable or missing"));
    }
    parts.join("; ")
}

/// The Disrupted condition, from the status alone: "zone-a: web-1 evicted; 1 other pod(s)
/// unavailable or missing". Both writers set it this way (the controller after each computation,
/// the webhook with each record), so a record written by the webhook is already what the
/// controller would write: it does not cost a second write of the status.
pub fn set_disrupted(status: &mut ZoneDisruptionBudgetStatus, policy: Policy) {
    let description = unavailable_zones(&from_status(status, policy), blocking);
    if description.is_empty() {
        status.set_condition(condition::DISRUPTED, false, reason::NOT_DISRUPTED, "");
    } else {
        status.set_condition(
            condition::DISRUPTED,
            true,
            reason::ZONE_DISRUPTED,
            description.join("; "),
        );
    }
}

/// Records an allowed eviction of a healthy pod: the record, and the pod moved from healthy to
/// unhealthy in its zone, with the per-zone numbers and the Disrupted condition recomputed.
pub fn record(
    status: &mut ZoneDisruptionBudgetStatus,
    pod: &str,
    zone: &Zone,
    at: Time,
    policy: Policy,
) {
    let key = zone_key(zone);
    status.disrupted_pods.insert(pod.to_string(), at);
    status
        .disrupted_pod_zones
        .insert(pod.to_string(), key.clone());
    if let Some(healthy) = status.current_healthy.get_mut(&key) {
        *healthy = (*healthy - 1).max(0);
    }
    let budget = from_status(status, policy);
    let records = records(status);
    apply(&budget, &records, status);
    set_disrupted(status, policy);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_topology::IntOrPercent;
    use zone_topology::budget::{Decision, EvictedPod, PodCondition};

    fn healthy_pods(per_zone: &[(&str, u32)]) -> Vec<BudgetPod> {
        let mut pods = Vec::new();
        for (zone, n) in per_zone {
            for i in 0..*n {
                pods.push(BudgetPod {
                    name: format!("{zone}-{i}"),
                    zone: Zone::known(*zone),
                    healthy: true,
                    created_ms: 0,
                });
            }
        }
        pods
    }

    fn controller_status(pods: &[BudgetPod], records: &[Disruption]) -> ZoneDisruptionBudgetStatus {
        let budget = budget::compute(&BudgetInput {
            expected_total: u32::try_from(pods.len()).unwrap(),
            pods,
            healthy_unnamed: &BTreeMap::new(),
            previous_expected: &BTreeMap::new(),
            disruptions: records,
            policy: Policy::max_unavailable(IntOrPercent::Int(2)),
        });
        let mut status = ZoneDisruptionBudgetStatus::default();
        apply(&budget, records, &mut status);
        status
    }

    fn evict(budget: &Budget, pod: &str, zone: &str) -> Decision {
        budget.decide(&EvictedPod {
            name: pod,
            zone: Zone::known(zone),
            condition: PodCondition::Healthy,
            created_ms: 0,
            rollout: false,
        })
    }

    #[test]
    fn webhook_budget_matches_the_controller_budget() {
        let pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]);
        let status = controller_status(&pods, &[]);
        assert_eq!(status.disruptions_allowed["zone-a"], 2);
        let rebuilt = from_status(&status, Policy::max_unavailable(IntOrPercent::Int(2)));
        assert_eq!(rebuilt.zones[&Zone::known("zone-a")].disruptions_allowed, 2);
        assert_eq!(rebuilt.zones[&Zone::known("zone-a")].expected, 3);
    }

    #[test]
    fn records_are_counted_once_whoever_computed_them() {
        let pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]);
        let mut status = controller_status(&pods, &[]);
        let max = Policy::max_unavailable(IntOrPercent::Int(2));

        // The webhook records two evictions in zone-a; the third is denied.
        record(
            &mut status,
            "zone-a-0",
            &Zone::known("zone-a"),
            time_of_ms(1000),
            max,
        );
        assert!(matches!(
            evict(&from_status(&status, max), "zone-a-1", "zone-a"),
            Decision::Allow { record: true, .. }
        ));
        record(
            &mut status,
            "zone-a-1",
            &Zone::known("zone-a"),
            time_of_ms(2000),
            max,
        );
        let after_two = from_status(&status, max);
        assert!(matches!(
            evict(&after_two, "zone-a-2", "zone-a"),
            Decision::Deny(_)
        ));
        assert!(matches!(
            evict(&after_two, "zone-b-0", "zone-b"),
            Decision::Deny(_)
        ));
        assert_eq!(status.current_healthy["zone-a"], 1);
        assert_eq!(status.current_unhealthy["zone-a"], 2);
        assert_eq!(status.disrupted_zones, vec!["zone-a".to_string()]);

        // The controller then computes from the pods and the same records: same numbers.
        let recomputed = controller_status(&pods, &records(&status));
        assert_eq!(recomputed.current_healthy, status.current_healthy);
        assert_eq!(recomputed.current_unhealthy, status.current_unhealthy);
        assert_eq!(recomputed.disruptions_allowed, status.disruptions_allowed);
        assert_eq!(recomputed.disrupted_pods, status.disrupted_pods);
    }

    #[test]
    fn the_unknown_zone_is_not_remembered_once_empty() {
        let mut pods = healthy_pods(&[("zone-a", 2), ("zone-b", 3)]);
        // A recreated pod, not scheduled yet.
        pods.push(BudgetPod {
            name: "web-0".into(),
            zone: Zone::Unknown,
            healthy: false,
            created_ms: 0,
        });
        let status = controller_status(&pods, &[]);
        assert_eq!(status.expected_pods["unknown"], 1);
        let remembered = remembered_expected(&status);
        assert_eq!(remembered.get(&Zone::Unknown), None);
        assert_eq!(remembered[&Zone::known("zone-a")], 2);

        // Scheduled in zone-a: "unknown" leaves the status, zone-a has its three pods.
        pods.pop();
        pods.extend(healthy_pods(&[("zone-a", 3)]).into_iter().skip(2));
        let budget = budget::compute(&BudgetInput {
            expected_total: 6,
            pods: &pods,
            healthy_unnamed: &BTreeMap::new(),
            previous_expected: &remembered,
            disruptions: &[],
            policy: Policy::max_unavailable(IntOrPercent::Int(1)),
        });
        let mut next = status.clone();
        apply(&budget, &[], &mut next);
        assert!(!next.expected_pods.contains_key("unknown"), "{next:?}");
        assert_eq!(next.expected_pods["zone-a"], 3);
        assert!(next.disrupted_zones.is_empty());
    }

    /// The controller's status from pods, expected pods and stored records, as a reconcile
    /// computes it.
    fn reconciled(
        pods: &[BudgetPod],
        expected_total: u32,
        stored: Vec<Disruption>,
    ) -> ZoneDisruptionBudgetStatus {
        reconciled_with(pods, expected_total, stored, &BTreeMap::new())
    }

    fn reconciled_with(
        pods: &[BudgetPod],
        expected_total: u32,
        stored: Vec<Disruption>,
        previous_expected: &BTreeMap<Zone, u32>,
    ) -> ZoneDisruptionBudgetStatus {
        let replaced = replaced(expected_total, previous_expected, pods.len());
        let records = settle_records(stored, pods, replaced);
        let budget = budget::compute(&BudgetInput {
            expected_total,
            pods,
            healthy_unnamed: &BTreeMap::new(),
            previous_expected,
            disruptions: &records,
            policy: Policy::max_unavailable(IntOrPercent::Int(1)),
        });
        let mut status = ZoneDisruptionBudgetStatus::default();
        apply(&budget, &records, &mut status);
        status
    }

    #[test]
    fn a_zoneless_record_of_a_pod_that_is_gone_is_dropped() {
        let pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3)]);
        // The Go controller's record (no zone) of a pod scaled away since.
        let stale = Disruption {
            pod: "web-100".into(),
            zone: Zone::Unknown,
            at_ms: 1000,
        };
        let status = reconciled(&pods, 6, vec![stale.clone()]);
        assert!(status.disrupted_pods.is_empty(), "{status:?}");
        // The webhook's view of that status lets zone-b go.
        let max = Policy::max_unavailable(IntOrPercent::Int(1));
        assert!(matches!(
            evict(&from_status(&status, max), "zone-b-0", "zone-b"),
            Decision::Allow { record: true, .. }
        ));
    }

    #[test]
    fn a_record_of_a_pod_that_is_gone_keeps_its_zone_disrupted() {
        // The only pod of its owner was evicted: the owner is not seen, so nothing counts the
        // pod as missing; its record does.
        let pods = healthy_pods(&[("zone-b", 3)]);
        let record = Disruption {
            pod: "single-0".into(),
            zone: Zone::known("zone-a"),
            at_ms: 1000,
        };
        let previous: BTreeMap<Zone, u32> =
            [(Zone::known("zone-a"), 1), (Zone::known("zone-b"), 3)].into();
        let status = reconciled_with(&pods, 3, vec![record], &previous);
        assert_eq!(status.disrupted_pods.len(), 1, "{status:?}");
        let max = Policy::max_unavailable(IntOrPercent::Int(1));
        assert!(matches!(
            evict(&from_status(&status, max), "zone-b-0", "zone-b"),
            Decision::Deny(_)
        ));
    }

    /// A ReplicaSet's evicted pod is gone and its owner still wants it: the record holds its
    /// zone until the replacement is there, which holds it until it is Ready, and not a moment
    /// longer (the record does not hold it for its two minutes).
    #[test]
    fn a_record_of_a_replaced_pod_ends_when_the_replacement_is_ready() {
        let record = Disruption {
            pod: "zone-a-0".into(),
            zone: Zone::known("zone-a"),
            at_ms: 1000,
        };
        let max = Policy::max_unavailable(IntOrPercent::Int(1));
        let previous: BTreeMap<Zone, u32> =
            [(Zone::known("zone-a"), 3), (Zone::known("zone-b"), 3)].into();
        let reconciled = |pods: &[BudgetPod], record: Disruption| {
            reconciled_with(pods, 6, vec![record], &previous)
        };
        let mut pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3)]);
        pods.remove(0);
        // Gone, not replaced yet: the record places the missing pod.
        let status = reconciled(&pods, record.clone());
        assert_eq!(
            status.disrupted_pod_zones["zone-a-0"], "zone-a",
            "{status:?}"
        );
        assert_eq!(status.disrupted_zones, ["zone-a"]);
        // Replaced, not Ready yet: the replacement holds zone-a.
        pods.push(BudgetPod {
            name: "web-new".into(),
            zone: Zone::known("zone-a"),
            healthy: false,
            created_ms: 2000,
        });
        let status = reconciled(&pods, record.clone());
        assert!(status.disrupted_pods.is_empty(), "{status:?}");
        assert_eq!(status.disrupted_zones, ["zone-a"]);
        assert!(matches!(
            evict(&from_status(&status, max), "zone-b-0", "zone-b"),
            Decision::Deny(_)
        ));
        // Ready: zone-b may go.
        if let Some(new) = pods.last_mut() {
            new.healthy = true;
        }
        let status = reconciled(&pods, record);
        assert!(status.disrupted_zones.is_empty(), "{status:?}");
        assert!(matches!(
            evict(&from_status(&status, max), "zone-b-0", "zone-b"),
            Decision::Allow { record: true, .. }
        ));
    }

    /// A StatefulSet's evicted pod comes back under its name, and cannot be scheduled (its node
    /// is cordoned): the record stays through the gap and after, and keeps the disruption in
    /// zone-a rather than in "unknown" where the new pod waits.
    #[test]
    fn a_record_stays_while_a_statefulset_pod_is_recreated_unscheduled() {
        let record = Disruption {
            pod: "zone-a-0".into(),
            zone: Zone::known("zone-a"),
            at_ms: 1000,
        };
        let previous: BTreeMap<Zone, u32> =
            [(Zone::known("zone-a"), 3), (Zone::known("zone-b"), 3)].into();
        let mut pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3)]);
        pods.remove(0);
        let status = reconciled_with(&pods, 6, vec![record.clone()], &previous);
        assert_eq!(
            status.disrupted_pod_zones["zone-a-0"], "zone-a",
            "{status:?}"
        );
        pods.push(BudgetPod {
            name: "zone-a-0".into(),
            zone: Zone::Unknown,
            healthy: false,
            created_ms: 2000,
        });
        let status = reconciled_with(&pods, 6, vec![record], &previous);
        assert_eq!(
            status.disrupted_pod_zones["zone-a-0"], "zone-a",
            "{status:?}"
        );
        assert_eq!(status.disrupted_zones, ["zone-a"]);
    }

    #[test]
    fn a_record_without_zone_takes_its_pods_zone() {
        let pods = healthy_pods(&[("zone-a", 3), ("zone-b", 3)]);
        let go_record = Disruption {
            pod: "zone-a-0".into(),
            zone: Zone::Unknown,
            at_ms: 1000,
        };
        let status = reconciled(&pods, 6, vec![go_record]);
        assert_eq!(status.disrupted_pod_zones["zone-a-0"], "zone-a");
        assert_eq!(status.disrupted_zones, ["zone-a"]);
        // The webhook sees the same: zone-a is the disrupted zone, not "unknown".
        let rebuilt = from_status(&status, Policy::max_unavailable(IntOrPercent::Int(1)));
        let zones: Vec<String> = rebuilt
            .disrupted_zones()
            .into_iter()
            .map(zone_key)
            .collect();
        assert_eq!(zones, ["zone-a"]);
    }

    #[test]
    fn unknown_zone_round_trips() {
        assert_eq!(zone_from_key(&zone_key(&Zone::Unknown)), Zone::Unknown);
        assert_eq!(zone_from_key("zone-a"), Zone::known("zone-a"));
    }
}
