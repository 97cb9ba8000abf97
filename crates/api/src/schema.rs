//! What the API server refuses at `kubectl apply`: the CEL rules of the CRD schemas.
//!
//! Every check of a kind's `validation` module that can be decided from the object alone has a
//! CEL rule too, so a bad spec is refused with a message naming its field instead of surfacing
//! later as an `Invalid` condition. The controllers keep validating: objects stored before these
//! rules existed, and what the schema leaves to them (numbers beyond the ranges Rust parses into;
//! job names repeated, or ConfigMap names of blanks, in lists too long for the API server to
//! afford the check).
//!
//! Semantic checks are CEL rules with our own messages. Each kind's rules sit beside the Rust
//! checks that say the same thing, in `<kind>/cel.rs` (and [`crate::shared::cel`] for what two
//! kinds share): where a rule and a check refuse the same spec they share the text, a constant
//! there that the error enum names. [`crate::patterns`] holds the patterns and bounds that rules
//! and checks have in common; this module [`add_rules`] and the amended selector schema. The
//! schema's keywords only bound sizes (`minimum`, `maxItems`, `maxLength`). The API server
//! estimates each rule's worst case from those bounds and refuses a CRD whose rule could cost more
//! than its budget: a rule that iterates over a list needs the list and the strings it compares
//! bounded, while a rule on a single string needs no bound.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Rule;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

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

/// A `LabelSelector` whose `matchExpressions` items carry the rules of their operator and values
/// (k8s-openapi owns the type, so its schema is amended here).
pub fn selector_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut selector = LabelSelector::json_schema(generator);
    selector.insert("nullable".to_string(), true.into());
    if let Some(requirement) = selector.pointer_mut("/properties/matchExpressions/items") {
        add_rules(
            requirement,
            [
                crate::shared::cel::selector_operator(),
                crate::shared::cel::selector_values_listed(),
                crate::shared::cel::selector_values_absent(),
            ],
        );
    }
    selector
}
