//! The ZoneAwareUpdate's CEL rules, beside the checks of [`super::validation`] that say the same thing: where
//! both refuse the same spec they share the message, a constant here.

use kube::core::{Reason, Rule};

use crate::patterns::{EXPONENTIAL_FACTOR, ZERO};

/// The message of [`max_unavailable_not_zero`], and of the ZoneAwareUpdate's check.
pub const MAX_UNAVAILABLE_NOT_ZERO: &str = "spec.maxUnavailable must be at least 1 or 1%: a \
     rollout that can remove no pod cannot progress";

/// A rollout that may remove no pod cannot progress (a ZoneDisruptionBudget of 0 is a freeze,
/// and valid).
pub fn max_unavailable_not_zero() -> Rule {
    Rule::new(format!(
        "type(self) == int ? self != 0 : !self.trim().matches('{ZERO}')"
    ))
    .message(MAX_UNAVAILABLE_NOT_ZERO)
}

/// The message of [`statefulset_named`], and of the ZoneAwareUpdate's check.
pub const STATEFULSET_NAMED: &str = "spec.statefulset is empty: name the StatefulSet to roll \
     out, or select a rollout group with spec.selector";

pub fn statefulset_named() -> Rule {
    Rule::new("has(self.selector) || has(self.statefulset) && self.statefulset.trim() != ''")
        .message(STATEFULSET_NAMED)
        .field_path(".statefulset")
        .reason(Reason::FieldValueRequired)
}

/// The message of [`one_target`], and of the ZoneAwareUpdate's check.
pub const ONE_TARGET: &str = "spec.statefulset and spec.selector are exclusive: name one \
     StatefulSet, or select a rollout group";

pub fn one_target() -> Rule {
    Rule::new("!has(self.selector) || !has(self.statefulset) || self.statefulset.trim() == ''")
        .message(ONE_TARGET)
        .field_path(".selector")
        .reason(Reason::FieldValueForbidden)
}

/// The message of [`group_selector_not_empty`], and of the ZoneAwareUpdate's check.
pub const GROUP_SELECTOR_NOT_EMPTY: &str =
    "spec.selector is empty: it would select every StatefulSet of the namespace";

pub fn group_selector_not_empty() -> Rule {
    Rule::new(
        "!has(self.selector) || \
         has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0 || \
         has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0",
    )
    .message(GROUP_SELECTOR_NOT_EMPTY)
    .field_path(".selector")
    .reason(Reason::FieldValueRequired)
}

/// The message of the rule on `spec.alertGate` (`zau::alert_gate_one_target`), and of the
/// ZoneAwareUpdate's check.
pub const ALERT_GATE_ONE_TARGET: &str = "spec.alertGate: set exactly one of url and service";

pub fn exponential_factor() -> Rule {
    Rule::new(format!("self.matches('{EXPONENTIAL_FACTOR}')")).message(
        "spec.exponentialFactor must be \"0\" (no growth) or a decimal number of at least 1, \
         like \"2.0\"",
    )
}
