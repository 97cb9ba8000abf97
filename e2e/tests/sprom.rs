//! ShardedPrometheus controller e2e on the local zonal cluster, as its ServiceAccount: children
//! pinned to zones by the real scheduler, config changes reaching every shard's config Secret in
//! place (no shard config in any ConfigMap), deleted children restored, invalid specs refused
//! once without a hot loop, and Degraded reasons for a ServiceAccount that cannot discover and
//! for zones without nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::fixture;
use e2e::localstack::free_port;
use e2e::process::ControllerProcess;
use e2e::prometheus::Major;
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::conditions::Conditions;
use zone_api::sprom::{condition, reason};

#[path = "sprom/kubectl_zone.rs"]
mod kubectl_zone;

const TIMEOUT: Duration = Duration::from_secs(120);
const MANAGER: &str = "e2e-sprom";
const NAME: &str = "prom";

/// The ShardedPrometheus [`NAME`] under test, with the shard controller watching its namespace.
type Fixture = fixture::Sprom;

async fn new_fixture(prefix: &str) -> Fixture {
    Fixture::new(prefix, NAME, MANAGER, TIMEOUT).await
}

fn spec(shards: u32, jobs: &[&str], zones: &[&str]) -> Value {
    let scrape: Vec<Value> = jobs
        .iter()
        .map(|job| json!({"job_name": job, "kubernetes_sd_configs": [{"role": "pod"}]}))
        .collect();
    json!({
        "shards": shards,
        "replicas": 2,
        // kwok nodes run the pods of this test (Ready without a container runtime).
        "nodeSelector": {"type": "kwok"},
        "shardingStrategy": {"topology": {"values": zones}},
        "scrapeConfigs": scrape,
    })
}

/// The `prometheus.yml` of a shard's config Secret (empty if it has none).
fn config_of(secret: &Secret) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("prometheus.yml"))
        .map_or_else(String::new, |b| String::from_utf8_lossy(&b.0).into_owned())
}

/// The shard config Secrets and the StatefulSets of the ShardedPrometheus, by name.
async fn children(ns: &TestNamespace) -> (BTreeMap<String, Secret>, BTreeMap<String, StatefulSet>) {
    let selector = format!("app.kubernetes.io/instance={NAME}");
    let params = ListParams::default().labels(&selector);
    let secrets: Api<Secret> = ns.api();
    let sets: Api<StatefulSet> = ns.api();
    let secrets = secrets
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    let sets = sets
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    (secrets, sets)
}

/// Asserts that no shard config is in a ConfigMap: no `<name>-shard-<i>` ConfigMap for the
/// `shards` shards, and no ConfigMap of the namespace with a `prometheus.yml` key.
async fn assert_no_config_in_config_maps(ns: &TestNamespace, shards: u32) {
    let config_maps: Api<ConfigMap> = ns.api();
    for index in 0..shards {
        let name = format!("{NAME}-shard-{index}");
        assert!(
            config_maps.get_opt(&name).await.unwrap().is_none(),
            "a ConfigMap {name}: the shard config belongs in its Secret"
        );
    }
    for config_map in config_maps.list(&ListParams::default()).await.unwrap() {
        assert!(
            !config_map
                .data
                .as_ref()
                .is_some_and(|d| d.contains_key("prometheus.yml")),
            "ConfigMap {} holds a prometheus.yml",
            config_map.name_any()
        );
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn sprom_shards_run_in_their_zones_and_follow_config_changes_in_place() {
    let fx = new_fixture("sprom").await;
    fx.prometheus_service_account().await;
    let zones = ["zone-a", "zone-b", "zone-c"];
    let generation = fx.apply(spec(3, &["pods"], &zones)).await;
    let sprom = fx
        .wait_status("3 shards available", generation, |s| {
            let status = s.status.as_ref().unwrap();
            match status.true_reason(condition::AVAILABLE) {
                Some(_) if status.shards == 3 && status.ready_shards == 3 => Ok(()),
                _ => Err(format!("{status:?}")),
            }
        })
        .await;
    let status = sprom.status.unwrap();
    assert_eq!(
        status.condition(condition::DEGRADED).unwrap().status,
        "False",
        "{:?}",
        status.conditions
    );
    assert_pods_of_each_shard_in_its_zone(&fx, &zones).await;
    let (secrets, sets) = a_new_job_reaches_every_secret_without_a_rollout(&fx, &zones).await;
    deleted_children_come_back(&fx, &secrets, &sets).await;

    // Scale down to 2 shards: the third shard's children are pruned.
    let generation = fx.apply(spec(2, &["pods", "more-pods"], &zones)).await;
    fx.wait_status("2 shards", generation, |s| {
        let status = s.status.as_ref().unwrap();
        (status.shards == 2)
            .then_some(())
            .ok_or(format!("{} shards", status.shards))
    })
    .await;
    wait_for("shard 2 pruned", TIMEOUT, || async {
        let (secrets, sets) = children(&fx.ns).await;
        if secrets.contains_key("prom-shard-2") || sets.contains_key("prom-shard-2") {
            Err("still there".to_string())
        } else {
            Ok(())
        }
    })
    .await;
}

/// Every pod of shard i runs on a node of zone(i), placed by the real scheduler.
async fn assert_pods_of_each_shard_in_its_zone(fx: &Fixture, zones: &[&str]) {
    let node_zones = e2e::nodes::zones(&fx.ns.client, "type=kwok").await;
    let pods: Api<Pod> = fx.ns.api();
    for (shard, zone) in zones.iter().enumerate() {
        let selector = format!("zonecontrol.k8s.aws/shard={shard}");
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        assert_eq!(list.items.len(), 2, "2 replicas of shard {shard}");
        for pod in &list.items {
            let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
            assert_eq!(&node_zones[&node], zone, "{} on {node}", pod.name_any());
        }
    }
}

/// A new scrape job reaches every shard's config Secret in place; no StatefulSet changes (no
/// rollout). The configs are in Secrets only: no ConfigMap holds one. Returns the children
/// after the change.
async fn a_new_job_reaches_every_secret_without_a_rollout(
    fx: &Fixture,
    zones: &[&str],
) -> (BTreeMap<String, Secret>, BTreeMap<String, StatefulSet>) {
    let (_, sets_before) = children(&fx.ns).await;
    let generation = fx.apply(spec(3, &["pods", "more-pods"], zones)).await;
    fx.wait_status("the new generation observed", generation, |_| Ok(()))
        .await;
    let (secrets, sets_after) = children(&fx.ns).await;
    assert_eq!(secrets.len(), 3);
    for secret in secrets.values() {
        assert!(
            config_of(secret).contains("job_name: more-pods"),
            "{}",
            secret.name_any()
        );
    }
    assert_no_config_in_config_maps(&fx.ns, 3).await;
    for (name, before) in &sets_before {
        let after = &sets_after[name];
        assert_eq!(
            after.metadata.generation, before.metadata.generation,
            "{name}: the StatefulSet spec did not change"
        );
    }
    (secrets, sets_after)
}

/// Deleted children come back: a shard's config Secret and another shard's StatefulSet.
async fn deleted_children_come_back(
    fx: &Fixture,
    secrets: &BTreeMap<String, Secret>,
    sets: &BTreeMap<String, StatefulSet>,
) {
    let secret_api: Api<Secret> = fx.ns.api();
    let set_api: Api<StatefulSet> = fx.ns.api();
    let old_secret = secrets["prom-shard-1"].uid().unwrap();
    let old_set = sets["prom-shard-2"].uid().unwrap();
    secret_api
        .delete("prom-shard-1", &DeleteParams::default())
        .await
        .unwrap();
    set_api
        .delete("prom-shard-2", &DeleteParams::background())
        .await
        .unwrap();
    wait_for("the deleted children back", TIMEOUT, || async {
        let (secrets, sets) = children(&fx.ns).await;
        let secret = secrets.get("prom-shard-1").ok_or("no Secret")?;
        let set = sets.get("prom-shard-2").ok_or("no StatefulSet")?;
        if secret.uid().unwrap() != old_secret
            && set.uid().unwrap() != old_set
            && config_of(secret).contains("more-pods")
        {
            Ok(())
        } else {
            Err("not recreated yet".to_string())
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn sprom_invalid_specs_are_refused_once_and_degraded_reasons_are_named() {
    let fx = new_fixture("sprom-invalid").await;
    let zones = ["zone-a", "zone-b", "zone-c"];

    // No Prometheus ServiceAccount yet: discovery would find nothing; Degraded says so.
    let generation = fx.apply(spec(3, &["pods"], &zones)).await;
    let status = fx
        .wait_true(
            generation,
            condition::DEGRADED,
            reason::SERVICE_ACCOUNT_FORBIDDEN,
        )
        .await;
    let message = &status.condition(condition::DEGRADED).unwrap().message;
    assert!(message.contains("list pods"), "{message}");

    // With the ServiceAccount bound, a zone with no node is the Degraded reason (zone-x).
    fx.prometheus_service_account().await;
    let generation = fx
        .apply(spec(3, &["pods"], &["zone-a", "zone-b", "zone-x"]))
        .await;
    let status = fx
        .wait_true(generation, condition::DEGRADED, reason::ZONES_WITHOUT_NODES)
        .await;
    let message = &status.condition(condition::DEGRADED).unwrap().message;
    assert!(message.contains("zone-x"), "{message}");

    // Let the shards of zone-a and zone-b become ready first: their pods' readiness reconciles
    // the resource too, and the count below is about the invalid spec alone.
    fx.wait_status(
        "2 of 3 shards ready (zone-x has no node)",
        generation,
        |s| {
            let ready = s.status.as_ref().map_or(0, |s| s.ready_shards);
            (ready == 2).then_some(()).ok_or(format!("{ready} ready"))
        },
    )
    .await;
    an_invalid_spec_is_refused_once_without_a_hot_loop(&fx).await;

    // Fewer shards than zones is valid: the zone without a shard is named, nothing refused.
    let generation = fx.apply(spec(2, &["pods"], &zones)).await;
    let status = fx
        .wait_true(generation, condition::DEGRADED, reason::ZONES_WITHOUT_SHARD)
        .await;
    assert_eq!(
        status.condition(condition::INVALID).unwrap().status,
        "False"
    );
    assert!(
        status
            .condition(condition::DEGRADED)
            .unwrap()
            .message
            .contains("zone-c")
    );

    // A storage change the StatefulSets cannot take (volumeClaimTemplates are immutable): the
    // API server's refusal is the Invalid reason, not an endless retry.
    let mut with_claims = spec(2, &["pods"], &zones);
    with_claims["storage"] = json!({"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
    }}});
    let generation = fx.apply(with_claims).await;
    let status = fx
        .wait_true(generation, condition::INVALID, reason::CHILD_REJECTED)
        .await;
    let message = &status.condition(condition::INVALID).unwrap().message;
    assert!(message.contains("StatefulSet prom-shard-"), "{message}");
}

/// The InvalidSpec events of the namespace, described: what each says, when, and which replica
/// said it.
async fn invalid_spec_events(ns: &TestNamespace) -> Vec<String> {
    fixture::events(ns, |e| e.reason.as_deref() == Some(reason::INVALID_SPEC))
        .await
        .into_iter()
        .map(|e| {
            format!(
                "{} at {:?} series {:?} by {:?}: {:?}",
                e.metadata.name.unwrap_or_default(),
                e.event_time.map(|t| t.0),
                e.series.map(|s| s.count),
                e.reporting_instance,
                e.note,
            )
        })
        .collect()
}

/// An invalid spec: Invalid with the reason, one event, no child changed, no hot loop. (A
/// retention Prometheus cannot represent: the CRD's schema refuses the other invalid specs.)
async fn an_invalid_spec_is_refused_once_without_a_hot_loop(fx: &Fixture) {
    let (secrets_before, sets_before) = children(&fx.ns).await;
    assert_eq!(secrets_before.len(), 3);
    let reconciles_before = fx.reconciles().await;
    let mut invalid = spec(3, &["pods"], &["zone-a", "zone-b", "zone-x"]);
    invalid["retention"] = json!({"time": "300y"});
    let generation = fx.apply(invalid).await;
    let status = fx
        .wait_true(generation, condition::INVALID, reason::INVALID_SPEC)
        .await;
    let message = &status.condition(condition::INVALID).unwrap().message;
    assert!(message.contains("spec.retention.time"), "{message}");
    assert_eq!(
        status.condition(condition::AVAILABLE).unwrap().status,
        "False"
    );

    // Watch it for a while: the invalid spec is not retried in a loop.
    let window = Duration::from_secs(30);
    let started = std::time::Instant::now();
    // One Warning event, and it stays one.
    wait_for("the Invalid event", TIMEOUT, || async {
        match invalid_spec_events(&fx.ns).await {
            found if found.len() == 1 => Ok(()),
            found => Err(format!("{} events: {found:#?}", found.len())),
        }
    })
    .await;
    let remaining = window.saturating_sub(started.elapsed());
    tokio::time::sleep(remaining).await; // a measurement window, not a synchronisation
    let reconciles = fx.reconciles().await - reconciles_before;
    assert!(
        reconciles <= 5.0,
        "{reconciles} reconciles in 30 s of an invalid spec"
    );
    let found = invalid_spec_events(&fx.ns).await;
    assert_eq!(found.len(), 1, "one event for the invalid spec: {found:#?}");
    let (secrets_after, sets_after) = children(&fx.ns).await;
    for (name, secret) in &secrets_before {
        assert_eq!(
            secrets_after[name].resource_version(),
            secret.resource_version(),
            "{name} unchanged by the invalid spec"
        );
    }
    for (name, set) in &sets_before {
        assert_eq!(
            sets_after[name].metadata.generation, set.metadata.generation,
            "{name} unchanged by the invalid spec"
        );
    }
}

/// The active targets of `job` a Prometheus pod reports from its own API: address → health.
async fn pod_targets(pod_ip: &str, job: &str) -> Result<BTreeMap<String, String>, String> {
    let address = format!("{pod_ip}:9090")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, "/api/v1/targets?state=active").await?;
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    let body: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let active = body["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(active
        .iter()
        .filter(|t| t["scrapePool"] == job)
        .map(|t| {
            (
                t["discoveredLabels"]["__address__"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                t["health"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

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

/// A scrape job `name` of the pods labelled `app: target` of the test namespace.
fn target_job(fx: &Fixture, name: &str) -> Value {
    json!({
        "job_name": name,
        "scrape_interval": "2s",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
        "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
    })
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

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn sprom_agents_run_with_agent_flag_no_rules_their_grace_period_and_are_never_retained() {
    let fx = new_fixture("sprom-agent").await;
    fx.prometheus_service_account().await;
    let zones = ["zone-a", "zone-b", "zone-c"];
    let mut agent = spec(3, &["pods"], &zones);
    let extra = json!({
        "mode": "Agent",
        "remoteWrite": [{"url": "http://192.0.2.1:9201/api/v1/write"}],
        "terminationGracePeriodSeconds": 45,
        // Asked for, but agents keep no data: removed shards are deleted at once.
        "shardRetentionPolicy": {"whenScaled": "Retain", "retain": {"retentionPeriod": "1h"}},
    });
    agent
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let generation = fx.apply(agent.clone()).await;
    fx.wait_status("3 agent shards", generation, |s| {
        let status = s.status.as_ref().unwrap();
        (status.shards == 3 && status.ready_shards == 3)
            .then_some(())
            .ok_or(format!("{status:?}"))
    })
    .await;
    let (secrets, _) = children(&fx.ns).await;
    for secret in secrets.values() {
        let config = config_of(secret);
        assert!(
            !config.contains("rule_files") && config.contains("remote_write"),
            "{}:\n{config}",
            secret.name_any()
        );
    }
    // The pods themselves: `--agent`, no rule volume, the configured grace period.
    let pods: Api<Pod> = fx.ns.api();
    let list = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}")))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 6, "2 replicas of 3 shards");
    for pod in &list.items {
        let spec = pod.spec.as_ref().unwrap();
        let args = spec.containers[0].args.clone().unwrap_or_default();
        assert!(
            args.iter().any(|a| a == "--agent"),
            "{}: {args:?}",
            pod.name_any()
        );
        assert!(
            !args.iter().any(|a| a.starts_with("--storage.tsdb")),
            "{}: {args:?}",
            pod.name_any()
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(45));
    }

    // A scale-down deletes the removed shard at once, whatever the policy asked.
    agent["shards"] = json!(2);
    let generation = fx.apply(agent).await;
    fx.wait_status("2 agent shards, none retained", generation, |s| {
        let status = s.status.as_ref().unwrap();
        (status.shards == 2 && status.retained_shards.is_empty())
            .then_some(())
            .ok_or(format!("{status:?}"))
    })
    .await;
    wait_for("shard 2 deleted", TIMEOUT, || async {
        let (secrets, sets) = children(&fx.ns).await;
        (!secrets.contains_key("prom-shard-2") && !sets.contains_key("prom-shard-2"))
            .then_some(())
            .ok_or("still there".to_string())
    })
    .await;
}

/// What the HPA and the ShardedPrometheus say at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScaleSample {
    hpa_current: i32,
    hpa_desired: i32,
    spec_shards: i32,
    status_shards: i32,
    retained: usize,
    selected_pods: usize,
}

async fn scale_sample(
    fx: &Fixture,
    hpas: &Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>,
) -> Result<ScaleSample, String> {
    let hpa = hpas.get(NAME).await.map_err(|e| e.to_string())?;
    let hpa_status = hpa.status.unwrap_or_default();
    let sprom = fx.sproms.get(NAME).await.map_err(|e| e.to_string())?;
    let status = sprom.status.unwrap_or_default();
    let pods: Api<Pod> = fx.ns.api();
    let selected_pods = if status.selector.is_empty() {
        0
    } else {
        pods.list(&ListParams::default().labels(&status.selector))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len()
    };
    Ok(ScaleSample {
        hpa_current: hpa_status.current_replicas.unwrap_or(0),
        hpa_desired: hpa_status.desired_replicas,
        spec_shards: sprom.spec.shards,
        status_shards: status.shards,
        retained: status.retained_shards.len(),
        selected_pods,
    })
}

/// Waits until the HPA and the resource agree on `shards` (and the selector lists one pod per
/// shard), checking every sample on the way: the HPA's current replicas are never more than the
/// active shards the resource reported (never shards × replicas, never the retained shards).
async fn follow_hpa(
    fx: &Fixture,
    hpas: &Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>,
    shards: i32,
    seen: &mut Vec<ScaleSample>,
) {
    let samples = std::cell::RefCell::new(std::mem::take(seen));
    wait_for(
        &format!("the HPA and the resource at {shards} shards"),
        Duration::from_secs(300),
        || async {
            let sample = scale_sample(fx, hpas).await?;
            let mut samples = samples.borrow_mut();
            let max_seen = samples
                .iter()
                .map(|s| s.status_shards)
                .chain([sample.status_shards])
                .max()
                .unwrap_or(0);
            assert!(
                sample.hpa_current <= max_seen,
                "the HPA counts {} replicas, the resource never had more than {max_seen} active shards: {sample:?}",
                sample.hpa_current
            );
            if samples.last() != Some(&sample) {
                eprintln!("{sample:?}");
                samples.push(sample.clone());
            }
            (sample.hpa_current == shards
                && sample.spec_shards == shards
                && sample.status_shards == shards
                && sample.selected_pods == usize::try_from(shards).unwrap_or(0))
            .then_some(())
            .ok_or(format!("{sample:?}"))
        },
    )
    .await;
    *seen = samples.into_inner();
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes and metrics-server (make e2e)"]
async fn sprom_a_real_hpa_on_cpu_scales_shards_not_pods() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-hpa").await;
    fx.prometheus_service_account().await;
    let target_addresses = six_metrics_targets(&fx, &real).await;

    // Two replicas per shard with a small CPU request, so that an idle Prometheus is a
    // measurable share of it; Retain, so that scaled-down shards keep running pods.
    let generation = fx
        .apply(fixture::on_real_nodes(&real, json!({
            "shards": 3,
            "replicas": 2,
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "shardRetentionPolicy": {"whenScaled": "Retain", "retain": {"retentionPeriod": "1h"}},
            "scrapeConfigs": [{
                "job_name": "targets",
                "scrape_interval": "2s",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
                "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
            }],
        })))
        .await;
    fx.wait_ready_shards("3 ready shards", generation, 3).await;
    the_hpa_scales_up_then_down_counting_active_shards(&fx).await;

    // One shard, fewer than the zones: it scrapes every zone's targets.
    let sprom = fx.sproms.get(NAME).await.unwrap();
    let status = sprom.status.unwrap();
    assert_eq!(
        status.true_reason(condition::DEGRADED),
        Some(reason::ZONES_WITHOUT_SHARD),
        "{:?}",
        status.conditions
    );
    let pods: Api<Pod> = fx.ns.api();
    let shard_zero = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={NAME},zonecontrol.k8s.aws/shard=0"
        )))
        .await
        .unwrap()
        .items;
    assert_eq!(shard_zero.len(), 2);
    for pod in &shard_zero {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        wait_for(
            &format!("{} scraping the targets of every zone", pod.name_any()),
            TIMEOUT,
            || async {
                let scraped = pod_targets(&ip, "targets").await?;
                let addresses: std::collections::BTreeSet<String> =
                    scraped.keys().cloned().collect();
                (addresses == target_addresses)
                    .then_some(())
                    .ok_or(format!("{addresses:?}, want {target_addresses:?}"))
            },
        )
        .await;
    }
}

/// Six metrics targets, two per zone on the real nodes, available: their addresses.
async fn six_metrics_targets(
    fx: &Fixture,
    real: &e2e::real::RealNodes,
) -> std::collections::BTreeSet<String> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = fx.ns.api();
    let target = json!({
        "metadata": {"name": "target"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "target"}},
                 "template": real.metrics_target_template("target")},
    });
    fixture::create(&deployments, target).await;
    let pods: Api<Pod> = fx.ns.api();
    let targets = e2e::pods::wait_available(&pods, "app=target", 6, TIMEOUT).await;
    targets
        .iter()
        .map(|p| {
            format!(
                "{}:8080",
                p.status.as_ref().unwrap().pod_ip.clone().unwrap()
            )
        })
        .collect()
}

/// The HorizontalPodAutoscaler of the ShardedPrometheus, 1 to 4 shards, aiming at
/// `utilization` % of the CPU request.
fn hpa(utilization: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": NAME},
        "spec": {
            "scaleTargetRef": {"apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus", "name": NAME},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": utilization}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    })
}

/// Up: a target below what an idle Prometheus uses drives the HPA to maxReplicas. Down: a
/// target far above the use drives it to minReplicas; the retained shards' pods keep running
/// and count for nothing.
async fn the_hpa_scales_up_then_down_counting_active_shards(fx: &Fixture) {
    let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> = fx.ns.api();
    fixture::apply(&hpas, NAME, MANAGER, &hpa(1)).await;
    let mut seen = Vec::new();
    follow_hpa(fx, &hpas, 4, &mut seen).await;
    let pods_running = fx.prometheus_pods().await.len();
    assert_eq!(
        pods_running, 8,
        "4 shards of 2 replicas run; the HPA counts 4"
    );

    fixture::apply(&hpas, NAME, MANAGER, &hpa(1000)).await;
    follow_hpa(fx, &hpas, 1, &mut seen).await;
    let last = seen.last().cloned().unwrap();
    assert_eq!(last.retained, 3, "{last:?}");
    eprintln!("HPA samples: {}", seen.len());
}

/// The shards whose rules the federator on `port` serves: shard label → rule names (deduplicated
/// per shard), or why not yet.
async fn federated_shards(port: u16) -> Result<BTreeMap<String, Vec<String>>, String> {
    let address = format!("127.0.0.1:{port}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, "/api/v1/rules").await?;
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if code != 200 || value.get("warnings").is_some() {
        return Err(format!("{code}: {body}"));
    }
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for group in value["data"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let shard = rule["labels"]["shard"].as_str().unwrap_or("").to_string();
            let name = rule["name"].as_str().unwrap_or("").to_string();
            let names = shards.entry(shard).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Ok(shards)
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_federator_discovers_the_shards_and_follows_a_scale_without_restart() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-fed").await;
    fx.prometheus_service_account().await;
    let rules: Api<ConfigMap> = fx.ns.api();
    let rule_file = json!({
        "metadata": {"name": "alerts"},
        "data": {"alerts.yaml": "groups:\n- name: alerts\n  interval: 2s\n  rules:\n  - alert: Always\n    expr: vector(1)\n  - record: one\n    expr: vector(1)\n"},
    });
    fixture::create(&rules, rule_file).await;
    let spec = |shards: u32| {
        fixture::on_real_nodes(
            &real,
            json!({
                "shards": shards,
                "replicas": 2,
                "ruleFiles": [{"configMap": "alerts"}],
                "scrapeConfigs": [],
            }),
        )
    };
    fx.apply(spec(2)).await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut federator = ControllerProcess::start(
        "rules-federator",
        &[
            "--listen-address",
            &listen,
            "--discover-sprom",
            NAME,
            "--discover-namespace",
            &fx.ns.name,
        ],
        &[],
    );
    let pid = federator.pid();
    let expect = |shards: u32| -> BTreeMap<String, Vec<String>> {
        (0..shards)
            .map(|s| (s.to_string(), vec!["Always".to_string(), "one".to_string()]))
            .collect()
    };
    for shards in [2u32, 3, 1] {
        if shards != 2 {
            fx.apply(spec(shards)).await;
        }
        wait_for(
            &format!("the federator serving the rules of {shards} shards"),
            Duration::from_secs(180),
            || async {
                let served = federated_shards(port).await?;
                (served == expect(shards))
                    .then_some(())
                    .ok_or(format!("{served:?}"))
            },
        )
        .await;
        assert!(federator.is_running(), "the federator kept running");
        assert_eq!(federator.pid(), pid);
    }
}

/// Labels the test namespace to enforce Pod Security `restricted`, and proves the API server
/// enforces it: a pod with no security context is refused (dry run).
async fn enforce_restricted(fx: &Fixture, image: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fx.ns.client.clone());
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(&fx.ns.name, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    let pods: Api<Pod> = fx.ns.api();
    let bare = json!({
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    });
    let refused = pods
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &serde_json::from_value(bare).unwrap(),
        )
        .await
        .expect_err("a pod without a security context is refused in a restricted namespace");
    assert!(
        refused.to_string().contains("restricted"),
        "refused for another reason: {refused}"
    );
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_shards_run_in_a_restricted_namespace_with_a_sidecar_beside_prometheus() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-restricted").await;
    fx.prometheus_service_account().await;
    enforce_restricted(&fx, &real.metrics_target_image).await;

    // The sidecar is the metrics target (it serves on 8080 beside Prometheus's 9090), restricted
    // itself: no escalation, no capability.
    let generation = fx
        .apply(fixture::on_real_nodes(
            &real,
            json!({
                "shards": 3,
                // Every shard scrapes its own pod's sidecar: a static target, kept on every shard
                // (not hashed to one) by prometheus-operator's opt-out label.
                "scrapeConfigs": [{"job_name": "sidecar", "scrape_interval": "2s",
                    "static_configs": [{"targets": ["localhost:8080"],
                        "labels": {"__tmp_disable_sharding": "true"}}]}],
                "podMetadata": {"labels": {"team": "observability"}},
                "containers": [{
                    "name": "sidecar",
                    "image": real.metrics_target_image,
                    "imagePullPolicy": "Never",
                    "args": ["serve"],
                    "ports": [{"name": "sidecar", "containerPort": 8080}],
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }],
            }),
        ))
        .await;
    fx.wait_ready_shards("3 ready shards in the restricted namespace", generation, 3)
        .await;
    let shard_pods = fx.prometheus_pods().await;
    assert_eq!(shard_pods.len(), 3);
    for pod in &shard_pods {
        let name = pod.name_any();
        assert_eq!(
            pod.labels().get("team").map(String::as_str),
            Some("observability")
        );
        let spec = pod.spec.as_ref().unwrap();
        let seccomp = spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.seccomp_profile.as_ref())
            .map(|profile| profile.type_.as_str());
        assert_eq!(seccomp, Some("RuntimeDefault"), "{name}");
        // Both containers run (not only started): every container ready.
        let statuses = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.clone())
            .unwrap_or_default();
        let running: Vec<(&str, bool)> = statuses
            .iter()
            .map(|status| (status.name.as_str(), status.ready))
            .collect();
        assert_eq!(running, [("prometheus", true), ("sidecar", true)], "{name}");
        // Prometheus scrapes the sidecar through localhost: the two share the pod.
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        wait_for(&format!("{name} scraping its sidecar"), TIMEOUT, || async {
            let scraped = pod_targets(&ip, "sidecar").await?;
            if scraped.values().any(|health| health == "up") {
                Ok(())
            } else {
                Err(format!("{scraped:?}"))
            }
        })
        .await;
    }
}

/// The PersistentVolumeClaims of shard `index` (one per replica).
async fn claims_of_shard(ns: &TestNamespace, index: u32) -> Vec<String> {
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = ns.api();
    let prefix = format!("data-{NAME}-shard-{index}-");
    claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .map(|claim| claim.name_any())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn sprom_paused_changes_nothing_and_deleted_shards_take_their_claims_along() {
    let fx = new_fixture("sprom-paused").await;
    fx.prometheus_service_account().await;
    let generation = fx.apply(claimed_spec(3, false)).await;
    fx.wait_status("3 shards", generation, |s| {
        let shards = s.status.as_ref().map_or(0, |s| s.shards);
        (shards == 3)
            .then_some(())
            .ok_or(format!("{shards} shards"))
    })
    .await;
    // The StatefulSet controller creates each replica's claim before its pod.
    let replicas = claimed_spec(3, false)["replicas"].as_u64().unwrap() as usize;
    for index in 0..3 {
        wait_for(&format!("shard {index}'s claims"), TIMEOUT, || async {
            let claims = claims_of_shard(&fx.ns, index).await;
            (claims.len() == replicas)
                .then_some(())
                .ok_or(format!("{claims:?}"))
        })
        .await;
    }
    paused_changes_nothing(&fx, replicas).await;

    // Unpaused: shard 2 is deleted (Delete scale-down) and its claim with it; the others stay.
    let generation = fx.apply(claimed_spec(2, false)).await;
    fx.wait_status("2 shards", generation, |s| {
        let status = s.status.as_ref().unwrap();
        (status.shards == 2 && status.condition(condition::PAUSED).is_none())
            .then_some(())
            .ok_or(format!("{} shards, {:?}", status.shards, status.conditions))
    })
    .await;
    wait_for("shard 2's claim deleted", TIMEOUT, || async {
        let claims = claims_of_shard(&fx.ns, 2).await;
        claims.is_empty().then_some(()).ok_or(format!("{claims:?}"))
    })
    .await;
    for index in 0..2 {
        assert_eq!(
            claims_of_shard(&fx.ns, index).await.len(),
            replicas,
            "shard {index}'s claims stay"
        );
    }
}

/// [`spec`] of `shards` shards over the three zones, with a claim per replica deleted with its
/// shard, scaled-down shards deleted, paused as `paused`.
fn claimed_spec(shards: u32, paused: bool) -> Value {
    let mut spec = spec(shards, &["pods"], &["zone-a", "zone-b", "zone-c"]);
    spec["storage"] = json!({"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }}});
    spec["persistentVolumeClaimRetentionPolicy"] = json!({"whenDeleted": "Delete"});
    spec["shardRetentionPolicy"] = json!({"whenScaled": "Delete"});
    spec["paused"] = json!(paused);
    spec
}

/// Paused, with a scale-down and a new job: Paused is reported and nothing changes, however
/// often the resource is reconciled.
async fn paused_changes_nothing(fx: &Fixture, replicas: usize) {
    let zones = ["zone-a", "zone-b", "zone-c"];
    let (secrets_before, sets_before) = children(&fx.ns).await;
    let mut paused = claimed_spec(2, true);
    paused["scrapeConfigs"] = spec(2, &["pods", "more"], &zones)["scrapeConfigs"].clone();
    let paused_generation = fx.apply(paused).await;
    let reconciles = fx.reconciles().await;
    wait_for("Paused reported", TIMEOUT, || async {
        let sprom = fx.sproms.get(NAME).await.map_err(|e| e.to_string())?;
        let status = sprom.status.unwrap_or_default();
        match status.true_reason(condition::PAUSED) {
            Some(reason::PAUSED) => Ok(status),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // More reconciles, triggered by a change to each shard's StatefulSet: still nothing
    // changes.
    let sets: Api<StatefulSet> = fx.ns.api();
    for i in 0..3 {
        let mut set = sets.get(&format!("{NAME}-shard-{i}")).await.unwrap();
        set.metadata
            .annotations
            .get_or_insert_default()
            .insert("e2e/touch".into(), "1".into());
        // A child event triggers a reconcile of the paused resource.
        sets.replace(&set.name_any(), &PostParams::default(), &set)
            .await
            .unwrap();
    }
    wait_for("reconciles of the paused resource", TIMEOUT, || async {
        let now = fx.reconciles().await;
        (now >= reconciles + 3.0)
            .then_some(())
            .ok_or(format!("{now} reconciles, {reconciles} before"))
    })
    .await;
    let (secrets_after, sets_after) = children(&fx.ns).await;
    assert_eq!(
        sets_after.keys().collect::<Vec<_>>(),
        sets_before.keys().collect::<Vec<_>>(),
        "no shard deleted while paused"
    );
    for (name, secret) in &secrets_after {
        assert_eq!(
            config_of(secret),
            config_of(&secrets_before[name]),
            "{name}'s configuration unchanged while paused"
        );
    }
    let status = fx.sproms.get(NAME).await.unwrap().status.unwrap();
    assert!(
        status.observed_generation < paused_generation,
        "the paused spec is not observed as acted on"
    );
    assert_eq!(claims_of_shard(&fx.ns, 2).await.len(), replicas);
}
