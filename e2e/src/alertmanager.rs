//! A real Alertmanager (0.35, from e2e/cluster/build.sh) on a real node of the local zonal cluster,
//! and the webhook receiver it notifies: an HTTP server in the test process, bound to the host's
//! address that the real nodes' pods reach.
//!
//! How a pod reaches the host: each real node's pods sit on the bridge `zae-<zone>`
//! (10.245.<n>.0/24, see e2e/cluster/real-nodes.sh) whose address 10.245.<n>.1 is their default
//! gateway, and that gateway is this host. A packet to any of the host's own addresses is
//! therefore delivered locally, without forwarding or NAT. The receiver binds to the real nodes'
//! InternalIP, which is the host's global address (the kubelet's `--node-ip`), so pods of every
//! zone reach it and nothing outside the host is involved.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::real::RealNodes;
use crate::{TestNamespace, wait_for};

/// The name of the Alertmanager Deployment, its Service and its pods' `app` label.
pub const NAME: &str = "alertmanager";
/// The Alertmanager port, named `web` on the Service (prometheus-operator's convention).
pub const PORT: u16 = 9093;
/// The Service port's name.
pub const PORT_NAME: &str = "web";

/// How the deployed Alertmanager routes and notifies.
pub struct AlertmanagerConfig<'a> {
    /// The zone of the real node it runs on.
    pub zone: &'a str,
    /// `route.group_by`.
    pub group_by: &'a [&'a str],
    /// Where the webhook receiver listens (`http://host:port/path`).
    pub webhook_url: &'a str,
}

/// The Alertmanager Deployment: one pod of `labels` on the real node of `zone`, its configuration
/// from the Secret `alertmanager`, no gossip.
fn deployment_manifest(real: &RealNodes, zone: &str, labels: &Value) -> Value {
    json!({
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "nodeSelector": {"type": "real", crate::workload::ZONE_LABEL: zone},
                    "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": "alertmanager",
                        "image": real.alertmanager_image,
                        "imagePullPolicy": "Never",
                        "args": [
                            "--config.file=/etc/alertmanager/alertmanager.yml",
                            "--storage.path=/alertmanager",
                            // No gossip: one instance, no cluster port.
                            "--cluster.listen-address=",
                            format!("--web.listen-address=:{PORT}"),
                            "--log.level=debug",
                        ],
                        "ports": [{"name": PORT_NAME, "containerPort": PORT}],
                        "readinessProbe": {
                            "httpGet": {"path": "/-/ready", "port": PORT_NAME},
                            "periodSeconds": 1,
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/alertmanager", "readOnly": true},
                            {"name": "data", "mountPath": "/alertmanager"},
                        ],
                    }],
                    "volumes": [
                        {"name": "config", "secret": {"secretName": NAME}},
                        {"name": "data", "emptyDir": {}},
                    ],
                },
            },
        },
    })
}

/// A running Alertmanager in a test namespace.
pub struct Alertmanager {
    pub pod_name: String,
    pub pod_ip: String,
}

impl Alertmanager {
    /// Deploys one Alertmanager pod on the real node of `config.zone` (a Deployment, its
    /// configuration in a Secret), the headless Service `alertmanager` with the port `web` (its
    /// endpoints are what Prometheus discovers), and waits until the pod is Ready.
    pub async fn deploy(
        ns: &TestNamespace,
        real: &RealNodes,
        config: &AlertmanagerConfig<'_>,
    ) -> Alertmanager {
        let yaml = alertmanager_yaml(config.group_by, config.webhook_url);
        let secrets: Api<Secret> = ns.api();
        let secret = json!({
            "metadata": {"name": NAME},
            "stringData": {"alertmanager.yml": yaml},
        });
        secrets
            .create(&PostParams::default(), &from(secret))
            .await
            .expect("create the Alertmanager config Secret");

        let labels = json!({"app": NAME});
        let deployment = deployment_manifest(real, config.zone, &labels);
        let deployments: Api<Deployment> = ns.api();
        deployments
            .create(&PostParams::default(), &from(deployment))
            .await
            .expect("create the Alertmanager Deployment");

        let service = json!({
            "metadata": {"name": NAME, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME}],
            },
        });
        let services: Api<Service> = ns.api();
        services
            .create(&PostParams::default(), &from(service))
            .await
            .expect("create the Alertmanager Service");

        let pods: Api<Pod> = ns.api();
        let pod =
            crate::pods::wait_available(&pods, &format!("app={NAME}"), 1, Duration::from_secs(120))
                .await
                .remove(0);
        Alertmanager {
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .expect("the Alertmanager pod's IP"),
        }
    }

    /// A [`WebhookReceiver`] on this host, where the pods reach it, and an Alertmanager
    /// ([`Alertmanager::deploy`]) in the real node of `zone` grouping by `group_by` and notifying
    /// that receiver.
    pub async fn deploy_with_receiver(
        ns: &TestNamespace,
        real: &RealNodes,
        zone: &str,
        group_by: &[&str],
    ) -> (WebhookReceiver, Alertmanager) {
        let receiver = WebhookReceiver::start(host_address(&ns.client).await).await;
        let config = AlertmanagerConfig {
            zone,
            group_by,
            webhook_url: &receiver.url(),
        };
        let alertmanager = Alertmanager::deploy(ns, real, &config).await;
        (receiver, alertmanager)
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::new(self.pod_ip.parse().expect("the pod IP"), PORT)
    }

    /// `GET /api/v2/alerts` (active, silenced, inhibited and unprocessed alerts alike).
    pub async fn alerts(&self) -> Result<Vec<ApiAlert>, String> {
        let (code, body) = crate::process::http_get_from(self.address(), "/api/v2/alerts").await?;
        if code != 200 {
            return Err(format!("HTTP {code}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }

    /// `POST /api/v2/alerts` of `alerts` (a JSON array of `{labels, annotations, startsAt,
    /// endsAt}`), as a Prometheus would send them.
    pub async fn post_alerts(&self, alerts: &Value) -> Result<(), String> {
        let body = alerts.to_string();
        let (code, answer) =
            crate::process::http_send(self.address(), "POST", "/api/v2/alerts", None, Some(&body))
                .await?;
        match code {
            200 => Ok(()),
            _ => Err(format!("HTTP {code}: {answer}")),
        }
    }

    /// Alertmanager's own `/metrics`, as text.
    pub async fn metrics(&self) -> Result<String, String> {
        let (code, body) = crate::process::http_get_from(self.address(), "/metrics").await?;
        if code != 200 {
            return Err(format!("HTTP {code}"));
        }
        Ok(body)
    }
}

/// The Alertmanager configuration: one route to the webhook, resolved alerts notified too, and
/// short waits so a test sees notifications within seconds.
pub fn alertmanager_yaml(group_by: &[&str], webhook_url: &str) -> String {
    let config = json!({
        "route": {
            "receiver": "webhook",
            "group_by": group_by,
            "group_wait": "1s",
            "group_interval": "2s",
            "repeat_interval": "1h",
        },
        "receivers": [{
            "name": "webhook",
            "webhook_configs": [{"url": webhook_url, "send_resolved": true}],
        }],
    });
    serde_norway::to_string(&config).expect("Alertmanager config YAML")
}

fn from<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

/// An alert as `/api/v2/alerts` lists it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiAlert {
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub starts_at: String,
    pub ends_at: String,
    pub fingerprint: String,
    /// `{state: active|suppressed|unprocessed, ...}`.
    pub status: Value,
}

/// One alert of a webhook notification.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAlert {
    /// firing or resolved.
    pub status: String,
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub starts_at: String,
    pub ends_at: String,
    #[serde(default)]
    pub fingerprint: String,
}

/// A webhook notification: Alertmanager's webhook payload (version 4), with when it arrived.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// firing (at least one alert of the group fires) or resolved.
    pub status: String,
    pub receiver: String,
    pub alerts: Vec<WebhookAlert>,
    #[serde(default)]
    pub group_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub common_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub common_annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub group_key: String,
    /// Arrival at the receiver, relative to its start.
    #[serde(skip, default)]
    pub received_after: Duration,
}

type Received = Arc<Mutex<Vec<Notification>>>;

/// An HTTP server in the test process recording every notification POSTed to it, bound to the
/// host address the real nodes' pods reach. Stopped on drop.
pub struct WebhookReceiver {
    pub addr: SocketAddr,
    received: Received,
    /// Bodies that were not a webhook payload (a failed test names them).
    rejected: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

/// The path the receiver records notifications on.
pub const WEBHOOK_PATH: &str = "/alerts";

/// The host's address as the real nodes know it: the InternalIP of a real node (every real node
/// runs on this host with its global address as `--node-ip`).
pub async fn host_address(client: &Client) -> IpAddr {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes
        .list(&ListParams::default().labels("type=real"))
        .await
        .expect("listing the real nodes")
        .items;
    nodes
        .iter()
        .filter_map(|node| node.status.as_ref()?.addresses.as_ref())
        .flatten()
        .find(|address| address.type_ == "InternalIP")
        .map(|address| address.address.parse().expect("an IP address"))
        .expect("a real node with an InternalIP")
}

impl WebhookReceiver {
    /// Starts the receiver on `host:<free port>`.
    pub async fn start(host: IpAddr) -> WebhookReceiver {
        let received: Received = Arc::default();
        let rejected: Arc<Mutex<Vec<String>>> = Arc::default();
        let started = Instant::now();
        let router = axum::Router::new().route(
            WEBHOOK_PATH,
            axum::routing::post({
                let received = received.clone();
                let rejected = rejected.clone();
                move |body: String| async move {
                    match serde_json::from_str::<Notification>(&body) {
                        Ok(mut notification) => {
                            notification.received_after = started.elapsed();
                            received.lock().unwrap().push(notification);
                            axum::http::StatusCode::OK
                        }
                        Err(error) => {
                            rejected.lock().unwrap().push(format!("{error}: {body}"));
                            axum::http::StatusCode::BAD_REQUEST
                        }
                    }
                }
            }),
        );
        let listener = TcpListener::bind(SocketAddr::new(host, 0))
            .await
            .unwrap_or_else(|e| panic!("bind the webhook receiver to {host}: {e}"));
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        WebhookReceiver {
            addr,
            received,
            rejected,
            task,
        }
    }

    /// The URL Alertmanager's webhook_configs name.
    pub fn url(&self) -> String {
        format!("http://{}{WEBHOOK_PATH}", self.addr)
    }

    /// Every notification received so far, in arrival order.
    pub fn notifications(&self) -> Vec<Notification> {
        self.received.lock().unwrap().clone()
    }

    /// The notifications received so far that `matches` accepts.
    pub fn matching(&self, matches: impl Fn(&Notification) -> bool) -> Vec<Notification> {
        self.notifications()
            .into_iter()
            .filter(|n| matches(n))
            .collect()
    }

    /// Polls until at least `count` received notifications are accepted by `matches` and returns
    /// them; panics after `timeout` with everything received.
    pub async fn wait_for(
        &self,
        what: &str,
        count: usize,
        timeout: Duration,
        matches: impl Fn(&Notification) -> bool,
    ) -> Vec<Notification> {
        wait_for(what, timeout, || async {
            let found = self.matching(&matches);
            if found.len() >= count {
                Ok(found)
            } else {
                Err(self.describe())
            }
        })
        .await
    }

    /// Watches for `window` that no more than `count` received notifications are accepted by
    /// `matches` (checking as often as [`wait_for`] polls, failing at the first excess); returns
    /// them at the end of the window.
    pub async fn assert_at_most_for(
        &self,
        what: &str,
        count: usize,
        window: Duration,
        matches: impl Fn(&Notification) -> bool,
    ) -> Vec<Notification> {
        let deadline = Instant::now() + window;
        loop {
            let found = self.matching(&matches);
            assert!(
                found.len() <= count,
                "{what}: {} notifications, at most {count} expected; received: {}",
                found.len(),
                self.describe()
            );
            if Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(crate::wait::POLL_INTERVAL).await;
        }
    }

    /// A summary of everything received: status, group labels, each alert's status and labels,
    /// arrival time; and any rejected body.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .notifications()
            .iter()
            .map(|n| {
                let alerts: Vec<String> = n
                    .alerts
                    .iter()
                    .map(|a| format!("{} {:?}", a.status, a.labels))
                    .collect();
                format!(
                    "[{:.1}s] {} group {:?}: {}",
                    n.received_after.as_secs_f64(),
                    n.status,
                    n.group_labels,
                    alerts.join("; ")
                )
            })
            .collect();
        lines.extend(
            self.rejected
                .lock()
                .unwrap()
                .iter()
                .map(|body| format!("rejected: {body}")),
        );
        if lines.is_empty() {
            "nothing received".to_string()
        } else {
            lines.join("\n")
        }
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_routes_everything_to_the_webhook_with_resolved_notifications() {
        let yaml = alertmanager_yaml(&["alertname", "shard"], "http://192.0.2.2:1234/alerts");
        let config: Value = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(config["route"]["group_by"], json!(["alertname", "shard"]));
        assert_eq!(config["route"]["group_wait"], "1s");
        assert_eq!(config["route"]["group_interval"], "2s");
        assert_eq!(config["route"]["repeat_interval"], "1h");
        let webhook = &config["receivers"][0]["webhook_configs"][0];
        assert_eq!(webhook["url"], "http://192.0.2.2:1234/alerts");
        assert_eq!(webhook["send_resolved"], true);
    }

    #[test]
    fn a_webhook_payload_parses() {
        let body = r#"{"receiver":"webhook","status":"firing","alerts":[{"status":"firing",
            "labels":{"alertname":"A","shard":"1"},"annotations":{},"startsAt":"2026-01-01T00:00:00Z",
            "endsAt":"0001-01-01T00:00:00Z","generatorURL":"","fingerprint":"f"}],
            "groupLabels":{"alertname":"A"},"commonLabels":{"alertname":"A","shard":"1"},
            "commonAnnotations":{},"externalURL":"","version":"4","groupKey":"{}:{}","truncatedAlerts":0}"#;
        let n: Notification = serde_json::from_str(body).unwrap();
        assert_eq!(n.status, "firing");
        assert_eq!(n.alerts[0].labels["shard"], "1");
        assert_eq!(n.group_labels["alertname"], "A");
    }
}
