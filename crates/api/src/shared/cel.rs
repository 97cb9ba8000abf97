//! The CEL rules that ZoneAwareUpdate and ZoneDisruptionBudget share (maxUnavailable, label
//! selectors), beside the checks of [`crate::shared`] that say the same thing with the same text.

use kube::core::{Message, Reason, Rule};

use crate::patterns::INT_OR_PERCENT;

/// On `spec.maxUnavailable` (both kinds).
pub fn max_unavailable_form() -> Rule {
    int_or_percent_form("spec.maxUnavailable", "25%")
}

/// On a ShardedPrometheus's `spec.rollout.maxUnavailable`.
pub fn rollout_max_unavailable_form() -> Rule {
    int_or_percent_form("spec.rollout.maxUnavailable", "25%")
}

/// On a ZoneDisruptionBudget's `spec.minAvailable`.
pub fn min_available_form() -> Rule {
    int_or_percent_form("spec.minAvailable", "50%")
}

/// An int-or-string field holding an integer or a percentage. The upper bound is the Kubernetes
/// `IntOrString`'s: a larger integer would make the stored object unreadable to the controllers.
fn int_or_percent_form(field: &str, example: &str) -> Rule {
    Rule::new(format!(
        "type(self) == int ? self >= 0 && self <= {max} : self.trim().matches('{INT_OR_PERCENT}')",
        max = i32::MAX
    ))
    .message(Message::Message(format!(
        "{field} must be an integer from 0 to {max} or a percentage like \"{example}\"",
        max = i32::MAX
    )))
}

/// The operators of a label selector expression, in the rule and the check.
pub const SELECTOR_OPERATORS: &str = "In, NotIn, Exists or DoesNotExist";

/// On each `selector.matchExpressions` item.
pub fn selector_operator() -> Rule {
    Rule::new("self.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist']")
        .message(Message::Message(format!(
            "spec.selector.matchExpressions[].operator must be {SELECTOR_OPERATORS}"
        )))
        .field_path(".operator")
}

/// On each `selector.matchExpressions` item.
pub fn selector_values_listed() -> Rule {
    Rule::new(
        "!(self.operator in ['In', 'NotIn']) || has(self.values) && size(self.values) > 0",
    )
    .message(
        "spec.selector.matchExpressions[].values: operators In and NotIn need at least one value",
    )
    .field_path(".values")
    .reason(Reason::FieldValueRequired)
}

/// On each `selector.matchExpressions` item.
pub fn selector_values_absent() -> Rule {
    Rule::new(
        "!(self.operator in ['Exists', 'DoesNotExist']) || \
         !has(self.values) || size(self.values) == 0",
    )
    .message(
        "spec.selector.matchExpressions[].values: operators Exists and DoesNotExist take no \
         values",
    )
    .field_path(".values")
    .reason(Reason::FieldValueForbidden)
}
