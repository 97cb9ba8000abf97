//! prometheus-operator v0.85 as the oracle of the ShardedPrometheus comparison: the real operator
//! runs on the host for the test's namespace, and its Prometheus (the local Prometheus 3.16 image
//! on a real node, with the operator's config reloader) discovers and scrapes what a
//! ServiceMonitor selects and loads what a PrometheusRule holds; monitors and rules outside the
//! Prometheus's selectors are left out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::operator::{Operator, OperatorPrometheus, install_crds};
use e2e::prometheus::Target;
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// The operator's Prometheus pod starts on a real node, its reloader writes the config, and
/// discovery delivers: tens of seconds on a loaded two-core machine.
const TIMEOUT: Duration = Duration::from_secs(180);
const MANAGER: &str = "e2e-oracle";
const TARGETS: usize = 3;

/// Applies a `monitoring.coreos.com/v1` object of `kind` in `ns`.
async fn apply_monitoring(ns: &TestNamespace, kind: &str, plural: &str, object: Value) {
    fixture::apply(ns, "v1", kind, plural, object).await;
}

fn service_monitor(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": "target"}},
            "endpoints": [{"port": "metrics", "interval": "2s"}],
        },
    })
}

fn prometheus_rule(name: &str, labels: Value, group: &str, alert: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"groups": [{
            "name": group,
            "rules": [{
                "alert": alert,
                "expr": "up{job=\"target\"} == 0",
                "for": "1m",
                "labels": {"severity": "warning"},
                "annotations": {"summary": "a metrics target is down"},
            }],
        }]},
    })
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes and prometheus-operator (make e2e)"]
async fn oracle_operator_prometheus_scrapes_a_service_monitor_and_loads_a_prometheus_rule() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let ns = TestNamespace::create(&cluster, "oracle").await;
    install_crds(&cluster).await;
    // Declared after the namespace, so it stops before the namespace is deleted.
    let mut operator = Operator::start(&cluster, &[&ns.name]).await;

    metrics_target_behind_a_service(&ns, &real).await;

    selected_and_decoy_monitors_and_rules(&ns).await;

    let prometheus = OperatorPrometheus::create(
        &cluster,
        &ns,
        "oracle",
        json!({
            "serviceMonitorSelector": {"matchLabels": {"oracle": "yes"}},
            "ruleSelector": {"matchLabels": {"oracle": "yes"}},
        }),
    )
    .await;
    prometheus.wait_ready(TIMEOUT).await;
    assert!(operator.is_running(), "the operator is still running");

    prometheus_runs_the_local_images_on_a_real_node(&prometheus, &ns, &real).await;

    let pod_of_ip = target_pods_by_ip(&ns).await;

    let (pool, all_pods) =
        every_target_pod_scraped_by_the_selected_monitor_only(&prometheus, &ns, &pod_of_ip).await;

    only_the_selected_rule_loaded(&prometheus, &ns).await;

    queried_samples_carry_the_same_labels(&prometheus, &ns, &all_pods).await;

    // The config the operator generated is what Prometheus runs (the pool's job is in both).
    let generated = prometheus.generated_config().await.unwrap();
    let running = prometheus.config_yaml().await.unwrap();
    let job_line = format!("job_name: {pool}");
    assert!(generated.contains(&job_line), "{generated}");
    assert!(running.contains(&job_line), "{running}");
    assert!(!generated.contains("decoy"), "{generated}");
    assert!(operator.is_running(), "the operator is still running");
}

/// The metrics target, one pod per zone on the real nodes, behind a Service.
async fn metrics_target_behind_a_service(ns: &TestNamespace, real: &RealNodes) {
    let deployments: Api<Deployment> = ns.api();
    let target = json!({
        "metadata": {"name": "target"},
        "spec": {
            "replicas": TARGETS,
            "selector": {"matchLabels": {"app": "target"}},
            "template": real.metrics_target_template("target"),
        },
    });
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(target).unwrap(),
        )
        .await
        .unwrap();
    let services: Api<Service> = ns.api();
    let service = json!({
        "metadata": {"name": "target", "labels": {"app": "target"}},
        "spec": {
            "selector": {"app": "target"},
            "ports": [{"name": "metrics", "port": 8080, "targetPort": "metrics"}],
        },
    });
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(service).unwrap(),
        )
        .await
        .unwrap();
}

/// Selected by the Prometheus: the monitor and the rule labelled oracle=yes. The decoys select
/// the same Service and hold a rule too, but are not labelled so.
async fn selected_and_decoy_monitors_and_rules(ns: &TestNamespace) {
    let selected = json!({"oracle": "yes"});
    let decoy = json!({"oracle": "no"});
    apply_monitoring(
        ns,
        "ServiceMonitor",
        "servicemonitors",
        service_monitor("target", selected.clone()),
    )
    .await;
    apply_monitoring(
        ns,
        "ServiceMonitor",
        "servicemonitors",
        service_monitor("decoy", decoy.clone()),
    )
    .await;
    apply_monitoring(
        ns,
        "PrometheusRule",
        "prometheusrules",
        prometheus_rule("target-rules", selected, "oracle", "TargetDown"),
    )
    .await;
    apply_monitoring(
        ns,
        "PrometheusRule",
        "prometheusrules",
        prometheus_rule("decoy-rules", decoy, "decoy", "DecoyDown"),
    )
    .await;
}

/// The operator's Prometheus pod runs on a real node, with the local images.
async fn prometheus_runs_the_local_images_on_a_real_node(
    prometheus: &OperatorPrometheus,
    ns: &TestNamespace,
    real: &RealNodes,
) {
    let pod = prometheus.pod().await.unwrap();
    let real_nodes = e2e::real::nodes(&ns.client).await;
    let node = e2e::pods::node_of(&pod).unwrap();
    assert!(real_nodes.contains_key(node), "on {node}, not a real node");
    let images: BTreeMap<String, String> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    assert_eq!(images["prometheus"], real.prometheus_image, "{images:?}");
    let reloader = e2e::operator::OperatorBuild::get().config_reloader_image;
    assert_eq!(images["config-reloader"], reloader, "{images:?}");
}

/// The target pods, by IP.
async fn target_pods_by_ip(ns: &TestNamespace) -> BTreeMap<String, String> {
    let pods: Api<Pod> = ns.api();
    let target_pods = e2e::pods::wait_available(&pods, "app=target", TARGETS, TIMEOUT).await;
    let pod_of_ip: BTreeMap<String, String> = target_pods
        .iter()
        .map(|p| {
            (
                p.status.as_ref().unwrap().pod_ip.clone().unwrap(),
                p.name_any(),
            )
        })
        .collect();
    assert_eq!(pod_of_ip.len(), TARGETS, "one IP per pod");
    pod_of_ip
}

/// Every target pod is an active target of the ServiceMonitor's pool, scraped up, and only that
/// pool is. Returns the pool and the target pods' names, sorted.
async fn every_target_pod_scraped_by_the_selected_monitor_only(
    prometheus: &OperatorPrometheus,
    ns: &TestNamespace,
    pod_of_ip: &BTreeMap<String, String>,
) -> (String, Vec<String>) {
    let pool = format!("serviceMonitor/{}/target/0", ns.name);
    let targets: Vec<Target> = wait_for(
        &format!("{TARGETS} targets of {pool} up"),
        TIMEOUT,
        || async {
            let targets = prometheus.targets().await?;
            let of_pool: Vec<Target> = targets
                .iter()
                .filter(|t| t.scrape_pool == pool)
                .cloned()
                .collect();
            if of_pool.len() == TARGETS && of_pool.iter().all(|t| t.health == "up") {
                Ok(targets)
            } else {
                let seen: Vec<(&str, &str, &str)> = targets
                    .iter()
                    .map(|t| {
                        (
                            t.scrape_pool.as_str(),
                            t.scrape_url.as_str(),
                            t.health.as_str(),
                        )
                    })
                    .collect();
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
    // Only that pool: the decoy monitor is not selected.
    let pools: Vec<&str> = targets.iter().map(|t| t.scrape_pool.as_str()).collect();
    assert!(pools.iter().all(|p| *p == pool), "pools: {pools:?}");
    let mut scraped_pods = Vec::new();
    for target in &targets {
        let labels = &target.labels;
        let instance = &labels["instance"];
        let ip = instance
            .strip_suffix(":8080")
            .unwrap_or_else(|| panic!("instance {instance} is not a pod IP on port 8080"));
        let pod = pod_of_ip
            .get(ip)
            .unwrap_or_else(|| panic!("{instance} is no target pod's: {pod_of_ip:?}"));
        assert_eq!(labels["namespace"], ns.name, "{labels:?}");
        assert_eq!(labels["service"], "target", "{labels:?}");
        assert_eq!(&labels["pod"], pod, "{labels:?}");
        assert_eq!(labels["endpoint"], "metrics", "{labels:?}");
        assert_eq!(labels["job"], "target", "{labels:?}");
        assert_eq!(labels["container"], "target", "{labels:?}");
        assert_eq!(
            target.scrape_url,
            format!("http://{ip}:8080/metrics"),
            "{target:?}"
        );
        scraped_pods.push(pod.clone());
    }
    scraped_pods.sort();
    let mut all_pods: Vec<String> = pod_of_ip.values().cloned().collect();
    all_pods.sort();
    assert_eq!(scraped_pods, all_pods, "every target pod scraped once");
    (pool, all_pods)
}

/// The selected rule's group is loaded, the decoy's is not.
async fn only_the_selected_rule_loaded(prometheus: &OperatorPrometheus, ns: &TestNamespace) {
    let groups = wait_for("the rule group oracle loaded", TIMEOUT, || async {
        let groups = prometheus.rule_groups().await?;
        let loaded = groups
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == "oracle"));
        if loaded {
            Ok(groups)
        } else {
            Err(groups.to_string())
        }
    })
    .await;
    let groups = groups.as_array().unwrap();
    assert_eq!(
        groups.len(),
        1,
        "only the selected rule's group: {groups:?}"
    );
    let group = &groups[0];
    let file = group["file"].as_str().unwrap();
    assert!(
        file.contains(&format!("{}-target-rules", ns.name)),
        "the group's file {file} is the PrometheusRule's"
    );
    let rules = group["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["type"], "alerting");
    assert_eq!(rules[0]["name"], "TargetDown");
    assert_eq!(rules[0]["query"], "up{job=\"target\"} == 0");
    assert_eq!(rules[0]["duration"], 60);
    assert_eq!(rules[0]["labels"]["severity"], "warning");
}

/// The query API: the scraped samples carry the same labels.
async fn queried_samples_carry_the_same_labels(
    prometheus: &OperatorPrometheus,
    ns: &TestNamespace,
    all_pods: &[String],
) {
    let up = wait_for("up of the targets in the TSDB", TIMEOUT, || async {
        let data = prometheus
            .query(&format!(
                "up{{namespace=\"{}\", service=\"target\"}} == 1",
                ns.name
            ))
            .await?;
        match data["result"].as_array() {
            Some(result) if result.len() == TARGETS => Ok(result.clone()),
            _ => Err(data.to_string()),
        }
    })
    .await;
    let mut queried_pods: Vec<String> = up
        .iter()
        .map(|series| series["metric"]["pod"].as_str().unwrap().to_string())
        .collect();
    queried_pods.sort();
    assert_eq!(queried_pods, all_pods);
}

#[path = "oracle/fixture.rs"]
mod fixture;

/// The ShardedPrometheus of the comparison.
const SPROM: &str = "zoned";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// A target as both sides report it: its pool and its labels after relabelling.
type TargetKey = (String, BTreeMap<String, String>);

/// The `data` of a Prometheus API answer from the pod at `ip`.
async fn pod_api(ip: &str, path: &str) -> Result<Value, String> {
    let address = format!("{ip}:9090").parse().map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, path).await?;
    if code != 200 {
        return Err(format!("{path}: HTTP {code}: {body}"));
    }
    let body: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    Ok(body["data"].clone())
}

fn active_targets(data: &Value) -> Result<Vec<Target>, String> {
    serde_json::from_value(data["activeTargets"].clone()).map_err(|e| e.to_string())
}

/// Our shards' pods: shard index → (pod IP, zone of its node).
async fn shard_pods(
    ns: &TestNamespace,
    zones: &BTreeMap<String, String>,
) -> Result<BTreeMap<u32, (String, String)>, String> {
    let pods: Api<Pod> = ns.api();
    let list = pods
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("app.kubernetes.io/instance={SPROM}")),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut shards = BTreeMap::new();
    for pod in list.items {
        if !e2e::pods::is_ready(&pod) {
            return Err(format!("{} is not ready", pod.name_any()));
        }
        let shard: u32 = pod.labels()["zonecontrol.k8s.aws/shard"]
            .parse()
            .map_err(|e| format!("{e}"))?;
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .ok_or("no IP")?;
        let node = e2e::pods::node_of(&pod).ok_or("not scheduled")?;
        shards.insert(shard, (ip, zones[node].clone()));
    }
    Ok(shards)
}

/// The zone of every node, real and kwok.
async fn node_zones(client: &kube::Client) -> BTreeMap<String, String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|node| {
            let zone = node
                .labels()
                .get("topology.kubernetes.io/zone")
                .cloned()
                .unwrap_or_default();
            (node.name_any(), zone)
        })
        .collect()
}

/// Every active target of our shards, with the shard that has it.
async fn shard_targets(
    shards: &BTreeMap<u32, (String, String)>,
) -> Result<Vec<(u32, Target)>, String> {
    let mut all = Vec::new();
    for (shard, (ip, _)) in shards {
        let data = pod_api(ip, "/api/v1/targets?state=active").await?;
        all.extend(active_targets(&data)?.into_iter().map(|t| (*shard, t)));
    }
    Ok(all)
}

fn keys<'a>(targets: impl Iterator<Item = &'a Target>) -> Vec<TargetKey> {
    let mut keys: Vec<TargetKey> = targets
        .map(|t| (t.scrape_pool.clone(), t.labels.clone()))
        .collect();
    keys.sort();
    keys
}

/// The scrape pools the fixture's selected monitors make, and how many targets each has.
fn expected_pools(a: &str, b: &str) -> BTreeMap<String, usize> {
    BTreeMap::from([
        (format!("serviceMonitor/{a}/web/0"), 3),
        (format!("serviceMonitor/{a}/web-honor/0"), 3),
        (format!("serviceMonitor/{a}/secure/0"), 1),
        (format!("serviceMonitor/{a}/any-namespace/0"), 3),
        (format!("serviceMonitor/{a}/match-names/0"), 3),
        (format!("serviceMonitor/{a}/kwok/0"), 3),
        (format!("serviceMonitor/{b}/api/0"), 3),
        (format!("podMonitor/{a}/web-pods/0"), 3),
        (format!("podMonitor/{a}/kwok-pods/0"), 3),
        (format!("podMonitor/{b}/api-pods/0"), 3),
        (format!("scrapeConfig/{a}/static"), 1),
        (format!("scrapeConfig/{a}/slices"), 3),
        (format!("scrapeConfig/{b}/pods"), 3),
    ])
}

fn pool_counts(keys: &[TargetKey]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (pool, _) in keys {
        *counts.entry(pool.clone()).or_insert(0) += 1;
    }
    counts
}

/// Waits until the union of our shards' active targets equals the operator's, exactly, and
/// every expected pool is there in full; then checks that each target is on exactly one shard,
/// of its own zone. Returns the shards.
async fn compare_targets(
    prometheus: &OperatorPrometheus,
    fx: &fixture::Fixture,
    zones: &BTreeMap<String, String>,
    shards: u32,
) -> BTreeMap<u32, (String, String)> {
    let expected = expected_pools(&fx.a.name, &fx.b.name);
    let (pods, ours) = wait_for(
        &format!("{shards} shards' targets equal to the operator's"),
        Duration::from_secs(300),
        || async {
            let theirs = keys(prometheus.targets().await?.iter());
            if pool_counts(&theirs) != expected {
                return Err(format!("operator pools {:?}", pool_counts(&theirs)));
            }
            let pods = shard_pods(&fx.a, zones).await?;
            if pods.len() != shards as usize {
                return Err(format!("{} shard pods", pods.len()));
            }
            let ours = shard_targets(&pods).await?;
            let our_keys = keys(ours.iter().map(|(_, t)| t));
            if our_keys != theirs {
                let missing: Vec<&TargetKey> =
                    theirs.iter().filter(|k| !our_keys.contains(k)).collect();
                let extra: Vec<&TargetKey> =
                    our_keys.iter().filter(|k| !theirs.contains(k)).collect();
                return Err(format!("missing {missing:#?}\nextra {extra:#?}"));
            }
            Ok((pods, ours))
        },
    )
    .await;
    // Each target on one shard (the multisets are equal and the operator has each once), and a
    // target with a pod on that pod's zone's shard.
    let mut zoned = 0;
    for (shard, target) in &ours {
        let (Some(pod), Some(namespace)) =
            (target.labels.get("pod"), target.labels.get("namespace"))
        else {
            continue;
        };
        let pod = Api::<Pod>::namespaced(fx.a.client.clone(), namespace)
            .get(pod)
            .await
            .unwrap();
        let node = e2e::pods::node_of(&pod).unwrap();
        assert_eq!(
            zones[node], pods[shard].1,
            "{} of {} (zone {}) is scraped by shard {shard} of {}",
            target.labels["pod"], target.scrape_pool, zones[node], pods[shard].1
        );
        zoned += 1;
    }
    assert!(zoned >= 30, "only {zoned} targets with a pod were checked");
    pods
}

/// The rule groups a Prometheus loaded: group name → its rules (name, type, query).
fn loaded_rules(groups: &Value) -> BTreeMap<String, Vec<(String, String, String)>> {
    groups
        .as_array()
        .into_iter()
        .flatten()
        .map(|group| {
            let rules = group["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|rule| {
                    let text = |key: &str| rule[key].as_str().unwrap_or_default().to_string();
                    (text("name"), text("type"), text("query"))
                })
                .collect();
            (
                group["name"].as_str().unwrap_or_default().to_string(),
                rules,
            )
        })
        .collect()
}

/// The label sets of an instant vector's series.
fn series(result: &Value) -> Vec<BTreeMap<String, String>> {
    let mut series: Vec<BTreeMap<String, String>> = result["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| serde_json::from_value(s["metric"].clone()).unwrap_or_default())
        .collect();
    series.sort();
    series
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes and prometheus-operator (make e2e)"]
async fn oracle_sharded_prometheus_matches_the_operator_target_for_target() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    install_crds(&cluster).await;
    let fx = fixture::Fixture::create(&cluster).await;
    let _operator = Operator::start(&cluster, &[&fx.a.name, &fx.b.name]).await;
    let prometheus = OperatorPrometheus::create(&cluster, &fx.a, "oracle", fx.selectors()).await;

    namespace_b_shared_with_a(&fx).await;

    // Our controller, over the whole cluster (the monitors are in two namespaces): the suite is
    // one of `make e2e`'s exclusive ones, or this controller would act on the other suites'
    // ShardedPrometheuses beside their own controllers.
    let port = e2e::localstack::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _controller = e2e::process::ControllerProcess::start(
        "shard-controller",
        &[
            "--leader-elect=false",
            "--lease-namespace",
            &fx.a.name,
            "--listen-address",
            &listen,
        ],
        &[],
    );
    let sproms: Api<zone_api::ShardedPrometheus> = fx.a.api();
    let generation = apply_sprom(&sproms, &fx, &real, 3).await;
    wait_ready_shards(&sproms, 3, generation).await;
    prometheus.wait_ready(TIMEOUT).await;
    let zones = node_zones(&fx.a.client).await;

    // 1. Target for target, over 3 shards.
    let shards = compare_targets(&prometheus, &fx, &zones, 3).await;

    // 2. The same rules load, the invalid object is refused by both and reported by us.
    same_rules_loaded_and_the_invalid_object_reported(&prometheus, &fx, &sproms, &shards).await;

    // 3. A series from the authenticated HTTPS target has the same labels on both sides.
    https_series_labelled_the_same(&prometheus, &fx, &shards).await;

    // 4. Four shards: still target for target.
    let generation = apply_sprom(&sproms, &fx, &real, 4).await;
    wait_ready_shards(&sproms, 4, generation).await;
    let shards = compare_targets(&prometheus, &fx, &zones, 4).await;

    // 5. A monitor change reaches the running shards: no restart, no rollout.
    monitor_change_reaches_the_running_shards(&prometheus, &fx, &zones, &shards).await;

    // 6. No fixture secret in any ConfigMap of the cluster, nor in the ShardedPrometheus.
    no_fixture_secret_in_config_maps_or_the_sprom(&fx, &sproms).await;

    // 7. A referenced Secret deleted: reported, and the last good configuration keeps running.
    deleted_secret_reported_and_the_last_good_config_kept(&fx, &sproms, &shards).await;
}

/// Namespace b lets a's ShardedPrometheus use its monitors, rules and their Secrets (objects
/// of another namespace are used only when the shards' ServiceAccount may get them).
async fn namespace_b_shared_with_a(fx: &fixture::Fixture) {
    let shared = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "prometheus-shared-with-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "zone-aware-prometheus-shared"},
        "subjects": [{"kind": "ServiceAccount", "name": e2e::operator::SERVICE_ACCOUNT,
                      "namespace": fx.a.name}],
    });
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(fx.b.client.clone(), &fx.b.name)
        .patch(
            "prometheus-shared-with-a",
            &kube::api::PatchParams::apply(MANAGER).force(),
            &kube::api::Patch::Apply(&shared),
        )
        .await
        .unwrap();
}

/// Applies the ShardedPrometheus of the comparison, with `shards` shards of one replica on the
/// real nodes; returns the generation applied.
async fn apply_sprom(
    sproms: &Api<zone_api::ShardedPrometheus>,
    fx: &fixture::Fixture,
    real: &RealNodes,
    shards: u32,
) -> i64 {
    let mut spec = fx.selectors();
    for (key, value) in [
        ("shards", json!(shards)),
        ("replicas", json!(1)),
        ("image", json!(real.prometheus_image)),
        ("serviceAccountName", json!(e2e::operator::SERVICE_ACCOUNT)),
        ("nodeSelector", json!({"type": "real"})),
        (
            "tolerations",
            json!([{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}]),
        ),
        ("shardingStrategy", json!({"topology": {"values": ZONES}})),
    ] {
        spec[key] = value;
    }
    e2e::apply::sprom(sproms, SPROM, MANAGER, spec).await
}

/// Waits until the ShardedPrometheus observed `generation` and has `shards` ready shards.
async fn wait_ready_shards(
    sproms: &Api<zone_api::ShardedPrometheus>,
    shards: i32,
    generation: i64,
) -> zone_api::ShardedPrometheus {
    wait_for(
        &format!("{shards} ready shards"),
        Duration::from_secs(300),
        || async {
            let sprom = sproms.get(SPROM).await.map_err(|e| e.to_string())?;
            let status = sprom.status.clone().unwrap_or_default();
            if status.observed_generation == generation && status.ready_shards == shards {
                Ok(sprom)
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await
}

/// The same rules load on every shard as at the operator's Prometheus; the invalid object is
/// refused by both and reported by us.
async fn same_rules_loaded_and_the_invalid_object_reported(
    prometheus: &OperatorPrometheus,
    fx: &fixture::Fixture,
    sproms: &Api<zone_api::ShardedPrometheus>,
    shards: &BTreeMap<u32, (String, String)>,
) {
    let theirs = wait_for("the operator's rule groups", TIMEOUT, || async {
        let groups = loaded_rules(&prometheus.rule_groups().await?);
        (groups.len() == 2)
            .then_some(groups.clone())
            .ok_or(format!("{groups:?}"))
    })
    .await;
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ["oracle-a", "oracle-b"],
        "the decoy and the invalid group are not loaded"
    );
    for (shard, (ip, _)) in shards {
        wait_for(&format!("shard {shard}'s rules"), TIMEOUT, || async {
            let ours = loaded_rules(&pod_api(ip, "/api/v1/rules").await?["groups"]);
            (ours == theirs).then_some(()).ok_or(format!("{ours:?}"))
        })
        .await;
    }
    let sprom = sproms.get(SPROM).await.unwrap();
    let status = sprom.status.clone().unwrap();
    let accepted = status
        .conditions
        .iter()
        .find(|c| c.type_ == "MonitoringObjectsAccepted")
        .unwrap();
    assert_eq!(
        (accepted.status.as_str(), accepted.reason.as_str()),
        ("False", "ObjectsRejected")
    );
    assert!(
        accepted
            .message
            .contains(&format!("PrometheusRule {}/rules-bad", fx.a.name))
            && accepted.message.contains("oracle-bad"),
        "{}",
        accepted.message
    );
    assert_eq!(status.shard_statuses[0].monitors, 13, "{status:?}");
    assert_eq!(status.shard_statuses[0].rule_groups, 2);
    assert_eq!(status.shard_statuses[0].rejected_objects, 1);
}

/// A series from the authenticated HTTPS target has the same labels on both sides.
async fn https_series_labelled_the_same(
    prometheus: &OperatorPrometheus,
    fx: &fixture::Fixture,
    shards: &BTreeMap<u32, (String, String)>,
) {
    let query = format!(
        "/api/v1/query?query=prometheus_build_info%7Bnamespace%3D%22{}%22%2Cservice%3D%22secure%22%7D",
        fx.a.name
    );
    let theirs = wait_for(
        "the HTTPS target's series at the operator",
        TIMEOUT,
        || async {
            let found = series(&prometheus.api(&query).await?);
            (!found.is_empty())
                .then_some(found.clone())
                .ok_or("none yet".to_string())
        },
    )
    .await;
    let ours = wait_for(
        "the HTTPS target's series on our shards",
        TIMEOUT,
        || async {
            let mut found = Vec::new();
            for (ip, _) in shards.values() {
                found.extend(series(&pod_api(ip, &query).await?));
            }
            found.sort();
            (found == theirs)
                .then_some(found.clone())
                .ok_or(format!("{found:?}"))
        },
    )
    .await;
    assert_eq!(ours.len(), 1, "{ours:?}");
}

/// A monitor change reaches the running shards: no restart, no rollout.
async fn monitor_change_reaches_the_running_shards(
    prometheus: &OperatorPrometheus,
    fx: &fixture::Fixture,
    zones: &BTreeMap<String, String>,
    shards: &BTreeMap<u32, (String, String)>,
) {
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = fx.a.api();
    let pods: Api<Pod> = fx.a.api();
    let before = pods
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("app.kubernetes.io/instance={SPROM}")),
        )
        .await
        .unwrap()
        .items;
    let set_generations: Vec<Option<i64>> = futures::future::join_all((0..4).map(|i| {
        let sets = sets.clone();
        async move {
            sets.get(&format!("{SPROM}-shard-{i}"))
                .await
                .unwrap()
                .metadata
                .generation
        }
    }))
    .await;
    fixture::apply(&fx.a, "v1", "ServiceMonitor", "servicemonitors", json!({
        "metadata": {"name": "web", "labels": {"oracle": "yes"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "targetLabels": ["team"],
            "podTargetLabels": ["tier"],
            "endpoints": [{
                "port": "metrics", "interval": "5s",
                "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
                    {"targetLabel": "changed", "replacement": "yes"},
                ],
                "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}],
            }],
        },
    }))
    .await;
    let pool = format!("serviceMonitor/{}/web/0", fx.a.name);
    wait_for(
        "the changed monitor in the running shards",
        Duration::from_secs(240),
        || async {
            let ours = shard_targets(shards).await?;
            let changed = ours
                .iter()
                .filter(|(_, t)| {
                    t.scrape_pool == pool
                        && t.labels.get("changed").map(String::as_str) == Some("yes")
                })
                .count();
            (changed == 3)
                .then_some(())
                .ok_or(format!("{changed} of 3 targets changed"))
        },
    )
    .await;
    compare_targets(prometheus, fx, zones, 4).await;
    for pod in &before {
        e2e::pods::assert_unchanged_and_not_restarted(&pods, pod).await;
    }
    for (i, before) in set_generations.iter().enumerate() {
        let after = sets
            .get(&format!("{SPROM}-shard-{i}"))
            .await
            .unwrap()
            .metadata
            .generation;
        assert_eq!(&after, before, "shard {i}'s StatefulSet rolled");
    }
}

/// No fixture secret in any ConfigMap of the cluster, nor in the ShardedPrometheus.
async fn no_fixture_secret_in_config_maps_or_the_sprom(
    fx: &fixture::Fixture,
    sproms: &Api<zone_api::ShardedPrometheus>,
) {
    let config_maps: Api<ConfigMap> = Api::all(fx.a.client.clone());
    let all = serde_json::to_string(&config_maps.list(&Default::default()).await.unwrap()).unwrap();
    let sprom_text = serde_json::to_string(&sproms.get(SPROM).await.unwrap()).unwrap();
    for secret in fx.secret_values() {
        assert!(!all.contains(&secret), "a ConfigMap holds a fixture secret");
        assert!(
            !sprom_text.contains(&secret),
            "the ShardedPrometheus holds a fixture secret"
        );
    }
}

/// A referenced Secret deleted: reported, and the last good configuration keeps running.
async fn deleted_secret_reported_and_the_last_good_config_kept(
    fx: &fixture::Fixture,
    sproms: &Api<zone_api::ShardedPrometheus>,
    shards: &BTreeMap<u32, (String, String)>,
) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = fx.a.api();
    secrets
        .delete("secure-auth", &Default::default())
        .await
        .unwrap();
    let monitor = format!("ServiceMonitor {}/secure", fx.a.name);
    wait_for("the deleted Secret reported", TIMEOUT, || async {
        let sprom = sproms.get(SPROM).await.map_err(|e| e.to_string())?;
        let message = sprom
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "MonitoringObjectsAccepted")
            .map(|c| c.message)
            .unwrap_or_default();
        let reported = message.contains(&monitor)
            && message.contains("secure-auth")
            && message.contains("last good jobs stay");
        reported.then_some(()).ok_or(message)
    })
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> = fx.a.api();
    let notes: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ObjectsRejected"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&monitor) && n.contains("secure-auth")),
        "{notes:?}"
    );
    let secure = format!("serviceMonitor/{}/secure/0", fx.a.name);
    for shard in shards.keys() {
        let config = secrets
            .get(&format!("{SPROM}-shard-{shard}"))
            .await
            .unwrap();
        let yaml = String::from_utf8(config.data.unwrap()["prometheus.yml"].0.clone()).unwrap();
        assert!(yaml.contains(&secure), "shard {shard} lost {secure}");
    }
    let ours = shard_targets(shards).await.unwrap();
    let up: Vec<&Target> = ours
        .iter()
        .map(|(_, t)| t)
        .filter(|t| t.scrape_pool == secure)
        .collect();
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(
        up[0].health, "up",
        "the HTTPS target is still scraped with its credentials"
    );
}
