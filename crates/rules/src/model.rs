//! The JSON of Prometheus's `/api/v1/rules` and `/api/v1/alerts`, as Prometheus 3 writes it
//! (`web/api/v1/api.go`). Fields older versions omit (`keepFiringFor`, `limit`, a recording
//! rule's `labels`) default; what a Prometheus writes is written back the same way.

use serde::{Deserialize, Serialize};

pub use crate::labels::Labels;
pub use crate::stamp::Stamp;

/// A short string held inline (up to 24 bytes), else allocated: a rule's name, state and health
/// and an alert's state and value, read from every answer by the million.
pub type Text = compact_str::CompactString;

/// `data` of `/api/v1/rules`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleDiscovery {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub groups: Vec<RuleGroup>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group_next_token: String,
}

/// `data` of `/api/v1/alerts`: `[]` when there are none, never `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertDiscovery {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub alerts: Vec<Alert>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleGroup {
    pub name: String,
    pub file: String,
    /// In evaluation order, alerting and recording rules together.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub interval: f64,
    #[serde(default)]
    pub limit: i64,
    #[serde(default)]
    pub evaluation_time: f64,
    #[serde(default)]
    pub last_evaluation: Stamp,
}

/// Read through [`AnyRule`], not serde's internally tagged enums: those buffer every rule in a
/// generic tree first, twice the allocations on the federator's hottest path.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum Rule {
    #[serde(rename = "alerting")]
    Alerting(AlertingRule),
    #[serde(rename = "recording")]
    Recording(RecordingRule),
}

/// Either kind of rule, its fields read in one pass whatever their order; `type` says which.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyRule {
    #[serde(rename = "type")]
    kind: RuleKind,
    state: Option<Text>,
    name: Text,
    query: String,
    #[serde(default)]
    duration: f64,
    #[serde(default)]
    keep_firing_for: f64,
    #[serde(default, deserialize_with = "null_as_empty")]
    labels: Labels,
    #[serde(default, deserialize_with = "null_as_empty")]
    annotations: Labels,
    #[serde(default)]
    alerts: Option<Vec<Alert>>,
    health: Text,
    #[serde(default)]
    last_error: String,
    #[serde(default)]
    evaluation_time: f64,
    #[serde(default)]
    last_evaluation: Stamp,
}

/// `type` of a rule, read without allocating.
#[derive(Deserialize)]
enum RuleKind {
    #[serde(rename = "alerting")]
    Alerting,
    #[serde(rename = "recording")]
    Recording,
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let any = AnyRule::deserialize(deserializer)?;
        match any.kind {
            RuleKind::Alerting => Ok(Rule::Alerting(AlertingRule {
                state: any
                    .state
                    .ok_or_else(|| serde::de::Error::missing_field("state"))?,
                name: any.name,
                query: any.query,
                duration: any.duration,
                keep_firing_for: any.keep_firing_for,
                labels: any.labels,
                annotations: any.annotations,
                alerts: any.alerts,
                health: any.health,
                last_error: any.last_error,
                evaluation_time: any.evaluation_time,
                last_evaluation: any.last_evaluation,
            })),
            RuleKind::Recording => Ok(Rule::Recording(RecordingRule {
                name: any.name,
                query: any.query,
                labels: any.labels,
                health: any.health,
                last_error: any.last_error,
                evaluation_time: any.evaluation_time,
                last_evaluation: any.last_evaluation,
            })),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertingRule {
    /// `firing`, `pending` or `inactive`.
    pub state: Text,
    pub name: Text,
    pub query: String,
    /// The `for` duration, in seconds.
    #[serde(default)]
    pub duration: f64,
    #[serde(default)]
    pub keep_firing_for: f64,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub labels: Labels,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub annotations: Labels,
    /// `null` when the request excluded alerts (as Prometheus writes it), else the instances.
    #[serde(default)]
    pub alerts: Option<Vec<Alert>>,
    pub health: Text,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    #[serde(default)]
    pub evaluation_time: f64,
    #[serde(default)]
    pub last_evaluation: Stamp,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordingRule {
    pub name: Text,
    pub query: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub labels: Labels,
    pub health: Text,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    #[serde(default)]
    pub evaluation_time: f64,
    #[serde(default)]
    pub last_evaluation: Stamp,
}

/// One instance of an alerting rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub labels: Labels,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub annotations: Labels,
    pub state: Text,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_at: Option<Stamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_since: Option<Stamp>,
    #[serde(default)]
    pub value: Text,
}

impl Rule {
    pub fn name(&self) -> &str {
        match self {
            Rule::Alerting(rule) => &rule.name,
            Rule::Recording(rule) => &rule.name,
        }
    }

    pub fn labels(&self) -> &Labels {
        match self {
            Rule::Alerting(rule) => &rule.labels,
            Rule::Recording(rule) => &rule.labels,
        }
    }

    pub fn labels_mut(&mut self) -> &mut Labels {
        match self {
            Rule::Alerting(rule) => &mut rule.labels,
            Rule::Recording(rule) => &mut rule.labels,
        }
    }

    pub fn health(&self) -> &str {
        match self {
            Rule::Alerting(rule) => &rule.health,
            Rule::Recording(rule) => &rule.health,
        }
    }

    pub fn last_evaluation(&self) -> &Stamp {
        match self {
            Rule::Alerting(rule) => &rule.last_evaluation,
            Rule::Recording(rule) => &rule.last_evaluation,
        }
    }
}

/// A JSON `null` where a list or object is expected reads as empty (Go writes nil slices and
/// maps as `null`).
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn prometheus_shapes_read_and_write_back() {
        let text = r#"{"groups":[{"name":"g","file":"/rules/a.yaml","rules":[
            {"state":"firing","name":"Up","query":"up == 0","duration":60,"keepFiringFor":0,
             "labels":{"severity":"page"},"annotations":{},"alerts":[{"labels":{"alertname":"Up"},
             "annotations":{},"state":"firing","activeAt":"2026-11-25T12:00:00.5Z","value":"0e+00"}],
             "health":"ok","evaluationTime":0.001,"lastEvaluation":"2026-11-25T12:00:01Z","type":"alerting"},
            {"name":"job:up:sum","query":"sum by (job) (up)","health":"ok","evaluationTime":0,
             "lastEvaluation":"2026-11-25T12:00:01Z","type":"recording"}],
            "interval":15,"limit":0,"evaluationTime":0.002,"lastEvaluation":"2026-11-25T12:00:01Z"}]}"#;
        let rules: RuleDiscovery = serde_json::from_str(text).unwrap();
        let group = &rules.groups[0];
        assert_eq!(group.rules.len(), 2);
        assert!(
            matches!(&group.rules[1], Rule::Recording(r) if r.labels.is_empty()),
            "a recording rule without labels"
        );
        let again: RuleDiscovery =
            serde_json::from_value(serde_json::to_value(&rules).unwrap()).unwrap();
        assert_eq!(again, rules);
        let written = serde_json::to_value(&rules).unwrap();
        assert_eq!(written["groups"][0]["rules"][0]["type"], "alerting");
        assert!(written.get("groupNextToken").is_none());
    }

    /// Either kind of rule reads with its fields in any order; a rule without its kind, an
    /// unknown kind or an alert without its state is refused.
    #[test]
    fn rules_read_whatever_the_order_of_their_fields() {
        let alerting: Rule = serde_json::from_str(
            r#"{"name":"x","type":"alerting","query":"1","health":"ok","state":"firing","alerts":[]}"#,
        )
        .unwrap();
        assert!(
            matches!(&alerting, Rule::Alerting(r) if r.state == "firing" && r.alerts == Some(vec![]))
        );
        let recording: Rule = serde_json::from_str(
            r#"{"query":"1","health":"ok","name":"r","type":"recording","labels":{"a":"b"}}"#,
        )
        .unwrap();
        assert!(matches!(&recording, Rule::Recording(r) if r.name == "r" && r.labels.len() == 1));
        for (bad, error) in [
            (
                r#"{"name":"x","query":"1","health":"ok"}"#,
                "missing field `type`",
            ),
            (
                r#"{"type":"other","name":"x","query":"1","health":"ok"}"#,
                "unknown variant `other`, expected `alerting` or `recording`",
            ),
            (
                r#"{"type":"alerting","name":"x","query":"1","health":"ok"}"#,
                "missing field `state`",
            ),
        ] {
            let refused = serde_json::from_str::<Rule>(bad).unwrap_err().to_string();
            assert!(refused.starts_with(error), "{bad}: {refused}");
        }
    }

    #[test]
    fn nulls_read_as_empty_and_no_alerts_write_as_an_empty_list() {
        let alerts: AlertDiscovery = serde_json::from_str(r#"{"alerts":null}"#).unwrap();
        assert!(alerts.alerts.is_empty());
        assert_eq!(
            serde_json::to_string(&AlertDiscovery::default()).unwrap(),
            r#"{"alerts":[]}"#
        );
        let rule: Rule = serde_json::from_str(
            r#"{"type":"alerting","state":"inactive","name":"x","query":"1","labels":null,"alerts":null,"health":"unknown"}"#,
        )
        .unwrap();
        let Rule::Alerting(rule) = rule else { panic!() };
        assert_eq!(rule.alerts, None, "excluded alerts stay null");
    }

    /// A group whose `interval` and `evaluationTime` are the JSON number `text`.
    fn group_with_numbers(text: &str) -> RuleGroup {
        serde_json::from_str(&format!(
            r#"{{"name":"g","file":"f","rules":[],"interval":{text},"evaluationTime":{text}}}"#
        ))
        .unwrap()
    }

    proptest::proptest! {
        /// A number a Prometheus writes (Go's shortest form that reads back as the same double,
        /// as serde_json writes it too) reads as that very double, so the merged answer writes
        /// the backend's number back unchanged.
        #[test]
        fn numbers_read_back_as_the_double_prometheus_wrote(bits in proptest::prelude::any::<u64>()) {
            let value = f64::from_bits(bits);
            proptest::prop_assume!(value.is_finite());
            let text = serde_json::to_string(&value).unwrap();
            let group = group_with_numbers(&text);
            proptest::prop_assert_eq!(group.interval.to_bits(), value.to_bits(), "{}", text);
            proptest::prop_assert_eq!(serde_json::to_string(&group.evaluation_time).unwrap(), text);
        }
    }

    /// One the reader without `float_roundtrip` misses by one unit in the last place.
    #[test]
    fn a_seventeen_digit_number_reads_back_exactly() {
        let text = "-2.2646314582651926e-160";
        let group = group_with_numbers(text);
        assert_eq!(group.evaluation_time.to_bits(), 11441808890153034653);
        assert_eq!(serde_json::to_string(&group.evaluation_time).unwrap(), text);
    }
}
