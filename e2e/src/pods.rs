//! Pod helpers: readiness as the API reports it, waiting for pods to be available, making a pod
//! unready the way a failing readiness probe would (kwok only marks Pending pods Ready, so the
//! patch sticks), evictions and deletions.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::wait_for;

/// The label of a StatefulSet's pods naming their revision.
pub const REVISION_LABEL: &str = "controller-revision-hash";

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

/// Ready and not terminating.
pub fn is_available(pod: &Pod) -> bool {
    is_ready(pod) && !is_terminating(pod)
}

/// Whether the pod is at StatefulSet revision `revision`.
pub fn at_revision(pod: &Pod, revision: &str) -> bool {
    pod.labels().get(REVISION_LABEL).map(String::as_str) == Some(revision)
}

/// The name of the node the pod is scheduled on.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// The pods labelled `selector`.
pub async fn list(pods: &Api<Pod>, selector: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap_or_else(|e| panic!("listing the pods {selector}: {e}"))
        .items
}

/// Waits until exactly `count` pods labelled `selector` exist and every one is available and,
/// when given, at `revision` (a StatefulSet converged).
pub async fn wait_all_available(
    pods: &Api<Pod>,
    selector: &str,
    count: usize,
    revision: Option<&str>,
    timeout: Duration,
) {
    let what = match revision {
        Some(revision) => format!("{count} pods of {selector} Ready at revision {revision}"),
        None => format!("{count} pods of {selector} Ready"),
    };
    wait_for(&what, timeout, || async {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?
            .items;
        let good = list
            .iter()
            .filter(|p| is_available(p) && revision.is_none_or(|r| at_revision(p, r)))
            .count();
        if good == count && list.len() == count {
            Ok(())
        } else {
            Err(format!("{good} good of {} pods", list.len()))
        }
    })
    .await;
}

/// The available pods labelled `selector`, once there are `count` of them.
pub async fn wait_available(
    pods: &Api<Pod>,
    selector: &str,
    count: usize,
    timeout: Duration,
) -> Vec<Pod> {
    wait_for(
        &format!("{count} Ready pods {selector}"),
        timeout,
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| e.to_string())?;
            let ready: Vec<Pod> = list.items.into_iter().filter(is_available).collect();
            if ready.len() == count {
                Ok(ready)
            } else {
                Err(format!("{} Ready", ready.len()))
            }
        },
    )
    .await
}

/// Deletes the pod `name` and waits until it is gone (a pod its StatefulSet has not recreated
/// yet).
pub async fn delete_and_wait_gone(pods: &Api<Pod>, name: &str, timeout: Duration) {
    pods.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    wait_for("the deleted pod to be gone", timeout, || async {
        match pods.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(format!(
                "{:?}",
                other.map(|p| p.map(|p| p.metadata.deletion_timestamp))
            )),
        }
    })
    .await;
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
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter(|p| is_ready(p) && at_revision(p, revision))
        .count())
}

/// Asserts that `pod` is still the same pod (same uid) and that none of its containers
/// restarted: a configuration change reached it in place.
pub async fn assert_unchanged_and_not_restarted(pods: &Api<Pod>, pod: &Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = pods
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("reading pod {name}: {e}"));
    assert_eq!(now.metadata.uid, pod.metadata.uid, "{name} was replaced");
    let restarts: i32 = now
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .sum();
    assert_eq!(restarts, 0, "{name} restarted");
}
