//! The eviction decision of a ZoneDisruptionBudget.

use std::fmt;

use super::{Blocking, Budget, Limit, RolloutsWhenFrozen, UnhealthyPods, ZoneBudget};
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
    /// Asked by the ZoneAwareUpdate controller for the rollout in progress in the pod's zone, as
    /// the webhook established it (the requesting user, and a rollout of the pod's StatefulSet
    /// in that zone with the pod on an old revision). Not capped by the zone's limit, so the
    /// rollout's batches are its own; still refused while another zone is disrupted (never two
    /// zones), and held by a freeze unless the budget lets rollouts through one.
    pub rollout: bool,
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
    /// This zone already has `maxUnavailable` pods unavailable, or no healthy pod above
    /// `minAvailable` (or, for a pod that is not Ready under `IfHealthyBudget`, is below its
    /// budget).
    ZoneBudgetExhausted {
        zone: Zone,
        limit: ZoneLimit,
        blocking: ZoneBudget,
    },
    /// `maxUnavailable` is 0 (or 0%), or `minAvailable` 100%: the budget is frozen, no running
    /// pod may be evicted. How teams stop voluntary disruption during an incident or a
    /// migration; a PodDisruptionBudget, the Go controllers and rollout-operator read 0 the same
    /// way.
    Frozen { zone: Zone, limit: Limit },
}

/// A zone's limit resolved to a number of pods, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLimit {
    MaxUnavailable(u32),
    MinAvailable(u32),
}

impl ZoneLimit {
    /// Why `blocking`'s zone allows no more: "already has 2 of maxUnavailable 2 pod(s)
    /// unavailable", "has 3 healthy pod(s), minAvailable 3".
    pub fn exhausted(self, blocking: &ZoneBudget) -> String {
        match self {
            ZoneLimit::MaxUnavailable(max) => format!(
                "already has {} of maxUnavailable {max} pod(s) unavailable",
                blocking.unhealthy
            ),
            ZoneLimit::MinAvailable(min) => {
                format!(
                    "has {} healthy pod(s), minAvailable {min}",
                    blocking.healthy
                )
            }
        }
    }
}

impl Denial {
    pub fn zone(&self) -> &Zone {
        match self {
            Denial::OtherZoneDisrupted { zone, .. }
            | Denial::ZoneBudgetExhausted { zone, .. }
            | Denial::Frozen { zone, .. } => zone,
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
                limit,
                blocking,
            } => write!(
                f,
                "zone {zone} {} ({})",
                limit.exhausted(blocking),
                Blocking(blocking)
            ),
            Denial::Frozen { limit, .. } => write!(
                f,
                "the budget is frozen ({limit}): no voluntary eviction of its pods"
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
        match pod.condition {
            // Pending, Succeeded and Failed pods run nothing; a PodDisruptionBudget lets their
            // evictions through too.
            PodCondition::Pending | PodCondition::Terminal => {
                return Decision::Allow {
                    zone,
                    record: false,
                };
            }
            // A rollout replaces a broken pod as any other.
            PodCondition::NotReady if pod.rollout && !self.holds_rollouts() => {
                return Decision::Allow {
                    zone,
                    record: false,
                };
            }
            // Evicting a pod that is already down removes no availability; denying it would
            // deadlock a drain on a crash-looping pod. Unless the policy says otherwise.
            PodCondition::NotReady => return self.decide_not_ready(zone),
            PodCondition::Healthy => {}
        }
        // A freeze holds every running pod (and before the retry rule: a budget frozen after an
        // eviction was allowed refuses its retry), a rollout's too unless the budget says.
        if self.frozen && (!pod.rollout || self.holds_rollouts()) {
            return Decision::Deny(Denial::Frozen {
                zone,
                limit: self.policy.limit,
            });
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
        if self.allowance(&budget) == 0 && !pod.rollout {
            return Decision::Deny(self.exhausted(zone, budget));
        }
        Decision::Allow { zone, record: true }
    }

    /// A freeze that holds rollouts too.
    fn holds_rollouts(&self) -> bool {
        self.frozen && self.policy.rollouts_when_frozen == RolloutsWhenFrozen::Hold
    }

    /// A running pod that is not Ready, by the unhealthy pod policy; never recorded (it removes
    /// no availability). A freeze holds it unless the policy is `AlwaysAllow`. `IfHealthyBudget`
    /// is the Eviction API's rule for a PodDisruptionBudget, over the pod's zone: the pod goes
    /// while the zone has the healthy pods its limit asks for (`currentHealthy >=
    /// desiredHealthy`, when some are asked for), or else as a healthy pod would (a disruption
    /// allowed: `currentHealthy > desiredHealthy`).
    fn decide_not_ready(&self, zone: Zone) -> Decision {
        let policy = self.policy.unhealthy_pods;
        if self.frozen && policy != UnhealthyPods::AlwaysAllow {
            return Decision::Deny(Denial::Frozen {
                zone,
                limit: self.policy.limit,
            });
        }
        if policy == UnhealthyPods::IfHealthyBudget {
            let budget = self.zone(&zone);
            let (healthy, desired) = (budget.healthy, budget.desired_healthy);
            let within = desired > 0 && healthy >= desired;
            if !within && healthy <= desired {
                return Decision::Deny(self.exhausted(zone, budget));
            }
        }
        Decision::Allow {
            zone,
            record: false,
        }
    }

    fn exhausted(&self, zone: Zone, blocking: ZoneBudget) -> Denial {
        let limit = match self.policy.limit {
            Limit::MaxUnavailable(_) => ZoneLimit::MaxUnavailable(self.max_unavailable),
            Limit::MinAvailable(_) => ZoneLimit::MinAvailable(blocking.desired_healthy),
        };
        Denial::ZoneBudgetExhausted {
            zone,
            limit,
            blocking,
        }
    }
}
