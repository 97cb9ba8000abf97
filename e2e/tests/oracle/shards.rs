//! Our shards as their pods' own APIs report them (active targets, rule groups, series), and
//! their targets compared with the operator's Prometheus, target for target, each on the shard of
//! its zone.

use super::*;

/// A target as both sides report it: its pool and its labels after relabelling.
type TargetKey = (String, BTreeMap<String, String>);

/// The `data` of a Prometheus API answer from the pod at `ip`.
pub(super) async fn pod_api(ip: &str, path: &str) -> Result<Value, String> {
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
pub(super) async fn node_zones(client: &kube::Client) -> BTreeMap<String, String> {
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
pub(super) async fn shard_targets(
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
pub(super) async fn compare_targets(
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
pub(super) fn loaded_rules(groups: &Value) -> BTreeMap<String, Vec<(String, String, String)>> {
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
pub(super) fn series(result: &Value) -> Vec<BTreeMap<String, String>> {
    let mut series: Vec<BTreeMap<String, String>> = result["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| serde_json::from_value(s["metric"].clone()).unwrap_or_default())
        .collect();
    series.sort();
    series
}
