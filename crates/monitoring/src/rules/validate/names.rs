//! Metric and label names as prometheus-operator has Prometheus check them: the legacy
//! character set (upstream sets Prometheus's name validation to legacy until it supports UTF-8
//! names), so a name that only a UTF-8-enabled Prometheus accepts is refused here as there.

use std::collections::BTreeMap;

/// `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(super) fn is_label_name(name: &str) -> bool {
    is_name(name, |_| false)
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub(super) fn is_metric_name(name: &str) -> bool {
    is_name(name, |b| b == b':')
}

fn is_name(name: &str, extra: impl Fn(u8) -> bool) -> bool {
    !name.is_empty()
        && name.bytes().enumerate().all(|(index, b)| {
            b.is_ascii_alphabetic() || b == b'_' || extra(b) || (index > 0 && b.is_ascii_digit())
        })
}

/// The problems of a group's or a rule's `labels`: invalid names, and `__name__`, which would
/// rename the result. (Values only need to be UTF-8, which every Rust string is.)
pub(super) fn labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels
        .keys()
        .filter_map(|name| {
            if name == "__name__" {
                Some("labels: \"__name__\" is not allowed as a rule label".to_string())
            } else if !is_label_name(name) {
                Some(format!(
                    "labels: {name:?} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)"
                ))
            } else {
                None
            }
        })
        .collect()
}
