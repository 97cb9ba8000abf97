//! The rules-federator as a host process, stopped and started again on the same address, and how
//! the gate reaches it: a URL, a URL with a ServiceAccount token from a Secret, or a Service whose
//! EndpointSlice names the host.

use e2e::localstack::free_port;
use e2e::wait::wait_until_empty;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};

use super::*;

/// How the rules-federator is run and how the gate reaches it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// `url: http://127.0.0.1:<port>`, no authentication.
    Url,
    /// `url`, the federator with `--auth=kubernetes`, the gate with `bearerTokenSecret` (a
    /// ServiceAccount token Secret of a reader of the federated alerts).
    UrlWithToken,
    /// `service`: a Service without selector whose EndpointSlice names the federator on the
    /// host's address, by port name.
    Service,
}

/// The rules-federator as a host process, stopped and started again on the same address.
pub(super) struct Federator {
    pub(super) address: SocketAddr,
    args: Vec<String>,
    token: Option<String>,
    process: Option<ControllerProcess>,
}

impl Federator {
    fn new(address: SocketAddr, namespace: &str, auth: bool) -> Federator {
        let mut args = vec![
            "--listen-address".to_string(),
            address.to_string(),
            "--discover-sprom".to_string(),
            SPROM.to_string(),
            "--discover-namespace".to_string(),
            namespace.to_string(),
            "--endpoint-timeout".to_string(),
            "1s".to_string(),
            "--shutdown-delay".to_string(),
            "0s".to_string(),
        ];
        if auth {
            args.push("--auth=kubernetes".to_string());
        }
        let mut federator = Federator {
            address,
            args,
            token: None,
            process: None,
        };
        federator.start();
        federator
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub(super) fn start(&mut self) {
        assert!(self.process.is_none(), "the federator is running");
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.process = Some(ControllerProcess::start("rules-federator", &args, &[]));
    }

    /// Kills the process and waits until its port refuses connections.
    pub(super) async fn stop(&mut self) {
        drop(self.process.take());
        let address = self.address;
        wait_for("the federator's port closed", TIMEOUT, || async move {
            match tokio::net::TcpStream::connect(address).await {
                Err(_) => Ok(()),
                Ok(_) => Err("still accepting".to_string()),
            }
        })
        .await;
    }

    pub(super) async fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get_with_token(self.address, path, self.token.as_deref()).await
    }

    /// The `AppErrors` alerts the federator serves (an answer with warnings is not complete).
    pub(super) async fn alerts(&self) -> Result<Vec<Alert>, String> {
        let (code, body) = self.get("/api/v1/alerts").await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 || value.get("warnings").is_some() {
            return Err(format!("{code}: {body}"));
        }
        let label = |alert: &Value, name: &str| {
            alert["labels"][name]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        Ok(value["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == ALERT)
            .map(|a| Alert {
                zone: label(a, "zone"),
                shard: label(a, "shard"),
                state: a["state"].as_str().unwrap_or_default().to_string(),
                active_at: a["activeAt"].as_str().unwrap_or_default().parse().unwrap(),
            })
            .collect())
    }

    /// Waits until `AppErrors` fires for `zone`, and for no other zone.
    pub(super) async fn wait_firing(&self, zone: &str) -> Alert {
        wait_for(&format!("{ALERT} firing in {zone}"), TIMEOUT, || async {
            let alerts = self.alerts().await?;
            match alerts.as_slice() {
                [alert] if alert.zone == zone && alert.state == "firing" => Ok(alert.clone()),
                _ => Err(format!("{alerts:?}")),
            }
        })
        .await
    }

    /// Waits until no `AppErrors` alert is active anywhere.
    pub(super) async fn wait_quiet(&self) {
        wait_until_empty(&format!("no {ALERT} alert"), TIMEOUT, || self.alerts()).await;
    }
}

/// The rules-federator as `gate` runs it, and how the gate reaches it (`url` or `service` of
/// `spec.alertGate`).
pub(super) async fn start_federator(ns: &TestNamespace, gate: Gate) -> (Federator, Value) {
    let (address, gate_target) = match gate {
        Gate::Url | Gate::UrlWithToken => {
            let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
            (address, json!({"url": format!("http://{address}")}))
        }
        Gate::Service => {
            // The real nodes' address is the host's: a Service's endpoint must not be a
            // loopback address.
            let host = e2e::alertmanager::host_address(&ns.client).await;
            let address = SocketAddr::new(host, free_port());
            federator_service(ns, address).await;
            (
                address,
                json!({"service": {"name": "federator", "port": "web"}}),
            )
        }
    };
    let mut federator = Federator::new(address, &ns.name, gate == Gate::UrlWithToken);
    if gate == Gate::UrlWithToken {
        federator.token = Some(gate_token(ns).await);
    }
    (federator, gate_target)
}

/// A Service `federator` without selector, and its EndpointSlice naming `address` (port `web`):
/// how the gate finds a federator run outside the cluster's pods.
async fn federator_service(ns: &TestNamespace, address: SocketAddr) {
    let services: Api<Service> = ns.api();
    let service = json!({
        "metadata": {"name": "federator"},
        "spec": {"clusterIP": "None", "ports": [{"name": "web", "port": address.port()}]},
    });
    fixture::create(&services, service).await;
    let slices: Api<EndpointSlice> = ns.api();
    let slice = json!({
        "metadata": {
            "name": "federator-host",
            "labels": {
                "kubernetes.io/service-name": "federator",
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "web", "port": address.port(), "protocol": "TCP"}],
    });
    fixture::create(&slices, slice).await;
}

/// What a namespace whose gates name a Secret grants the controller (docs/zau.md): a RoleBinding
/// of the shipped ClusterRole `zone-aware-zau-gate-secrets` to its ServiceAccount. Nothing when
/// the controller runs as the test's admin (`E2E_AS_SERVICE_ACCOUNT` unset).
pub(super) async fn allow_gate_secrets(ns: &TestNamespace, controller: &ControllerProcess) {
    let Some(identity) = &controller.identity else {
        return;
    };
    let binding = json!({
        "metadata": {"name": "zau-gate-secrets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": identity.rendered_name("zone-aware-zau-gate-secrets"),
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": identity.service_account,
            "namespace": identity.namespace,
        }],
    });
    let bindings: Api<RoleBinding> = ns.api();
    fixture::create(&bindings, binding).await;
}

/// The ServiceAccount [`GATE_ACCOUNT`] allowed to read the federated alerts (a ClusterRole with
/// the rules of the shipped `zone-aware-rules-federator-reader`, bound to it; both owned by the
/// namespace, so they go with it), and its token in the Secret [`GATE_TOKEN_SECRET`] (key
/// `token`, filled by the token controller). Returns the token.
async fn gate_token(ns: &TestNamespace) -> String {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = ns.api();
    fixture::create(&accounts, json!({"metadata": {"name": GATE_ACCOUNT}})).await;
    let namespace = Api::<Namespace>::all(ns.client.clone())
        .get(&ns.name)
        .await
        .unwrap();
    let owner = json!([{
        "apiVersion": "v1", "kind": "Namespace", "name": ns.name, "uid": namespace.uid().unwrap(),
    }]);
    let name = format!("{}-gate-reader", ns.name);
    let shipped =
        std::fs::read_to_string(e2e::deploy::repo_root().join("config/rbac/rules-federator.yaml"))
            .unwrap();
    let rules = e2e::identity::yaml_to_json(&shipped)
        .into_iter()
        .find(|o| o["metadata"]["name"] == "zone-aware-rules-federator-reader")
        .expect("the reader ClusterRole in config/rbac/rules-federator.yaml")["rules"]
        .clone();
    let role = json!({"metadata": {"name": name, "ownerReferences": owner}, "rules": rules});
    fixture::create(&Api::<ClusterRole>::all(ns.client.clone()), role).await;
    let binding = json!({
        "metadata": {"name": name, "ownerReferences": owner},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": GATE_ACCOUNT, "namespace": ns.name}],
    });
    fixture::create(&Api::<ClusterRoleBinding>::all(ns.client.clone()), binding).await;
    let secrets: Api<Secret> = ns.api();
    let secret = json!({
        "metadata": {
            "name": GATE_TOKEN_SECRET,
            "annotations": {"kubernetes.io/service-account.name": GATE_ACCOUNT},
        },
        "type": "kubernetes.io/service-account-token",
    });
    fixture::create(&secrets, secret).await;
    wait_for(
        "the token controller to fill the Secret",
        TIMEOUT,
        || async {
            let secret = secrets
                .get(GATE_TOKEN_SECRET)
                .await
                .map_err(|e| e.to_string())?;
            secret
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|t| String::from_utf8(t.0.clone()).unwrap())
                .ok_or_else(|| "no token yet".to_string())
        },
    )
    .await
}
