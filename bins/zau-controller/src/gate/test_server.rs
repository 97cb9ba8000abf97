//! The alerts the gate's tests serve from the shared fake Prometheus ([`FakePrometheus`]).

use serde_json::{Value, json};

pub use zone_operator::testing::{FakePrometheus, Reply, TestCa};

/// `{"status":"success","data":{"alerts":[...]}}` with these alerts (labels, state).
pub fn alerts(alerts: &[(&[(&str, &str)], &str)]) -> Reply {
    let alerts: Vec<Value> = alerts
        .iter()
        .map(|(labels, state)| {
            let labels: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), json!(v)))
                .collect();
            json!({"labels": labels, "annotations": {}, "state": state,
                   "activeAt": "2026-01-01T00:00:00Z", "value": "1e+00"})
        })
        .collect();
    Reply::success(json!({ "alerts": alerts }))
}

/// Nothing fires.
pub fn quiet() -> Reply {
    alerts(&[])
}
