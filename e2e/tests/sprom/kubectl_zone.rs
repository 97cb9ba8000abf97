//! `kubectl zone shards` through the real kubectl on real Prometheus shards: the targets each
//! shard scrapes, and a resize's moves predicted before it happens; and `kubectl zone` as a user
//! holding `view` only.

use std::collections::BTreeSet;

use e2e::kubectl_zone;
use k8s_openapi::api::apps::v1::StatefulSet;
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};

use super::*;

/// The pod annotation the test sets on the targets after the resize: Prometheus relabels its
/// targets again on a discovery update, not on a reload, so a target seen with it was placed by
/// the configuration loaded after the resize.
const TOUCH: &str = "e2e-touch";

/// address → the shard scraping it, once the shards `0..shards` together scrape `expected`
/// targets of the job `targets`, each once, each discovered with the annotation [`TOUCH`] at
/// `touch` (None: without it).
async fn keepers(
    fx: &Fixture,
    shards: u32,
    expected: usize,
    touch: Option<&str>,
) -> BTreeMap<String, u32> {
    wait_for(
        &format!("{shards} shards scraping the {expected} targets, each once"),
        TIMEOUT,
        || async {
            let mut kept: BTreeMap<String, u32> = BTreeMap::new();
            let mut seen = 0;
            for pod in fx.prometheus_pods().await {
                let shard: u32 = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
                let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                    return Err(format!("shard {shard} has no IP yet"));
                };
                for (address, touched) in touched_targets(&ip).await? {
                    if touched.as_deref() != touch {
                        return Err(format!(
                            "{address} not discovered again yet on shard {shard}"
                        ));
                    }
                    seen += 1;
                    kept.insert(address, shard);
                }
            }
            let shards_seen: BTreeSet<u32> = kept.values().copied().collect();
            match seen == expected
                && kept.len() == expected
                && shards_seen.iter().all(|s| *s < shards)
            {
                true => Ok(kept),
                false => Err(format!("{seen} scraped: {kept:?}")),
            }
        },
    )
    .await
}

/// The active targets of the job `targets` of the Prometheus at `ip`: address → the value of
/// the annotation [`TOUCH`] they were discovered with.
async fn touched_targets(ip: &str) -> Result<BTreeMap<String, Option<String>>, String> {
    let address = format!("{ip}:9090").parse().map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, "/api/v1/targets?state=active").await?;
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    let body: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let label = format!(
        "__meta_kubernetes_pod_annotation_{}",
        TOUCH.replace('-', "_")
    );
    Ok(body["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|t| t["scrapePool"] == "targets")
        .map(|t| {
            let labels = &t["discoveredLabels"];
            let address = labels["__address__"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (address, labels[&label].as_str().map(str::to_string))
        })
        .collect())
}

/// shard → the configuration its Prometheus has loaded (`/api/v1/status/config`).
async fn loaded_configs(fx: &Fixture) -> BTreeMap<u32, String> {
    let mut loaded = BTreeMap::new();
    for pod in fx.prometheus_pods().await {
        let shard: u32 = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let address = format!("{ip}:9090").parse().unwrap();
        if let Ok((200, body)) = e2e::process::http_get_from(address, "/api/v1/status/config").await
        {
            loaded.insert(shard, body);
        }
    }
    loaded
}

/// `kubectl zone shards --to 5` while the shards keep `before`: each shard's zone, readiness and
/// target count checked against the shards' own answers; the predicted moves (address → shard).
async fn predicted_moves(
    cluster: &Cluster,
    fx: &Fixture,
    before: &BTreeMap<String, u32>,
) -> BTreeMap<String, u32> {
    let ns = fx.ns.name.clone();
    let answer = kubectl_zone::json(cluster, &["shards", NAME, "-n", &ns, "--to", "5"]);
    for shard in answer["shards"].as_array().unwrap() {
        let index = shard["index"].as_u64().unwrap() as u32;
        let scraped = before.values().filter(|s| **s == index).count();
        assert_eq!(
            shard["targets"], scraped,
            "shard {index}'s targets: {answer}"
        );
        assert_eq!(
            shard["zone"],
            ["zone-a", "zone-b", "zone-c"][index as usize]
        );
        assert_eq!(shard["readyReplicas"], 1);
    }
    let resize = &answer["resize"];
    assert_eq!(resize["targets"], before.len(), "{answer}");
    assert!(resize.get("unplaced").is_none(), "{answer}");
    resize["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["target"].as_str().unwrap().to_string(),
                m["to"].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

/// Applies `spec` (5 shards) and returns where the targets are once shards 0 and 1 (zone-a's and
/// zone-b's first, which now keep half their zone's buckets) have loaded it (a Secret volume
/// reaches a running pod within about a minute) and every target was discovered again.
async fn resized(fx: &Fixture, spec: Value, targets: &[Pod]) -> BTreeMap<String, u32> {
    let loaded_before = loaded_configs(fx).await;
    let generation = fx.apply(spec).await;
    fx.wait_ready_shards("5 ready shards", generation, 5).await;
    wait_for(
        "shards 0 and 1 reloaded",
        Duration::from_secs(180),
        || async {
            let loaded = loaded_configs(fx).await;
            match (0..2).all(|shard| {
                loaded
                    .get(&shard)
                    .is_some_and(|c| Some(c) != loaded_before.get(&shard))
            }) {
                true => Ok(()),
                false => Err("the configuration loaded before the resize".to_string()),
            }
        },
    )
    .await;
    let pods: Api<Pod> = fx.ns.api();
    let touch = json!({"metadata": {"annotations": {TOUCH: "1"}}});
    for target in targets {
        pods.patch(
            &target.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&touch),
        )
        .await
        .unwrap();
    }
    keepers(fx, 5, targets.len(), Some("1")).await
}

/// Three shards of real Prometheus scraping 12 targets on the real nodes. `kubectl zone shards
/// --to 5` reports each shard's targets as the shards do and predicts the moves; the resize to 5
/// then moves what it predicted (within one target, and each measured move where predicted).
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_kubectl_zone_shards_predicts_a_resize_on_real_prometheus() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-zone-shards").await;
    fx.prometheus_service_account().await;
    let targets = real
        .run_metrics_targets(&fx.ns, "target", 12, TIMEOUT)
        .await;
    let spec = |shards: u32| {
        fixture::on_real_nodes(
            &real,
            json!({"shards": shards, "replicas": 1, "scrapeConfigs": [target_job(&fx, "targets")]}),
        )
    };
    let generation = fx.apply(spec(3)).await;
    fx.wait_ready_shards("3 ready shards", generation, 3).await;
    let before = keepers(&fx, 3, targets.len(), None).await;

    let predicted = predicted_moves(&cluster, &fx, &before).await;

    let after = resized(&fx, spec(5), &targets).await;
    let measured: BTreeMap<String, u32> = after
        .iter()
        .filter(|(address, shard)| before.get(*address) != Some(shard))
        .map(|(address, shard)| (address.clone(), *shard))
        .collect();
    eprintln!(
        "kubectl zone shards --to 5: predicted {} moves, measured {}: {predicted:?} / {measured:?}",
        predicted.len(),
        measured.len()
    );
    assert!(
        predicted.len().abs_diff(measured.len()) <= 1,
        "predicted {predicted:?}, measured {measured:?}"
    );
    for (address, shard) in &measured {
        if let Some(to) = predicted.get(address) {
            assert_eq!(to, shard, "{address} moved elsewhere than predicted");
        }
    }
    a_viewer_sees_what_view_grants(&cluster, &fx).await;
}

/// As a user holding `view` in the namespace: the shards with their zones and readiness but not
/// their targets (the pod proxy), a budget's zones but not its pods' (nodes), and a rollout plan
/// or a drain refused; each time the missing permission is named, in one line.
async fn a_viewer_sees_what_view_grants(cluster: &Cluster, fx: &Fixture) {
    let ns = fx.ns.name.as_str();
    let budgets: Api<ZoneDisruptionBudget> = fx.ns.api();
    let budget = e2e::workload::zone_disruption_budget(
        "web",
        json!({"selector": {"matchLabels": {"app": "target"}}, "maxUnavailable": 1}),
    );
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 0, "serviceName": "web",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "registry.invalid/web:1"}]}},
        },
    }))
    .unwrap();
    fx.ns
        .api::<StatefulSet>()
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
    let zau = e2e::workload::zone_aware_update("web", json!({"statefulset": "web"}));
    fx.ns
        .api::<ZoneAwareUpdate>()
        .create(&PostParams::default(), &zau)
        .await
        .unwrap();
    let viewer = kubectl_zone::viewer(cluster, &fx.ns).await;
    let run = |args: &[&str]| kubectl_zone::run(cluster, &viewer, args);

    let shards = run(&["shards", NAME, "-o", "json"]);
    assert_eq!(shards.code, 0, "{shards:?}");
    let shards = shards.json();
    assert_eq!(shards["shards"].as_array().unwrap().len(), 5, "{shards}");
    assert_eq!(shards["shards"][0]["zone"], "zone-a");
    assert!(shards["shards"][0].get("targets").is_none(), "{shards}");
    let missing = shards["missing"].to_string();
    assert!(
        missing.contains("pods/proxy") && missing.contains("ask for that permission"),
        "{missing}"
    );
    let resize = run(&["shards", NAME, "--to", "3"]);
    assert_one_line_refusal(&resize, "pods/proxy");

    let budget = run(&["budget", "-o", "json"]);
    assert_eq!(budget.code, 0, "{budget:?}");
    let budget = budget.json();
    assert_eq!(budget["namespace"], ns);
    // The ShardedPrometheus's own zone budget beside the test's.
    let names: Vec<&str> = budget["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [format!("{NAME}-shards").as_str(), "web"],
        "{budget}"
    );
    assert!(
        budget["missing"].to_string().contains("list nodes"),
        "{budget}"
    );

    assert_one_line_refusal(&run(&["budget", "--drain", "zone-a-real"]), "nodes");
    assert_one_line_refusal(&run(&["rollout", "plan", "web"]), "nodes");
}

/// A refusal: exit 1 and one line on stderr naming `resource` and what to do.
fn assert_one_line_refusal(answer: &kubectl_zone::Answer, resource: &str) {
    assert_eq!(answer.code, 1, "{answer:?}");
    let stderr = answer.stderr.trim_end();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("kubectl zone: cannot ")
            && stderr.contains(resource)
            && stderr.contains("ask for that permission"),
        "{stderr}"
    );
}
