#![allow(clippy::unwrap_used)]
use prost::Message;

use super::*;

/// A group as Prometheus 3 writes it: an alerting rule with a firing and a pending alert, an
/// inactive one, one Prometheus 3 has not evaluated yet, a recording rule with labels.
pub(crate) const GROUP: &str = r#"{
  "name": "node", "file": "/etc/prometheus/rules/node.yaml", "interval": 30, "limit": 0,
  "evaluationTime": 0.000412, "lastEvaluation": "2026-11-29T09:46:26.123456789Z",
  "rules": [
    {"type": "alerting", "state": "firing", "name": "NodeDown", "query": "up{job=\"node\"} == 0",
     "duration": 300, "keepFiringFor": 60,
     "labels": {"severity": "page"}, "annotations": {"summary": "{{ $labels.instance }} is down"},
     "alerts": [
       {"labels": {"alertname": "NodeDown", "instance": "a:9100", "severity": "page"},
        "annotations": {"summary": "a:9100 is down"}, "state": "firing",
        "activeAt": "2026-11-29T09:40:00Z", "value": "0e+00"},
       {"labels": {"alertname": "NodeDown", "instance": "b:9100", "severity": "page"},
        "annotations": {"summary": "b:9100 is down"}, "state": "pending",
        "activeAt": "2026-11-29T09:45:56.5Z", "value": "0e+00"}],
     "health": "ok", "evaluationTime": 0.0002, "lastEvaluation": "2026-11-29T09:46:26.1Z"},
    {"type": "alerting", "state": "inactive", "name": "Never", "query": "vector(1) < 0",
     "duration": 0, "keepFiringFor": 0, "labels": {}, "annotations": {}, "alerts": [],
     "health": "unknown", "evaluationTime": 0, "lastEvaluation": "0001-01-01T00:00:00Z"},
    {"type": "alerting", "state": "unknown", "name": "NotYet", "query": "vector(1)",
     "duration": 0, "keepFiringFor": 0, "labels": {}, "annotations": {}, "alerts": [],
     "health": "unknown", "evaluationTime": 0, "lastEvaluation": "0001-01-01T00:00:00Z"},
    {"type": "recording", "name": "job:up:sum", "query": "sum by (job) (up)",
     "labels": {"team": "infra"}, "health": "err", "lastError": "many-to-many matching",
     "evaluationTime": 0.0001, "lastEvaluation": "2026-11-29T09:46:26.2Z"}
  ]
}"#;

pub(crate) fn group() -> RuleGroup {
    serde_json::from_str(GROUP).unwrap()
}

/// Out to the wire and back in, through the encoded bytes: the same group, every field.
#[test]
fn a_group_crosses_the_wire_unchanged() {
    let original = group();
    let bytes = thanos::RuleGroup::from(&original).encode_to_vec();
    let read = RuleGroup::from(thanos::RuleGroup::decode(bytes.as_slice()).unwrap());
    assert_eq!(read, original);
    assert_eq!(
        serde_json::to_value(&read).unwrap(),
        serde_json::to_value(&original).unwrap(),
        "written back as Prometheus wrote it"
    );
}

/// The fields land where Thanos reads them: seconds, states, labels, instants.
#[test]
fn fields_map_as_thanos_maps_them() {
    let wire = thanos::RuleGroup::from(&group());
    assert_eq!(wire.interval, 30.0);
    assert_eq!(
        wire.last_evaluation,
        Some(Timestamp {
            seconds: 1_795_945_586,
            nanos: 123_456_789
        })
    );
    let Some(thanos::rule::Result::Alert(alert)) = &wire.rules[0].result else {
        panic!("an alerting rule first: {:?}", wire.rules[0]);
    };
    assert_eq!(alert.state(), thanos::AlertState::Firing);
    assert_eq!(alert.duration_seconds, 300.0);
    assert_eq!(alert.keep_firing_for_seconds, 60.0);
    assert_eq!(alert.alerts[1].state(), thanos::AlertState::Pending);
    assert_eq!(
        alert.alerts[1].active_at,
        Some(Timestamp {
            seconds: 1_795_945_556,
            nanos: 500_000_000
        })
    );
    let severity = &alert.labels.as_ref().unwrap().labels[0];
    assert_eq!(
        (severity.name.as_str(), severity.value.as_str()),
        ("severity", "page")
    );
    let Some(thanos::rule::Result::Alert(never)) = &wire.rules[1].result else {
        panic!("the second rule is alerting");
    };
    assert_eq!(never.last_evaluation, Some(go_zero()), "Go's zero time");
    let Some(thanos::rule::Result::Alert(not_yet)) = &wire.rules[2].result else {
        panic!("the third rule is alerting");
    };
    // Thanos v0.42's numbers: UNKNOWN 0, INACTIVE 1, PENDING 2, FIRING 3.
    assert_eq!(
        (
            not_yet.state,
            never.state,
            alert.alerts[1].state,
            alert.state
        ),
        (0, 1, 2, 3)
    );
    assert!(matches!(
        wire.rules[3].result,
        Some(thanos::rule::Result::Recording(_))
    ));
}

/// What the wire may hold that Prometheus never writes: no timestamp, a timestamp past year
/// 9999 or with negative nanoseconds, an unknown state number, a rule of neither kind. Each
/// reads as a value Prometheus would write; nothing fails.
#[test]
fn odd_wire_values_read_as_prometheus_values() {
    let zero = Stamp::from("0001-01-01T00:00:00Z");
    assert_eq!(stamp(None), zero);
    for odd in [
        Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        },
        Timestamp {
            seconds: 0,
            nanos: -1,
        },
    ] {
        assert_eq!(stamp(Some(&odd)), zero, "{odd:?}");
    }
    assert_eq!(state_text(7), "unknown");
    let wire = thanos::RuleGroup {
        name: "g".into(),
        rules: vec![thanos::Rule { result: None }],
        ..thanos::RuleGroup::default()
    };
    let read = RuleGroup::from(wire);
    assert!(read.rules.is_empty());
    assert_eq!(read.last_evaluation, zero);
    // A text that names no instant goes out as the zero time.
    assert_eq!(timestamp(&Stamp::from("yesterday")), go_zero());
}
