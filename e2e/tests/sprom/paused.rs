//! A paused ShardedPrometheus changes nothing however often it is reconciled; unpaused, a deleted
//! shard takes its PersistentVolumeClaims along.

use super::*;

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
