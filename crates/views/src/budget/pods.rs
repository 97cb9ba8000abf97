//! What the controllers and the webhook read of pods: whether a pod is healthy, the budget's
//! view of it (its zone comes from the node cache), and what a cache keeps of one ([`strip_pod`]).

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use kube::ResourceExt;
use zone_topology::Zone;
use zone_topology::budget::{BudgetPod, PodCondition};

/// What the controllers keep of a cached pod to place it and judge it: its node name, phase and
/// Ready condition, its labels, owners and times. Annotations, managed fields, finalizers, the
/// rest of the spec (containers, volumes) and of the status go: a full pod is several kB, a
/// stripped one a few hundred bytes, and the caches hold thousands.
pub fn strip_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.annotations = None;
    meta.managed_fields = None;
    meta.finalizers = None;
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        conditions: status.conditions.map(|conditions| {
            conditions
                .into_iter()
                .filter(|c| c.type_ == "Ready")
                .collect()
        }),
        ..PodStatus::default()
    });
}

/// How much availability evicting the pod would remove.
pub fn condition(pod: &Pod) -> PodCondition {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    match phase {
        "Succeeded" | "Failed" => return PodCondition::Terminal,
        "Pending" => return PodCondition::Pending,
        _ => {}
    }
    // A terminating pod is already on its way out: evicting it again removes nothing.
    if pod.metadata.deletion_timestamp.is_some() || !is_ready(pod) {
        return PodCondition::NotReady;
    }
    PodCondition::Healthy
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Creation time in unix milliseconds (0 when unset).
pub fn created_ms(pod: &Pod) -> i64 {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_millisecond())
}

/// The budget's view of a pod.
pub fn budget_pod(pod: &Pod, zone: Zone) -> BudgetPod {
    BudgetPod {
        name: pod.name_any(),
        zone,
        healthy: condition(pod) == PodCondition::Healthy,
        created_ms: created_ms(pod),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, ready: &str, deleting: bool) -> Pod {
        let mut value = json!({
            "metadata": {"name": "web-0", "namespace": "apps"},
            "spec": {"containers": [], "nodeName": "node-a"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn conditions_follow_phase_readiness_and_deletion() {
        assert_eq!(
            condition(&pod("Running", "True", false)),
            PodCondition::Healthy
        );
        assert_eq!(
            condition(&pod("Running", "False", false)),
            PodCondition::NotReady
        );
        assert_eq!(
            condition(&pod("Running", "True", true)),
            PodCondition::NotReady
        );
        assert_eq!(
            condition(&pod("Pending", "False", false)),
            PodCondition::Pending
        );
        assert_eq!(
            condition(&pod("Failed", "False", false)),
            PodCondition::Terminal
        );
        assert_eq!(
            condition(&pod("Succeeded", "True", false)),
            PodCondition::Terminal
        );
    }

    #[test]
    fn stripping_keeps_what_the_budget_reads() {
        let mut stripped = pod("Running", "True", false);
        strip_pod(&mut stripped);
        assert_eq!(condition(&stripped), PodCondition::Healthy);
        assert_eq!(
            stripped.spec.and_then(|s| s.node_name).as_deref(),
            Some("node-a")
        );
    }
}
