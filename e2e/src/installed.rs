//! Checks of an installation of the project running on the local cluster's real nodes, whatever
//! installed it (`helm install`, or `kubectl apply -f install.yaml`): the controllers' pods
//! available, the eviction webhook at failurePolicy Fail and judging, the samples at their status,
//! the installed objects present or gone.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::deploy::{Identity, dynamic_api, status_of, wait_for_sample_budget};
use crate::quota::PodQuota;
use crate::{TestNamespace, nodes, pods, wait_for};

pub const TIMEOUT: Duration = Duration::from_secs(180);

/// `name[:tag]` of an image reference (a registry port such as host:5000/name is not a tag).
pub fn split_image(image: &str) -> (&str, &str) {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') {
        image.rsplit_once(':').unwrap()
    } else {
        (image, "latest")
    }
}

/// Waits until the webhook configuration `name` is at failurePolicy Fail: a zdb-controller replica
/// serves with a certificate its caBundle trusts. From then on, an eviction it does not answer
/// fails (500) instead of being let through.
pub async fn wait_for_fail_policy(client: &Client, name: &str) {
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for(
        "the failurePolicy moved to Fail by a replica",
        TIMEOUT,
        || async {
            let configuration = webhooks.get(name).await.map_err(|e| e.to_string())?;
            let webhook = &configuration.webhooks.unwrap_or_default()[0];
            let bundle = webhook.client_config.ca_bundle.as_ref().map(|b| b.0.len());
            match webhook.failure_policy.as_deref() {
                Some("Fail") if bundle.unwrap_or(0) > 0 => Ok(()),
                other => Err(format!(
                    "failurePolicy {other:?}, caBundle {bundle:?} bytes"
                )),
            }
        },
    )
    .await;
}

/// Waits until every object of `ids` exists (`present`) or is gone (`!present`).
pub async fn wait_all(client: &Client, ids: &[Identity], present: bool, what: &str) {
    let mut apis = Vec::new();
    for (api_version, kind, namespace, name) in ids {
        let api = dynamic_api(client, api_version, kind, namespace.as_deref()).await;
        apis.push((api, format!("{kind} {name}"), name.as_str()));
    }
    wait_for(what, TIMEOUT, || async {
        let mut wrong = Vec::new();
        for (api, what, name) in &apis {
            let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
            if found.is_some() != present {
                wrong.push(what.as_str());
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("not yet: {wrong:?}"))
        }
    })
    .await;
}

/// The pods of `binary` in `pods_api`'s namespace, once exactly `count` of them exist and are
/// available.
pub async fn wait_binary_pods(pods_api: &Api<Pod>, binary: &str, count: usize) -> Vec<Pod> {
    let selector = format!("app.kubernetes.io/name={binary}");
    wait_for(
        &format!("exactly {count} available pods of {binary}"),
        TIMEOUT,
        || async {
            let list = pods_api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            let available = list.items.iter().filter(|p| pods::is_available(p)).count();
            if list.items.len() == count && available == count {
                Ok(list.items)
            } else {
                Err(format!("{} pods, {available} available", list.items.len()))
            }
        },
    )
    .await
}

/// A budgeted eviction judged by the webhook: answered (allowed, or refused by the budget with
/// 429), never failed by a webhook that could not be called.
pub fn assert_judged(answer: &Result<(), (u16, String)>) {
    if let Err((code, message)) = answer {
        assert_eq!(*code, 429, "the eviction was not judged: {message}");
        assert!(message.contains("admission webhook"), "{message}");
    }
}

/// The samples (`make samples`, applied in `namespace`) under the installed controllers: the
/// ZoneDisruptionBudget counts its pods per zone, the ZoneAwareUpdate reports its revisions, the
/// ShardedPrometheus is Available with three shards (Degraded only because its ServiceAccount is
/// bound to no prometheus ClusterRole).
pub async fn wait_for_samples(client: &Client, namespace: &str) {
    let api =
        |kind: &'static str| dynamic_api(client, "zonecontrol.k8s.aws/v1", kind, Some(namespace));
    let zdbs = api("ZoneDisruptionBudget").await;
    let zaus = api("ZoneAwareUpdate").await;
    let sproms = api("ShardedPrometheus").await;
    wait_for_sample_budget(&zdbs).await;
    wait_for("the sample ZAU's status", TIMEOUT, || async {
        let status = status_of(&zaus, "web").await?;
        if status["updateRevision"].is_string()
            && status["currentRevision"] == status["updateRevision"]
        {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
    wait_for(
        "the sample ShardedPrometheus Available",
        TIMEOUT,
        || async {
            let status = status_of(&sproms, "prometheus").await?;
            let condition = |type_: &str| {
                status["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
                    .unwrap_or_default()
            };
            if condition("Available")["status"] == "True"
                && status["shards"] == 3
                && condition("Degraded")["reason"] == "ServiceAccountForbidden"
            {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
}

/// The webhook judges the sample budget's evictions in `victim`: one zone may be disrupted, a
/// second is refused (429, naming the disrupted zone). Returns the zone of each sample pod.
pub async fn assert_webhook_judges(victim: &TestNamespace) -> BTreeMap<String, String> {
    let victim_pods: Api<Pod> = victim.api();
    let zone_of = nodes::pod_zones(&victim_pods, "app=web").await;
    let in_zone = |zone: &str| {
        zone_of
            .iter()
            .find(|(_, z)| *z == zone)
            .map(|(name, _)| name.clone())
            .unwrap()
    };
    let count = victim_pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    // One pod fewer than now: the evicted pod's replacement waits until the quota goes.
    let quota = PodQuota::hold(victim, count - 1).await;
    pods::evict(&victim_pods, &in_zone("zone-a"), false)
        .await
        .expect("the first zone's eviction is allowed");
    let (code, message) = pods::evict(&victim_pods, &in_zone("zone-b"), false)
        .await
        .expect_err("a second zone is refused while zone-a is disrupted");
    assert_eq!(code, 429, "{message}");
    assert!(
        message.contains("admission webhook") && message.contains("zone-a"),
        "{message}"
    );
    quota.release().await;
    zone_of
}
