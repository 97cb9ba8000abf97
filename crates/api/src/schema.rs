//! What the API server refuses at `kubectl apply`: the CEL rules of the CRD schemas.
//!
//! Every check of [`crate::validation`] that can be decided from the object alone is here too, so
//! a bad spec is refused with a message naming its field instead of surfacing later as an
//! `Invalid` condition. The controllers keep validating: objects stored before these rules
//! existed, and what the schema leaves to them (numbers beyond the ranges Rust parses into; job
//! names repeated, or ConfigMap names of blanks, in lists too long for the API server to afford
//! the check).
//!
//! Semantic checks are CEL rules with our own messages; where a rule and a check of
//! [`crate::validation`] say the same thing they share the text, a constant here beside the rule
//! (the error enums of the validation modules name it). The schema's keywords only bound sizes (`minimum`, `maxItems`, `maxLength`).
//! The API server estimates each rule's worst case from those bounds and refuses a CRD whose rule
//! could cost more than its budget: a rule that iterates over a list needs the list and the strings
//! it compares bounded, while a rule on a single string needs no bound.
//!
//! The patterns have no backslash and no quote, so they sit unescaped in CEL string literals; the
//! crate's tests match them, as the CRD carries them, against the Rust parsers.

use kube::core::{Message, Reason, Rule};
use serde_json::Value;

use crate::sprom::contract;

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

// --- maxUnavailable (ZoneAwareUpdate and ZoneDisruptionBudget) ---

/// An int-or-string field holding an integer or a percentage. The upper bound is the Kubernetes
/// `IntOrString`'s: a larger integer would make the stored object unreadable to the controllers.
pub fn max_unavailable_form() -> Rule {
    Rule::new(format!(
        "type(self) == int ? self >= 0 && self <= {max} : self.trim().matches('{INT_OR_PERCENT}')",
        max = i32::MAX
    ))
    .message(Message::Message(format!(
        "spec.maxUnavailable must be an integer from 0 to {max} or a percentage like \"25%\"",
        max = i32::MAX
    )))
}

/// The message of [`max_unavailable_not_zero`], and of the ZoneAwareUpdate's check.
pub const MAX_UNAVAILABLE_NOT_ZERO: &str = "spec.maxUnavailable must be at least 1 or 1%: a \
     rollout that can remove no pod cannot progress";

/// A rollout that may remove no pod cannot progress (a ZoneDisruptionBudget of 0 is a freeze,
/// and valid).
pub fn max_unavailable_not_zero() -> Rule {
    Rule::new(format!(
        "type(self) == int ? self != 0 : !self.trim().matches('{ZERO}')"
    ))
    .message(MAX_UNAVAILABLE_NOT_ZERO)
}

// --- ZoneAwareUpdate ---

/// The message of [`statefulset_named`], and of the ZoneAwareUpdate's check.
pub const STATEFULSET_NAMED: &str = "spec.statefulset is empty: name the StatefulSet to roll out";

pub fn statefulset_named() -> Rule {
    Rule::new("has(self.statefulset) && self.statefulset.trim() != ''")
        .message(STATEFULSET_NAMED)
        .field_path(".statefulset")
        .reason(Reason::FieldValueRequired)
}

/// The message of the rule on `spec.alertGate` (`zau::alert_gate_one_target`), and of the
/// ZoneAwareUpdate's check.
pub const ALERT_GATE_ONE_TARGET: &str = "spec.alertGate: set exactly one of url and service";

pub fn exponential_factor() -> Rule {
    Rule::new(format!("self.matches('{EXPONENTIAL_FACTOR}')")).message(
        "spec.exponentialFactor must be \"0\" (no growth) or a decimal number of at least 1, \
         like \"2.0\"",
    )
}

// --- ZoneDisruptionBudget ---

/// The message of [`selector_not_empty`], and of the ZoneDisruptionBudget's check.
pub const SELECTOR_NOT_EMPTY: &str =
    "spec.selector is missing or empty: it would select every pod of the namespace";

pub fn selector_not_empty() -> Rule {
    Rule::new(
        "has(self.selector) && (\
         has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0 || \
         has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)",
    )
    .message(SELECTOR_NOT_EMPTY)
    .field_path(".selector")
    .reason(Reason::FieldValueRequired)
}

/// The operators of a label selector expression, in the rule and the check.
pub const SELECTOR_OPERATORS: &str = "In, NotIn, Exists or DoesNotExist";

/// On each `selector.matchExpressions` item.
pub fn selector_operator() -> Rule {
    Rule::new("self.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist']")
        .message(Message::Message(format!(
            "spec.selector.matchExpressions[].operator must be {SELECTOR_OPERATORS}"
        )))
        .field_path(".operator")
}

/// On each `selector.matchExpressions` item.
pub fn selector_values_listed() -> Rule {
    Rule::new(
        "!(self.operator in ['In', 'NotIn']) || has(self.values) && size(self.values) > 0",
    )
    .message(
        "spec.selector.matchExpressions[].values: operators In and NotIn need at least one value",
    )
    .field_path(".values")
    .reason(Reason::FieldValueRequired)
}

/// On each `selector.matchExpressions` item.
pub fn selector_values_absent() -> Rule {
    Rule::new(
        "!(self.operator in ['Exists', 'DoesNotExist']) || \
         !has(self.values) || size(self.values) == 0",
    )
    .message(
        "spec.selector.matchExpressions[].values: operators Exists and DoesNotExist take no \
         values",
    )
    .field_path(".values")
    .reason(Reason::FieldValueForbidden)
}

// --- ShardedPrometheus ---

/// The zone rules apply in Topology sharding only (Classic ignores `topology`); an absent mode
/// is the default, Topology.
const CLASSIC: &str = "has(self.mode) && self.mode != 'Topology'";

/// The message of [`zones_listed`], and of the ShardedPrometheus's check.
pub const ZONES_LISTED: &str = "spec.shardingStrategy.topology.values is empty: Topology \
     sharding needs at least one zone (or set shardingStrategy.mode to Classic)";

/// On the spec, not on `shardingStrategy`: the API server checks a default against the rules of
/// its own node, and the default strategy (Topology, no zone) is incomplete by design.
pub fn zones_listed() -> Rule {
    Rule::new(
        "has(self.shardingStrategy) && (\
         has(self.shardingStrategy.mode) && self.shardingStrategy.mode != 'Topology' || \
         has(self.shardingStrategy.topology) && has(self.shardingStrategy.topology.values) && \
         size(self.shardingStrategy.topology.values) > 0)",
    )
    .message(ZONES_LISTED)
    .field_path(".shardingStrategy.topology.values")
    .reason(Reason::FieldValueRequired)
}

/// On `shardingStrategy`.
pub fn zones_are_label_values() -> Rule {
    Rule::new(format!(
        "{CLASSIC} || !has(self.topology) || !has(self.topology.values) || \
         self.topology.values.all(zone, zone.matches('{LABEL_VALUE}'))"
    ))
    .message(Message::Message(format!(
        "spec.shardingStrategy.topology.values: every zone must be a label value: 1 to 63 \
         {LABEL_VALUE_FORM}"
    )))
    .field_path(".topology.values")
}

/// On `shardingStrategy`. No reason FieldValueDuplicate: the API server reports that reason
/// without the rule's message.
pub fn zones_unique() -> Rule {
    Rule::new(format!(
        "{CLASSIC} || !has(self.topology) || !has(self.topology.values) || \
         self.topology.values.all(zone, self.topology.values.exists_one(other, other == zone))"
    ))
    .message("spec.shardingStrategy.topology.values lists a zone more than once")
    .field_path(".topology.values")
}

/// The guard of the `externalLabelName` rules: Topology sharding and a name that is set.
const ZONE_LABEL_SET: &str = "!has(self.topology) || !has(self.topology.externalLabelName) || \
     self.topology.externalLabelName == ''";

/// On `shardingStrategy`.
pub fn zone_label_is_label_name() -> Rule {
    Rule::new(format!(
        "{CLASSIC} || {ZONE_LABEL_SET} || self.topology.externalLabelName.matches('{LABEL_NAME}')"
    ))
    .message(Message::Message(format!(
        "spec.shardingStrategy.topology.externalLabelName must be {LABEL_NAME_FORM}, or \"\" for \
         no zone label"
    )))
    .field_path(".topology.externalLabelName")
}

/// Why the zone label may not be a label the controller sets, in the rule and the check.
pub fn zone_label_set_by_controller() -> String {
    format!(
        "is also set by the controller ({shard}, {replica}): choose another name",
        shard = contract::SHARD_EXTERNAL_LABEL,
        replica = contract::REPLICA_EXTERNAL_LABEL,
    )
}

/// On `shardingStrategy`.
pub fn zone_label_not_reserved() -> Rule {
    Rule::new(format!(
        "{CLASSIC} || {ZONE_LABEL_SET} || \
         !(self.topology.externalLabelName in ['{shard}', '{replica}'])",
        shard = contract::SHARD_EXTERNAL_LABEL,
        replica = contract::REPLICA_EXTERNAL_LABEL,
    ))
    .message(Message::Message(format!(
        "spec.shardingStrategy.topology.externalLabelName {}",
        zone_label_set_by_controller()
    )))
    .field_path(".topology.externalLabelName")
}

/// On `externalLabels`. Map keys cannot be bounded in a schema, but the API server estimates
/// them as short, so this rule stays cheap.
pub fn external_labels_are_label_names() -> Rule {
    Rule::new(format!("self.all(name, name.matches('{LABEL_NAME}'))")).message(Message::Message(
        format!("spec.externalLabels: every name must be {LABEL_NAME_FORM}"),
    ))
}

/// On the spec.
pub fn external_labels_not_reserved() -> Rule {
    Rule::new(format!(
        "!has(self.externalLabels) || \
         !('{shard}' in self.externalLabels) && !('{replica}' in self.externalLabels)",
        shard = contract::SHARD_EXTERNAL_LABEL,
        replica = contract::REPLICA_EXTERNAL_LABEL,
    ))
    .message(Message::Message(format!(
        "spec.externalLabels: {shard} and {replica} are set by the controller on every \
             shard: choose other names",
        shard = contract::SHARD_EXTERNAL_LABEL,
        replica = contract::REPLICA_EXTERNAL_LABEL,
    )))
    .field_path(".externalLabels")
}

/// On the spec. `shardingStrategy` and its `topology` have defaults, so the API server has filled
/// them in before any rule runs.
pub fn external_labels_leave_the_zone_label() -> Rule {
    Rule::new(format!(
        "!has(self.externalLabels) || \
         has(self.shardingStrategy.mode) && self.shardingStrategy.mode != 'Topology' || \
         (has(self.shardingStrategy.topology.externalLabelName) ? \
         self.shardingStrategy.topology.externalLabelName == '' || \
         !(self.shardingStrategy.topology.externalLabelName in self.externalLabels) : \
         !('{default}' in self.externalLabels))",
        default = contract::DEFAULT_ZONE_EXTERNAL_LABEL,
    ))
    .message(Message::Message(format!(
        "spec.externalLabels: the zone label (shardingStrategy.topology.externalLabelName, \
             default \"{default}\") is set by the controller on every shard: choose another name",
        default = contract::DEFAULT_ZONE_EXTERNAL_LABEL,
    )))
    .field_path(".externalLabels")
}

/// On each `scrapeConfigs` item (whose `job_name` the schema declares a string).
pub fn scrape_config_job_name() -> Rule {
    Rule::new("has(self.job_name) && self.job_name != ''")
        .message("spec.scrapeConfigs[].job_name must be a non-empty string")
        .field_path(".job_name")
        .reason(Reason::FieldValueRequired)
}

/// Why a `remoteWrite` item needs a url, in the rule and the check.
pub const REMOTE_WRITE_ENTRY: &str = "each entry is one Prometheus remote_write";

/// On each `remoteWrite` item (whose `url` the schema declares a string).
pub fn remote_write_url() -> Rule {
    Rule::new("has(self.url) && self.url != ''")
        .message(Message::Message(format!(
            "spec.remoteWrite[].url must be a non-empty string: {REMOTE_WRITE_ENTRY}"
        )))
        .field_path(".url")
        .reason(Reason::FieldValueRequired)
}

/// The message of [`agent_remote_writes`], and of the ShardedPrometheus's check.
pub const AGENT_REMOTE_WRITES: &str = "spec.remoteWrite is empty: mode Agent keeps no data \
     locally and forwards everything through remote write, so it needs at least one target";

/// On the spec.
pub fn agent_remote_writes() -> Rule {
    Rule::new(
        "!has(self.mode) || self.mode != 'Agent' || \
         has(self.remoteWrite) && size(self.remoteWrite) > 0",
    )
    .message(AGENT_REMOTE_WRITES)
    .field_path(".remoteWrite")
    .reason(Reason::FieldValueRequired)
}

/// The message of [`agent_has_no_rule_files`], and of the ShardedPrometheus's check.
pub const AGENT_HAS_NO_RULE_FILES: &str = "spec.ruleFiles is set but mode is Agent: agents do \
     not evaluate rules; remove ruleFiles or use mode Server";

/// On the spec.
pub fn agent_has_no_rule_files() -> Rule {
    Rule::new(
        "!has(self.mode) || self.mode != 'Agent' || \
         !has(self.ruleFiles) || size(self.ruleFiles) == 0",
    )
    .message(AGENT_HAS_NO_RULE_FILES)
    .field_path(".ruleFiles")
    .reason(Reason::FieldValueForbidden)
}

/// What an empty `ruleFiles[].configMap` lacks, in the rule and the check.
pub const RULE_FILE_CONFIG_MAP: &str = "is empty: name the ConfigMap holding the rules";

/// On each `ruleFiles[].configMap`. Not a name of blanks (the controller refuses it): trimming
/// every item of an unbounded list costs more than the API server allows.
pub fn rule_file_config_map() -> Rule {
    Rule::new("self != ''").message(Message::Message(format!(
        "spec.ruleFiles[].configMap {RULE_FILE_CONFIG_MAP}"
    )))
}

/// What an empty `ruleFiles[].key` lacks, in the rule and the check.
pub const RULE_FILE_KEY: &str = "name a key, or leave key out to load every key";

/// On each `ruleFiles[].key`.
pub fn rule_file_key() -> Rule {
    Rule::new("self != ''").message(Message::Message(format!(
        "spec.ruleFiles[].key is empty: {RULE_FILE_KEY}"
    )))
}

/// On `retention.time` and `shardRetentionPolicy.retain.retentionPeriod`.
pub fn prometheus_duration(field: &str) -> Rule {
    Rule::new(format!(
        "self != '' && self.matches('{PROMETHEUS_DURATION}')"
    ))
    .message(Message::Message(format!(
        "{field} must be a Prometheus duration: numbers each followed by a unit (y, w, d, h, \
             m, s, ms), largest first, like 15d or 1d12h"
    )))
}

/// On `retention.size` and `enforcedBodySizeLimit`.
pub fn prometheus_size(field: &str) -> Rule {
    Rule::new(format!("self.matches('{PROMETHEUS_SIZE}')")).message(Message::Message(format!(
        "{field} must be a Prometheus size: a number and a unit (B, KB, MB, GB, TB, PB, EB or \
         KiB ... EiB), like 10GB"
    )))
}

/// The message of [`storage_one_kind`], and of the ShardedPrometheus's check.
pub const STORAGE_ONE_KIND: &str =
    "spec.storage sets both volumeClaimTemplate and emptyDir: choose one";

/// On `storage`.
pub fn storage_one_kind() -> Rule {
    Rule::new("!has(self.volumeClaimTemplate) || !has(self.emptyDir)").message(STORAGE_ONE_KIND)
}
