//! The ShardedPrometheus the alerts come from (three shards, one per zone, evaluating the rule)
//! and the StatefulSet `web` they scrape, two pods per zone on the real nodes.

use k8s_openapi::api::core::v1::ConfigMap;
use zone_api::ShardedPrometheus;

use super::*;

/// The rules ConfigMap and the ShardedPrometheus [`SPROM`]: three shards (one per zone) of the
/// real Prometheus, scraping the application's pods of the namespace every 2 s (labelled with
/// their zone and pod) and evaluating [`RULES`] every 2 s.
pub(super) async fn create_sharded_prometheus(ns: &TestNamespace, real: &RealNodes) {
    let rules: Api<ConfigMap> = ns.api();
    fixture::create(
        &rules,
        json!({"metadata": {"name": "rules"}, "data": {"app.yaml": RULES}}),
    )
    .await;
    let sprom = json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": SPROM},
        "spec": fixture::on_real_nodes(real, json!({
            "shards": 3,
            "replicas": 1,
            "scrapeInterval": "2s",
            "evaluationInterval": "2s",
            "ruleFiles": [{"configMap": "rules"}],
            "scrapeConfigs": [fixture::zone_scrape_job(&ns.name, "app_kubernetes_io_part_of", SET)],
        })),
    });
    let sproms: Api<ShardedPrometheus> = ns.api();
    fixture::apply(&sproms, SPROM, MANAGER, &sprom).await;
}

/// Waits until the StatefulSet's pods are all Ready at its revision, two in each zone: pod name
/// -> zone.
pub(super) async fn wait_two_pods_per_zone(
    sets: &Api<StatefulSet>,
    pods: &Api<Pod>,
) -> BTreeMap<String, String> {
    let revision = e2e::workload::update_revision(sets, SET, Duration::from_secs(30)).await;
    pods::wait_all_available(
        pods,
        &format!("app={SET}"),
        REPLICAS,
        Some(&revision),
        TIMEOUT,
    )
    .await;
    let zones = e2e::nodes::pod_zones(pods, &format!("app={SET}")).await;
    for zone in ZONES {
        assert_eq!(
            zones.values().filter(|z| *z == zone).count(),
            2,
            "two pods in {zone}: {zones:?}"
        );
    }
    zones
}

/// The StatefulSet `web`: the metrics target, two pods per zone on the real nodes, OnDelete,
/// labelled `app: web` and `app.kubernetes.io/part-of: web`, without errors.
pub(super) fn statefulset(real: &RealNodes) -> StatefulSet {
    let mut template = real.metrics_target_template(SET);
    template["metadata"]["labels"][PART_OF] = json!(SET);
    serde_json::from_value(json!({
        "metadata": {"name": SET},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": SET,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": SET}},
            "template": template,
        },
    }))
    .unwrap()
}

/// The Prometheus pod of each shard, once the ShardedPrometheus reports 3 ready shards; shard i
/// runs in zone i.
pub(super) async fn wait_shards(pods: &Api<Pod>) -> Vec<SocketAddr> {
    let selector = format!("app.kubernetes.io/instance={SPROM}");
    let list = pods::wait_available(pods, &selector, 3, TIMEOUT).await;
    let nodes = e2e::real::nodes(&pods.clone().into_client()).await;
    let mut shards = vec![None; 3];
    for pod in &list {
        let shard: usize = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
        let zone = &nodes[pods::node_of(pod).unwrap()];
        assert_eq!(zone, ZONES[shard], "shard {shard} runs in its zone");
        shards[shard] = Some(SocketAddr::new(pod_ip(pod), 9090));
    }
    shards.into_iter().map(Option::unwrap).collect()
}

/// `data.result` of an instant query of a Prometheus pod.
pub(super) async fn query(prometheus: SocketAddr, promql: &str) -> Result<Vec<Value>, String> {
    let path = format!(
        "/api/v1/query?query={}",
        e2e::prometheus::url_encode(promql)
    );
    let (code, body) = e2e::process::http_get_from(prometheus, &path).await?;
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if code != 200 {
        return Err(format!("{code}: {body}"));
    }
    Ok(value["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}
