//! Relabelling rules: the user's (validated as prometheus-operator validates them, so a rule
//! Prometheus would refuse never reaches it), the selector rules upstream generates for a
//! monitor's `selector`, and the label-selector string of the `RoleSelector` mechanism.

use std::sync::LazyLock;

use regex::Regex;
use zone_topology::relabel::{Action, RelabelConfig as Rule};

use crate::monitors::{LabelSelector, RelabelConfig};

/// `[^a-zA-Z0-9_]` → `_`, as upstream turns Kubernetes label names into Prometheus ones.
pub(crate) fn sanitize_label_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

static RELABEL_TARGET: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(?:(?:[a-zA-Z_]|\$(?:\{[0-9A-Za-z_]+\}|[0-9A-Za-z_]+))+[0-9A-Za-z_]*)+$").ok()
});

fn is_relabel_target(text: &str) -> bool {
    RELABEL_TARGET.as_ref().is_some_and(|re| re.is_match(text))
}

fn parse_action(text: &str) -> Option<Action> {
    serde_json::from_value(serde_json::Value::String(text.to_ascii_lowercase())).ok()
}

/// Validates `rules` (reported as `field[i]`) and converts them to Prometheus rules, keeping
/// exactly the fields that were set, as upstream does (empty regex/target/modulus omitted,
/// action lowercased).
pub(crate) fn user_rules(field: &str, rules: &[RelabelConfig]) -> Result<Vec<Rule>, String> {
    rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            validate(rule).map_err(|problem| format!("{field}[{index}]: {problem}"))?;
            Ok(convert(rule))
        })
        .collect()
}

fn convert(rule: &RelabelConfig) -> Rule {
    let non_empty = |value: &Option<String>| value.clone().filter(|value| !value.is_empty());
    Rule {
        source_labels: rule.source_labels.clone(),
        separator: rule.separator.clone(),
        target_label: non_empty(&rule.target_label),
        regex: non_empty(&rule.regex),
        modulus: rule.modulus.filter(|modulus| *modulus != 0),
        replacement: rule.replacement.clone(),
        action: rule.action.as_deref().and_then(parse_action),
    }
}

fn validate(rule: &RelabelConfig) -> Result<(), String> {
    let action_text = rule
        .action
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or("replace");
    let action =
        parse_action(action_text).ok_or_else(|| format!("unknown action {action_text:?}"))?;
    let regex = rule.regex.as_deref().unwrap_or("");
    Regex::new(&format!("^(?s:{regex})$"))
        .map_err(|_| format!("invalid regex {regex:?} for relabel configuration"))?;
    let target = rule.target_label.as_deref().unwrap_or("");
    let modulus = rule.modulus.unwrap_or(0);
    let custom_replacement = rule.replacement.as_deref().is_some_and(|r| r != "$1");
    use Action::*;
    if action == Hashmod && modulus == 0 {
        return Err("hashmod requires a non-zero modulus".into());
    }
    let needs_target = matches!(
        action,
        Replace | Hashmod | Lowercase | Uppercase | KeepEqual | DropEqual
    );
    if needs_target && target.is_empty() {
        return Err(format!("action {action_text:?} needs targetLabel"));
    }
    let templated_target = matches!(
        action,
        Replace | Lowercase | Uppercase | KeepEqual | DropEqual
    );
    if templated_target && !is_relabel_target(target) {
        return Err(format!(
            "{target:?} is an invalid targetLabel for {action_text:?}"
        ));
    }
    if matches!(action, Lowercase | Uppercase | KeepEqual | DropEqual) && custom_replacement {
        return Err(format!("replacement cannot be set for {action_text:?}"));
    }
    if action == Labelmap
        && let Some(replacement) = &rule.replacement
        && !is_relabel_target(replacement)
    {
        return Err(format!(
            "{replacement:?} is an invalid replacement for labelmap"
        ));
    }
    let custom_separator = rule.separator.as_deref().is_some_and(|s| s != ";");
    if matches!(action, KeepEqual | DropEqual)
        && ((!regex.is_empty() && regex != "(.*)")
            || modulus != 0
            || custom_separator
            || custom_replacement)
    {
        return Err(format!(
            "{action_text:?} takes only sourceLabels and targetLabel"
        ));
    }
    if matches!(action, Labeldrop | Labelkeep)
        && (!rule.source_labels.is_empty()
            || !target.is_empty()
            || modulus != 0
            || custom_separator
            || custom_replacement)
    {
        return Err(format!("{action_text:?} takes only regex"));
    }
    Ok(())
}

/// A rule copying `source` into `target` (upstream's plain `source_labels`/`target_label`).
pub(crate) fn copy(source: &str, target: &str) -> Rule {
    Rule {
        source_labels: vec![source.to_string()],
        target_label: Some(target.to_string()),
        ..Rule::default()
    }
}

/// A rule setting `target` from `source` only when it is non-empty (`regex: (.+)`).
pub(crate) fn copy_if_set(source: &str, target: &str) -> Rule {
    Rule {
        regex: Some("(.+)".into()),
        replacement: Some("${1}".into()),
        ..copy(source, target)
    }
}

/// A rule setting `target` to a constant (no source labels, no action).
pub(crate) fn constant(target: &str, value: &str) -> Rule {
    Rule {
        target_label: Some(target.to_string()),
        replacement: Some(value.to_string()),
        ..Rule::default()
    }
}

/// Upstream's relabel-mechanism selection: one keep/drop rule per requirement, on
/// `__meta_kubernetes_<object>_label(present)_<key>`; matchLabels first, sorted by key.
pub(crate) fn selector_rules(object: &str, selector: &LabelSelector) -> Vec<Rule> {
    let label = |key: &str| {
        format!(
            "__meta_kubernetes_{object}_label_{}",
            sanitize_label_name(key)
        )
    };
    let present = |key: &str| {
        format!(
            "__meta_kubernetes_{object}_labelpresent_{}",
            sanitize_label_name(key)
        )
    };
    let mut rules = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        rules.push(Rule::keep(
            &[&label(key), &present(key)],
            &format!("({value});true"),
        ));
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let key = requirement.key.as_str();
        let values = requirement.values.clone().unwrap_or_default().join("|");
        let rule = match requirement.operator.as_str() {
            "In" => Rule::keep(&[&label(key), &present(key)], &format!("({values});true")),
            "NotIn" => Rule::drop(&[&label(key), &present(key)], &format!("({values});true")),
            "Exists" => Rule::keep(&[&present(key)], "true"),
            "DoesNotExist" => Rule::drop(&[&present(key)], "true"),
            _ => continue,
        };
        rules.push(rule);
    }
    rules
}

static LABEL_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").ok());
static DNS_SUBDOMAIN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").ok()
});

fn matches(re: &LazyLock<Option<Regex>>, text: &str) -> bool {
    re.as_ref().is_some_and(|re| re.is_match(text))
}

fn valid_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && matches(&DNS_SUBDOMAIN, p));
    prefix_ok && name.len() <= 63 && matches(&LABEL_NAME, name)
}

fn valid_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && matches(&LABEL_NAME, value))
}

/// One requirement of a parsed selector: key, operator text, sorted values.
struct Requirement {
    key: String,
    operator: &'static str,
    values: Vec<String>,
}

/// Checks `selector` as Kubernetes parses it (upstream refuses a monitor whose selector does
/// not parse) and returns its requirements sorted by key.
fn requirements(field: &str, selector: &LabelSelector) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        if !valid_key(key) || !valid_value(value) {
            return Err(format!(
                "{field}.matchLabels: invalid label {key:?}: {value:?}"
            ));
        }
        out.push(Requirement {
            key: key.clone(),
            operator: "=",
            values: vec![value.clone()],
        });
    }
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{index}]");
        let mut values = expression.values.clone().unwrap_or_default();
        let operator = match expression.operator.as_str() {
            "In" => "in",
            "NotIn" => "notin",
            "Exists" => "exists",
            "DoesNotExist" => "!",
            other => return Err(format!("{at}.operator: {other:?} is not a valid operator")),
        };
        let set_based = matches!(operator, "in" | "notin");
        if set_based == values.is_empty() {
            return Err(format!(
                "{at}.values: must be {} for {}",
                if set_based { "non-empty" } else { "empty" },
                expression.operator
            ));
        }
        if !valid_key(&expression.key) {
            return Err(format!("{at}.key: invalid label key {:?}", expression.key));
        }
        if let Some(bad) = values.iter().find(|value| !valid_value(value)) {
            return Err(format!("{at}.values: invalid label value {bad:?}"));
        }
        values.sort();
        out.push(Requirement {
            key: expression.key.clone(),
            operator,
            values,
        });
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// Validates a monitor's selector.
pub(crate) fn check_selector(field: &str, selector: &LabelSelector) -> Result<(), String> {
    requirements(field, selector).map(|_| ())
}

/// The selector as Kubernetes prints it (`app=web,tier in (a,b),!legacy`), for SD `selectors`.
pub(crate) fn selector_string(field: &str, selector: &LabelSelector) -> Result<String, String> {
    let parts: Vec<String> = requirements(field, selector)?
        .into_iter()
        .map(|r| match r.operator {
            "=" => format!("{}={}", r.key, r.values.join("")),
            "exists" => r.key,
            "!" => format!("!{}", r.key),
            operator => format!("{} {operator} ({})", r.key, r.values.join(",")),
        })
        .collect();
    Ok(parts.join(","))
}

/// Rules as the JSON list Prometheus reads.
pub(crate) fn to_json(rules: &[Rule]) -> serde_json::Value {
    serde_json::to_value(rules).unwrap_or_default()
}
