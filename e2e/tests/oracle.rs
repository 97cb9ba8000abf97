//! prometheus-operator v0.85 as the oracle of the ShardedPrometheus comparison: the real operator
//! runs on the host for the test's namespace, and its Prometheus (the local Prometheus 3.16 image
//! on a real node, with the operator's config reloader) discovers and scrapes what a
//! ServiceMonitor selects and loads what a PrometheusRule holds; monitors and rules outside the
//! Prometheus's selectors are left out. A ShardedPrometheus is then compared with it, target for
//! target, in `oracle/comparison.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::operator::{Operator, OperatorPrometheus, install_crds};
use e2e::prometheus::Target;
use e2e::real::RealNodes;
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

#[path = "oracle/comparison.rs"]
mod comparison;
#[path = "oracle/fixture.rs"]
mod fixture;
#[path = "oracle/shards.rs"]
mod shards;

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

/// The ShardedPrometheus of the comparison.
const SPROM: &str = "zoned";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
