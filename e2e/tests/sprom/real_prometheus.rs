//! Real Prometheus 3 and 2.55 shards on the real nodes: each scrapes exactly its zone's targets,
//! loads the rule files, and takes a new job by reload, without a restart.

use e2e::prometheus::Major;

use super::*;

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_real_prometheus_pods_scrape_the_targets_of_their_own_zone() {
    real_pods_scrape_their_zone(Major::V3, "sprom-real").await;
}

/// The same with `version: v2.55.1` on Prometheus 2.55.1: its flags, and the reloader sidecar
/// that brings the new job to the running pods.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_real_prometheus_2_pods_scrape_the_targets_of_their_own_zone() {
    real_pods_scrape_their_zone(Major::V2, "sprom-real-v2").await;
}

/// Three shards of real Prometheus of `major` on the real nodes: each scrapes exactly its zone's
/// targets, loads the rule file, and takes a new job without a restart.
async fn real_pods_scrape_their_zone(major: Major, prefix: &str) {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture(prefix).await;
    fx.prometheus_service_account().await;

    // The metrics target on the real nodes, spread evenly over the zones.
    let targets = real.run_metrics_targets(&fx.ns, "target", 6, TIMEOUT).await;
    let real_zones = e2e::real::nodes(&fx.ns.client).await;
    let mut targets_of_zone: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for pod in &targets {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let zone = real_zones[e2e::pods::node_of(pod).unwrap()].clone();
        targets_of_zone
            .entry(zone)
            .or_default()
            .insert(format!("{ip}:8080"));
    }

    // Rule files from a ConfigMap (every key): loaded by each shard from the mounted volume.
    let rules: Api<ConfigMap> = fx.ns.api();
    let rule_file = json!({
        "metadata": {"name": "rules"},
        "data": {"targets.yaml": "groups:\n- name: targets\n  rules:\n  - record: job:up:sum\n    expr: sum by (job) (up)\n"},
    });
    fixture::create(&rules, rule_file).await;
    let generation = fx
        .apply(real_spec(&real, major, vec![target_job(&fx, "targets")]))
        .await;
    fx.wait_ready_shards("3 ready shards of real Prometheus", generation, 3)
        .await;

    // Each shard's pod scrapes, with up == 1, exactly the target pods of its own zone.
    let prometheus_pods = fx.prometheus_pods().await;
    assert_eq!(prometheus_pods.len(), 3);
    for pod in &prometheus_pods {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let zone = real_zones[e2e::pods::node_of(pod).unwrap()].clone();
        let shard: usize = pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
        assert_eq!(
            zone,
            ["zone-a", "zone-b", "zone-c"][shard],
            "shard {shard} in its zone"
        );
        wait_rules_and_zone_targets(shard, &zone, &ip, &targets_of_zone[&zone]).await;
    }
    a_new_job_reaches_the_running_pods_by_reload(&fx, &real, major, &prometheus_pods).await;
}

/// Three shards of one replica of the real Prometheus of `major` on the real nodes, with the
/// rule files of the ConfigMap `rules`, scraping `jobs`.
fn real_spec(real: &e2e::real::RealNodes, major: Major, jobs: Vec<Value>) -> Value {
    let mut spec = fixture::on_real_nodes(
        real,
        json!({
            "ruleFiles": [{"configMap": "rules"}],
            "shards": 3,
            "replicas": 1,
            "scrapeConfigs": jobs,
        }),
    );
    if major == Major::V2 {
        spec["version"] = json!("v2.55.1");
        spec["image"] = json!(real.prometheus2_image);
        spec["configReloaderImage"] = json!(real.config_reloader_image);
    }
    spec
}

/// Waits until the Prometheus of `shard` at `ip` loaded the rule file and scrapes exactly the
/// `expected` targets of its `zone`, all up.
async fn wait_rules_and_zone_targets(
    shard: usize,
    zone: &str,
    ip: &str,
    expected: &std::collections::BTreeSet<String>,
) {
    wait_for(
        &format!("shard {shard} loaded the rule file"),
        TIMEOUT,
        || async {
            let address = format!("{ip}:9090").parse().map_err(|e| format!("{e}"))?;
            let (_, body) = e2e::process::http_get_from(address, "/api/v1/rules").await?;
            if body.contains("job:up:sum") {
                Ok(())
            } else {
                Err(body)
            }
        },
    )
    .await;
    wait_for(
        &format!("shard {shard} scraping {zone}'s targets, all up"),
        TIMEOUT,
        || async {
            let scraped = pod_targets(ip, "targets").await?;
            let addresses: std::collections::BTreeSet<String> = scraped.keys().cloned().collect();
            if &addresses == expected && scraped.values().all(|h| h == "up") {
                Ok(())
            } else {
                Err(format!("{scraped:?}, want {expected:?} up"))
            }
        },
    )
    .await;
}

/// A new job reaches the running pods through auto-reload: no restart, no rollout.
async fn a_new_job_reaches_the_running_pods_by_reload(
    fx: &Fixture,
    real: &e2e::real::RealNodes,
    major: Major,
    prometheus_pods: &[Pod],
) {
    let pods: Api<Pod> = fx.ns.api();
    let sets: Api<StatefulSet> = fx.ns.api();
    let generations: Vec<Option<i64>> = futures::future::join_all((0..3).map(|i| {
        let sets = sets.clone();
        async move {
            sets.get(&format!("{NAME}-shard-{i}"))
                .await
                .unwrap()
                .metadata
                .generation
        }
    }))
    .await;
    let jobs = vec![target_job(fx, "targets"), target_job(fx, "targets-again")];
    let generation = fx.apply(real_spec(real, major, jobs)).await;
    fx.wait_status("the new job observed", generation, |_| Ok(()))
        .await;
    for pod in prometheus_pods {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        wait_for(
            "the new job in the running Prometheus",
            Duration::from_secs(180),
            || async {
                let scraped = pod_targets(&ip, "targets-again").await?;
                if !scraped.is_empty() && scraped.values().all(|h| h == "up") {
                    Ok(())
                } else {
                    Err(format!("{scraped:?}"))
                }
            },
        )
        .await;
        e2e::pods::assert_unchanged_and_not_restarted(&pods, pod).await;
    }
    for (i, before) in generations.iter().enumerate() {
        let after = sets
            .get(&format!("{NAME}-shard-{i}"))
            .await
            .unwrap()
            .metadata
            .generation;
        assert_eq!(&after, before, "shard {i}'s StatefulSet did not roll");
    }
}
