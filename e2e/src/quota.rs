//! Holding pod creation in a namespace with a ResourceQuota: a pod deleted while the quota is full
//! is not recreated by its StatefulSet until the quota goes (a replacement that does not exist
//! yet, as on a node that is gone).

use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::{TestNamespace, wait_for};

pub struct PodQuota {
    api: Api<ResourceQuota>,
    name: String,
}

impl PodQuota {
    /// At most `pods` pods in `ns`; returns once the quota controller has counted the usage (the
    /// admission check only enforces a counted quota).
    pub async fn hold(ns: &TestNamespace, pods: usize) -> PodQuota {
        Self::hold_in(Api::namespaced(ns.client.clone(), &ns.name), pods).await
    }

    /// As [`PodQuota::hold`], in the namespace of `api`.
    pub async fn hold_in(api: Api<ResourceQuota>, pods: usize) -> PodQuota {
        Self::hold_count(api, "pods", pods).await
    }

    /// At most `count` objects of the quota resource `resource` (`pods`,
    /// `count/statefulsets.apps`) in the namespace of `api`, once counted.
    pub async fn hold_count(api: Api<ResourceQuota>, resource: &str, count: usize) -> PodQuota {
        let name = format!(
            "at-most-{count}-{}",
            resource.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        );
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"hard": {resource: count.to_string()}},
        }))
        .expect("quota");
        api.create(&PostParams::default(), &quota)
            .await
            .expect("create the quota");
        wait_for(
            "the quota to be counted",
            Duration::from_secs(60),
            || async {
                let quota = api.get(&name).await.map_err(|e| e.to_string())?;
                let used = quota
                    .status
                    .and_then(|s| s.used)
                    .and_then(|u| u.get(resource).cloned());
                used.map(|_| ())
                    .ok_or_else(|| "no status.used yet".to_string())
            },
        )
        .await;
        PodQuota { api, name }
    }

    /// Removes the quota. The StatefulSet controller retries a refused creation with a backoff;
    /// touch the StatefulSet to make it retry at once.
    pub async fn release(self) {
        self.api
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("delete the quota");
    }
}
