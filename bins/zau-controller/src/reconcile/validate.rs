//! **validate** (pure): the spec, and the StatefulSet it names, must be something a rollout can
//! act on; otherwise the reason and message of the `Invalid` condition.

use k8s_openapi::api::apps::v1::StatefulSet;
use zone_api::zau::{condition, reason};
use zone_api::{ValidZau, ZoneAwareUpdate};
use zone_operator::{Blocked, Invalid};
use zone_topology::rollout;

use crate::gate::Selector;

/// What an invalid spec stops: the reconcile waits for a change of the spec (or of the
/// StatefulSet, which is watched).
pub(super) const BLOCKED: Blocked = Blocked {
    condition: condition::PROGRESSING,
    consequence: "nothing is removed until this is fixed",
};

/// The spec, checked.
pub fn spec(zau: &ZoneAwareUpdate) -> Result<ValidZau, Invalid> {
    zau.spec.validate().map_err(|error| Invalid {
        reason: reason::INVALID_SPEC,
        message: error.to_string(),
    })
}

/// The alert gate's matchers, parsed (the API crate checks the rest of the gate).
pub fn gate_selector(valid: &ValidZau) -> Result<Option<Selector>, Invalid> {
    valid
        .alert_gate
        .as_ref()
        .map(|gate| {
            Selector::parse(&gate.matchers).map_err(|error| Invalid {
                reason: reason::INVALID_SPEC,
                message: format!("spec.alertGate.matchers: {error}"),
            })
        })
        .transpose()
}

/// The StatefulSet as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub replicas: u32,
    pub max_unavailable: u32,
    pub min_ready_seconds: u32,
    /// `None` while the StatefulSet controller has not observed the latest spec (its
    /// updateRevision is stale).
    pub update_revision: Option<String>,
    pub current_revision: String,
}

/// Checks the StatefulSet a valid spec names (pure): it must use `OnDelete`, and the spec's
/// maxUnavailable must resolve against its replicas.
pub fn target(valid: &ValidZau, set: &StatefulSet) -> Result<Target, Invalid> {
    let spec = set.spec.clone().unwrap_or_default();
    let strategy = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".to_string());
    if strategy != "OnDelete" {
        return Err(Invalid {
            reason: reason::NOT_ON_DELETE,
            message: format!(
                "StatefulSet {} has updateStrategy {strategy}: set it to OnDelete, or the StatefulSet controller and this rollout would both replace pods",
                valid.statefulset
            ),
        });
    }
    let replicas = u32::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let max_unavailable = rollout::resolve_max_unavailable(valid.max_unavailable, replicas)
        .map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: format!("spec.maxUnavailable: {error}"),
        })?;
    let status = set.status.clone().unwrap_or_default();
    let update_revision = status.update_revision.clone().unwrap_or_default();
    let observed = status.observed_generation >= set.metadata.generation;
    Ok(Target {
        replicas,
        max_unavailable,
        min_ready_seconds: u32::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0),
        update_revision: Some(update_revision).filter(|r| observed && !r.is_empty()),
        current_revision: status.current_revision.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use zone_topology::IntOrPercent;

    fn valid(max_unavailable: IntOrPercent) -> ValidZau {
        ValidZau {
            statefulset: "web".into(),
            exponential_factor: 2.0,
            max_unavailable,
            alert_gate: None,
            bake_time: None,
            paused: false,
        }
    }

    fn set(value: serde_json::Value) -> StatefulSet {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn target_checks_the_statefulset() {
        let on_delete = json!({"type": "OnDelete"});
        let cases: Vec<(&str, serde_json::Value, IntOrPercent, Result<Target, &str>)> = vec![
            (
                "observed OnDelete set",
                json!({"metadata": {"generation": 2},
                    "spec": {"replicas": 6, "minReadySeconds": 3, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 6, "observedGeneration": 2, "updateRevision": "web-2", "currentRevision": "web-1"}}),
                IntOrPercent::Percent(50),
                Ok(Target {
                    replicas: 6,
                    max_unavailable: 3,
                    min_ready_seconds: 3,
                    update_revision: Some("web-2".into()),
                    current_revision: "web-1".into(),
                }),
            ),
            (
                "spec not observed yet: no update revision",
                json!({"metadata": {"generation": 3},
                    "spec": {"replicas": 2, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 2, "observedGeneration": 2, "updateRevision": "web-2"}}),
                IntOrPercent::Int(1),
                Ok(Target {
                    replicas: 2,
                    max_unavailable: 1,
                    min_ready_seconds: 0,
                    update_revision: None,
                    current_revision: String::new(),
                }),
            ),
            (
                "RollingUpdate (the default) is refused",
                json!({"spec": {"replicas": 2, "selector": {}, "template": {}}}),
                IntOrPercent::Int(1),
                Err(reason::NOT_ON_DELETE),
            ),
            (
                "maxUnavailable 0 is refused",
                json!({"spec": {"replicas": 2, "updateStrategy": on_delete, "selector": {}, "template": {}}}),
                IntOrPercent::Int(0),
                Err(reason::INVALID_SPEC),
            ),
        ];
        for (name, value, max_unavailable, expected) in cases {
            let got = target(&valid(max_unavailable), &set(value)).map_err(|i| i.reason);
            assert_eq!(got, expected, "{name}");
        }
    }
}
