//! The answer to one eviction, and the words of a denial: shared by the judge, the batches and
//! the queues of a budget's evictions.

use zone_topology::budget::Denial;

use crate::metrics::reason;
use crate::view;

/// The answer to one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Metric label (bounded, see `metrics::reason`).
    pub reason: &'static str,
    /// The denial message, or a warning for an allowed eviction.
    pub message: Option<String>,
}

pub(super) fn allowed(reason: &'static str) -> Verdict {
    Verdict {
        allowed: true,
        reason,
        message: None,
    }
}

pub(super) fn denied(reason: &'static str, message: String) -> Verdict {
    Verdict {
        allowed: false,
        reason,
        message: Some(message),
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

pub(super) fn denial_reason(denial: &Denial) -> &'static str {
    match denial {
        Denial::OtherZoneDisrupted { .. } => reason::OTHER_ZONE_DISRUPTED,
        Denial::ZoneBudgetExhausted { .. } => reason::ZONE_BUDGET_EXHAUSTED,
        Denial::Frozen { .. } => reason::FROZEN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zone_topology::budget::{Limit, ZoneLimit};
    use zone_topology::{IntOrPercent, Zone};

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
