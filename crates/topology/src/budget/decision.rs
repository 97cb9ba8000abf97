//! The eviction decision of a ZoneDisruptionBudget.

use std::fmt;

use super::{Blocking, Budget, ZoneBudget};
use crate::zone::Zone;

/// The state of the pod being evicted, read fresh by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCondition {
    /// Running, Ready and not terminating: evicting it removes availability.
    Healthy,
    NotReady,
    Pending,
    /// Succeeded or Failed.
    Terminal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictedPod<'a> {
    pub name: &'a str,
    pub zone: Zone,
    pub condition: PodCondition,
    /// When the pod was created (ms). A record of its name made before this is of an earlier pod
    /// of that name (a StatefulSet's pods come back under the same name): it still counts in its
    /// zone until pruned, but does not make this pod's eviction a retry.
    pub created_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; `record` says whether the eviction must be recorded as a disruption of `zone`.
    Allow {
        zone: Zone,
        record: bool,
    },
    Deny(Denial),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// Another zone is disrupted: no eviction in this zone until it recovers.
    OtherZoneDisrupted {
        zone: Zone,
        disrupted: Zone,
        blocking: ZoneBudget,
    },
    /// This zone already has `maxUnavailable` pods unavailable.
    ZoneBudgetExhausted {
        zone: Zone,
        max_unavailable: u32,
        blocking: ZoneBudget,
    },
    /// `maxUnavailable` is 0 (or 0%): the budget is frozen, no running pod may be evicted. How
    /// teams stop voluntary disruption during an incident or a migration; a
    /// PodDisruptionBudget, the Go controllers and rollout-operator read 0 the same way.
    Frozen { zone: Zone },
}

impl Denial {
    pub fn zone(&self) -> &Zone {
        match self {
            Denial::OtherZoneDisrupted { zone, .. }
            | Denial::ZoneBudgetExhausted { zone, .. }
            | Denial::Frozen { zone } => zone,
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::OtherZoneDisrupted {
                zone,
                disrupted,
                blocking,
            } => write!(
                f,
                "zone {disrupted} is disrupted ({}); evictions in zone {zone} must wait",
                Blocking(blocking)
            ),
            Denial::ZoneBudgetExhausted {
                zone,
                max_unavailable,
                blocking,
            } => write!(
                f,
                "zone {zone} already has {} of maxUnavailable {max_unavailable} pod(s) unavailable ({})",
                blocking.unhealthy,
                Blocking(blocking)
            ),
            Denial::Frozen { .. } => f.write_str(
                "the budget is frozen (maxUnavailable 0): no voluntary eviction of its pods",
            ),
        }
    }
}

impl Budget {
    /// Decides an eviction. Pure: the caller records an allowed, recordable eviction with a
    /// conditional write and re-decides on conflict.
    pub fn decide(&self, pod: &EvictedPod<'_>) -> Decision {
        let zone = match (&pod.zone, self.record_zone(pod.name)) {
            (Zone::Unknown, Some(recorded)) => recorded.clone(),
            (zone, _) => zone.clone(),
        };
        // A freeze holds every running pod, Ready or not (and before the retry rule: a budget
        // frozen after an eviction was allowed refuses its retry). Pending, Succeeded and Failed
        // pods run nothing; a PodDisruptionBudget lets their evictions through too.
        if self.frozen
            && matches!(
                pod.condition,
                PodCondition::Healthy | PodCondition::NotReady
            )
        {
            return Decision::Deny(Denial::Frozen { zone });
        }
        // Evicting a pod that is already down removes no availability; denying it would deadlock
        // a drain on a crash-looping pod.
        if pod.condition != PodCondition::Healthy {
            return Decision::Allow {
                zone,
                record: false,
            };
        }
        // A retry of an allowed eviction (kubectl drain retries) is answered the same way; a
        // new pod under a recorded name is not a retry.
        if self.is_recorded_for(pod.name, pod.created_ms) {
            return Decision::Allow {
                zone,
                record: false,
            };
        }
        if let Some(disrupted) = self.disrupted_zones().into_iter().find(|d| **d != zone) {
            return Decision::Deny(Denial::OtherZoneDisrupted {
                blocking: self.zone(disrupted),
                disrupted: disrupted.clone(),
                zone,
            });
        }
        let budget = self.zone(&zone);
        if budget.unhealthy + 1 > self.max_unavailable {
            return Decision::Deny(Denial::ZoneBudgetExhausted {
                zone,
                max_unavailable: self.max_unavailable,
                blocking: budget,
            });
        }
        Decision::Allow { zone, record: true }
    }
}
