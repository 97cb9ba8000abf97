//! Removing one old-revision pod so the StatefulSet controller recreates it at the new revision.
//!
//! By default through the Eviction API, so PodDisruptionBudgets and ZoneDisruptionBudgets (their
//! webhook) govern rollouts exactly as they govern node drains: one budget for both. The pod's
//! UID is a precondition, so a pod recreated under the same name since the cache last saw it is
//! never removed by mistake.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};

use crate::cli::PodRemoval;

/// What happened to one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Evicted or deleted: it is terminating now.
    Removed,
    /// Already gone, or replaced (the UID precondition failed): nothing to do.
    AlreadyGone,
    /// Refused with 429: a disruption budget allows no more disruptions now.
    Refused { message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    #[error("cannot evict pod {pod}")]
    Evict {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete pod {pod}")]
    Delete {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// Removes `pod` (with UID `uid`) by `mode`.
pub async fn remove(
    pods: &Api<Pod>,
    mode: PodRemoval,
    pod: &str,
    uid: &str,
) -> Result<Removal, RemovalError> {
    let delete = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let result = match mode {
        PodRemoval::Evict => pods
            .create_subresource::<serde_json::Value, serde_json::Value>(
                "eviction",
                pod,
                &PostParams::default(),
                &eviction(pod, uid),
            )
            .await
            .map(|_| ()),
        PodRemoval::Delete => pods.delete(pod, &delete).await.map(|_| ()),
    };
    match result {
        Ok(()) => Ok(Removal::Removed),
        Err(error) => classify(error).map_err(|source| match mode {
            PodRemoval::Evict => RemovalError::Evict {
                pod: pod.to_string(),
                source,
            },
            PodRemoval::Delete => RemovalError::Delete {
                pod: pod.to_string(),
                source,
            },
        }),
    }
}

/// The Eviction of `pod`, conditional on its UID. Built here rather than by `Api::evict`, whose
/// body carries the delete options under a key the API server ignores (`delete_options`): the
/// precondition would be dropped and a pod recreated under the same name could be evicted.
fn eviction(pod: &str, uid: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod},
        "deleteOptions": {"preconditions": {"uid": uid}},
    })
}

/// 404 (gone) and 409 (UID precondition: a new pod of that name) mean the pod we meant is
/// already gone; 429 is a budget's answer, not a failure.
fn classify(error: kube::Error) -> Result<Removal, kube::Error> {
    match &error {
        kube::Error::Api(status) => match status.code {
            404 | 409 => Ok(Removal::AlreadyGone),
            429 => Ok(Removal::Refused {
                message: status.message.clone(),
            }),
            _ => Err(error),
        },
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn the_eviction_carries_the_uid_precondition() {
        let body = eviction("web-3", "u-3");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "u-3");
        assert_eq!(body["metadata"]["name"], "web-3");
        assert_eq!(body["kind"], "Eviction");
    }

    fn api_error(code: u16, message: &str) -> kube::Error {
        let mut status = Status::failure(message, "Reason");
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn budget_refusals_and_gone_pods_are_answers() {
        assert!(matches!(
            classify(api_error(429, "Cannot evict pod as it would violate the pod's disruption budget.")),
            Ok(Removal::Refused { message }) if message.contains("disruption budget")
        ));
        assert_eq!(
            classify(api_error(404, "not found")).ok(),
            Some(Removal::AlreadyGone)
        );
        assert_eq!(
            classify(api_error(409, "uid precondition")).ok(),
            Some(Removal::AlreadyGone)
        );
        assert!(classify(api_error(500, "webhook failed")).is_err());
    }
}
