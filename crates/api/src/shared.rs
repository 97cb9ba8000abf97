//! What the checks of every kind use: durations, `maxUnavailable`, label selectors, label names
//! and values; [`cel`] holds the CEL rules that say the same as these checks.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_topology::{IntOrPercent, IntOrPercentError};

use crate::units::{UnitError, parse_prometheus_duration};

pub mod cel;

/// When `maxUnavailable` is not set: one pod, the most careful budget that still makes progress.
pub const DEFAULT_MAX_UNAVAILABLE: IntOrPercent = IntOrPercent::Int(1);

/// A field that is not a Prometheus duration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {value:?} is not a Prometheus duration: {source}")]
pub struct DurationError {
    pub field: &'static str,
    pub value: String,
    #[source]
    pub source: UnitError,
}

/// A label selector expression the API server would refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "spec.selector: operator {operator:?} of key {key:?} is not {operators}",
        operators = cel::SELECTOR_OPERATORS
    )]
    Operator { key: String, operator: String },
    #[error("spec.selector: key {key:?} with operator {operator} needs {needs}")]
    Values {
        key: String,
        operator: String,
        needs: &'static str,
    },
}

/// `IntOrString` as the budget helpers understand it.
pub fn int_or_percent(value: &IntOrString) -> Result<IntOrPercent, IntOrPercentError> {
    match value {
        IntOrString::Int(number) => IntOrPercent::int(i64::from(*number)),
        IntOrString::String(text) => IntOrPercent::parse(text),
    }
}

/// `maxUnavailable`, [`DEFAULT_MAX_UNAVAILABLE`] when unset.
pub(crate) fn max_unavailable(
    value: Option<&IntOrString>,
) -> Result<IntOrPercent, IntOrPercentError> {
    value.map_or(Ok(DEFAULT_MAX_UNAVAILABLE), int_or_percent)
}

/// A selector with neither labels nor expressions: it selects everything.
pub fn is_unselective(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// The operators and values of a label selector's expressions, as the API server checks them
/// for a Deployment's selector (a custom resource's is not checked for us).
pub fn check_selector(selector: &LabelSelector) -> Result<(), SelectorError> {
    for expression in selector.match_expressions.as_deref().unwrap_or_default() {
        let values = expression.values.as_deref().unwrap_or_default();
        let needs = match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => "at least one value",
            "Exists" | "DoesNotExist" if !values.is_empty() => "no values",
            "In" | "NotIn" | "Exists" | "DoesNotExist" => continue,
            other => {
                return Err(SelectorError::Operator {
                    key: expression.key.clone(),
                    operator: other.to_string(),
                });
            }
        };
        return Err(SelectorError::Values {
            key: expression.key.clone(),
            operator: expression.operator.clone(),
            needs,
        });
    }
    Ok(())
}

pub(crate) fn duration(field: &'static str, value: &str) -> Result<Duration, DurationError> {
    parse_prometheus_duration(value).map_err(|source| DurationError {
        field,
        value: value.to_string(),
        source,
    })
}

/// `value`, or `default` when unset or empty.
pub(crate) fn non_empty_or(value: Option<&str>, default: &str) -> String {
    value
        .filter(|value| !value.is_empty())
        .unwrap_or(default)
        .to_string()
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A non-empty Kubernetes label value: at most 63 characters of `[A-Za-z0-9_.-]`, starting and
/// ending with a letter or digit.
pub(crate) fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= 63
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
