//! The ZoneDisruptionBudget eviction webhook for one test namespace: a cluster-scoped
//! ValidatingWebhookConfiguration whose `url` points at a zdb-controller on 127.0.0.1 and whose
//! namespaceSelector picks only that namespace (tests running in parallel never see each other's
//! webhook), and the zdb-controller process serving it.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::cluster::{Cluster, DeleteOnDrop};
use crate::localstack::free_port;
use crate::process::{ControllerProcess, namespace_args};
use crate::tls::TlsServer;
use crate::{TestNamespace, wait_for};

/// The eviction webhook's name in its configuration (`webhooks[].name`), as the shipped one's.
pub const WEBHOOK_NAME: &str = "eviction.zdb.zonecontrol.k8s.aws";

/// The Secret the self-signed webhook keeps its CA and certificate in.
pub const TLS_SECRET: &str = "zdb-webhook-tls";

/// The webhook configuration of one test, deleted when the test ends.
pub struct EvictionWebhook {
    pub name: String,
    /// Where the API server calls the webhook: `127.0.0.1:<port>`.
    pub port: u16,
    _delete: DeleteOnDrop,
}

/// The flags of a zdb-controller for one test namespace: `identity`, leader election on or off,
/// watching and keeping its Lease in `namespace`, metrics on `listen`, the webhook served on
/// `webhook` and registered as the configuration `config_name`. TLS flags come on top (e.g.
/// [`self_signed_args`]).
pub fn zdb_args(
    identity: &str,
    leader_elect: bool,
    namespace: &str,
    listen: &str,
    webhook: &str,
    config_name: &str,
) -> Vec<String> {
    let mut args = vec!["--identity".to_string(), identity.to_string()];
    args.extend(namespace_args(namespace, leader_elect));
    for (flag, value) in [
        ("--listen-address", listen),
        ("--webhook-address", webhook),
        ("--webhook-config-name", config_name),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    args
}

/// The TLS flags of self-signed mode: the CA and certificate in the Secret [`TLS_SECRET`] of
/// `namespace`, the caBundle of the webhook configuration patched from it.
pub fn self_signed_args(namespace: &str) -> Vec<String> {
    [
        "--self-signed",
        "--tls-secret-name",
        TLS_SECRET,
        "--tls-secret-namespace",
        namespace,
        "--service-name",
        "zdb-webhook",
        "--service-namespace",
        namespace,
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// The AdmissionReview the API server sends for `POST pods/<pod>/eviction` (`dry_run`: as for
/// `kubectl drain --dry-run=server`, decided and not recorded).
pub fn admission_review(uid: &str, namespace: &str, pod: &str, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": pod,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:perf-drain", "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace, "creationTimestamp": null},
            },
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    }))
    .expect("AdmissionReview JSON")
}

impl EvictionWebhook {
    /// Registers a webhook for evictions in `ns`, called at `https://127.0.0.1:<port>`, failing
    /// closed. Until a controller patches its caBundle the API server cannot call it.
    pub async fn create(cluster: &Cluster, ns: &TestNamespace, port: u16) -> EvictionWebhook {
        Self::create_on(cluster, ns, "127.0.0.1", port).await
    }

    /// [`EvictionWebhook::create`] called at `https://<host>:<port>` (`[::1]`: over IPv6).
    pub async fn create_on(
        cluster: &Cluster,
        ns: &TestNamespace,
        host: &str,
        port: u16,
    ) -> EvictionWebhook {
        let url = format!("https://{host}:{port}/validate-eviction");
        Self::register(cluster, ns, port, &url, None).await
    }

    /// Registers a webhook for evictions in `ns` calling `path` of the test's own `server`,
    /// trusting its CA, failing closed.
    pub async fn for_server(
        cluster: &Cluster,
        ns: &TestNamespace,
        server: &TlsServer,
        path: &str,
    ) -> EvictionWebhook {
        let port = server.addr.port();
        Self::register(cluster, ns, port, &server.url(path), Some(&server.ca_pem)).await
    }

    async fn register(
        cluster: &Cluster,
        ns: &TestNamespace,
        port: u16,
        url: &str,
        ca_pem: Option<&str>,
    ) -> EvictionWebhook {
        let name = format!("zdb-{}", ns.name);
        let mut client_config = json!({"url": url});
        if let Some(pem) = ca_pem {
            client_config["caBundle"] = json!(k8s_openapi::ByteString(pem.as_bytes().to_vec()));
        }
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": WEBHOOK_NAME,
                "rules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods/eviction"],
                    "scope": "Namespaced",
                }],
                "clientConfig": client_config,
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
            _delete: DeleteOnDrop::new::<ValidatingWebhookConfiguration>(
                cluster.config().await,
                &name,
                DeleteParams::default(),
            ),
            name,
            port,
        }
    }

    /// One zdb-controller for `ns` serving this webhook, self-signed (CA in [`TLS_SECRET`]),
    /// without leader election.
    pub fn controller(&self, ns: &TestNamespace) -> ControllerProcess {
        self.controller_with(ns, &[])
    }

    /// [`EvictionWebhook::controller`] with `extra` flags.
    pub fn controller_with(&self, ns: &TestNamespace, extra: &[String]) -> ControllerProcess {
        self.controller_listening(ns, free_port(), extra)
    }

    /// [`EvictionWebhook::controller_with`] serving its metrics on 127.0.0.1:`metrics_port`.
    pub fn controller_listening(
        &self,
        ns: &TestNamespace,
        metrics_port: u16,
        extra: &[String],
    ) -> ControllerProcess {
        let listen = format!("127.0.0.1:{metrics_port}");
        let webhook = format!("127.0.0.1:{}", self.port);
        let identity = format!("zdb-{}", self.port);
        let mut args = zdb_args(&identity, false, &ns.name, &listen, &webhook, &self.name);
        args.extend(self_signed_args(&ns.name));
        args.extend(extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ControllerProcess::start("zdb-controller", &args, &[])
    }

    /// Sets the caBundle of this webhook configuration (a controller in cert-dir mode leaves it
    /// alone).
    pub async fn set_ca_bundle(&self, ns: &TestNamespace, pem: &str) {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
        let patch = json!({"webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": {"caBundle": k8s_openapi::ByteString(pem.as_bytes().to_vec())},
        }]});
        configs
            .patch(
                &self.name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(patch),
            )
            .await
            .expect("patch the caBundle");
    }

    /// The caBundle of each webhook of the configuration (empty where none is set).
    pub async fn ca_bundles(&self, ns: &TestNamespace) -> Result<Vec<Vec<u8>>, String> {
        let config = Api::<ValidatingWebhookConfiguration>::all(ns.client.clone())
            .get(&self.name)
            .await
            .map_err(|e| e.to_string())?;
        Ok(config
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
            .collect())
    }

    /// Waits until a controller patched the caBundle (until then the API server, failing closed,
    /// refuses every eviction of the namespace).
    pub async fn wait_ca_bundle(&self, ns: &TestNamespace) {
        wait_for("the caBundle patched", Duration::from_secs(60), || async {
            let bundles = self.ca_bundles(ns).await?;
            if bundles.iter().all(|b| !b.is_empty()) {
                Ok(())
            } else {
                Err("no caBundle yet".to_string())
            }
        })
        .await;
    }
}

/// The API server's own counters of the admission calls to some webhooks (by their names, as in
/// a configuration's `webhooks[].name`), summed over their other labels; a counter not yet
/// incremented is absent, so 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    /// Every call (`apiserver_admission_webhook_request_total`).
    pub calls: f64,
    /// Calls rejected because the webhook could not be called (connection, TLS, timeout) or did
    /// not answer properly (`failurePolicy: Fail`): `apiserver_admission_webhook_rejection_count`
    /// with an `error_type` other than `no_error`.
    pub failed: f64,
    /// Calls let through because calling the webhook failed (`failurePolicy: Ignore`).
    pub fail_open: f64,
}

impl Counters {
    /// The counters of `webhooks`, from the API server's `/metrics`.
    pub async fn read(client: &kube::Client, webhooks: &[&str]) -> Counters {
        let request = hyper::Request::get("/metrics")
            .body(Vec::new())
            .expect("a GET request");
        let text = client
            .request_text(request)
            .await
            .expect("the API server's /metrics");
        let sum = |metric: &str, wanted: &dyn Fn(&str) -> bool| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(&format!("{metric}{{")) && wanted(line))
                .filter(|line| {
                    webhooks
                        .iter()
                        .any(|name| line.contains(&format!(r#"name="{name}""#)))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Counters {
            calls: sum("apiserver_admission_webhook_request_total", &|_| true),
            failed: sum("apiserver_admission_webhook_rejection_count", &|line| {
                !line.contains(r#"error_type="no_error""#)
            }),
            fail_open: sum("apiserver_admission_webhook_fail_open_count", &|_| true),
        }
    }

    /// What was counted from `before` to these.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            calls: self.calls - before.calls,
            failed: self.failed - before.failed,
            fail_open: self.fail_open - before.fail_open,
        }
    }
}
