//! **validate** (pure): the spec, and the StatefulSet it names, must be something a rollout can
//! act on; otherwise the reason and message of the `Invalid` condition.

use k8s_openapi::api::apps::v1::StatefulSet;
use zone_api::validation::RolloutTarget;
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

/// One StatefulSet of the rollout, as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetState {
    pub name: String,
    pub replicas: u32,
    pub min_ready_seconds: u32,
    /// `None` while the StatefulSet controller has not observed the latest spec (its
    /// updateRevision is stale).
    pub update_revision: Option<String>,
    pub current_revision: String,
}

/// What the rollout rolls, as the planner needs it: one StatefulSet, or a rollout group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// By name.
    pub sets: Vec<SetState>,
    /// A rollout group (spec.selector): the status names each StatefulSet.
    pub grouped: bool,
    /// Summed over the StatefulSets.
    pub replicas: u32,
    /// Resolved against `replicas`.
    pub max_unavailable: u32,
    /// The StatefulSet's update revision, or each of the group's as `name=revision`, joined;
    /// `None` while any is not observed yet.
    pub update_revision: Option<String>,
    /// The same of the current revisions.
    pub current_revision: String,
}

impl Target {
    pub fn set(&self, name: &str) -> Option<&SetState> {
        self.sets.iter().find(|set| set.name == name)
    }
}

/// Checks one StatefulSet of the rollout (pure): it must use `OnDelete`.
pub fn statefulset(set: &StatefulSet) -> Result<SetState, Invalid> {
    let name = set.metadata.name.clone().unwrap_or_default();
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
                "StatefulSet {name} has updateStrategy {strategy}: set it to OnDelete, or the StatefulSet controller and this rollout would both replace pods",
            ),
        });
    }
    let status = set.status.clone().unwrap_or_default();
    let update_revision = status.update_revision.clone().unwrap_or_default();
    let observed = status.observed_generation >= set.metadata.generation;
    Ok(SetState {
        name,
        replicas: u32::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0),
        min_ready_seconds: u32::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0),
        update_revision: Some(update_revision).filter(|r| observed && !r.is_empty()),
        current_revision: status.current_revision.unwrap_or_default(),
    })
}

/// The rollout's target from its checked StatefulSets (pure): the spec's maxUnavailable must
/// resolve against their replicas.
pub fn target(valid: &ValidZau, mut sets: Vec<SetState>) -> Result<Target, Invalid> {
    sets.sort_by(|a, b| a.name.cmp(&b.name));
    let grouped = matches!(valid.target, RolloutTarget::Group(_));
    let replicas = sets.iter().map(|set| set.replicas).sum();
    let max_unavailable = rollout::resolve_max_unavailable(valid.max_unavailable, replicas)
        .map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: format!("spec.maxUnavailable: {error}"),
        })?;
    let joined = |revision: &dyn Fn(&SetState) -> Option<String>| -> Option<String> {
        if !grouped {
            return sets.first().and_then(revision);
        }
        let parts: Option<Vec<String>> = sets
            .iter()
            .map(|set| Some(format!("{}={}", set.name, revision(set)?)))
            .collect();
        parts.map(|parts| parts.join(","))
    };
    let update_revision = joined(&|set| set.update_revision.clone());
    let current_revision = joined(&|set| Some(set.current_revision.clone())).unwrap_or_default();
    Ok(Target {
        sets,
        grouped,
        replicas,
        max_unavailable,
        update_revision,
        current_revision,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use zone_topology::IntOrPercent;

    fn valid(target: RolloutTarget, max_unavailable: IntOrPercent) -> ValidZau {
        ValidZau {
            target,
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

    fn state(name: &str, replicas: u32, update: Option<&str>, current: &str) -> SetState {
        SetState {
            name: name.into(),
            replicas,
            min_ready_seconds: 0,
            update_revision: update.map(Into::into),
            current_revision: current.into(),
        }
    }

    #[test]
    fn each_statefulset_is_checked() {
        let on_delete = json!({"type": "OnDelete"});
        let cases: Vec<(&str, serde_json::Value, Result<SetState, &str>)> = vec![
            (
                "observed OnDelete set",
                json!({"metadata": {"name": "web", "generation": 2},
                    "spec": {"replicas": 6, "minReadySeconds": 3, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 6, "observedGeneration": 2, "updateRevision": "web-2", "currentRevision": "web-1"}}),
                Ok(SetState {
                    min_ready_seconds: 3,
                    ..state("web", 6, Some("web-2"), "web-1")
                }),
            ),
            (
                "spec not observed yet: no update revision",
                json!({"metadata": {"name": "web", "generation": 3},
                    "spec": {"replicas": 2, "updateStrategy": on_delete, "selector": {}, "template": {}},
                    "status": {"replicas": 2, "observedGeneration": 2, "updateRevision": "web-2"}}),
                Ok(state("web", 2, None, "")),
            ),
            (
                "RollingUpdate (the default) is refused",
                json!({"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {}, "template": {}}}),
                Err(reason::NOT_ON_DELETE),
            ),
        ];
        for (name, value, expected) in cases {
            let got = statefulset(&set(value)).map_err(|i| i.reason);
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_target_is_one_statefulset_or_a_group() {
        let one = target(
            &valid(
                RolloutTarget::StatefulSet("web".into()),
                IntOrPercent::Percent(50),
            ),
            vec![state("web", 6, Some("web-2"), "web-1")],
        )
        .unwrap();
        assert_eq!(
            (one.replicas, one.max_unavailable, one.grouped),
            (6, 3, false)
        );
        assert_eq!(one.update_revision.as_deref(), Some("web-2"));
        assert_eq!(one.current_revision, "web-1");

        let group = RolloutTarget::Group(Default::default());
        let sets = vec![
            state("ing-b", 3, Some("b-2"), "b-1"),
            state("ing-a", 3, Some("a-2"), "a-1"),
        ];
        let grouped = target(&valid(group.clone(), IntOrPercent::Percent(50)), sets).unwrap();
        assert_eq!(
            (grouped.replicas, grouped.max_unavailable, grouped.grouped),
            (6, 3, true)
        );
        assert_eq!(
            grouped.update_revision.as_deref(),
            Some("ing-a=a-2,ing-b=b-2")
        );
        assert_eq!(grouped.current_revision, "ing-a=a-1,ing-b=b-1");
        assert_eq!(grouped.set("ing-b").unwrap().replicas, 3);

        // One StatefulSet of the group not observed yet: the group waits.
        let sets = vec![
            state("ing-a", 3, Some("a-2"), "a-1"),
            state("ing-b", 3, None, ""),
        ];
        let waiting = target(&valid(group, IntOrPercent::Int(1)), sets).unwrap();
        assert_eq!(waiting.update_revision, None);

        let zero = target(
            &valid(
                RolloutTarget::StatefulSet("web".into()),
                IntOrPercent::Int(0),
            ),
            vec![state("web", 2, Some("web-2"), "")],
        );
        assert_eq!(zero.map_err(|i| i.reason), Err(reason::INVALID_SPEC));
    }
}
