//! The checks of a ZoneDisruptionBudget spec, and the spec ready to act on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use zone_topology::IntOrPercentError;
use zone_topology::budget::{self, Limit, Policy, UnhealthyPods};

use super::cel;
use crate::shared::{
    SelectorError, check_selector, int_or_percent, is_unselective, max_unavailable,
};
use crate::zdb::{RolloutsWhenFrozen, UnhealthyPodEvictionPolicy, ZoneDisruptionBudgetSpec};

/// Why a ZoneDisruptionBudget spec cannot be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZdbError {
    #[error("{}", cel::SELECTOR_NOT_EMPTY)]
    EmptySelector,
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("spec.maxUnavailable: {0}")]
    MaxUnavailable(#[source] IntOrPercentError),
    #[error("spec.minAvailable: {0}")]
    MinAvailable(#[source] IntOrPercentError),
    #[error("{}", cel::ONE_LIMIT)]
    BothLimits,
}

/// A ZoneDisruptionBudget spec ready to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZdb {
    pub selector: LabelSelector,
    /// maxUnavailable 0 (or 0%) and minAvailable 100% are valid and mean frozen: no running pod
    /// it selects may be evicted, as with such a PodDisruptionBudget.
    pub policy: Policy,
}

impl ZoneDisruptionBudgetSpec {
    pub fn validate(&self) -> Result<ValidZdb, ZdbError> {
        let selector = self.selector.clone().unwrap_or_default();
        if is_unselective(&selector) {
            return Err(ZdbError::EmptySelector);
        }
        check_selector(&selector)?;
        let limit = match (&self.min_available, &self.max_unavailable) {
            (Some(_), Some(_)) => return Err(ZdbError::BothLimits),
            (Some(min), None) => {
                Limit::MinAvailable(int_or_percent(min).map_err(ZdbError::MinAvailable)?)
            }
            (None, max) => Limit::MaxUnavailable(
                max_unavailable(max.as_ref()).map_err(ZdbError::MaxUnavailable)?,
            ),
        };
        let unhealthy_pods = match self.unhealthy_pod_eviction_policy {
            None => UnhealthyPods::Unset,
            Some(UnhealthyPodEvictionPolicy::IfHealthyBudget) => UnhealthyPods::IfHealthyBudget,
            Some(UnhealthyPodEvictionPolicy::AlwaysAllow) => UnhealthyPods::AlwaysAllow,
        };
        let rollouts_when_frozen = match self.rollouts_when_frozen {
            None | Some(RolloutsWhenFrozen::Hold) => budget::RolloutsWhenFrozen::Hold,
            Some(RolloutsWhenFrozen::Proceed) => budget::RolloutsWhenFrozen::Proceed,
        };
        Ok(ValidZdb {
            selector,
            policy: Policy {
                limit,
                unhealthy_pods,
                rollouts_when_frozen,
            },
        })
    }
}

#[cfg(test)]
mod tests;
