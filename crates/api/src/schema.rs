//! What the API server refuses at `kubectl apply`: the CEL rules of the CRD schemas.
//!
//! Every check of [`crate::validation`] that can be decided from the object alone has a CEL rule
//! too, so a bad spec is refused with a message naming its field instead of surfacing later as an
//! `Invalid` condition. The controllers keep validating: objects stored before these rules
//! existed, and what the schema leaves to them (numbers beyond the ranges Rust parses into; job
//! names repeated, or ConfigMap names of blanks, in lists too long for the API server to afford
//! the check).
//!
//! Semantic checks are CEL rules with our own messages. Each kind's rules sit beside the Rust
//! checks that say the same thing, in `validation/<kind>/cel.rs` (and [`crate::validation::cel`]
//! for what two kinds share): where a rule and a check refuse the same spec they share the text,
//! a constant there that the error enum names. This module holds what the rules have in common:
//! the patterns, the bounds, and [`add_rules`]. The schema's keywords only bound sizes
//! (`minimum`, `maxItems`, `maxLength`). The API server estimates each rule's worst case from those bounds and refuses a CRD whose rule
//! could cost more than its budget: a rule that iterates over a list needs the list and the strings
//! it compares bounded, while a rule on a single string needs no bound.
//!
//! The patterns have no backslash and no quote, so they sit unescaped in CEL string literals; the
//! crate's tests match them, as the CRD carries them, against the Rust parsers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Rule;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

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

/// Appends `rules` to the `x-kubernetes-validations` of `schema`: a schema node of a type this
/// crate does not own, amended in a `schema_with` function. (A rule always serialises; the crate's
/// tests check that each one is in the CRD.)
pub fn add_rules(schema: &mut Value, rules: impl IntoIterator<Item = Rule>) {
    let rules = rules
        .into_iter()
        .filter_map(|rule| serde_json::to_value(rule).ok());
    if let Some(Value::Array(list)) = schema.as_object_mut().map(|object| {
        object
            .entry("x-kubernetes-validations")
            .or_insert_with(|| Value::Array(Vec::new()))
    }) {
        list.extend(rules);
    }
}

/// What a Prometheus label name is, in the messages about one.
pub const LABEL_NAME_FORM: &str = "a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)";

/// What a Kubernetes label value is made of, after its length, in the messages about one.
pub const LABEL_VALUE_FORM: &str =
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

/// A `LabelSelector` whose `matchExpressions` items carry the rules of their operator and values
/// (k8s-openapi owns the type, so its schema is amended here).
pub fn selector_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut selector = LabelSelector::json_schema(generator);
    selector.insert("nullable".to_string(), true.into());
    if let Some(requirement) = selector.pointer_mut("/properties/matchExpressions/items") {
        add_rules(
            requirement,
            [
                crate::validation::cel::selector_operator(),
                crate::validation::cel::selector_values_listed(),
                crate::validation::cel::selector_values_absent(),
            ],
        );
    }
    selector
}
