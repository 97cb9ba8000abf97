//! Prometheus `relabel_configs`: serde types that serialise to valid Prometheus YAML, and an
//! evaluator with Prometheus's semantics so tests can run the rules we generate.
//!
//! Semantics follow `model/relabel/relabel.go`: regexes are fully anchored and dot-all
//! (`^(?s:RE)$`), missing labels read as the empty string, a `replace` whose result is empty
//! deletes the target label, and `$1`/`${1}`/`$name` expand as in Go's `Regexp.Expand` (Rust's
//! `regex` crate expands with the same rules).

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::hashmod::hashmod;

/// A label set: name → value. Absent and empty are the same thing, as in Prometheus.
pub type Labels = BTreeMap<String, String>;

pub const DEFAULT_SEPARATOR: &str = ";";
pub const DEFAULT_REGEX: &str = "(.*)";
pub const DEFAULT_REPLACEMENT: &str = "$1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Replace,
    Keep,
    Drop,
    #[serde(rename = "keepequal")]
    KeepEqual,
    #[serde(rename = "dropequal")]
    DropEqual,
    Hashmod,
    Labelmap,
    Labeldrop,
    Labelkeep,
    Lowercase,
    Uppercase,
}

/// One entry of a Prometheus `relabel_configs` list. Unset fields are omitted when serialised so
/// the output reads like hand-written Prometheus configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RelabelConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modulus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
}

impl RelabelConfig {
    /// `replace`: set `target` from `sources` when the joined value matches `regex`.
    pub fn replace(sources: &[&str], regex: &str, target: &str, replacement: &str) -> Self {
        RelabelConfig {
            source_labels: owned(sources),
            target_label: Some(target.to_string()),
            regex: Some(regex.to_string()),
            replacement: Some(replacement.to_string()),
            action: Some(Action::Replace),
            ..RelabelConfig::default()
        }
    }

    /// `keep`: drop the target unless the joined `sources` match `regex`.
    pub fn keep(sources: &[&str], regex: &str) -> Self {
        RelabelConfig {
            source_labels: owned(sources),
            regex: Some(regex.to_string()),
            action: Some(Action::Keep),
            ..RelabelConfig::default()
        }
    }

    /// `drop`: drop the target when the joined `sources` match `regex`.
    pub fn drop(sources: &[&str], regex: &str) -> Self {
        RelabelConfig {
            source_labels: owned(sources),
            regex: Some(regex.to_string()),
            action: Some(Action::Drop),
            ..RelabelConfig::default()
        }
    }

    /// `hashmod`: `target = md5(joined sources) % modulus`.
    pub fn hashmod(sources: &[&str], target: &str, modulus: u64) -> Self {
        RelabelConfig {
            source_labels: owned(sources),
            target_label: Some(target.to_string()),
            modulus: Some(modulus),
            action: Some(Action::Hashmod),
            ..RelabelConfig::default()
        }
    }
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_string()).collect()
}

#[derive(Debug, thiserror::Error)]
pub enum RelabelError {
    #[error("relabel rule {index}: invalid regex {regex:?}")]
    InvalidRegex {
        index: usize,
        regex: String,
        #[source]
        source: Box<regex::Error>,
    },
    #[error("relabel rule {index}: action {action:?} needs a target_label")]
    MissingTargetLabel { index: usize, action: Action },
    #[error("relabel rule {index}: hashmod needs a modulus greater than zero")]
    MissingModulus { index: usize },
}

/// Rules compiled once (regexes parsed) and applied to many targets.
#[derive(Debug, Clone)]
pub struct CompiledRules {
    rules: Vec<CompiledRule>,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    source_labels: Vec<String>,
    separator: String,
    target_label: String,
    regex: Regex,
    modulus: u64,
    replacement: String,
    action: Action,
}

impl CompiledRules {
    pub fn new(configs: &[RelabelConfig]) -> Result<CompiledRules, RelabelError> {
        let rules = configs
            .iter()
            .enumerate()
            .map(|(index, config)| compile(index, config))
            .collect::<Result<_, _>>()?;
        Ok(CompiledRules { rules })
    }

    /// Applies the rules in order; `None` means the target was dropped.
    pub fn apply(&self, labels: &Labels) -> Option<Labels> {
        let mut labels = labels.clone();
        for rule in &self.rules {
            if !rule.apply(&mut labels) {
                return None;
            }
        }
        Some(labels)
    }
}

/// Convenience for one-off evaluation: compile and apply.
pub fn apply(configs: &[RelabelConfig], labels: &Labels) -> Result<Option<Labels>, RelabelError> {
    Ok(CompiledRules::new(configs)?.apply(labels))
}

fn compile(index: usize, config: &RelabelConfig) -> Result<CompiledRule, RelabelError> {
    let action = config.action.unwrap_or_default();
    let pattern = config.regex.as_deref().unwrap_or(DEFAULT_REGEX);
    let regex =
        Regex::new(&format!("^(?s:{pattern})$")).map_err(|source| RelabelError::InvalidRegex {
            index,
            regex: pattern.to_string(),
            source: Box::new(source),
        })?;
    let target_label = config.target_label.clone().unwrap_or_default();
    let needs_target = matches!(
        action,
        Action::Replace
            | Action::Hashmod
            | Action::Lowercase
            | Action::Uppercase
            | Action::KeepEqual
            | Action::DropEqual
    );
    if needs_target && target_label.is_empty() {
        return Err(RelabelError::MissingTargetLabel { index, action });
    }
    let modulus = config.modulus.unwrap_or(0);
    if action == Action::Hashmod && modulus == 0 {
        return Err(RelabelError::MissingModulus { index });
    }
    Ok(CompiledRule {
        source_labels: config.source_labels.clone(),
        separator: config
            .separator
            .clone()
            .unwrap_or_else(|| DEFAULT_SEPARATOR.to_string()),
        target_label,
        regex,
        modulus,
        replacement: config
            .replacement
            .clone()
            .unwrap_or_else(|| DEFAULT_REPLACEMENT.to_string()),
        action,
    })
}

/// Sets a label the Prometheus way: an empty value removes it.
fn set(labels: &mut Labels, name: String, value: String) {
    if value.is_empty() {
        labels.remove(&name);
    } else {
        labels.insert(name, value);
    }
}

impl CompiledRule {
    fn joined(&self, labels: &Labels) -> String {
        let values: Vec<&str> = self
            .source_labels
            .iter()
            .map(|name| labels.get(name).map_or("", String::as_str))
            .collect();
        values.join(&self.separator)
    }

    /// Returns false when the target is dropped.
    fn apply(&self, labels: &mut Labels) -> bool {
        match self.action {
            Action::Keep => self.regex.is_match(&self.joined(labels)),
            Action::Drop => !self.regex.is_match(&self.joined(labels)),
            Action::KeepEqual | Action::DropEqual => {
                let target = labels.get(&self.target_label).map_or("", String::as_str);
                let equal = self.joined(labels) == target;
                equal == (self.action == Action::KeepEqual)
            }
            Action::Replace => {
                let value = self.joined(labels);
                if let Some(captures) = self.regex.captures(&value) {
                    let mut target = String::new();
                    captures.expand(&self.target_label, &mut target);
                    // Prometheus skips a rule whose expanded target is not a valid label name.
                    if is_label_name(&target) {
                        let mut result = String::new();
                        captures.expand(&self.replacement, &mut result);
                        set(labels, target, result);
                    }
                }
                true
            }
            Action::Hashmod => {
                let value = hashmod(&self.joined(labels), self.modulus);
                set(labels, self.target_label.clone(), value.to_string());
                true
            }
            Action::Lowercase | Action::Uppercase => {
                let value = self.joined(labels);
                let value = if self.action == Action::Lowercase {
                    value.to_lowercase()
                } else {
                    value.to_uppercase()
                };
                set(labels, self.target_label.clone(), value);
                true
            }
            Action::Labelmap => {
                let renamed: Vec<(String, String)> = labels
                    .iter()
                    .filter(|(name, _)| self.regex.is_match(name))
                    .map(|(name, value)| {
                        let new_name = self.regex.replace(name, self.replacement.as_str());
                        (new_name.into_owned(), value.clone())
                    })
                    .collect();
                for (name, value) in renamed {
                    set(labels, name, value);
                }
                true
            }
            Action::Labeldrop | Action::Labelkeep => {
                let keep_matching = self.action == Action::Labelkeep;
                labels.retain(|name, _| self.regex.is_match(name) == keep_matching);
                true
            }
        }
    }
}

/// Prometheus label names: `[a-zA-Z_][a-zA-Z0-9_]*` (the legacy scheme that relabelling uses).
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) if first.is_ascii_alphabetic() || first == '_' => {
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn replace_only_sets_when_the_anchored_regex_matches() {
        let rule =
            RelabelConfig::replace(&["__address__", "__tmp_hash"], "(.+);", "__tmp_hash", "$1");
        let out = apply(
            std::slice::from_ref(&rule),
            &labels(&[("__address__", "10.0.0.1:80")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out["__tmp_hash"], "10.0.0.1:80");
        // A user-set __tmp_hash makes the joined value "addr;user", which "(.+);" cannot match.
        let preset = labels(&[("__address__", "10.0.0.1:80"), ("__tmp_hash", "user")]);
        let out = apply(&[rule], &preset).unwrap().unwrap();
        assert_eq!(out["__tmp_hash"], "user");
    }

    #[test]
    fn regex_is_anchored_on_both_ends() {
        let keep = RelabelConfig::keep(&["zone"], "zone-a");
        assert!(
            apply(std::slice::from_ref(&keep), &labels(&[("zone", "zone-a")]))
                .unwrap()
                .is_some()
        );
        assert!(
            apply(std::slice::from_ref(&keep), &labels(&[("zone", "zone-ab")]))
                .unwrap()
                .is_none()
        );
        assert!(
            apply(&[keep], &labels(&[("zone", "xzone-a")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn empty_replacement_deletes_the_label() {
        let rule = RelabelConfig::replace(&["missing"], "(.*)", "present", "$1");
        let out = apply(&[rule], &labels(&[("present", "x")]))
            .unwrap()
            .unwrap();
        assert!(!out.contains_key("present"));
    }

    #[test]
    fn hashmod_writes_the_prometheus_bucket() {
        let rule = RelabelConfig::hashmod(&["__address__"], "__tmp_hash", 4);
        let out = apply(&[rule], &labels(&[("__address__", "10.0.0.1:9090")]))
            .unwrap()
            .unwrap();
        assert_eq!(out["__tmp_hash"], "1");
    }

    #[test]
    fn drop_keepequal_labelmap_and_labeldrop() {
        let drop = RelabelConfig::drop(&["job"], "node.*");
        assert!(
            apply(&[drop], &labels(&[("job", "node-exporter")]))
                .unwrap()
                .is_none()
        );
        let keepequal = RelabelConfig {
            source_labels: vec!["a".into()],
            target_label: Some("b".into()),
            action: Some(Action::KeepEqual),
            ..RelabelConfig::default()
        };
        assert!(
            apply(
                std::slice::from_ref(&keepequal),
                &labels(&[("a", "1"), ("b", "1")])
            )
            .unwrap()
            .is_some()
        );
        assert!(
            apply(&[keepequal], &labels(&[("a", "1"), ("b", "2")]))
                .unwrap()
                .is_none()
        );
        let labelmap = RelabelConfig {
            regex: Some("__meta_(.+)".into()),
            action: Some(Action::Labelmap),
            ..RelabelConfig::default()
        };
        let out = apply(&[labelmap], &labels(&[("__meta_pod", "p")]))
            .unwrap()
            .unwrap();
        assert_eq!(out["pod"], "p");
        let labeldrop = RelabelConfig {
            regex: Some("__meta_.*".into()),
            action: Some(Action::Labeldrop),
            ..RelabelConfig::default()
        };
        let out = apply(&[labeldrop], &labels(&[("__meta_pod", "p"), ("job", "j")]))
            .unwrap()
            .unwrap();
        assert_eq!(out, labels(&[("job", "j")]));
    }

    #[test]
    fn bad_rules_are_errors_not_panics() {
        let bad_regex = RelabelConfig::keep(&["a"], "(");
        assert!(matches!(
            CompiledRules::new(&[bad_regex]),
            Err(RelabelError::InvalidRegex { .. })
        ));
        let no_modulus = RelabelConfig::hashmod(&["a"], "b", 0);
        assert!(matches!(
            CompiledRules::new(&[no_modulus]),
            Err(RelabelError::MissingModulus { .. })
        ));
        let no_target = RelabelConfig {
            action: Some(Action::Replace),
            ..RelabelConfig::default()
        };
        assert!(matches!(
            CompiledRules::new(&[no_target]),
            Err(RelabelError::MissingTargetLabel { .. })
        ));
    }

    #[test]
    fn serialises_like_prometheus_yaml() {
        let rule = RelabelConfig::hashmod(&["__tmp_hash"], "__tmp_hash", 3);
        let yaml = serde_norway::to_string(&[rule]).unwrap();
        assert_eq!(
            yaml,
            "- source_labels:\n  - __tmp_hash\n  target_label: __tmp_hash\n  modulus: 3\n  action: hashmod\n"
        );
        let back: Vec<RelabelConfig> = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(back[0].modulus, Some(3));
    }
}
