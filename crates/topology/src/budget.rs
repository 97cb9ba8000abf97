//! ZoneDisruptionBudget math: expected and unhealthy pods per zone, and whether an eviction may
//! proceed.
//!
//! Semantics kept from the Go controller so migrating users see the same budget: a percentage
//! `maxUnavailable` is of the *total* expected pods, rounded up, and applies to each zone. Fixed:
//! missing pods count as unhealthy, so a zone whose replacement pod does not exist yet stays
//! disrupted and no other zone gets budget meanwhile. Added from PodDisruptionBudget:
//! `minAvailable` (per zone) and `unhealthyPodEvictionPolicy` (see [`Policy`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::int_or_percent::IntOrPercent;
use crate::zone::Zone;

mod decision;
pub use decision::{Decision, Denial, EvictedPod, PodCondition, ZoneLimit};

/// How long an eviction the webhook allowed stays recorded. The API server may still refuse the
/// eviction after the webhook allowed it (a PodDisruptionBudget, a conflict, another webhook), so
/// records are provisional; two minutes is what the disruption controller gives a PDB's
/// `disruptedPods` entries.
pub const DISRUPTION_TTL_MS: i64 = 2 * 60 * 1000;

/// An eviction the webhook allowed, with the zone the pod was in: a recreated pod is Pending with
/// no node, so its zone is unknown until it is scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disruption {
    pub pod: String,
    pub zone: Zone,
    /// Unix milliseconds.
    pub at_ms: i64,
}

/// A pod selected by the budget, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetPod {
    pub name: String,
    pub zone: Zone,
    /// Ready and not terminating.
    pub healthy: bool,
    /// Creation time, unix milliseconds.
    pub created_ms: i64,
}

/// The pods a budget's selector should find: each top-level owner's desired replicas counted once
/// (a Deployment, not its ReplicaSets, which double-count during a rollout), plus bare pods.
pub fn expected_total<'a>(
    owner_replicas: impl IntoIterator<Item = &'a u32>,
    bare_pods: u32,
) -> u32 {
    owner_replicas
        .into_iter()
        .fold(bare_pods, |sum, replicas| sum.saturating_add(*replicas))
}

/// Times are stored to the second (truncated): creation times and record times alike.
const STORED_TIME_RESOLUTION_MS: i64 = 1000;

/// Whether a pod created at `created_ms` came after a record made at `at_ms`. A pod recreated
/// within the second of its record has the record's second, and counts as created after it.
fn created_after(created_ms: i64, at_ms: i64) -> bool {
    created_ms.saturating_add(STORED_TIME_RESOLUTION_MS - 1) > at_ms
}

/// Drops records that expired, and records whose pod was recreated after the eviction and is
/// scheduled (its new zone is known, so the record no longer helps to place it). A record whose
/// pod is gone stays until it expires: it tells which zone the missing pod belongs to.
pub fn prune(disruptions: &[Disruption], pods: &[BudgetPod], now_ms: i64) -> Vec<Disruption> {
    disruptions
        .iter()
        .filter(|record| now_ms.saturating_sub(record.at_ms) <= DISRUPTION_TTL_MS)
        .filter(|record| {
            !pods.iter().any(|pod| {
                pod.name == record.pod
                    && created_after(pod.created_ms, record.at_ms)
                    && pod.zone.is_known()
            })
        })
        .cloned()
        .collect()
}

/// How long an eviction the webhook allowed counts while its pod is seen standing: there, not
/// terminating, and the same pod the eviction named (not recreated since). An eviction the API
/// server carries out deletes the pod within the same request, so its pod is terminating or gone
/// at once. A record whose pod still stands past this window was never carried out: the API
/// server refused it after the webhook (a PodDisruptionBudget, another webhook, a conflict), or
/// the review did not come from the API server at all. It is dropped then, instead of holding
/// every other zone of the budget for [`DISRUPTION_TTL_MS`].
pub const CONFIRMATION_WINDOW_MS: i64 = 10_000;

/// When `record` stops counting unless its pod is seen going: `Some(deadline)` (unix ms) while
/// `standing` (a pod that is there and not terminating) is the pod the record names, created
/// before the record; `None` when the record is not about that pod.
pub fn confirmation_deadline(record: &Disruption, standing: &BudgetPod) -> Option<i64> {
    (standing.name == record.pod && !created_after(standing.created_ms, record.at_ms))
        .then(|| record.at_ms.saturating_add(CONFIRMATION_WINDOW_MS))
}

/// The records whose eviction was not carried out: their pod still stands (see
/// [`confirmation_deadline`]) and the confirmation window has passed.
pub fn unconfirmed<'a>(
    records: &'a [Disruption],
    standing: &[BudgetPod],
    now_ms: i64,
) -> Vec<&'a Disruption> {
    records
        .iter()
        .filter(|record| {
            standing
                .iter()
                .filter_map(|pod| confirmation_deadline(record, pod))
                .any(|deadline| now_ms > deadline)
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct BudgetInput<'a> {
    /// See [`expected_total`].
    pub expected_total: u32,
    pub pods: &'a [BudgetPod],
    /// Healthy pods known only by their number per zone (a budget rebuilt from its status):
    /// counted like healthy pods of `pods` that no record names.
    pub healthy_unnamed: &'a BTreeMap<Zone, u32>,
    /// `status.expectedPods` of the last computation: a zone whose nodes all vanished keeps its
    /// place, and a zone whose pod disappeared is where that missing pod belongs.
    pub previous_expected: &'a BTreeMap<Zone, u32>,
    /// Already pruned (see [`prune`]).
    pub disruptions: &'a [Disruption],
    pub policy: Policy,
}

/// What a budget keeps in each zone: a PodDisruptionBudget's two forms, exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// At most this many unavailable pods per zone. A percentage is of *all* the expected pods,
    /// rounded up, and applies to each zone: the Go controller's semantics, kept so migrating
    /// users see the same budget.
    MaxUnavailable(IntOrPercent),
    /// At least this many available pods per zone. A percentage is of the zone's expected pods,
    /// rounded up: in each zone, a PodDisruptionBudget's `minAvailable` over that zone's pods.
    MinAvailable(IntOrPercent),
}

impl Limit {
    /// No voluntary disruption of a running pod at all, told by the spec (`maxUnavailable` 0 or
    /// 0%, `minAvailable` 100%), not by the resolved numbers: 10% of an empty budget resolves to
    /// 0 too, and is no freeze.
    pub fn is_freeze(self) -> bool {
        match self {
            Limit::MaxUnavailable(value) => value.is_zero(),
            Limit::MinAvailable(value) => matches!(value, IntOrPercent::Percent(p) if p >= 100),
        }
    }

    /// What ends a freeze of this limit, for messages: "maxUnavailable is raised".
    pub fn thawed_when(self) -> &'static str {
        match self {
            Limit::MaxUnavailable(_) => "maxUnavailable is raised",
            Limit::MinAvailable(_) => "minAvailable is lowered",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::MaxUnavailable(value) => write!(f, "maxUnavailable {value}"),
            Limit::MinAvailable(value) => write!(f, "minAvailable {value}"),
        }
    }
}

/// When a running pod that is not Ready may be evicted: a PodDisruptionBudget's
/// `unhealthyPodEvictionPolicy`. Pending, Succeeded and Failed pods may always be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnhealthyPods {
    /// Unset: always, but while the budget is frozen (the behaviour before the field existed).
    #[default]
    Unset,
    /// Only while its zone is within its budget (healthy >= desired healthy).
    IfHealthyBudget,
    /// Always, frozen budget or not.
    AlwaysAllow,
}

/// Whether a frozen budget holds the evictions a ZoneAwareUpdate rollout makes in its zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RolloutsWhenFrozen {
    /// A freeze is a freeze: the rollout waits, as every other eviction does.
    #[default]
    Hold,
    /// The rollout's own evictions go on; every other eviction is still refused.
    Proceed,
}

/// A budget's spec as the math needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub limit: Limit,
    pub unhealthy_pods: UnhealthyPods,
    pub rollouts_when_frozen: RolloutsWhenFrozen,
}

impl Policy {
    /// `maxUnavailable`, the unhealthy pod policy unset, rollouts held by a freeze.
    pub fn max_unavailable(value: IntOrPercent) -> Policy {
        Policy {
            limit: Limit::MaxUnavailable(value),
            unhealthy_pods: UnhealthyPods::Unset,
            rollouts_when_frozen: RolloutsWhenFrozen::Hold,
        }
    }

    /// `minAvailable`, the unhealthy pod policy unset, rollouts held by a freeze.
    pub fn min_available(value: IntOrPercent) -> Policy {
        Policy {
            limit: Limit::MinAvailable(value),
            unhealthy_pods: UnhealthyPods::Unset,
            rollouts_when_frozen: RolloutsWhenFrozen::Hold,
        }
    }
}

/// One zone's numbers (the Go status fields) and what makes it disrupted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneBudget {
    pub expected: u32,
    pub healthy: u32,
    pub unhealthy: u32,
    pub desired_healthy: u32,
    pub disruptions_allowed: u32,
    /// Present pods that are unavailable or have a recorded eviction, by name.
    pub blocking_pods: Vec<String>,
    /// Expected pods that do not exist (yet).
    pub missing: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub policy: Policy,
    /// `maxUnavailable` resolved against every expected pod (0 under `minAvailable`, which is
    /// resolved per zone into each zone's `desired_healthy`).
    max_unavailable: u32,
    /// No voluntary disruption of a running pod (see [`Limit::is_freeze`], [`Denial::Frozen`]).
    pub frozen: bool,
    pub zones: BTreeMap<Zone, ZoneBudget>,
    disruptions: Vec<Disruption>,
}

/// Computes every zone's budget.
pub fn compute(input: &BudgetInput<'_>) -> Budget {
    let (mut zones, observed, present) = count_present(input);
    let missing = input.expected_total.saturating_sub(present);
    place_missing(input, &mut zones, &observed, missing);
    let max_unavailable = match input.policy.limit {
        Limit::MaxUnavailable(value) => value.resolve(input.expected_total),
        Limit::MinAvailable(_) => 0,
    };
    let mut budget = Budget {
        policy: input.policy,
        max_unavailable,
        frozen: input.policy.limit.is_freeze(),
        zones,
        disruptions: input.disruptions.to_vec(),
    };
    budget.settle();
    budget
}

/// The pods present per zone (every zone of the last computation, even if empty now), the names
/// of the observed pods, and how many pods are present (named or not).
fn count_present<'a>(
    input: &BudgetInput<'a>,
) -> (BTreeMap<Zone, ZoneBudget>, BTreeSet<&'a str>, u32) {
    let recorded: BTreeMap<&str, &Disruption> = input
        .disruptions
        .iter()
        .map(|record| (record.pod.as_str(), record))
        .collect();
    let mut zones: BTreeMap<Zone, ZoneBudget> = input
        .previous_expected
        .keys()
        .map(|zone| (zone.clone(), ZoneBudget::default()))
        .collect();

    let mut observed: BTreeSet<&str> = BTreeSet::new();
    for pod in input.pods {
        observed.insert(pod.name.as_str());
        let record = recorded.get(pod.name.as_str());
        let zone = match (&pod.zone, record) {
            (Zone::Unknown, Some(record)) => record.zone.clone(),
            (zone, _) => zone.clone(),
        };
        let budget = zones.entry(zone).or_default();
        budget.expected += 1;
        if pod.healthy && record.is_none() {
            budget.healthy += 1;
        } else {
            budget.blocking_pods.push(pod.name.clone());
        }
    }

    let mut present = u32::try_from(input.pods.len()).unwrap_or(u32::MAX);
    for (zone, healthy) in input.healthy_unnamed.iter().filter(|(_, n)| **n > 0) {
        let budget = zones.entry(zone.clone()).or_default();
        budget.expected += healthy;
        budget.healthy += healthy;
        present = present.saturating_add(*healthy);
    }
    (zones, observed, present)
}

/// Missing pods go where they were last seen: the zone of their eviction record first, then
/// zones that lost pods since the last computation, and only then "unknown".
fn place_missing(
    input: &BudgetInput<'_>,
    zones: &mut BTreeMap<Zone, ZoneBudget>,
    observed: &BTreeSet<&str>,
    mut missing: u32,
) {
    for record in input
        .disruptions
        .iter()
        .filter(|r| !observed.contains(r.pod.as_str()))
    {
        if missing == 0 {
            break;
        }
        zones.entry(record.zone.clone()).or_default().missing += 1;
        missing -= 1;
    }
    for (zone, previous) in input.previous_expected {
        if missing == 0 {
            break;
        }
        let budget = zones.entry(zone.clone()).or_default();
        let deficit = previous
            .saturating_sub(budget.expected + budget.missing)
            .min(missing);
        budget.missing += deficit;
        missing -= deficit;
    }
    if missing > 0 {
        zones.entry(Zone::Unknown).or_default().missing += missing;
    }
}

impl Budget {
    /// Each zone's totals, and what it allows: nothing while another zone is disrupted.
    fn settle(&mut self) {
        for budget in self.zones.values_mut() {
            budget.expected += budget.missing;
            budget.unhealthy = budget.expected.saturating_sub(budget.healthy);
            budget.desired_healthy = match self.policy.limit {
                Limit::MaxUnavailable(_) => budget.expected.saturating_sub(self.max_unavailable),
                Limit::MinAvailable(value) => value.resolve(budget.expected),
            };
        }
        let disrupted: Vec<Zone> = self.disrupted_zones().into_iter().cloned().collect();
        let allowed: Vec<u32> = self.zones.values().map(|b| self.allowance(b)).collect();
        for ((zone, budget), allowance) in self.zones.iter_mut().zip(allowed) {
            let other_disrupted = disrupted.iter().any(|d| d != zone);
            budget.disruptions_allowed = if other_disrupted { 0 } else { allowance };
        }
    }

    /// The evictions `zone`'s own numbers allow, whatever the other zones: what `maxUnavailable`
    /// leaves beside the zone's unavailable pods, or the zone's healthy pods above
    /// `minAvailable`.
    fn allowance(&self, zone: &ZoneBudget) -> u32 {
        match self.policy.limit {
            Limit::MaxUnavailable(_) => self.max_unavailable.saturating_sub(zone.unhealthy),
            Limit::MinAvailable(_) => zone.healthy.saturating_sub(zone.desired_healthy),
        }
    }

    /// `maxUnavailable` resolved against every expected pod; `None` under `minAvailable`.
    pub fn max_unavailable(&self) -> Option<u32> {
        matches!(self.policy.limit, Limit::MaxUnavailable(_)).then_some(self.max_unavailable)
    }

    /// Zones with an unhealthy, missing or recorded-evicted pod.
    pub fn disrupted_zones(&self) -> Vec<&Zone> {
        self.zones
            .iter()
            .filter(|(_, b)| b.unhealthy > 0)
            .map(|(zone, _)| zone)
            .collect()
    }

    /// Whether `pod`, created at `created_ms`, has a record of its own: one of its name it was
    /// not created after (a record it was created after is of an earlier pod of that name, see
    /// [`prune`]).
    pub fn is_recorded_for(&self, pod: &str, created_ms: i64) -> bool {
        self.disruptions
            .iter()
            .any(|record| record.pod == pod && !created_after(created_ms, record.at_ms))
    }

    fn record_zone(&self, pod: &str) -> Option<&Zone> {
        self.disruptions
            .iter()
            .find(|record| record.pod == pod)
            .map(|record| &record.zone)
    }

    fn zone(&self, zone: &Zone) -> ZoneBudget {
        self.zones.get(zone).cloned().unwrap_or_default()
    }
}

/// What blocks a zone, for messages: `web-1, web-4 unavailable; 1 missing`.
pub(crate) struct Blocking<'a>(pub &'a ZoneBudget);

impl fmt::Display for Blocking<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let budget = self.0;
        let mut parts = Vec::new();
        if !budget.blocking_pods.is_empty() {
            parts.push(format!("{} unavailable", budget.blocking_pods.join(", ")));
        }
        if budget.missing > 0 {
            parts.push(format!("{} missing", budget.missing));
        }
        f.write_str(&parts.join("; "))
    }
}

#[cfg(test)]
mod tests;
