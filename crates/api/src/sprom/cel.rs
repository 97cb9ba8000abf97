//! The ShardedPrometheus's CEL rules, beside the checks of [`super::validation`] that say the same thing:
//! where both refuse the same spec they share the text, a constant or function here.

use kube::core::{Message, Reason, Rule};

use crate::patterns::{
    LABEL_NAME, LABEL_NAME_FORM, LABEL_VALUE, LABEL_VALUE_FORM, PROMETHEUS_DURATION,
    PROMETHEUS_SIZE,
};
use crate::sprom::contract;

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
