//! The patterns, bounds and message fragments that the CEL rules of the CRD schemas and the Rust
//! checks share: a leaf, naming nothing else of the crate, so that the types' schemas, the rules
//! and the checks of every kind can all use it.
//!
//! The patterns have no backslash and no quote, so they sit unescaped in CEL string literals; the
//! crate's tests match them, as the CRD carries them, against the Rust parsers.

/// An integer or a percentage, as [`zone_topology::IntOrPercent::parse`] reads a string once
/// trimmed (it accepts a leading `+`, as Rust's integer parsing does).
pub const INT_OR_PERCENT: &str = "^[+]?[0-9]+%?$";

/// The strings of [`INT_OR_PERCENT`] that mean zero: `0`, `0%`, `00`, `+0%`, ...
pub const ZERO: &str = "^[+]?0+%?$";

/// A decimal that is 0 (no growth) or at least 1, without sign or exponent: what
/// [`zone_topology::rollout::parse_exponential_factor`] accepts, written as the Go controllers'
/// manifests write it.
pub const EXPONENTIAL_FACTOR: &str = "^(0+([.]0+)?|0*[1-9][0-9]*([.][0-9]+)?)$";

/// A non-empty Kubernetes label value (the 63-character limit is the list items' `maxLength`).
pub const LABEL_VALUE: &str = "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";

/// The longest Kubernetes label value, hence the longest zone name.
pub const LABEL_VALUE_MAX_LENGTH: u32 = 63;

/// The most zones `shardingStrategy.topology.values` may list. Far above any region's zone count;
/// the bound lets the API server afford the uniqueness rule (a comparison of every pair).
pub const MAX_ZONES: u32 = 64;

/// A Prometheus label name.
pub const LABEL_NAME: &str = "^[a-zA-Z_][a-zA-Z0-9_]*$";

/// A Prometheus duration ([`crate::units::parse_prometheus_duration`]): `0`, or numbers each
/// followed by a unit, largest unit first, each unit at most once. The pattern also matches the
/// empty string, which the rules refuse separately.
pub const PROMETHEUS_DURATION: &str =
    "^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$";

/// A Prometheus size ([`crate::units::parse_prometheus_size`]): `0`, or a number and a unit.
pub const PROMETHEUS_SIZE: &str =
    "^(0|[0-9]+([.][0-9]+)?(B|KB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB))$";

/// What a Prometheus label name is, in the messages about one.
pub const LABEL_NAME_FORM: &str = "a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)";

/// What a Kubernetes label value is made of, after its length, in the messages about one.
pub const LABEL_VALUE_FORM: &str =
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
