//! The PrometheusRule spec (monitoring.coreos.com/v1) as the CRD stores it. Field names are the
//! CRD's: camelCase except `query_offset`, `partial_response_strategy` and `keep_firing_for`,
//! which the CRD spells as Prometheus does. Strings that Go leaves empty when unset (`record`,
//! `alert`) stay plain strings here, empty meaning unset, so both read the same objects.

use std::collections::BTreeMap;

pub use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrometheusRuleSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<RuleGroup>,
}

/// Rules evaluated together, in order, at the group's interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleGroup {
    pub name: String,
    /// Added to every rule's result (a rule's own labels win). Prometheus >= 3.0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How often the group is evaluated; unset or empty: the global evaluation interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Evaluation timestamps shifted this far into the past. Prometheus >= 2.53.
    #[serde(
        rename = "query_offset",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub query_offset: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// Thanos Ruler only; never written to a Prometheus rule file.
    #[serde(
        rename = "partial_response_strategy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub partial_response_strategy: Option<String>,
    /// At most this many alerts (alerting rule) or series (recording rule) per rule; 0: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// A recording rule (`record`) or an alerting rule (`alert`): exactly one of them is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub record: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub alert: String,
    /// PromQL; the CRD takes a number too (`expr: 1`), which is the same PromQL.
    pub expr: IntOrString,
    /// Alerting rules: pending this long before firing. Empty means unset.
    #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    /// Alerting rules: keeps firing this long after the condition clears.
    #[serde(
        rename = "keep_firing_for",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub keep_firing_for: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Alerting rules only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Rule {
    /// The PromQL text of `expr`, a number written as Go would.
    pub fn expr_text(&self) -> String {
        match &self.expr {
            IntOrString::Int(number) => number.to_string(),
            IntOrString::String(text) => text.clone(),
        }
    }
}
