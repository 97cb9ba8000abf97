//! **validate** (pure): the spec, and the StatefulSets it names, must be something a rollout can
//! act on; otherwise the reason and message of the `Invalid` condition.

use zone_api::zau::{condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdate};
use zone_operator::{Blocked, Invalid};

use crate::gate::Selector;

/// The StatefulSets' checks, shared with `kubectl zone`.
pub use zone_views::rollout::{Target, statefulset, target};

/// What an invalid spec stops: the reconcile waits for a change of the spec (or of the
/// StatefulSet, which is watched).
pub(super) const BLOCKED: Blocked = Blocked {
    condition: condition::PROGRESSING,
    consequence: "nothing is removed until this is fixed",
};

/// The spec, checked.
pub fn spec(zau: &ZoneAwareUpdate) -> Result<ValidZau, Invalid> {
    zau.spec.validate().map_err(|error| Invalid {
        reason: reason::INVALID_SPEC,
        message: error.to_string(),
    })
}

/// The alert gate's matchers, parsed (the API crate checks the rest of the gate).
pub fn gate_selector(valid: &ValidZau) -> Result<Option<Selector>, Invalid> {
    valid
        .alert_gate
        .as_ref()
        .map(|gate| {
            Selector::parse(&gate.matchers).map_err(|error| Invalid {
                reason: reason::INVALID_SPEC,
                message: format!("spec.alertGate.matchers: {error}"),
            })
        })
        .transpose()
}
