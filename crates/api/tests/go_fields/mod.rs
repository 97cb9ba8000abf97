//! The status fields the Go zone-aware controllers write, which the CRDs and the types keep under
//! the same names (shared by the CRD and the Go-compatibility tests).

/// A ZoneDisruptionBudget's status, as the Go controller writes it.
pub const ZDB_STATUS: [&str; 6] = [
    "observedGeneration",
    "disruptionsAllowed",
    "currentHealthy",
    "currentUnhealthy",
    "desiredHealthy",
    "expectedPods",
];
