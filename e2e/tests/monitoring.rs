//! The controllers monitored by the project's own stack: `make deploy MONITORING=1` of config/local
//! (the controllers as real pods on the real nodes, a PodMonitor per binary, the mixin's
//! PrometheusRule), a ShardedPrometheus of real Prometheus pods (one shard per zone) that selects
//! the monitors and the rules, and the deployed rules-federator in front of its shards. The
//! mixin's rules are rendered by jsonnet with a test setting (`zauPausedTooLongFor: "30s"`) and
//! replace the committed PrometheusRule.
//!
//! - `ZoneAwareWebhookDown` fires through the federator once the zdb-controller Deployment is
//!   scaled to 0 (measured from the moment no zdb pod is left), and resolves when it is back;
//! - `ZoneAwareRolloutPausedTooLong` fires for a ZoneAwareUpdate its CloudWatch alarm pauses.
//!
//! Isolation: every deployed name carries the test's suffix; zdb-controller and zau-controller
//! watch only the test namespace (the webhook selects only it, so a zdb-controller scaled to 0
//! refuses no eviction elsewhere); shard-controller and the federator watch the controllers'
//! namespace, where the monitors, the rule and the ShardedPrometheus are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use e2e::deploy::{DeployedFederator, Overlay, TestDeploy, controllers, reader_token};
use e2e::operator::monitoring_resource;
use e2e::process::http_get_from;
use e2e::proxy::RoundRobinProxy;
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace, pods, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;

#[path = "monitoring/alerts.rs"]
mod alerts;
#[path = "monitoring/render.rs"]
mod render;

use alerts::{rollout_paused_by_its_alarm_raises_paused_too_long, webhook_down_fires_and_resolves};

/// The ShardedPrometheus; the shipped federator discovers this name (`--discover-sprom`).
const SPROM: &str = "prometheus";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The shards' scrape and evaluation interval.
const INTERVAL: Duration = Duration::from_secs(10);
const INTERVAL_SPEC: &str = "10s";
/// The labels of every object of config/monitoring/, which the ShardedPrometheus selects by.
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "zone-aware-controllers");
const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "monitoring");
/// The PrometheusRule of config/monitoring/ (and of the mixin's jsonnet).
const RULE: &str = "zone-aware-controllers";
/// The mixin's settings for this test, as jsonnet.
const MIXIN_CONFIG: &str = r#"{zauPausedTooLongFor: "30s"}"#;
const WEBHOOK_DOWN: &str = "ZoneAwareWebhookDown";
/// The `for` of ZoneAwareWebhookDown (the mixin's default).
const WEBHOOK_DOWN_FOR: Duration = Duration::from_secs(120);
const PAUSED_TOO_LONG: &str = "ZoneAwareRolloutPausedTooLong";
/// The `for` of ZoneAwareRolloutPausedTooLong under [`MIXIN_CONFIG`].
const PAUSED_TOO_LONG_FOR: Duration = Duration::from_secs(30);
const MANAGER: &str = "e2e-monitoring";
const TIMEOUT: Duration = Duration::from_secs(240);
const IMG: &str = "registry.invalid/zone-aware-controllers:e2e";

fn part_of_and_component() -> Value {
    json!({PART_OF.0: PART_OF.1, COMPONENT.0: COMPONENT.1})
}

/// Patches of the test overlay: a container argument of a Deployment, or an environment variable.
fn arg_patch(deployment: &str, arg: &str) -> String {
    add_patch(deployment, "args", arg)
}

fn env_patch(deployment: &str, name: &str, value: &str) -> String {
    add_patch(
        deployment,
        "env",
        &format!(r#"{{name: {name}, value: "{value}"}}"#),
    )
}

/// A patch adding `value` to the list `list` of the first container of the Deployment.
fn add_patch(deployment: &str, list: &str, value: &str) -> String {
    format!(
        r#"- target:
    kind: Deployment
    name: {deployment}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/{list}/-
      value: {value}
"#
    )
}

/// The host's address as the real nodes' pods reach it: a real node's InternalIP (the kubelets
/// run on this host).
async fn host_address(client: &Client) -> IpAddr {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default().labels("type=real"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("a real node");
    node.status
        .and_then(|s| s.addresses)
        .into_iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP")
        .expect("the real node's InternalIP")
        .address
        .parse()
        .unwrap()
}

/// The deployed federator's API, as a reader of the federated rules and alerts.
struct Federator {
    api: DeployedFederator,
    token: String,
}

impl Federator {
    /// The answer's `data`; an answer with warnings (a shard that did not answer) is not one.
    async fn get(&self, path: &str) -> Result<Value, String> {
        let (code, body) = self.api.get(path, Some(&self.token)).await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 || value.get("warnings").is_some() {
            return Err(format!("{code}: {body}"));
        }
        Ok(value["data"].clone())
    }

    /// The instances of alert `name` the federator serves (pending and firing), each with the
    /// shard label.
    async fn alerts(&self, name: &str) -> Result<Vec<Value>, String> {
        let data = self.get("/api/v1/alerts").await?;
        Ok(data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == name)
            .cloned()
            .collect())
    }

    /// Waits until `name` fires, on at least one shard, for an instance with all of `labels`; the
    /// firing instances then.
    async fn wait_firing(&self, name: &str, labels: &Value, timeout: Duration) -> Vec<Value> {
        wait_for(
            &format!("{name} firing at the federator"),
            timeout,
            || async {
                let alerts = self.alerts(name).await?;
                let firing: Vec<Value> = alerts
                    .iter()
                    .filter(|a| a["state"] == "firing" && has_labels(a, labels))
                    .cloned()
                    .collect();
                if firing.is_empty() {
                    Err(format!("{alerts:?}"))
                } else {
                    Ok(firing)
                }
            },
        )
        .await
    }

    /// Waits until no instance of `name` is pending or firing on any shard.
    async fn wait_inactive(&self, name: &str, timeout: Duration) {
        wait_for(&format!("no {name} at the federator"), timeout, || async {
            let alerts = self.alerts(name).await?;
            if alerts.is_empty() {
                Ok(())
            } else {
                Err(format!("{alerts:?}"))
            }
        })
        .await;
    }
}

fn has_labels(alert: &Value, labels: &Value) -> bool {
    labels
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| &alert["labels"][key] == value)
}

/// A shard's Prometheus pod and its API.
struct Shard {
    index: String,
    address: SocketAddr,
}

impl Shard {
    /// The instant vector of `promql` as `(labels, value)`.
    async fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, String> {
        let path = format!(
            "/api/v1/query?query={}",
            e2e::prometheus::url_encode(promql)
        );
        let (code, body) = http_get_from(self.address, &path).await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 {
            return Err(format!("{code}: {body}"));
        }
        Ok(value["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sample| {
                let number = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (sample["metric"].clone(), number)
            })
            .collect())
    }
}

/// Seconds, for the printed figures.
fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn monitoring_mixin_alerts_fire_through_the_federator_webhook_down_and_rollout_paused() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    e2e::operator::install_crds(&cluster).await;
    // The mixin rendered first: without it there is nothing to prove.
    let rule = e2e::mixin::prometheus_rule(MIXIN_CONFIG);
    let groups = e2e::mixin::group_names(&rule);
    assert!(!groups.is_empty(), "the mixin renders no rule group");

    let victim = TestNamespace::create(&cluster, "monitoring").await;
    let client = victim.client.clone();
    let suffix = victim.suffix().to_string();
    // The controllers' namespace, apart from the test namespace (`e2e-monitoring-<suffix>`).
    let namespace = format!("e2e-monitored-{suffix}");

    let proxy = cloudwatch_proxy_for_pods(&cluster, &client).await;
    let cloudwatch_for_pods = format!("http://{}", proxy.addr);
    let patches = overlay_patches(&victim.name, &namespace, &cloudwatch_for_pods);
    let overlay = Overlay::new("config/local", &suffix, &victim.name, &patches);
    let mut deployment = TestDeploy::new(&cluster, overlay, &namespace, real.project_image())
        .with_var("MONITORING", "1");
    deployment.make("deploy");

    let deployed_pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut controller_pods = BTreeMap::new();
    for binary in controllers() {
        let selector = format!("app.kubernetes.io/name={binary}");
        let ready = pods::wait_available(&deployed_pods, &selector, 2, TIMEOUT).await;
        controller_pods.insert(binary, ready);
    }

    mixin_rule_replaces_the_committed_one(&client, &namespace, rule).await;

    let (_discovery, shards) =
        sharded_prometheus_one_shard_per_zone(&cluster, &client, &namespace, &real).await;

    every_shard_scrapes_both_pods_of_every_binary(&shards).await;

    // The federator serves the mixin's groups of every shard.
    let federator_pod = &controller_pods["rules-federator"][0];
    let federator = Federator {
        api: DeployedFederator::of(&client, federator_pod).await,
        token: reader_token(
            &cluster,
            &victim,
            &format!("zone-aware-rules-federator-reader-{suffix}"),
        ),
    };
    federator_serves_the_mixin_groups_of_every_shard(&federator, &shards, &groups).await;

    rollout_paused_by_its_alarm_raises_paused_too_long(&cluster, &victim, &federator).await;

    webhook_down_fires_and_resolves(&cluster, &client, &namespace, &suffix, &shards, &federator)
        .await;

    deployment.undeploy();
    drop(proxy);
}

/// CloudWatch (LocalStack, on the host's 127.0.0.1) for the zau-controller pods, through a
/// proxy on the host's address.
async fn cloudwatch_proxy_for_pods(cluster: &Cluster, client: &Client) -> RoundRobinProxy {
    let localstack: SocketAddr = cluster
        .aws_endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("LocalStack's endpoint is http://<ip>:<port>");
    RoundRobinProxy::start_at(
        SocketAddr::new(host_address(client).await, 0),
        vec![localstack],
    )
    .await
}

/// The test overlay's patches: zau- and zdb-controller watch only the namespace `victim`,
/// zau-controller polls its alarms every 2 s at `cloudwatch`, shard-controller and the federator
/// watch the controllers' `namespace`.
fn overlay_patches(victim: &str, namespace: &str, cloudwatch: &str) -> String {
    let mut patches = String::new();
    for binary in ["zau-controller", "zdb-controller"] {
        patches += &arg_patch(binary, &format!("--watch-namespace={}", victim));
    }
    patches += &arg_patch("zau-controller", "--alarm-poll-interval=2s");
    for (name, value) in [
        ("AWS_ENDPOINT_URL", cloudwatch),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ] {
        patches += &env_patch("zau-controller", name, value);
    }
    patches += &arg_patch(
        "shard-controller",
        &format!("--watch-namespace={namespace}"),
    );
    patches += &arg_patch(
        "rules-federator",
        &format!("--discover-namespace={namespace}"),
    );
    patches
}

/// The mixin's rules with the test's settings, in place of the committed PrometheusRule that
/// `make deploy MONITORING=1` applied (replaced whole, so none of its rules stay).
async fn mixin_rule_replaces_the_committed_one(client: &Client, namespace: &str, mut rule: Value) {
    let rules: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &monitoring_resource("PrometheusRule", "prometheusrules"),
    );
    let committed = rules
        .get(RULE)
        .await
        .expect("make deploy MONITORING=1 applied the committed PrometheusRule");
    rule["metadata"]["namespace"] = json!(namespace);
    rule["metadata"]["resourceVersion"] = json!(committed.resource_version());
    let rule: DynamicObject = serde_json::from_value(rule).unwrap();
    rules
        .replace(RULE, &PostParams::default(), &rule)
        .await
        .expect("replacing the PrometheusRule with the test's rendering");
}

/// The ShardedPrometheus: one shard per zone on the real nodes, selecting the component's
/// PodMonitors and PrometheusRule (namespace selectors unset: its own namespace). Returns its
/// discovery ServiceAccount's binding (deleted when dropped) and its shards.
async fn sharded_prometheus_one_shard_per_zone(
    cluster: &Cluster,
    client: &Client,
    namespace: &str,
    real: &RealNodes,
) -> (e2e::cluster::DeleteOnDrop, Vec<Shard>) {
    let _discovery = e2e::prometheus::discovery_service_account(
        cluster,
        client,
        namespace,
        &format!("{namespace}-prometheus"),
    )
    .await;
    let sproms: Api<ShardedPrometheus> = Api::namespaced(client.clone(), namespace);
    let selector = json!({"matchLabels": part_of_and_component()});
    let generation = e2e::apply::sprom(
        &sproms,
        SPROM,
        MANAGER,
        json!({
            "shards": 3,
            "image": real.prometheus_image,
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
            "shardingStrategy": {"topology": {"values": ZONES}},
            "serviceAccountName": e2e::prometheus::SERVICE_ACCOUNT,
            "scrapeInterval": INTERVAL_SPEC,
            "evaluationInterval": INTERVAL_SPEC,
            "podMonitorSelector": selector,
            "ruleSelector": selector,
        }),
    )
    .await;
    wait_for("3 ready shards", TIMEOUT, || async {
        let status = sproms
            .get(SPROM)
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if status.observed_generation == generation && status.ready_shards == 3 {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    let deployed_pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let shards: Vec<Shard> = pods::list(
        &deployed_pods,
        &format!("app.kubernetes.io/instance={SPROM}"),
    )
    .await
    .iter()
    .map(|pod| Shard {
        index: pod.labels()["zonecontrol.k8s.aws/shard"].clone(),
        address: format!(
            "{}:9090",
            pod.status.as_ref().unwrap().pod_ip.as_ref().unwrap()
        )
        .parse()
        .unwrap(),
    })
    .collect();
    assert_eq!(shards.len(), 3, "one Prometheus pod per shard");
    (_discovery, shards)
}

/// Every shard scrapes both pods of every binary (the PodMonitors' __tmp_disable_sharding),
/// under job="<binary>" (their jobLabel).
async fn every_shard_scrapes_both_pods_of_every_binary(shards: &[Shard]) {
    let want: BTreeMap<String, f64> = controllers().into_iter().map(|b| (b, 2.0)).collect();
    for shard in shards {
        wait_for(
            &format!("shard {} scraping both pods of every binary", shard.index),
            TIMEOUT,
            || async {
                let up: BTreeMap<String, f64> = shard
                    .query("count by (job) (up == 1)")
                    .await?
                    .into_iter()
                    .filter_map(|(labels, n)| Some((labels["job"].as_str()?.to_string(), n)))
                    .collect();
                if up == want {
                    Ok(())
                } else {
                    Err(format!("{up:?}"))
                }
            },
        )
        .await;
    }
}

/// The federator serves the mixin's `groups` of every shard.
async fn federator_serves_the_mixin_groups_of_every_shard(
    federator: &Federator,
    shards: &[Shard],
    groups: &[String],
) {
    let want_groups: BTreeSet<(String, String)> = shards
        .iter()
        .flat_map(|s| groups.iter().map(|g| (s.index.clone(), g.clone())))
        .collect();
    wait_for(
        "the federator serving the mixin's groups of every shard",
        TIMEOUT,
        || async {
            let data = federator.get("/api/v1/rules").await?;
            let served: BTreeSet<(String, String)> = data["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|group| {
                    let name = group["name"].as_str().unwrap_or_default().to_string();
                    group["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(move |r| r["labels"]["shard"].as_str().map(str::to_string))
                        .map(move |shard| (shard, name.clone()))
                })
                .collect();
            let missing: Vec<_> = want_groups.difference(&served).collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing (shard, group): {missing:?}"))
            }
        },
    )
    .await;
}
