//! Pod helpers: readiness as the API reports it, making a pod unready the way a failing readiness
//! probe would (kwok only marks Pending pods Ready, so the patch sticks), and evictions.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Sets the pod's Ready (and ContainersReady) condition through the status subresource.
pub async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": status, "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
    ]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap_or_else(|e| panic!("patching the Ready condition of {name}: {e}"));
}

/// Evicts `name` through the Eviction API: `Ok(())`, or the API's status code and message of
/// the refusal. A dry run is asked as `kubectl drain --dry-run=server` asks it, in the Eviction's
/// `deleteOptions` (kube's `Api::evict` sends its delete options under a key the API server
/// ignores, so the body is built here).
pub async fn evict(pods: &Api<Pod>, name: &str, dry_run: bool) -> Result<(), (u16, String)> {
    let mut eviction = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name},
    });
    if dry_run {
        eviction["deleteOptions"] = json!({"dryRun": ["All"]});
    }
    match pods
        .create_subresource::<serde_json::Value, serde_json::Value>(
            "eviction",
            name,
            &kube::api::PostParams::default(),
            &eviction,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message.clone())),
        Err(other) => Err((0, other.to_string())),
    }
}

/// How many pods labelled `selector` are Ready at StatefulSet revision `revision` (their
/// `controller-revision-hash`), or why the list failed.
pub async fn ready_at_revision(
    pods: &Api<Pod>,
    selector: &str,
    revision: &str,
) -> Result<usize, String> {
    let list = pods
        .list(&kube::api::ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            is_ready(p)
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    .is_some_and(|r| r == revision)
        })
        .count())
}
