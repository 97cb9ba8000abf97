//! The ZoneDisruptionBudget's CEL rules, beside the checks of [`super::validation`] that say the same
//! thing with the same text (a constant here). Its maxUnavailable and selector items share theirs with
//! the ZoneAwareUpdate ([`crate::shared::cel`]).

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

/// The message of [`one_limit`], and of the ZoneDisruptionBudget's check.
pub const ONE_LIMIT: &str = "spec.minAvailable and spec.maxUnavailable are exclusive: set one";

/// minAvailable and maxUnavailable are exclusive, as in a PodDisruptionBudget.
pub fn one_limit() -> Rule {
    Rule::new("!(has(self.minAvailable) && has(self.maxUnavailable))")
        .message(ONE_LIMIT)
        .field_path(".minAvailable")
        .reason(Reason::FieldValueForbidden)
}
