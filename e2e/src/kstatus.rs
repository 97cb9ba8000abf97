//! kstatus's reading of an object (sigs.k8s.io/cli-utils/pkg/kstatus, which Flux's health checks
//! and `kubectl wait`-style tools follow), by its documented rules for custom resources: an
//! object being deleted is Terminating; a status that has not observed the object's generation
//! is InProgress; a `Reconciling` condition True is InProgress, a `Stalled` one Failed; anything
//! else is Current.

use serde_json::Value;

/// kstatus's verdict on one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Current,
    InProgress,
    Failed,
    Terminating,
}

/// The verdict on `object` (the API server's JSON of it).
pub fn compute(object: &Value) -> Status {
    if !object["metadata"]["deletionTimestamp"].is_null() {
        return Status::Terminating;
    }
    let observed = &object["status"]["observedGeneration"];
    if !observed.is_null() && observed != &object["metadata"]["generation"] {
        return Status::InProgress;
    }
    let is_true = |type_: &str| {
        object["status"]["conditions"]
            .as_array()
            .is_some_and(|all| {
                all.iter()
                    .any(|c| c["type"] == type_ && c["status"] == "True")
            })
    };
    if is_true("Reconciling") {
        Status::InProgress
    } else if is_true("Stalled") {
        Status::Failed
    } else {
        Status::Current
    }
}

/// The `Ready` condition's status and reason, as `kubectl wait --for=condition=Ready` reads it.
pub fn ready(object: &Value) -> Option<(String, String)> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_documented_rules() {
        let object = |generation: i64, observed: i64, conditions: Value| {
            json!({"metadata": {"generation": generation},
                   "status": {"observedGeneration": observed, "conditions": conditions}})
        };
        let reconciling = json!([{"type": "Reconciling", "status": "True"}]);
        let stalled = json!([{"type": "Stalled", "status": "True"}]);
        let ready = json!([{"type": "Ready", "status": "True", "reason": "Done"},
                          {"type": "Reconciling", "status": "False"}]);
        assert_eq!(compute(&object(2, 2, reconciling)), Status::InProgress);
        assert_eq!(compute(&object(2, 2, stalled)), Status::Failed);
        assert_eq!(compute(&object(2, 2, ready.clone())), Status::Current);
        assert_eq!(compute(&object(3, 2, ready.clone())), Status::InProgress);
        assert_eq!(
            super::ready(&object(2, 2, ready)),
            Some(("True".into(), "Done".into()))
        );
        let mut deleted = object(2, 2, json!([]));
        deleted["metadata"]["deletionTimestamp"] = json!("2026-12-07T00:00:00Z");
        assert_eq!(compute(&deleted), Status::Terminating);
    }
}
