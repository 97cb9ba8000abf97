//! The ZoneDisruptionBudget eviction webhook for one test namespace: a cluster-scoped
//! ValidatingWebhookConfiguration whose `url` points at a zdb-controller on 127.0.0.1 and whose
//! namespaceSelector picks only that namespace (tests running in parallel never see each other's
//! webhook), and the zdb-controller process serving it.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::cluster::{Cluster, cleanup_blocking};
use crate::localstack::free_port;
use crate::process::ControllerProcess;
use crate::{TestNamespace, wait_for};

/// The Secret the self-signed webhook keeps its CA and certificate in.
pub const TLS_SECRET: &str = "zdb-webhook-tls";

/// The webhook configuration of one test, deleted when the test ends.
pub struct EvictionWebhook {
    pub name: String,
    /// Where the API server calls the webhook: `127.0.0.1:<port>`.
    pub port: u16,
    config: kube::Config,
}

impl EvictionWebhook {
    /// Registers a webhook for evictions in `ns`, called at `https://127.0.0.1:<port>`, failing
    /// closed. Until a controller patches its caBundle the API server cannot call it.
    pub async fn create(cluster: &Cluster, ns: &TestNamespace, port: u16) -> EvictionWebhook {
        let name = format!("zdb-{}", ns.name);
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "eviction.zdb.zonecontrol.k8s.aws",
                "rules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods/eviction"],
                    "scope": "Namespaced",
                }],
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate-eviction")},
                "failurePolicy": "Fail",
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            }],
        }))
        .expect("webhook configuration");
        Api::<ValidatingWebhookConfiguration>::all(ns.client.clone())
            .create(&PostParams::default(), &config)
            .await
            .expect("create the webhook configuration");
        EvictionWebhook {
            name,
            port,
            config: cluster.config().await,
        }
    }

    /// One zdb-controller for `ns` serving this webhook, self-signed (CA in [`TLS_SECRET`]),
    /// without leader election.
    pub fn controller(&self, ns: &TestNamespace) -> ControllerProcess {
        let listen = format!("127.0.0.1:{}", free_port());
        let webhook = format!("127.0.0.1:{}", self.port);
        let identity = format!("zdb-{}", self.port);
        let args = [
            "--identity",
            identity.as_str(),
            "--leader-elect=false",
            "--watch-namespace",
            &ns.name,
            "--lease-namespace",
            &ns.name,
            "--listen-address",
            &listen,
            "--webhook-address",
            &webhook,
            "--self-signed",
            "--tls-secret-name",
            TLS_SECRET,
            "--tls-secret-namespace",
            &ns.name,
            "--service-name",
            "zdb-webhook",
            "--service-namespace",
            &ns.name,
            "--webhook-config-name",
            &self.name,
        ];
        ControllerProcess::start("zdb-controller", &args, &[])
    }

    /// Waits until a controller patched the caBundle (until then the API server, failing closed,
    /// refuses every eviction of the namespace).
    pub async fn wait_ca_bundle(&self, ns: &TestNamespace) {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
        wait_for("the caBundle patched", Duration::from_secs(60), || async {
            let config = configs.get(&self.name).await.map_err(|e| e.to_string())?;
            let patched = config.webhooks.unwrap_or_default().iter().all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| !b.0.is_empty())
            });
            if patched {
                Ok(())
            } else {
                Err("no caBundle yet".to_string())
            }
        })
        .await;
    }
}

impl Drop for EvictionWebhook {
    fn drop(&mut self) {
        let name = self.name.clone();
        cleanup_blocking(self.config.clone(), |client| async move {
            let _ = Api::<ValidatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await;
        });
    }
}
