//! The ZoneDisruptionBudget's CEL rules, beside the checks of [`super`] that say the same thing
//! with the same text (a constant here). Its maxUnavailable and selector items share theirs with
//! the ZoneAwareUpdate ([`crate::validation::cel`]).

use kube::core::{Reason, Rule};

/// The message of [`selector_not_empty`], and of the ZoneDisruptionBudget's check.
pub const SELECTOR_NOT_EMPTY: &str =
    "spec.selector is missing or empty: it would select every pod of the namespace";

pub fn selector_not_empty() -> Rule {
    Rule::new(
        "has(self.selector) && (\
         has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0 || \
         has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)",
    )
    .message(SELECTOR_NOT_EMPTY)
    .field_path(".selector")
    .reason(Reason::FieldValueRequired)
}
