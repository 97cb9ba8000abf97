//! What the controller keeps of pods, StatefulSets and nodes, and how a pod becomes the planner's
//! [`RolloutPod`].
//!
//! The caches hold thousands of pods; only the fields the planner needs survive
//! ([`strip_pod`]), which keeps the process small (one full pod is several kB, a stripped one a few
//! hundred bytes).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use zone_topology::Zone;
use zone_topology::rollout::RolloutPod;

pub use zone_topology::rollout::REVISION_LABEL;

/// The pod's ordinal as a label (Kubernetes >= 1.28); the name suffix is the fallback.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Drops everything of a pod the controller does not read: beyond the shared stripping, the
/// labels but the revision and index, the owners but the controlling StatefulSet.
pub fn strip_pod(pod: &mut Pod) {
    zone_operator::zones::strip_pod(pod);
    let meta = &mut pod.metadata;
    meta.generate_name = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| key == REVISION_LABEL || key == POD_INDEX_LABEL);
    }
    if let Some(owners) = meta.owner_references.as_mut() {
        owners.retain(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet");
    }
}

/// Drops the pod template and claim templates (the bulk of a StatefulSet) and other unread parts
/// (the labels stay: a rollout group selects by them).
pub fn strip_statefulset(set: &mut StatefulSet) {
    let meta = &mut set.metadata;
    meta.annotations = None;
    meta.managed_fields = None;
    if let Some(spec) = set.spec.as_mut() {
        *spec = StatefulSetSpec {
            replicas: spec.replicas,
            min_ready_seconds: spec.min_ready_seconds,
            update_strategy: spec.update_strategy.take(),
            selector: std::mem::take(&mut spec.selector),
            service_name: spec.service_name.take(),
            ..StatefulSetSpec::default()
        };
    }
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn full_pod() -> Pod {
        pod(json!({
            "metadata": {
                "name": "web-12", "namespace": "apps", "uid": "u1",
                "labels": {"app": "web", REVISION_LABEL: "web-abc", POD_INDEX_LABEL: "12"},
                "annotations": {"big": "x".repeat(1000)},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "c1"}
                ]
            },
            "spec": {"nodeName": "zone-a-node-1", "containers": [{"name": "app", "image": "img:1"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "PodScheduled", "status": "True"}
            ]}
        }))
    }

    #[test]
    fn stripping_keeps_what_the_planner_reads() {
        let mut pod = full_pod();
        strip_pod(&mut pod);
        assert_eq!(owner_statefulset(&pod), Some("web"));
        assert_eq!(ordinal(&pod), Some(12));
        assert_eq!(pod.labels().len(), 2, "only the revision and index labels");
        assert!(pod.annotations().is_empty());
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("zone-a-node-1")
        );
        assert!(pod.spec.as_ref().unwrap().containers.is_empty());
        let now = "2026-01-01T00:01:00Z".parse().unwrap();
        assert_eq!(availability(&pod, 0, now), Availability::Available);
        let conditions = pod.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        assert!(serde_json::to_string(&pod).unwrap().len() < 600);
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
        let pod = full_pod();
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

    #[test]
    fn statefulset_loses_its_template() {
        let mut set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": 3},
            "spec": {
                "replicas": 12, "minReadySeconds": 5, "serviceName": "web",
                "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "img:1"}]}}
            },
            "status": {"replicas": 12, "updateRevision": "web-2", "observedGeneration": 3}
        }))
        .unwrap();
        strip_statefulset(&mut set);
        let spec = set.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(12));
        assert_eq!(spec.min_ready_seconds, Some(5));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        assert!(spec.template.spec.is_none());
        assert_eq!(
            set.status.as_ref().unwrap().update_revision.as_deref(),
            Some("web-2")
        );
    }
}
