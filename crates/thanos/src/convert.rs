//! Rule groups between Prometheus's JSON model (`zone_rules`) and Thanos's wire messages, both
//! ways, field for field as Thanos maps them: a group read over gRPC and the same group read over
//! HTTP are equal values, so one merge serves both protocols.
//!
//! What the wire has no field for is lost on the way out and default on the way in: an alert's
//! `keepFiringSince`. An instant the wire cannot carry (a text that is not RFC 3339) goes out as
//! Go's zero time, as Prometheus writes a group never evaluated; an instant the JSON cannot carry
//! (outside years 0000 to 9999) comes in as that zero time too.

use prost_types::Timestamp;
use zone_rules::model::{AlertingRule, Labels, RecordingRule};
use zone_rules::{Alert, Rule, RuleGroup, Stamp};

use crate::thanos;

/// Go's zero `time.Time`, 0001-01-01T00:00:00Z, in seconds since 1970.
pub(crate) const GO_ZERO_SECONDS: i64 = -62_135_596_800;

/// Nanoseconds in a second.
const NANOS: i128 = 1_000_000_000;

fn go_zero() -> Timestamp {
    Timestamp {
        seconds: GO_ZERO_SECONDS,
        nanos: 0,
    }
}

/// `stamp` as a protobuf Timestamp (seconds floored, nanoseconds never negative).
fn timestamp(stamp: &Stamp) -> Timestamp {
    let Some(instant) = stamp.instant() else {
        return go_zero();
    };
    let total = instant.as_nanosecond();
    match (
        i64::try_from(total.div_euclid(NANOS)),
        i32::try_from(total.rem_euclid(NANOS)),
    ) {
        (Ok(seconds), Ok(nanos)) => Timestamp { seconds, nanos },
        _ => go_zero(),
    }
}

/// `timestamp` as Prometheus writes it; absent or out of range: Go's zero time.
fn stamp(timestamp: Option<&Timestamp>) -> Stamp {
    let zero = || Stamp::from_unix(GO_ZERO_SECONDS, 0).unwrap_or_default();
    let Some(timestamp) = timestamp else {
        return zero();
    };
    u32::try_from(timestamp.nanos)
        .ok()
        .and_then(|nanos| Stamp::from_unix(timestamp.seconds, nanos))
        .unwrap_or_else(zero)
}

fn label_set(labels: &Labels) -> thanos::LabelSet {
    thanos::LabelSet {
        labels: labels
            .iter()
            .map(|(name, value)| thanos::Label {
                name: name.to_string(),
                value: value.to_string(),
            })
            .collect(),
    }
}

fn labels(set: Option<&thanos::LabelSet>) -> Labels {
    set.map(|set| {
        set.labels
            .iter()
            .map(|label| (label.name.as_str(), label.value.as_str()))
            .collect()
    })
    .unwrap_or_default()
}

/// A rule's or an alert's state as the wire names it; a text it has no name for as unknown.
fn state(text: &str) -> thanos::AlertState {
    match text {
        "firing" => thanos::AlertState::Firing,
        "pending" => thanos::AlertState::Pending,
        "inactive" => thanos::AlertState::Inactive,
        _ => thanos::AlertState::Unknown,
    }
}

/// The state's text as Prometheus writes it (the wire's name in lower case); a number the wire
/// has no name for as unknown.
pub(crate) fn state_text(state: i32) -> &'static str {
    match thanos::AlertState::try_from(state) {
        Ok(thanos::AlertState::Firing) => "firing",
        Ok(thanos::AlertState::Pending) => "pending",
        Ok(thanos::AlertState::Inactive) => "inactive",
        _ => "unknown",
    }
}

impl From<&RuleGroup> for thanos::RuleGroup {
    fn from(group: &RuleGroup) -> Self {
        thanos::RuleGroup {
            name: group.name.clone(),
            file: group.file.clone(),
            rules: group.rules.iter().map(thanos::Rule::from).collect(),
            interval: group.interval,
            evaluation_duration_seconds: group.evaluation_time,
            last_evaluation: Some(timestamp(&group.last_evaluation)),
            partial_response_strategy: thanos::PartialResponseStrategy::Warn.into(),
            limit: group.limit,
        }
    }
}

impl From<&Rule> for thanos::Rule {
    fn from(rule: &Rule) -> Self {
        let result = match rule {
            Rule::Alerting(rule) => thanos::rule::Result::Alert(alerting(rule)),
            Rule::Recording(rule) => thanos::rule::Result::Recording(recording(rule)),
        };
        thanos::Rule {
            result: Some(result),
        }
    }
}

fn alerting(rule: &AlertingRule) -> thanos::Alert {
    thanos::Alert {
        state: state(&rule.state).into(),
        name: rule.name.to_string(),
        query: rule.query.clone(),
        duration_seconds: rule.duration,
        labels: Some(label_set(&rule.labels)),
        annotations: Some(label_set(&rule.annotations)),
        alerts: rule.alerts.iter().flatten().map(alert_instance).collect(),
        health: rule.health.to_string(),
        last_error: rule.last_error.clone(),
        evaluation_duration_seconds: rule.evaluation_time,
        last_evaluation: Some(timestamp(&rule.last_evaluation)),
        keep_firing_for_seconds: rule.keep_firing_for,
    }
}

fn recording(rule: &RecordingRule) -> thanos::RecordingRule {
    thanos::RecordingRule {
        name: rule.name.to_string(),
        query: rule.query.clone(),
        labels: Some(label_set(&rule.labels)),
        health: rule.health.to_string(),
        last_error: rule.last_error.clone(),
        evaluation_duration_seconds: rule.evaluation_time,
        last_evaluation: Some(timestamp(&rule.last_evaluation)),
    }
}

fn alert_instance(alert: &Alert) -> thanos::AlertInstance {
    thanos::AlertInstance {
        labels: Some(label_set(&alert.labels)),
        annotations: Some(label_set(&alert.annotations)),
        state: state(&alert.state).into(),
        active_at: alert.active_at.as_ref().map(timestamp),
        value: alert.value.to_string(),
        partial_response_strategy: thanos::PartialResponseStrategy::Warn.into(),
    }
}

impl From<thanos::RuleGroup> for RuleGroup {
    fn from(group: thanos::RuleGroup) -> Self {
        RuleGroup {
            name: group.name,
            file: group.file,
            rules: group.rules.into_iter().filter_map(rule).collect(),
            interval: group.interval,
            limit: group.limit,
            evaluation_time: group.evaluation_duration_seconds,
            last_evaluation: stamp(group.last_evaluation.as_ref()),
        }
    }
}

/// The rule a wire rule holds; none when it holds neither kind (a newer kind this side does not
/// know), which is left out as Prometheus leaves out what it cannot write.
fn rule(rule: thanos::Rule) -> Option<Rule> {
    Some(match rule.result? {
        thanos::rule::Result::Alert(alert) => Rule::Alerting(AlertingRule {
            state: state_text(alert.state).into(),
            name: alert.name.into(),
            query: alert.query,
            duration: alert.duration_seconds,
            keep_firing_for: alert.keep_firing_for_seconds,
            labels: labels(alert.labels.as_ref()),
            annotations: labels(alert.annotations.as_ref()),
            alerts: Some(alert.alerts.into_iter().map(instance).collect()),
            health: alert.health.into(),
            last_error: alert.last_error,
            evaluation_time: alert.evaluation_duration_seconds,
            last_evaluation: stamp(alert.last_evaluation.as_ref()),
        }),
        thanos::rule::Result::Recording(recording) => Rule::Recording(RecordingRule {
            name: recording.name.into(),
            query: recording.query,
            labels: labels(recording.labels.as_ref()),
            health: recording.health.into(),
            last_error: recording.last_error,
            evaluation_time: recording.evaluation_duration_seconds,
            last_evaluation: stamp(recording.last_evaluation.as_ref()),
        }),
    })
}

fn instance(alert: thanos::AlertInstance) -> Alert {
    Alert {
        labels: labels(alert.labels.as_ref()),
        annotations: labels(alert.annotations.as_ref()),
        state: state_text(alert.state).into(),
        active_at: alert.active_at.as_ref().map(|at| stamp(Some(at))),
        keep_firing_since: None,
        value: alert.value.into(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
