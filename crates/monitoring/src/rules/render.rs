//! The rule file itself: Prometheus's rule-file format (snake_case keys), written from a
//! validated spec. Keys that are unset are left out rather than written empty, so Prometheus
//! applies its own defaults; label and annotation maps come out sorted, so the same object
//! always gives the same bytes and the ConfigMaps only change when the rules do.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Evaluator;
use super::spec::{PrometheusRuleSpec, Rule, RuleGroup};

#[derive(Serialize)]
struct File<'a> {
    groups: Vec<Group<'a>>,
}

#[derive(Serialize)]
struct Group<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query_offset: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<i64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partial_response_strategy: Option<&'a str>,
    rules: Vec<FileRule<'a>>,
}

#[derive(Serialize)]
struct FileRule<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    record: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    alert: &'a str,
    expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    for_: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_firing_for: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: &'a BTreeMap<String, String>,
}

impl<'a> Group<'a> {
    /// `partial_response_strategy` is Thanos Ruler's: Prometheus refuses a file holding it.
    fn new(group: &'a RuleGroup, evaluator: Evaluator) -> Group<'a> {
        Group {
            name: &group.name,
            interval: non_empty(&group.interval),
            query_offset: group.query_offset.as_deref(),
            limit: group.limit,
            labels: &group.labels,
            partial_response_strategy: match evaluator {
                Evaluator::Prometheus => None,
                Evaluator::ThanosRuler => non_empty(&group.partial_response_strategy),
            },
            rules: group.rules.iter().map(FileRule::new).collect(),
        }
    }
}

impl<'a> FileRule<'a> {
    fn new(rule: &'a Rule) -> FileRule<'a> {
        FileRule {
            record: &rule.record,
            alert: &rule.alert,
            // Always a string: a numeric expr is the same PromQL, and Prometheus reads a string.
            expr: rule.expr_text(),
            for_: non_empty(&rule.for_),
            keep_firing_for: rule.keep_firing_for.as_deref(),
            labels: &rule.labels,
            annotations: &rule.annotations,
        }
    }
}

/// An empty duration means unset (upstream drops it); written empty, Prometheus would refuse
/// it.
fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

/// The YAML of the rule file of `spec` for `evaluator`.
pub(super) fn yaml(spec: &PrometheusRuleSpec, evaluator: Evaluator) -> Result<String, String> {
    let file = File {
        groups: spec
            .groups
            .iter()
            .map(|group| Group::new(group, evaluator))
            .collect(),
    };
    serde_norway::to_string(&file).map_err(|error| format!("rendering the rule file: {error}"))
}
