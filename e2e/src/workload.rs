//! The objects the scenarios and measurements run: the StatefulSet (`replicas` pods labelled
//! `app: <name>`, spread evenly over the zones (the scheduler refuses skew), created in parallel
//! and quick to terminate: 1 s grace, kwok honours it), its revisions and image, and the
//! ZoneAwareUpdates and ZoneDisruptionBudgets.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};

use crate::wait_for;

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

/// The StatefulSet's updateRevision once its controller has observed the latest spec.
pub async fn update_revision(sets: &Api<StatefulSet>, name: &str, timeout: Duration) -> String {
    wait_for(
        "the StatefulSet controller to observe the spec",
        timeout,
        || async {
            let set = sets.get(name).await.map_err(|e| e.to_string())?;
            let status = set.status.clone().unwrap_or_default();
            match status.update_revision {
                Some(revision) if status.observed_generation == set.metadata.generation => {
                    Ok(revision)
                }
                other => Err(format!("{other:?} at {:?}", status.observed_generation)),
            }
        },
    )
    .await
}

/// Sets the image of the StatefulSet's container `app` and returns its new updateRevision.
pub async fn set_image(
    sets: &Api<StatefulSet>,
    name: &str,
    image: &str,
    timeout: Duration,
) -> String {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": image}
    ]}}}});
    sets.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch the image");
    update_revision(sets, name, timeout).await
}

/// Touches the StatefulSet so its controller syncs at once (e.g. retries a pod creation a quota
/// refused, instead of after its backoff).
pub async fn touch(sets: &Api<StatefulSet>, name: &str) {
    let stamp = k8s_openapi::jiff::Timestamp::now().to_string();
    sets.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": stamp}}})),
    )
    .await
    .expect("touch the StatefulSet");
}

/// A ZoneAwareUpdate `name` with `spec` (its JSON; unchecked, so invalid specs can be made).
pub fn zone_aware_update(name: &str, spec: Value) -> ZoneAwareUpdate {
    custom_object("ZoneAwareUpdate", name, spec)
}

/// A ZoneDisruptionBudget `name` with `spec` (its JSON).
pub fn zone_disruption_budget(name: &str, spec: Value) -> ZoneDisruptionBudget {
    custom_object("ZoneDisruptionBudget", name, spec)
}

fn custom_object<K: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("{kind} manifest: {e}"))
}
