//! A ShardedPrometheus selecting what the operator's Prometheus selects, over 3 and then 4 shards:
//! the same targets, rules and series; a monitor change reaching the running shards; no fixture
//! secret in a ConfigMap; a deleted Secret reported while the last good configuration runs on.

use k8s_openapi::api::core::v1::ConfigMap;

use super::shards::{compare_targets, loaded_rules, node_zones, pod_api, series, shard_targets};
use super::*;

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
        &e2e::fixture::without_zau_controller(),
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
