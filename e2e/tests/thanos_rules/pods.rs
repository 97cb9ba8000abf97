//! `config/thanos` as users apply it, run as pods on the real nodes: the Querier finds every
//! shard's sidecar, the Store Gateway and the Rulers through the cluster DNS (`dnssrv+`), the
//! Store Gateway reads LocalStack's S3, the Rulers query the Querier through its Service IP and
//! alert the Alertmanager through its Service's SRV record. Two changes to the manifests, both
//! of a cluster and not of the project: the names of the namespace and the Alertmanager Service
//! (which config/thanos asks users to edit), and the real nodes' placement (their taint; the kwok
//! nodes run no container). The images are the manifests' own names, which the nodes hold as
//! aliases of the local builds of the same versions. The chart's `thanos.enabled` objects are
//! these (`make test` checks the chart renders config/thanos).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::alertmanager::Alertmanager;
use e2e::config_thanos::{self, OBJSTORE_SECRET};
use e2e::fixture;
use e2e::real::RealNodes;
use e2e::thanos::{RULER_REPLICA_LABEL, block_metas, healthy_endpoints, pod_s3};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{Value, json};
use zone_api::sprom::contract::GLOBAL_SCOPE;

use super::{Fixture, TIMEOUT, create_rule, wait_held};

/// The ShardedPrometheus config/thanos is written for.
const NAME: &str = "prometheus";
const MANAGER: &str = "e2e-thanos-pods";
/// The first block: cut after 1.5 block lengths (1 min) and a compaction tick, shipped by the
/// sidecar's next sync.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(360);
/// The global alert: true only over all three shards' targets at once.
const ALERT: &str = "AllZonesScraped";

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn thanos_rules_config_thanos_runs_as_pods_through_the_cluster_dns_and_answers_a_global_query_and_alert()
 {
    let cluster = Cluster::get();
    e2e::operator::install_crds(&cluster).await;
    let real = RealNodes::of(&cluster);
    let fx = Fixture::new("thanos-pods", NAME, MANAGER, TIMEOUT).await;
    fx.prometheus_service_account().await;
    real.run_metrics_targets(&fx.ns, "target", 3, TIMEOUT).await;
    let s3 = pod_s3(&cluster).await;
    config_thanos::objstore_secret(&cluster, &fx.ns).await;
    // The receiver lives as long as the test: the Alertmanager notifies it.
    let (_receiver, alertmanager) =
        Alertmanager::deploy_with_receiver(&fx.ns, &real, "zone-b", &["alertname"]).await;
    let rule = json!({"groups": [{"name": "all-zones", "interval": "5s", "rules": [
        {"alert": ALERT, "expr": "count(up{job=\"targets\"} == 1) == 3"},
    ]}]});
    create_rule(&fx, "all-zones", Some(GLOBAL_SCOPE), rule).await;
    let generation = fx.apply(spec(&real, &fx)).await;
    fx.wait_ready_shards("3 shards with their sidecars", generation, 3)
        .await;
    // The Store Gateway lists the bucket when it starts (then every 15 minutes): it starts
    // once a block is there.
    wait_for("a block in the bucket", BLOCK_TIMEOUT, || async {
        let metas = block_metas(s3, &fx.ns.name).await?;
        (!metas.is_empty())
            .then_some(())
            .ok_or("none yet".to_string())
    })
    .await;

    let volumes = config_thanos::claim_volumes(&cluster, &fx.ns).await;
    config_thanos::apply(&cluster, &real, &fx.ns.name);
    let pods: Api<Pod> = fx.ns.api();
    for (selector, count) in [
        ("app.kubernetes.io/name=thanos-query", 2),
        ("app.kubernetes.io/name=thanos-store", 1),
        ("app.kubernetes.io/name=thanos-ruler", 2),
    ] {
        e2e::pods::wait_available(&pods, selector, count, TIMEOUT).await;
    }
    let query = config_thanos::query_service(&fx.ns).await;
    the_querier_finds_every_component_by_dns(query, &fx.ns.name).await;
    a_global_query_through_the_service_ip_sees_every_shard_once(query).await;
    let started = Instant::now();
    let alerts = wait_held(&alertmanager, ALERT, TIMEOUT).await;
    eprintln!(
        "{ALERT} at the Alertmanager {:.1?} after the Querier answered",
        started.elapsed()
    );
    assert_eq!(
        alerts.len(),
        1,
        "the two Rulers' alerts are one: {alerts:?}"
    );
    assert!(
        !alerts[0].labels.contains_key(RULER_REPLICA_LABEL)
            && !alerts[0].labels.contains_key("shard"),
        "{:?}",
        alerts[0].labels
    );
    drop(volumes);
}

/// Three shards of one replica on the real nodes, one per zone, scraping the targets every 2 s,
/// loading the namespace's PrometheusRules (the global one goes to the Rulers' ConfigMap), each
/// pod with a sidecar shipping 1-minute blocks to the bucket of [`OBJSTORE_SECRET`].
fn spec(real: &RealNodes, fx: &Fixture) -> Value {
    fixture::on_real_nodes(
        real,
        json!({
            "shards": 3,
            "replicas": 1,
            "scrapeConfigs": [{
                "job_name": "targets",
                "scrape_interval": "2s",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
                "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
            }],
            "ruleSelector": {},
            "thanos": {
                "image": real.thanos_image,
                "objectStorageConfig": {"name": OBJSTORE_SECRET, "key": "objstore.yml"},
                "blockSize": "1m",
            },
        }),
    )
}

/// Through `dnssrv+` names alone: the three sidecars, the Store Gateway and both Rulers are
/// healthy endpoints of the Querier, and the Store Gateway holds the bucket's blocks (the shards'
/// external labels).
async fn the_querier_finds_every_component_by_dns(query: SocketAddr, namespace: &str) {
    let started = Instant::now();
    wait_for(
        "3 sidecars, the Store Gateway (with the bucket's blocks) and 2 Rulers healthy at the Querier",
        TIMEOUT,
        || async {
            let stores = e2e::thanos::api_at(query, "/api/v1/stores").await?;
            let healthy = healthy_endpoints(&stores);
            let count = |kind: &str| healthy.iter().filter(|e| e.starts_with(kind)).count();
            let store_labels = stores["store"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|store| store["labelSets"].as_array().cloned().unwrap_or_default())
                .count();
            (count("sidecar ") == 3 && count("store ") == 1 && count("rule ") == 2 && store_labels > 0)
                .then_some(())
                .ok_or(format!("healthy {healthy:?}, the store's label sets: {store_labels}"))
        },
    )
    .await;
    eprintln!(
        "in {namespace}: the Querier found every component by DNS in {:.1?}",
        started.elapsed()
    );
}

/// One series per target through the Querier's Service IP: three, one per shard.
async fn a_global_query_through_the_service_ip_sees_every_shard_once(query: SocketAddr) {
    let path = format!(
        "/api/v1/query?query={}",
        e2e::prometheus::url_encode("count by (shard) (up{job=\"targets\"} == 1)")
    );
    wait_for(
        "one target up per shard through the Querier",
        TIMEOUT,
        || async {
            let data = e2e::thanos::api_at(query, &path).await?;
            let shards: Vec<(String, String)> = data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|sample| {
                    (
                        sample["metric"]["shard"]
                            .as_str()
                            .unwrap_or("?")
                            .to_string(),
                        sample["value"][1].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect();
            let wanted: Vec<(String, String)> = ["0", "1", "2"]
                .map(|s| (s.to_string(), "1".to_string()))
                .to_vec();
            (shards == wanted)
                .then_some(())
                .ok_or(format!("{shards:?}"))
        },
    )
    .await;
}
