//! The shards' children on the kwok nodes: pods pinned to their zones, a config change reaching
//! every shard's Secret in place, deleted children restored, a scale-down pruning a shard; agents
//! and their scale-down.

use kube::api::DeleteParams;

use super::*;

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
