//! Checks a spec before a controller acts on it. Errors are written to an `Invalid` condition and
//! an event, so the messages speak to the person who wrote the manifest.
//!
//! One module per kind, each with its error enum and the spec ready to act on; where a check has
//! a CEL twin in the CRD schema ([`crate::schema`]), both say it with the same text.

pub mod cel;
mod shared;
pub mod sprom;
pub mod zau;
pub mod zdb;

pub use shared::{
    DEFAULT_MAX_UNAVAILABLE, DurationError, SelectorError, check_selector, int_or_percent,
    is_label_name,
};
pub use sprom::{
    ObjectStorage, PROMETHEUS_CONTAINER, PodOptions, RESERVED_FLAGS, RESERVED_POD_LABELS,
    RESERVED_VOLUMES, RULE_VOLUME_PREFIX, ShardStorage, SpromError, THANOS_SIDECAR_CONTAINER,
    THANOS_UPLOAD_CONTAINER_PREFIX, ThanosError, ValidSprom, ValidThanos,
};
pub use zau::{
    DEFAULT_GATE_POLL_INTERVAL, DEFAULT_GATE_TIMEOUT, DEFAULT_GATE_ZONE_LABEL, GateTarget,
    RolloutTarget, ValidAlertGate, ValidZau, ZauError,
};
pub use zdb::{ValidZdb, ZdbError};
