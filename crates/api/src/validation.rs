//! Checks a spec before a controller acts on it. Errors are written to an `Invalid` condition and
//! an event, so the messages speak to the person who wrote the manifest.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_topology::rollout::{RolloutError, parse_exponential_factor};
use zone_topology::{IntOrPercent, IntOrPercentError};

use crate::{ZoneAwareUpdateSpec, ZoneDisruptionBudgetSpec};

/// When `maxUnavailable` is not set: one pod, the most careful budget that still makes progress.
pub const DEFAULT_MAX_UNAVAILABLE: IntOrPercent = IntOrPercent::Int(1);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.statefulset is empty: name the StatefulSet to roll out")]
    MissingStatefulSet,
    #[error("spec.exponentialFactor: {0}")]
    ExponentialFactor(#[source] RolloutError),
    #[error("spec.maxUnavailable: {0}")]
    MaxUnavailable(#[source] IntOrPercentError),
    #[error("spec.maxUnavailable must be at least 1 or 1%")]
    MaxUnavailableZero,
    #[error("spec.selector is missing or empty: it would select every pod of the namespace")]
    EmptySelector,
    #[error(
        "spec.selector: operator {operator:?} of key {key:?} is not In, NotIn, Exists or DoesNotExist"
    )]
    SelectorOperator { key: String, operator: String },
    #[error("spec.selector: key {key:?} with operator {operator} needs {needs}")]
    SelectorValues {
        key: String,
        operator: String,
        needs: &'static str,
    },
}

/// A ZoneAwareUpdate spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZau {
    pub statefulset: String,
    pub exponential_factor: f64,
    /// Resolved against spec.replicas by the controller (`rollout::resolve_max_unavailable`).
    pub max_unavailable: IntOrPercent,
}

/// A ZoneDisruptionBudget spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZdb {
    pub selector: LabelSelector,
    pub max_unavailable: IntOrPercent,
}

/// `IntOrString` as the budget helpers understand it.
pub fn int_or_percent(value: &IntOrString) -> Result<IntOrPercent, IntOrPercentError> {
    match value {
        IntOrString::Int(number) => IntOrPercent::int(i64::from(*number)),
        IntOrString::String(text) => IntOrPercent::parse(text),
    }
}

fn max_unavailable(value: Option<&IntOrString>) -> Result<IntOrPercent, SpecError> {
    let parsed = match value {
        None => DEFAULT_MAX_UNAVAILABLE,
        Some(value) => int_or_percent(value).map_err(SpecError::MaxUnavailable)?,
    };
    match parsed {
        IntOrPercent::Int(0) | IntOrPercent::Percent(0) => Err(SpecError::MaxUnavailableZero),
        parsed => Ok(parsed),
    }
}

impl ZoneAwareUpdateSpec {
    pub fn validate(&self) -> Result<ValidZau, SpecError> {
        if self.statefulset.trim().is_empty() {
            return Err(SpecError::MissingStatefulSet);
        }
        let exponential_factor = parse_exponential_factor(&self.exponential_factor)
            .map_err(SpecError::ExponentialFactor)?;
        Ok(ValidZau {
            statefulset: self.statefulset.clone(),
            exponential_factor,
            max_unavailable: max_unavailable(self.max_unavailable.as_ref())?,
        })
    }
}

impl ZoneDisruptionBudgetSpec {
    pub fn validate(&self) -> Result<ValidZdb, SpecError> {
        let selector = self.selector.clone().unwrap_or_default();
        let labels = selector
            .match_labels
            .as_ref()
            .is_some_and(|l| !l.is_empty());
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if !labels && expressions.is_empty() {
            return Err(SpecError::EmptySelector);
        }
        for expression in expressions {
            let values = expression.values.as_deref().unwrap_or_default();
            let needs = match expression.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => Some("at least one value"),
                "Exists" | "DoesNotExist" if !values.is_empty() => Some("no values"),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
                other => {
                    return Err(SpecError::SelectorOperator {
                        key: expression.key.clone(),
                        operator: other.to_string(),
                    });
                }
            };
            if let Some(needs) = needs {
                return Err(SpecError::SelectorValues {
                    key: expression.key.clone(),
                    operator: expression.operator.clone(),
                    needs,
                });
            }
        }
        Ok(ValidZdb {
            selector,
            max_unavailable: max_unavailable(self.max_unavailable.as_ref())?,
        })
    }
}

#[cfg(test)]
mod tests;
