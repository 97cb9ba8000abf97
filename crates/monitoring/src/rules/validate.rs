//! What Prometheus checks when it loads a rule file (rulefmt, the PromQL parser), checked
//! before the file is written, with prometheus-operator's settings: legacy (non-UTF-8) metric
//! and label names, no experimental PromQL.
//!
//! The reason names the group and the rule, e.g. `group "api", rule 2 (alert "HighErrors"):
//! expr: ...`, so the owner of the object knows what to fix without reading Prometheus logs.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use super::duration;
use super::spec::{PrometheusRuleSpec, Rule, RuleGroup};

mod expr;
mod names;
mod template;

#[cfg(test)]
mod tests;

/// Ok, or the first problem of `spec` (and how many more there are).
pub(super) fn spec(spec: &PrometheusRuleSpec) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, group) in spec.groups.iter().enumerate() {
        let number = index + 1;
        let at = match group.name.as_str() {
            "" => format!("group {number}"),
            name => format!("group {name:?}"),
        };
        if group.name.is_empty() {
            problems.push(format!("{at}: name is empty"));
        } else {
            match seen.entry(&group.name) {
                Entry::Occupied(first) => problems.push(format!(
                    "{at}: name is repeated (groups {} and {number}); group names are unique \
                     within a file",
                    first.get()
                )),
                Entry::Vacant(entry) => {
                    entry.insert(number);
                }
            }
        }
        for problem in self::group(group) {
            problems.push(format!("{at}: {problem}"));
        }
        for (index, rule) in group.rules.iter().enumerate() {
            let at = format!("{at}, {}", rule_at(index + 1, rule));
            for problem in self::rule(rule) {
                problems.push(format!("{at}: {problem}"));
            }
        }
    }
    match problems.len() {
        0 => Ok(()),
        1 => Err(problems.swap_remove(0)),
        more => Err(format!(
            "{} (and {} more problem{})",
            problems.swap_remove(0),
            more - 1,
            if more == 2 { "" } else { "s" }
        )),
    }
}

/// `rule 2 (alert "HighErrors")`: the 1-based position, and the name rulefmt shows.
fn rule_at(number: usize, rule: &Rule) -> String {
    match (rule.alert.as_str(), rule.record.as_str()) {
        ("", "") => format!("rule {number}"),
        ("", record) => format!("rule {number} (record {record:?})"),
        (alert, _) => format!("rule {number} (alert {alert:?})"),
    }
}

/// For a Thanos Ruler: every group's `partial_response_strategy` is `warn` or `abort` (any
/// case, as Thanos reads it) or unset (`abort`).
pub(super) fn partial_response(spec: &PrometheusRuleSpec) -> Result<(), String> {
    for group in &spec.groups {
        if let Some(strategy) = group.partial_response_strategy.as_deref()
            && !strategy.is_empty()
            && !["warn", "abort"].contains(&strategy.to_ascii_lowercase().as_str())
        {
            return Err(format!(
                "group {:?}: partial_response_strategy: {strategy:?} is not warn or abort",
                group.name
            ));
        }
    }
    Ok(())
}

/// The group's own fields.
fn group(group: &RuleGroup) -> Vec<String> {
    let mut problems = Vec::new();
    // An empty interval is dropped (upstream), meaning the global evaluation interval.
    if let Some(interval) = group.interval.as_deref().filter(|i| !i.is_empty())
        && let Err(why) = duration::parse(interval)
    {
        problems.push(format!("interval: {why}"));
    }
    if let Some(offset) = &group.query_offset
        && let Err(why) = duration::parse(offset)
    {
        problems.push(format!("query_offset: {why}"));
    }
    if let Some(limit) = group.limit.filter(|limit| *limit < 0) {
        problems.push(format!("limit: {limit} is negative (0 means no limit)"));
    }
    problems.extend(names::labels(&group.labels));
    problems
}

/// One rule, in rulefmt's order of checks.
fn rule(rule: &Rule) -> Vec<String> {
    let mut problems = Vec::new();
    let recording = !rule.record.is_empty();
    let alerting = !rule.alert.is_empty();
    match (recording, alerting) {
        (true, true) => problems.push("only one of record and alert may be set".to_string()),
        (false, false) => problems.push("one of record or alert must be set".to_string()),
        _ => {}
    }
    if let Err(why) = expr::check(&rule.expr_text()) {
        problems.push(format!("expr: {why}"));
    }
    // An empty `for` is dropped (upstream); `keep_firing_for` cannot be empty in the CRD.
    let for_ = rule.for_.as_deref().filter(|f| !f.is_empty());
    let mut durations = [
        ("for", for_),
        ("keep_firing_for", rule.keep_firing_for.as_deref()),
    ]
    .map(|(field, text)| (field, text.map(duration::parse)));
    for (field, parsed) in &mut durations {
        if let Some(Err(why)) = parsed {
            problems.push(format!("{field}: {why}"));
        }
    }
    if recording {
        if !rule.annotations.is_empty() {
            problems.push("annotations are only valid on alerting rules".to_string());
        }
        // Prometheus accepts `for: 0s` on a recording rule: only a non-zero duration is wrong.
        for (field, parsed) in durations {
            if let Some(Ok(millis)) = parsed
                && millis != 0
            {
                problems.push(format!("{field} is only valid on alerting rules"));
            }
        }
        if !names::is_metric_name(&rule.record) {
            problems.push(format!(
                "record: {:?} is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
                rule.record
            ));
        }
        if rule.record.contains(['{', '}']) {
            problems.push(
                "record: braces in the name of a recording rule; should they be in expr?"
                    .to_string(),
            );
        }
    }
    problems.extend(names::labels(&rule.labels));
    for name in rule.annotations.keys() {
        if !names::is_label_name(name) {
            problems.push(format!(
                "annotations: {name:?} is not a valid annotation name ([a-zA-Z_][a-zA-Z0-9_]*)"
            ));
        }
    }
    if alerting {
        let templates = [("label", &rule.labels), ("annotation", &rule.annotations)];
        for (what, map) in templates {
            for (name, value) in map {
                if let Err(why) = template::check(value) {
                    problems.push(format!("{what} {name:?}: template: {why}"));
                }
            }
        }
    }
    problems
}
