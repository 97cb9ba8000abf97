//! The reasons of a ZoneDisruptionBudget's conditions.
//!
//! The status is written with a PUT to `/status` carrying the resourceVersion
//! (`zone_operator::status`), by the controller and the webhook alike (not server-side apply,
//! not a merge patch): the webhook records disruptions in the same object, and a write that
//! cannot conflict would erase a record made between our read and our write.

/// Condition reasons (CamelCase, stable: alerts and scripts match on them).
pub mod reason {
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const OVERLAPPING: &str = "OverlappingBudgets";
    pub const COMPUTED: &str = "BudgetComputed";
    pub const ZONE_DISRUPTED: &str = "ZoneDisrupted";
    pub const NOT_DISRUPTED: &str = "NoZoneDisrupted";
}
