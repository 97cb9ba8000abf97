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
use e2e::fixture;
use e2e::real::RealNodes;
use e2e::thanos::{RULER_REPLICA_LABEL, block_metas, healthy_endpoints, objstore_config, pod_s3};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod, Secret, Service};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use zone_api::sprom::contract::GLOBAL_SCOPE;

use super::{Fixture, TIMEOUT, create_rule, wait_held};

/// The ShardedPrometheus config/thanos is written for.
const NAME: &str = "prometheus";
const MANAGER: &str = "e2e-thanos-pods";
/// The Secret config/thanos reads the bucket's configuration from.
const OBJSTORE_SECRET: &str = "thanos-objstore";
/// The claims of config/thanos's StatefulSets (one Store Gateway, two Rulers).
const CLAIMS: [&str; 3] = [
    "data-thanos-store-0",
    "data-thanos-ruler-0",
    "data-thanos-ruler-1",
];
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
    let secrets: Api<Secret> = fx.ns.api();
    let objstore = objstore_config(&s3.to_string(), &fx.ns.name);
    fixture::create(
        &secrets,
        json!({"metadata": {"name": OBJSTORE_SECRET}, "stringData": {"objstore.yml": objstore}}),
    )
    .await;
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

    let volumes = claim_volumes(&cluster, &fx).await;
    apply_config_thanos(&cluster, &real, &fx.ns.name);
    let pods: Api<Pod> = fx.ns.api();
    for (selector, count) in [
        ("app.kubernetes.io/name=thanos-query", 2),
        ("app.kubernetes.io/name=thanos-store", 1),
        ("app.kubernetes.io/name=thanos-ruler", 2),
    ] {
        e2e::pods::wait_available(&pods, selector, count, TIMEOUT).await;
    }
    let query = query_service(&fx).await;
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

/// The cluster has no volume provisioner: one hostPath PersistentVolume per claim of
/// config/thanos's StatefulSets, bound to it in advance, its directory (under the real nodes'
/// state, which `make cluster-down` removes) writable by the pods' user. Deleted on drop.
async fn claim_volumes(cluster: &Cluster, fx: &Fixture) -> Vec<e2e::cluster::DeleteOnDrop> {
    let state = std::path::PathBuf::from(cluster.var("E2E_LOGS").expect("E2E_LOGS"))
        .parent()
        .expect("the state dir")
        .join("nodes/volumes")
        .join(&fx.ns.name);
    let volumes: Api<PersistentVolume> = Api::all(fx.ns.client.clone());
    let config = cluster.config().await;
    let mut made = Vec::new();
    for claim in CLAIMS {
        let dir = state.join(claim);
        std::fs::create_dir_all(&dir).expect("the volume's directory");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .expect("the volume's directory writable");
        let name = format!("{}-{claim}", fx.ns.name);
        fixture::create(
            &volumes,
            json!({
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": dir, "type": "Directory"},
                    "claimRef": {"namespace": fx.ns.name, "name": claim},
                },
            }),
        )
        .await;
        made.push(e2e::cluster::DeleteOnDrop::new::<PersistentVolume>(
            config.clone(),
            &name,
            DeleteParams::default(),
        ));
    }
    made
}

/// `kubectl kustomize config/thanos`, with the test's namespace and Alertmanager Service for
/// `monitoring` and `alertmanager-operated`, its pods placed on the real nodes, applied
/// server-side. The images it names are tagged in the nodes as the local builds, which must be
/// of the same versions.
fn apply_config_thanos(cluster: &Cluster, real: &RealNodes, namespace: &str) {
    let mut kustomize = e2e::identity::kubectl(cluster);
    kustomize
        .arg("kustomize")
        .arg(e2e::deploy::repo_root().join("config/thanos"));
    let rendered = e2e::identity::run(kustomize, None)
        .replace("namespace: monitoring", &format!("namespace: {namespace}"))
        .replace(".monitoring.svc", &format!(".{namespace}.svc"))
        .replace("alertmanager-operated", e2e::alertmanager::NAME);
    let mut objects = e2e::identity::yaml_to_json(&rendered);
    let mut images = std::collections::BTreeSet::new();
    for object in &mut objects {
        let Some(pod) = object.pointer_mut("/spec/template/spec") else {
            continue;
        };
        pod["nodeSelector"] = json!({"type": "real"});
        pod["tolerations"] =
            json!([{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}]);
        for container in pod["containers"].as_array().into_iter().flatten() {
            images.insert(container["image"].as_str().unwrap_or_default().to_string());
        }
    }
    for image in &images {
        let local = [&real.thanos_image, &real.config_reloader_image]
            .into_iter()
            .find(|local| repository(local) == repository(image))
            .unwrap_or_else(|| panic!("no local build of {image}"));
        assert_eq!(
            tag(local),
            tag(image),
            "config/thanos runs {image}, the cluster builds {local}"
        );
        real.alias_image(local, image);
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut apply = e2e::identity::kubectl(cluster);
    apply.args(["apply", "--server-side", "-f", "-"]);
    let applied = e2e::identity::run(apply, Some(list.to_string().as_bytes()));
    assert_eq!(
        applied.lines().count(),
        9,
        "every object of config/thanos: {applied}"
    );
}

/// The last path segment of an image's name without its tag: `thanos` of
/// `quay.io/thanos/thanos:v0.42.5`.
fn repository(image: &str) -> &str {
    let name = image.rsplit_once(':').map_or(image, |(name, _)| name);
    name.rsplit('/').next().unwrap_or(name)
}

fn tag(image: &str) -> &str {
    image.rsplit_once(':').map_or("", |(_, tag)| tag)
}

/// The Querier's Service IP and HTTP port, which this host reaches through kube-proxy.
async fn query_service(fx: &Fixture) -> SocketAddr {
    let services: Api<Service> = fx.ns.api();
    let service = services
        .get("thanos-query")
        .await
        .expect("the Service thanos-query");
    let ip = service
        .spec
        .and_then(|spec| spec.cluster_ip)
        .expect("thanos-query's cluster IP");
    SocketAddr::new(ip.parse().expect("a cluster IP"), 10902)
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
