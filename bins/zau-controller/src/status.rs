//! The status the controller wants a ZoneAwareUpdate to show, the events a change deserves, and
//! writing it (server-side apply, only when it changed: a status write never triggers another
//! reconcile, and an unchanged status is never written).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use zone_api::zau::condition;
use zone_api::{ZoneAwareUpdate, ZoneAwareUpdateStatus, conditions};

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const STATEFULSET_NOT_FOUND: &str = "StatefulSetNotFound";
    pub const NOT_ON_DELETE: &str = "UpdateStrategyNotOnDelete";
    pub const VALID: &str = "Valid";
    pub const WAITING_FOR_STATEFULSET: &str = "WaitingForStatefulSet";
    pub const WAITING: &str = "Waiting";
    pub const BATCH_REMOVED: &str = "BatchRemoved";
    pub const BUDGET_EXHAUSTED: &str = "DisruptionBudgetExhausted";
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    pub const IN_PROGRESS: &str = "InProgress";
    pub const ALARM_FIRING: &str = "AlarmFiring";
    pub const ALARM_NOT_FOUND: &str = "AlarmNotFound";
    pub const ALARM_UNAVAILABLE: &str = "AlarmUnavailable";
    pub const DRY_RUN: &str = "DryRun";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const PAUSED: &str = "Paused";
}

/// Alarm-related pause reasons (they set `pausedRollout`).
pub const ALARM_REASONS: [&str; 3] = [
    reason::ALARM_FIRING,
    reason::ALARM_NOT_FOUND,
    reason::ALARM_UNAVAILABLE,
];

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot write the status of ZoneAwareUpdate {namespace}/{name}")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Sets a condition, keeping its transition time when the status did not flip.
pub fn set(
    status: &mut ZoneAwareUpdateStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: impl Into<String>,
) {
    let now = Time(Timestamp::now());
    conditions::set(
        &mut status.conditions,
        conditions::new(
            type_,
            value,
            reason,
            message,
            status.observed_generation,
            now,
        ),
    );
}

/// The condition of `type_`, if set.
pub fn find<'a>(
    status: &'a ZoneAwareUpdateStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// `(status, reason)` of the Paused condition when True.
pub fn paused_reason(status: &ZoneAwareUpdateStatus) -> Option<&str> {
    find(status, condition::PAUSED)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.as_str())
}

/// Whether `type_` is True with this reason and message for this generation: the same
/// complaint was already made (and its event published).
pub fn already_reported(
    status: &ZoneAwareUpdateStatus,
    type_: &str,
    reason: &str,
    message: &str,
) -> bool {
    find(status, type_).is_some_and(|c| {
        c.status == "True"
            && c.reason == reason
            && c.message == message
            && c.observed_generation == status.observed_generation
    })
}

/// Writes `status` by server-side apply (forcing: the controller owns the status) and returns
/// the object the API server stored.
pub async fn write(
    api: &Api<ZoneAwareUpdate>,
    zau: &ZoneAwareUpdate,
    field_manager: &str,
    status: &ZoneAwareUpdateStatus,
) -> Result<ZoneAwareUpdate, StatusError> {
    let body = json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneAwareUpdate",
        "status": status,
    });
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(&zau.name_any(), &params, &Patch::Apply(&body))
        .await
        .map_err(|source| StatusError::Write {
            namespace: zau.namespace().unwrap_or_default(),
            name: zau.name_any(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_complaints_are_recognised_per_generation() {
        let mut status = ZoneAwareUpdateStatus {
            observed_generation: Some(2),
            ..ZoneAwareUpdateStatus::default()
        };
        assert!(!already_reported(
            &status,
            condition::INVALID,
            reason::INVALID_SPEC,
            "bad"
        ));
        set(
            &mut status,
            condition::INVALID,
            true,
            reason::INVALID_SPEC,
            "bad",
        );
        assert!(already_reported(
            &status,
            condition::INVALID,
            reason::INVALID_SPEC,
            "bad"
        ));
        status.observed_generation = Some(3);
        assert!(!already_reported(
            &status,
            condition::INVALID,
            reason::INVALID_SPEC,
            "bad"
        ));
    }

    #[test]
    fn unchanged_conditions_compare_equal() {
        let mut first = ZoneAwareUpdateStatus::default();
        set(&mut first, condition::PAUSED, false, reason::NOT_PAUSED, "");
        let mut second = first.clone();
        set(
            &mut second,
            condition::PAUSED,
            false,
            reason::NOT_PAUSED,
            "",
        );
        assert_eq!(
            first, second,
            "re-deriving a condition must not force a write"
        );
        assert_eq!(paused_reason(&second), None);
        set(
            &mut second,
            condition::PAUSED,
            true,
            reason::ALARM_FIRING,
            "x",
        );
        assert_eq!(paused_reason(&second), Some(reason::ALARM_FIRING));
    }
}
