//! The checks of a ZoneDisruptionBudget spec, and the spec ready to act on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use zone_topology::{IntOrPercent, IntOrPercentError};

use super::shared::{SelectorError, check_selector, max_unavailable};
use crate::zdb::ZoneDisruptionBudgetSpec;

pub mod cel;

/// Why a ZoneDisruptionBudget spec cannot be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZdbError {
    #[error("{}", cel::SELECTOR_NOT_EMPTY)]
    EmptySelector,
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("spec.maxUnavailable: {0}")]
    MaxUnavailable(#[source] IntOrPercentError),
}

/// A ZoneDisruptionBudget spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZdb {
    pub selector: LabelSelector,
    /// 0 (or 0%) is valid and means frozen: no running pod it selects may be evicted, as with a
    /// PodDisruptionBudget of maxUnavailable 0.
    pub max_unavailable: IntOrPercent,
}

impl ZoneDisruptionBudgetSpec {
    pub fn validate(&self) -> Result<ValidZdb, ZdbError> {
        let selector = self.selector.clone().unwrap_or_default();
        let labels = selector
            .match_labels
            .as_ref()
            .is_some_and(|l| !l.is_empty());
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if !labels && expressions.is_empty() {
            return Err(ZdbError::EmptySelector);
        }
        check_selector(&selector)?;
        Ok(ValidZdb {
            selector,
            max_unavailable: max_unavailable(self.max_unavailable.as_ref())
                .map_err(ZdbError::MaxUnavailable)?,
        })
    }
}

#[cfg(test)]
mod tests;
