//! The StatefulSet the scenarios and measurements run: `replicas` pods labelled `app: <name>`,
//! spread evenly over the zones (the scheduler refuses skew), created in parallel and quick to
//! terminate (1 s grace, kwok honours it).

use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The manifest as JSON, for a caller to adjust (update strategy, labels) before
/// [`to_statefulset`].
pub fn spread_statefulset(name: &str, replicas: usize, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": ZONE_LABEL,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": name}},
                    }],
                    "containers": [{"name": "app", "image": image}],
                },
            },
        },
    })
}

pub fn to_statefulset(manifest: Value) -> StatefulSet {
    serde_json::from_value(manifest).expect("StatefulSet manifest")
}
