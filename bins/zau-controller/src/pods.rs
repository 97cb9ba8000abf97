//! What the controller keeps of pods and StatefulSets (how a pod becomes the planner's
//! `RolloutPod` is `zone_views::rollout`'s).
//!
//! The caches hold thousands of pods; only the fields the planner needs survive
//! ([`strip_pod`]), which keeps the process small (one full pod is several kB, a stripped one a few
//! hundred bytes).

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::Pod;

pub use zone_topology::rollout::REVISION_LABEL;
pub use zone_views::rollout::{POD_INDEX_LABEL, owner_statefulset};

/// Drops everything of a pod the controller does not read: beyond the shared stripping, the
/// labels but the revision and index, the owners but the controlling StatefulSet.
pub fn strip_pod(pod: &mut Pod) {
    zone_views::budget::pods::strip_pod(pod);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;
    use zone_views::rollout::{Availability, availability, ordinal};

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
