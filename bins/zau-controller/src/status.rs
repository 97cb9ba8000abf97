//! The reasons of a ZoneAwareUpdate's conditions. The status is written by server-side apply
//! (`zone_operator::status::apply_status`), only when it changed: a status write never triggers
//! another reconcile, and an unchanged status is never written.

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
