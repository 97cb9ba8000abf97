//! `make deploy` from a test: the make targets with the cluster's kubectl, a test overlay that keeps
//! a deployment to itself (unique names, the webhook and the controllers limited to the test's
//! namespace), dynamic APIs for rendered objects, and deletion order from the store's revisions.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::Cluster;
use crate::identity;

pub fn repo_root() -> PathBuf {
    crate::cluster::e2e_dir().join("..").canonicalize().unwrap()
}

/// `make <target>` from the repository root with kubectl of the cluster on PATH.
/// The controller binaries `make deploy` ships, in the order of `bins.txt` (the one list).
pub fn controllers() -> Vec<String> {
    std::fs::read_to_string(repo_root().join("bins.txt"))
        .expect("bins.txt at the repository root")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The binaries that run leader-elected (a Lease each); the others (the rules-federator) serve
/// on every replica.
pub fn is_leader_elected(binary: &str) -> bool {
    binary != "rules-federator"
}

/// The flag that confines `binary` to one namespace.
pub fn namespace_flag(binary: &str) -> &'static str {
    match binary {
        "rules-federator" => "--discover-namespace",
        _ => "--watch-namespace",
    }
}

/// Kustomize patches that make each of `controllers` watch only the namespace `victim`.
pub fn watch_only(controllers: &[String], victim: &str) -> String {
    controllers
        .iter()
        .map(|controller| {
            format!(
                r#"- target:
    kind: Deployment
    name: {}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: {}={}
"#,
                controller,
                namespace_flag(controller),
                victim
            )
        })
        .collect::<String>()
}

/// The holder of the Lease of `controller` among `leases`: the one Lease whose holder is one of
/// the controller's pods.
pub async fn lease_holder(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    controller: &str,
) -> Result<String, String> {
    let list = leases
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let holders: Vec<String> = list
        .items
        .iter()
        .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
        .filter(|holder| holder.starts_with(controller))
        .collect();
    match holders.as_slice() {
        [holder] => Ok(holder.clone()),
        other => Err(format!("holders of {controller}: {other:?}")),
    }
}

pub fn make(cluster: &Cluster, target: &str, vars: &[(&str, &str)]) -> String {
    let mut command = Command::new("make");
    command
        .current_dir(repo_root())
        .arg("--no-print-directory")
        .arg(target)
        .env("PATH", identity::path_with_cluster_tools(cluster))
        .env("KUBECONFIG", &cluster.kubeconfig);
    for (name, value) in vars {
        command.arg(format!("{name}={value}"));
    }
    identity::run(command, None)
}

/// A kustomize overlay of `base` (a directory under config/) in a temporary directory, removed on
/// drop: `-<suffix>` on every name, the webhook limited to namespace `victim`, plus `patches`
/// (kustomize `patches:` entries, YAML).
pub struct Overlay {
    pub path: PathBuf,
}

impl Overlay {
    pub fn new(base: &str, suffix: &str, victim: &str, patches: &str) -> Overlay {
        let path = std::env::temp_dir().join(format!(
            "e2e-deploy-overlay-{suffix}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        let base = repo_root().join(base);
        let up = "../".repeat(path.components().count().saturating_sub(1));
        let base = format!("{up}{}", base.strip_prefix("/").unwrap().to_string_lossy());
        std::fs::write(
            path.join("kustomization.yaml"),
            format!(
                r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
nameSuffix: "-{suffix}"
resources:
- {base}
labels:
- pairs:
    zonecontrol.k8s.aws/e2e: "true"
patches:
- target:
    kind: ValidatingWebhookConfiguration
  patch: |-
    - op: replace
      path: /webhooks/0/namespaceSelector
      value:
        matchLabels:
          kubernetes.io/metadata.name: {victim}
{patches}"#
            ),
        )
        .unwrap();
        Overlay { path }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The `(apiVersion, kind, namespace, name)` of every rendered object.
pub fn identities(objects: &[Value]) -> Vec<Identity> {
    objects
        .iter()
        .map(|o| {
            (
                o["apiVersion"].as_str().unwrap().to_string(),
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"].as_str().map(str::to_string),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub async fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let resource: ApiResource = resource;
    // kustomize gives a namespace to cluster-scoped kinds its schema does not know
    // (ValidatingAdmissionPolicy); the API server drops it, and so does this.
    match namespace {
        Some(ns) if capabilities.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// The object's status, or why there is none yet.
pub async fn status_of(api: &Api<DynamicObject>, name: &str) -> Result<Value, String> {
    let object = api.get(name).await.map_err(|e| e.to_string())?;
    object
        .data
        .get("status")
        .cloned()
        .ok_or_else(|| "no status yet".to_string())
}

/// Records the resourceVersion at which each named object is deleted. Within one etcd the
/// resourceVersion is the store's global revision, so deletions of different kinds can be ordered
/// by it (the audit policy of the local cluster does not log these kinds).
/// The returned receiver fires once the watch has replayed the object (the watch is live).
pub fn watch_deletions(
    api: Api<DynamicObject>,
    name: String,
) -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::task::JoinHandle<Option<u64>>,
) {
    let (live, ready) = tokio::sync::oneshot::channel();
    let handle = tokio::spawn(async move {
        let mut live = Some(live);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let Ok(stream) = api.watch(&params, "0").await else {
            return None;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(_)) => {
                    if let Some(live) = live.take() {
                        let _ = live.send(());
                    }
                }
                Ok(WatchEvent::Deleted(object)) => {
                    return object.metadata.resource_version?.parse().ok();
                }
                _ => {}
            }
        }
        None
    });
    (ready, handle)
}

/// One `make deploy` of a test: the overlay of [`Overlay::new`] rendered into `namespace` with
/// image `img`. Dropped before [`TestDeploy::undeploy_webhook_first`] ran (a failed test), it
/// undeploys whatever was deployed.
pub struct TestDeploy<'a> {
    cluster: &'a Cluster,
    overlay: Overlay,
    namespace: String,
    img: String,
    /// More make variables of every target (e.g. `MONITORING=1`).
    vars: Vec<(String, String)>,
    undeployed: bool,
}

/// `(apiVersion, kind, namespace, name)` of a rendered object.
pub type Identity = (String, String, Option<String>, String);

impl<'a> TestDeploy<'a> {
    pub fn new(cluster: &'a Cluster, overlay: Overlay, namespace: &str, img: &str) -> Self {
        TestDeploy {
            cluster,
            overlay,
            namespace: namespace.to_string(),
            img: img.to_string(),
            vars: Vec::new(),
            undeployed: false,
        }
    }

    /// Passes `name=value` to every make target of this deployment (deploy, manifests and the
    /// undeploy of a drop alike), e.g. `MONITORING=1`.
    pub fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.to_string(), value.to_string()));
        self
    }

    /// `make <target>` with NAMESPACE, IMG and DEPLOY_BASE of this deployment.
    pub fn make(&self, target: &str) -> String {
        let base = self.overlay.path.display().to_string();
        let mut vars = vec![
            ("NAMESPACE", self.namespace.as_str()),
            ("IMG", self.img.as_str()),
            ("DEPLOY_BASE", base.as_str()),
        ];
        vars.extend(self.vars.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        make(self.cluster, target, &vars)
    }

    /// `make undeploy` (the webhook configuration first); nothing is left for the drop to undo.
    pub fn undeploy(&mut self) {
        self.make("undeploy");
        self.undeployed = true;
    }

    /// The objects `make deploy` applies, from `make manifests`.
    pub fn manifests(&self) -> Vec<Value> {
        identity::yaml_to_json(&self.make("manifests"))
    }

    /// `make undeploy`, watching every object in `ids` until it is deleted; asserts that the
    /// ValidatingWebhookConfiguration `webhook` went first (by the store's revisions: within one
    /// etcd the resourceVersion is its global revision).
    pub async fn undeploy_webhook_first(
        &mut self,
        client: &Client,
        ids: &[Identity],
        webhook: &str,
    ) {
        let mut deletions = Vec::new();
        for (api_version, kind, ns, name) in ids {
            let api = dynamic_api(client, api_version, kind, ns.as_deref()).await;
            let (live, handle) = watch_deletions(api, name.clone());
            // A watch from "0" first replays the existing object: then it is live.
            tokio::time::timeout(Duration::from_secs(30), live)
                .await
                .unwrap_or_else(|_| panic!("watch on {kind}/{name} not live"))
                .unwrap();
            deletions.push((format!("{kind}/{name}"), handle));
        }
        self.make("undeploy");
        self.undeployed = true;
        let mut revisions = BTreeMap::new();
        for (what, handle) in deletions {
            let revision = tokio::time::timeout(Duration::from_secs(180), handle)
                .await
                .unwrap_or_else(|_| panic!("{what} was not deleted"))
                .unwrap()
                .unwrap_or_else(|| panic!("no deletion seen for {what}"));
            revisions.insert(what, revision);
        }
        let webhook_key = format!("ValidatingWebhookConfiguration/{webhook}");
        let webhook_revision = revisions[&webhook_key];
        for (what, revision) in &revisions {
            assert!(
                *what == webhook_key || webhook_revision < *revision,
                "the webhook configuration ({webhook_revision}) is deleted before {what} ({revision})"
            );
        }
    }
}

impl Drop for TestDeploy<'_> {
    fn drop(&mut self) {
        if !self.undeployed {
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.make("undeploy")));
        }
    }
}

/// Binds the ServiceAccount `service_account` of `victim` to the ClusterRole `role` by a
/// ClusterRoleBinding the namespace owns (deleting the namespace removes it, even if the test
/// is killed).
pub fn bind_cluster_role(
    cluster: &Cluster,
    victim: &crate::TestNamespace,
    service_account: &str,
    role: &str,
) {
    let kubectl_stdin = |args: &[&str], stdin: Option<&str>| {
        let mut command = identity::kubectl(cluster);
        command.args(args);
        identity::run(command, stdin.map(str::as_bytes))
    };
    let namespace = &victim.name;
    let uid = kubectl_stdin(
        &[
            "get",
            "namespace",
            namespace,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": format!("{namespace}-{service_account}"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid}],
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    });
    kubectl_stdin(&["apply", "-f", "-"], Some(&binding.to_string()));
}

/// A token for the federator ([`FEDERATOR_AUDIENCE`]) of ServiceAccount `grafana` in the
/// victim namespace, bound to ClusterRole `role` (a
/// deployed `zone-aware-rules-federator-reader-<suffix>`) by a ClusterRoleBinding the namespace
/// owns (deleting the namespace removes it, even if the test is killed).
pub fn reader_token(cluster: &Cluster, victim: &crate::TestNamespace, role: &str) -> String {
    let kubectl_stdin = |args: &[&str], stdin: Option<&str>| {
        let mut command = identity::kubectl(cluster);
        command.args(args);
        identity::run(command, stdin.map(str::as_bytes))
    };
    let namespace = &victim.name;
    kubectl_stdin(
        &["create", "serviceaccount", "grafana", "-n", namespace],
        None,
    );
    bind_cluster_role(cluster, victim, "grafana", role);
    kubectl_stdin(
        &[
            "create",
            "token",
            "grafana",
            "-n",
            namespace,
            "--duration=1h",
            "--audience",
            FEDERATOR_AUDIENCE,
        ],
        None,
    )
    .trim()
    .to_string()
}

/// The deployed federator pod's API as Grafana calls it: over HTTPS, trusting only the `ca.crt`
/// of the Secret the federator keeps its serving certificate in, checked for the Service's name.
pub struct DeployedFederator {
    pub address: std::net::SocketAddr,
    server_name: String,
    ca: String,
}

/// The Secret of the deployed federator's serving certificate (`--tls-self-signed-secret` of
/// config/manager and the chart).
pub const FEDERATOR_TLS_SECRET: &str = "rules-federator-tls";

impl DeployedFederator {
    /// The API of the federator pod `pod`, once its Secret holds a CA.
    pub async fn of(client: &Client, pod: &k8s_openapi::api::core::v1::Pod) -> DeployedFederator {
        let namespace = pod.metadata.namespace.clone().expect("a pod's namespace");
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .expect("the federator pod's IP");
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(client.clone(), &namespace);
        let ca = crate::wait_for(
            "the federator's serving certificate in its Secret",
            Duration::from_secs(60),
            || async {
                let secret = secrets
                    .get(FEDERATOR_TLS_SECRET)
                    .await
                    .map_err(|e| e.to_string())?;
                let data = secret.data.unwrap_or_default();
                let ca = data.get("ca.crt").ok_or("no ca.crt")?;
                String::from_utf8(ca.0.clone()).map_err(|e| e.to_string())
            },
        )
        .await;
        DeployedFederator {
            address: std::net::SocketAddr::new(ip.parse().expect("a pod IP"), 9090),
            server_name: format!("rules-federator.{namespace}.svc"),
            ca,
        }
    }

    /// `GET path` as the holder of `token` (anonymous without one): the status and the body.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
        crate::tls::https_get(self.address, &self.server_name, &self.ca, path, token).await
    }

    /// `thanos.Rules/Rules` on the gRPC port (10901), over TLS verified against the Secret's CA
    /// for the Service's name, as the holder of `token` (its `authorization` metadata): every
    /// streamed message, or the call's status (`Err` with the transport's error when no
    /// connection is made).
    pub async fn grpc_rules(
        &self,
        token: Option<&str>,
    ) -> Result<Vec<zone_thanos::thanos::RulesResponse>, String> {
        let config = crate::tls::client_config(self.ca.as_bytes())?;
        let channel = crate::rules_grpc::tls_channel(
            std::net::SocketAddr::new(self.address.ip(), GRPC_PORT),
            &self.server_name,
            config,
        )
        .await?;
        let mut client = zone_thanos::thanos::rules_client::RulesClient::new(channel);
        let mut request = tonic::Request::new(zone_thanos::thanos::RulesRequest::default());
        if let Some(token) = token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|e| format!("{e}"))?;
            request.metadata_mut().insert("authorization", value);
        }
        let mut stream = client
            .rules(request)
            .await
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?
            .into_inner();
        let mut messages = Vec::new();
        while let Some(message) = stream
            .message()
            .await
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?
        {
            messages.push(message);
        }
        Ok(messages)
    }
}

/// The deployed federator's gRPC port (`--grpc-listen-address` of config/manager and the chart).
pub const GRPC_PORT: u16 = 10901;

/// The audience the deployed federator accepts tokens for (`--auth-audience` of
/// config/manager and the chart).
pub const FEDERATOR_AUDIENCE: &str = "rules-federator";

/// `kubectl apply --server-side -k config/samples` into `namespace`.
pub fn apply_samples(cluster: &Cluster, namespace: &str) {
    let mut command = identity::kubectl(cluster);
    command.args(["apply", "--server-side", "-n", namespace, "-k"]);
    command.arg(repo_root().join("config/samples"));
    identity::run(command, None);
}

/// Waits (up to `timeout`) until the status of the object `name` of `api` satisfies `done`; the
/// last status seen is the reason given on timeout.
async fn wait_for_status(
    what: &str,
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) {
    crate::wait_for(what, timeout, || async {
        let status = status_of(api, name).await?;
        if done(&status) {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
}

/// Waits until the sample ZoneDisruptionBudget `web` expects and counts its six pods, two per zone,
/// and allows one disruption in each zone.
pub async fn wait_for_sample_budget(zdbs: &Api<DynamicObject>) {
    let per_zone = serde_json::json!({"zone-a": 2, "zone-b": 2, "zone-c": 2});
    let allowed = serde_json::json!({"zone-a": 1, "zone-b": 1, "zone-c": 1});
    let timeout = Duration::from_secs(90);
    wait_for_status(
        "the sample ZDB's per-zone status",
        zdbs,
        "web",
        timeout,
        |status| {
            status["expectedPods"] == per_zone
                && status["currentHealthy"] == per_zone
                && status["disruptionsAllowed"] == allowed
        },
    )
    .await;
}

/// Waits until the sample ShardedPrometheus `prometheus` is Available with three shards, one per
/// zone (kwok marks their pods Ready), and Degraded only because its ServiceAccount is bound to no
/// prometheus ClusterRole.
pub async fn wait_for_sample_sprom(sproms: &Api<DynamicObject>) {
    wait_for_status(
        "the sample ShardedPrometheus Available",
        sproms,
        "prometheus",
        Duration::from_secs(180),
        |status| {
            let condition = |type_: &str| {
                status["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
                    .unwrap_or_default()
            };
            condition("Available")["status"] == "True"
                && status["shards"] == 3
                && condition("Degraded")["reason"] == "ServiceAccountForbidden"
        },
    )
    .await;
}

/// Waits until the sample ZoneAwareUpdate `web` reports its revisions, the current one the update
/// one (nothing to roll).
pub async fn wait_for_sample_zau(zaus: &Api<DynamicObject>) {
    let timeout = Duration::from_secs(180);
    wait_for_status("the sample ZAU's status", zaus, "web", timeout, |status| {
        status["updateRevision"].is_string()
            && status["currentRevision"] == status["updateRevision"]
    })
    .await;
}
