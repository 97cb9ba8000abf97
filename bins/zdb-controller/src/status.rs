//! Conditions of a ZoneDisruptionBudget and writing its status.
//!
//! The status is written with a PUT to `/status` carrying the resourceVersion, by the controller
//! and the webhook alike (not server-side apply, not a merge patch): the webhook records
//! disruptions in the same object, and a write that cannot conflict would erase a record made
//! between our read and our write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus, conditions};

use crate::view::now_time;

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const OVERLAPPING: &str = "OverlappingBudgets";
    pub const COMPUTED: &str = "BudgetComputed";
    pub const ZONE_DISRUPTED: &str = "ZoneDisrupted";
    pub const NOT_DISRUPTED: &str = "NoZoneDisrupted";
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot write the status of ZoneDisruptionBudget {namespace}/{name}")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl StatusError {
    /// Another writer (the webhook, another replica) changed the object since it was read.
    pub fn is_conflict(&self) -> bool {
        let StatusError::Write { source, .. } = self;
        matches!(source, kube::Error::Api(status) if status.code == 409)
    }
}

/// Sets a condition, keeping its transition time when the status did not flip.
pub fn set(
    status: &mut ZoneDisruptionBudgetStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: impl Into<String>,
) {
    let generation = Some(status.observed_generation);
    conditions::set(
        &mut status.conditions,
        conditions::new(type_, value, reason, message, generation, now_time()),
    );
}

pub fn find<'a>(status: &'a ZoneDisruptionBudgetStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `type_` is already True with this reason and message for this generation: the same
/// complaint was made (and its event published) before.
pub fn already_reported(
    status: &ZoneDisruptionBudgetStatus,
    type_: &str,
    reason: &str,
    message: &str,
) -> bool {
    find(status, type_).is_some_and(|c| {
        c.status == "True"
            && c.reason == reason
            && c.message == message
            && c.observed_generation == Some(status.observed_generation)
    })
}

/// PUTs `status` as the status of `zdb`, conditional on `zdb`'s resourceVersion; returns the
/// stored object.
pub async fn replace(
    api: &Api<ZoneDisruptionBudget>,
    zdb: &ZoneDisruptionBudget,
    status: ZoneDisruptionBudgetStatus,
) -> Result<ZoneDisruptionBudget, StatusError> {
    let mut object = zdb.clone();
    object.metadata.managed_fields = None;
    object.status = Some(status);
    api.replace_status(&zdb.name_any(), &PostParams::default(), &object)
        .await
        .map_err(|source| StatusError::Write {
            namespace: zdb.namespace().unwrap_or_default(),
            name: zdb.name_any(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zone_api::zdb::condition;

    #[test]
    fn rederiving_the_same_conditions_changes_nothing() {
        let mut first = ZoneDisruptionBudgetStatus {
            observed_generation: 3,
            ..Default::default()
        };
        set(&mut first, condition::READY, true, reason::COMPUTED, "ok");
        let mut second = first.clone();
        set(&mut second, condition::READY, true, reason::COMPUTED, "ok");
        assert_eq!(first, second, "an unchanged status must not be written");
        set(
            &mut second,
            condition::INVALID,
            true,
            reason::INVALID_SPEC,
            "bad",
        );
        assert_ne!(first, second);
        assert!(already_reported(
            &second,
            condition::INVALID,
            reason::INVALID_SPEC,
            "bad"
        ));
        second.observed_generation = 4;
        assert!(!already_reported(
            &second,
            condition::INVALID,
            reason::INVALID_SPEC,
            "bad"
        ));
    }
}
