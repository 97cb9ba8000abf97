//! A ZoneAwareUpdate's rollout as its planner (`zone_topology::rollout`) sees it, from the
//! StatefulSets and pods the API server holds: what the zau-controller reads from its caches and
//! `kubectl zone rollout plan` from a list, turned into the planner's input the one same way.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use zone_api::conditions::Invalid;
use zone_api::zau::RolloutTarget;
use zone_api::zau::reason;
use zone_api::{ValidZau, ZoneAwareUpdateStatus};
use zone_topology::Zone;
use zone_topology::rollout::{self, REVISION_LABEL, RolloutInput, RolloutPod};

/// The pod's ordinal as a label (Kubernetes >= 1.28); the name suffix is the fallback.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The StatefulSet that controls `pod`, if any.
pub fn owner_statefulset(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet")
        .map(|owner| owner.name.as_str())
}

/// The pod's ordinal: the pod-index label, else the number after the last `-` of its name.
pub fn ordinal(pod: &Pod) -> Option<u32> {
    pod.labels()
        .get(POD_INDEX_LABEL)
        .and_then(|index| index.parse().ok())
        .or_else(|| pod.name_any().rsplit_once('-')?.1.parse().ok())
}

fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Availability of a pod, honouring `minReadySeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Ready, but not for `minReadySeconds` yet: available after this much more time.
    ReadySoon(Duration),
    Unavailable,
}

pub fn availability(pod: &Pod, min_ready_seconds: u32, now: Timestamp) -> Availability {
    let Some(condition) = ready_condition(pod).filter(|c| c.status == "True") else {
        return Availability::Unavailable;
    };
    if min_ready_seconds == 0 {
        return Availability::Available;
    }
    let Some(since) = condition.last_transition_time.as_ref() else {
        return Availability::Available;
    };
    let ready_for = now.duration_since(since.0);
    let needed = k8s_openapi::jiff::SignedDuration::from_secs(i64::from(min_ready_seconds));
    if ready_for >= needed {
        Availability::Available
    } else {
        let rest = needed - ready_for;
        Availability::ReadySoon(Duration::try_from(rest).unwrap_or(Duration::from_secs(1)))
    }
}

/// A pod of the StatefulSet as the planner sees it, plus when it turns available (for a requeue).
pub struct PlannedPod {
    pub pod: RolloutPod,
    pub available_in: Option<Duration>,
}

/// Converts a cached pod of a StatefulSet rolling out `update_revision`; `None` when it has no
/// ordinal (not a StatefulSet pod after all).
pub fn rollout_pod(
    pod: &Pod,
    zone: Zone,
    min_ready_seconds: u32,
    update_revision: &str,
    now: Timestamp,
) -> Option<PlannedPod> {
    let ordinal = ordinal(pod)?;
    let availability = availability(pod, min_ready_seconds, now);
    Some(PlannedPod {
        pod: RolloutPod {
            name: pod.name_any(),
            ordinal,
            zone,
            revision: pod
                .labels()
                .get(REVISION_LABEL)
                .cloned()
                .unwrap_or_default(),
            update_revision: update_revision.to_owned(),
            ready: availability == Availability::Available,
            terminating: pod.metadata.deletion_timestamp.is_some(),
        },
        available_in: match availability {
            Availability::ReadySoon(rest) => Some(rest),
            _ => None,
        },
    })
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

/// The rollout's pods as the planner sees them, and what the status says of them.
#[derive(Debug, Default)]
pub struct PlannedPods {
    pub planned: Vec<RolloutPod>,
    /// Old-revision pods, by StatefulSet.
    pub old: BTreeMap<String, i32>,
    /// When the first Ready-but-not-yet-available pod turns available.
    pub soonest_available: Option<Duration>,
}

/// The pods of `target`'s StatefulSets among `pods` (each with its zone), as the planner sees
/// them at `now`; other pods are left out.
pub fn plan_pods<'p>(
    target: &Target,
    pods: impl IntoIterator<Item = (&'p Pod, Zone)>,
    now: Timestamp,
) -> PlannedPods {
    let mut out = PlannedPods::default();
    for (pod, zone) in pods {
        let Some(set) = owner_statefulset(pod).and_then(|owner| target.set(owner)) else {
            continue;
        };
        let update_revision = set.update_revision.as_deref().unwrap_or_default();
        let Some(p) = rollout_pod(pod, zone, set.min_ready_seconds, update_revision, now) else {
            continue;
        };
        if let Some(rest) = p.available_in {
            out.soonest_available = Some(out.soonest_available.map_or(rest, |s| s.min(rest)));
        }
        *out.old.entry(set.name.clone()).or_default() += i32::from(!p.pod.is_updated());
        out.planned.push(p.pod);
    }
    out
}

/// The planner's input for the rollout of `target` to `update_revision` over `pods`, from the
/// status it has reached (`status`): its step, zone and revision.
pub fn input<'a>(
    status: &'a ZoneAwareUpdateStatus,
    valid: &ValidZau,
    target: &Target,
    update_revision: &'a str,
    pods: &'a [RolloutPod],
    last_zone: Option<&'a Zone>,
) -> RolloutInput<'a> {
    RolloutInput {
        replicas: target.replicas,
        update_revision,
        last_update_revision: Some(status.update_revision.as_str()).filter(|r| !r.is_empty()),
        step: u32::try_from(status.update_step).unwrap_or(0),
        last_zone,
        max_unavailable: target.max_unavailable,
        exponential_factor: valid.exponential_factor,
        pods,
    }
}

/// A zone as the status records it (`Zone`'s display form).
pub fn zone_from_status(name: &str) -> Zone {
    if name == Zone::Unknown.to_string() {
        Zone::Unknown
    } else {
        Zone::known(name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;
    use zone_topology::IntOrPercent;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    /// `web-12` at revision `web-abc`, Ready since 2026-01-01T00:00:00Z.
    fn ready_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "web-12", "labels": {REVISION_LABEL: "web-abc"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]}
        }))
    }

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

    #[test]
    fn ordinal_falls_back_to_the_name() {
        let pod = pod(json!({"metadata": {"name": "my-app-7"}}));
        assert_eq!(ordinal(&pod), Some(7));
        let pod2 = super::tests::pod(json!({"metadata": {"name": "nonumber"}}));
        assert_eq!(ordinal(&pod2), None);
    }

    #[test]
    fn min_ready_seconds_delays_availability() {
        let pod = ready_pod();
        let now: Timestamp = "2026-01-01T00:00:04Z".parse().unwrap();
        assert_eq!(
            availability(&pod, 10, now),
            Availability::ReadySoon(Duration::from_secs(6))
        );
        assert_eq!(availability(&pod, 4, now), Availability::Available);
        let planned = rollout_pod(&pod, Zone::known("zone-a"), 10, "web-abc", now).unwrap();
        assert!(!planned.pod.ready);
        assert!(planned.pod.is_updated());
        assert_eq!(planned.available_in, Some(Duration::from_secs(6)));
    }

    #[test]
    fn missing_or_false_ready_condition_is_unavailable() {
        let now = Timestamp::now();
        let unready = pod(json!({"metadata": {"name": "web-0"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        assert_eq!(availability(&unready, 0, now), Availability::Unavailable);
        let pending = pod(json!({"metadata": {"name": "web-0"}}));
        assert_eq!(availability(&pending, 0, now), Availability::Unavailable);
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
