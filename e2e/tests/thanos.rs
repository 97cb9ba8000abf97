//! ShardedPrometheus with `spec.thanos` on the real nodes, as the shard controller's
//! ServiceAccount: a Thanos sidecar beside every shard replica's real Prometheus, a real Thanos
//! Querier over the sidecars that the headless Service `<name>-thanos-sidecar` lists, and the
//! blocks the sidecars upload to LocalStack's S3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::fixture;
use e2e::fixture::Wanted;
use e2e::real::RealNodes;
use e2e::thanos::{
    BUCKET, ThanosQuery, ThanosStore, block_metas, objstore_config, pod_s3, samples,
    sidecar_endpoints,
};
use e2e::{Cluster, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{Value, json};
use zone_api::sprom::{condition, reason};

const TIMEOUT: Duration = Duration::from_secs(180);
/// The first block is cut after 1.5 block lengths of samples and a compaction tick (1 min),
/// then shipped by the sidecar's next sync (30 s).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(360);
const MANAGER: &str = "e2e-thanos";
const NAME: &str = "prom";
const SERVICE: &str = "prom-thanos-sidecar";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// How long a retained shard is kept: its deadline passes within the test.
const RETAINED_FOR: &str = "2m";
/// From a removed shard's retirement to its deletion: the pods settle on the retired
/// configuration (75 s), snapshot, upload; a failed attempt is retried after 15 s.
const FINAL_UPLOAD_TIMEOUT: Duration = Duration::from_secs(420);

type Fixture = fixture::Sprom;

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn thanos_a_querier_over_the_sidecar_service_sees_each_target_once_and_blocks_reach_s3() {
    let cluster = Cluster::get();
    let real = RealNodes::of(&cluster);
    let fx = Fixture::new("thanos", NAME, MANAGER, TIMEOUT).await;
    fx.prometheus_service_account().await;
    // Six targets spread over the zones: two per zone, so two per shard.
    real.run_metrics_targets(&fx.ns, "target", 6, TIMEOUT).await;
    let (s3, bucket) = objstore(&cluster, &fx).await;

    let generation = fx.apply(spec(&real, &fx, 3, "Retain")).await;
    fx.wait_ready_shards("3 shards of 2 replicas with their sidecars", generation, 3)
        .await;
    let endpoints = sidecar_endpoints(&fx.ns, SERVICE, 6, TIMEOUT).await;
    let query = ThanosQuery::start(&endpoints).await;
    query.wait_endpoints(6, TIMEOUT).await;

    every_target_once_per_shard_deduplicated(&query).await;
    blocks_reach_the_bucket(s3, &fx.ns.name).await;
    let store = ThanosStore::start(&bucket).await;
    let from_bucket = ThanosQuery::start(std::slice::from_ref(&store.grpc)).await;
    from_bucket.wait_endpoints(1, TIMEOUT).await;
    a_retained_shard_stays_behind_the_service_and_queryable(&real, &fx, &query).await;
    let held = settled_samples(&query, 2).await;
    a_removed_shard_is_deleted_once_all_it_held_is_in_the_bucket(&fx, &from_bucket, 2, held).await;
    an_upload_cut_keeps_the_shard_until_the_store_is_back(
        &real,
        &fx,
        &query,
        &from_bucket,
        &bucket,
    )
    .await;
    no_block_twice_in_the_bucket(s3, &fx.ns.name).await;
}

/// `shards` shards of two replicas on the real nodes scraping the targets every 2 s, each pod
/// with a sidecar uploading 1-minute blocks to the bucket of the Secret `objstore`; a scale-down
/// retains the shards removed for two minutes (`when_scaled` Retain) or deletes them.
fn spec(real: &RealNodes, fx: &Fixture, shards: u32, when_scaled: &str) -> Value {
    fixture::on_real_nodes(
        real,
        json!({
            "shards": shards,
            "shardRetentionPolicy": {"whenScaled": when_scaled, "retain": {"retentionPeriod": RETAINED_FOR}},
            "replicas": 2,
            "scrapeConfigs": [{
                "job_name": "targets",
                "scrape_interval": "2s",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
                "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
            }],
            "thanos": {
                "image": real.thanos_image,
                "objectStorageConfig": {"name": "objstore", "key": "objstore.yml"},
                "blockSize": "1m",
            },
        }),
    )
}

/// LocalStack's S3 as the pods reach it: the bucket [`BUCKET`], made here, and the Secret
/// `objstore` holding the sidecars' objstore configuration. Returns the address this host
/// reaches it at, and the configuration.
async fn objstore(cluster: &Cluster, fx: &Fixture) -> (SocketAddr, String) {
    let s3 = pod_s3(cluster).await;
    let config = objstore_config(&s3.to_string(), &fx.ns.name);
    let secrets: Api<Secret> = fx.ns.api();
    fixture::create(
        &secrets,
        json!({"metadata": {"name": "objstore"}, "stringData": {"objstore.yml": config}}),
    )
    .await;
    (s3, config)
}

/// Replaces the sidecars' objstore configuration in the Secret `objstore` (read by each upload
/// attempt as it starts).
async fn set_objstore(fx: &Fixture, config: &str) {
    let secrets: Api<Secret> = fx.ns.api();
    let patch = json!({"stringData": {"objstore.yml": config}});
    secrets
        .patch(
            "objstore",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// Through the Querier: every shard scrapes its zone's two targets, each target is one series
/// once the replicas are deduplicated and two without.
async fn every_target_once_per_shard_deduplicated(query: &ThanosQuery) {
    let expected: BTreeMap<(String, String), String> = ZONES
        .iter()
        .enumerate()
        .map(|(shard, zone)| ((shard.to_string(), (*zone).to_string()), "2".to_string()))
        .collect();
    wait_for(
        "count by (shard, zone) (up{job=\"targets\"}) through the Querier",
        TIMEOUT,
        || async {
            let result = query
                .query("count by (shard, zone) (up{job=\"targets\"} == 1)")
                .await?;
            let counted: BTreeMap<(String, String), String> = samples(&result)
                .into_iter()
                .map(|(labels, value)| ((labels["shard"].clone(), labels["zone"].clone()), value))
                .collect();
            (counted == expected)
                .then_some(())
                .ok_or(format!("{counted:?}"))
        },
    )
    .await;
    // Every replica scrapes them (the slower ones a scrape later): 12 series without dedup.
    wait_for(
        "every replica's series, 12 without dedup",
        TIMEOUT,
        || async {
            let raw = query.query_raw("count(up{job=\"targets\"})").await?;
            let count = samples(&raw).first().map(|(_, value)| value.clone());
            (count.as_deref() == Some("12"))
                .then_some(())
                .ok_or(format!("{count:?}"))
        },
    )
    .await;
    let deduplicated = query.query("count(up{job=\"targets\"})").await.unwrap();
    assert_eq!(samples(&deduplicated)[0].1, "6", "one series per target");
}

/// A block of every shard × replica in the bucket, its meta.json carrying the pod's external
/// labels (shard, zone and prometheus_replica).
async fn blocks_reach_the_bucket(s3: SocketAddr, prefix: &str) {
    wait_for(
        "a block of each of the 6 pods in the bucket",
        UPLOAD_TIMEOUT,
        || async {
            let mut replicas = std::collections::BTreeSet::new();
            for key in block_metas(s3, prefix).await? {
                let (_, meta) =
                    e2e::process::http_get_from(s3, &format!("/{BUCKET}/{key}")).await?;
                let meta: Value = serde_json::from_str(&meta).map_err(|e| format!("{key}: {e}"))?;
                let labels = &meta["thanos"]["labels"];
                let (Some(shard), Some(zone), Some(replica)) = (
                    labels["shard"].as_str(),
                    labels["zone"].as_str(),
                    labels["prometheus_replica"].as_str(),
                ) else {
                    return Err(format!("{key}: labels {labels}"));
                };
                let index: usize = shard.parse().map_err(|_| format!("shard {shard}"))?;
                assert_eq!(ZONES.get(index), Some(&zone), "{key}: {labels}");
                replicas.insert(replica.to_string());
            }
            (replicas.len() == 6)
                .then_some(())
                .ok_or(format!("blocks of {replicas:?}"))
        },
    )
    .await;
}

/// Scaled to 2, shard 2 is retained: it scrapes nothing more, but its pods stay behind the
/// sidecars' Service, and the Querier still answers with its zone's series of the last minutes.
async fn a_retained_shard_stays_behind_the_service_and_queryable(
    real: &RealNodes,
    fx: &Fixture,
    query: &ThanosQuery,
) {
    let generation = fx.apply(spec(real, fx, 2, "Retain")).await;
    fx.wait_status("shard 2 retained", generation, |sprom| {
        let status = sprom.status.clone().unwrap_or_default();
        let retained: Vec<i32> = status.retained_shards.iter().map(|r| r.index).collect();
        (status.shards == 2 && retained == [2])
            .then_some(())
            .ok_or(format!("{} shards, retained {retained:?}", status.shards))
    })
    .await;
    sidecar_endpoints(&fx.ns, SERVICE, 6, TIMEOUT).await;
    let result = query
        .query("count by (shard, zone) (count_over_time(up{job=\"targets\", shard=\"2\"}[10m]))")
        .await
        .unwrap();
    let counted: Vec<_> = samples(&result)
        .into_iter()
        .map(|(labels, value)| (labels["zone"].clone(), value))
        .collect();
    assert_eq!(
        counted,
        [("zone-c".to_string(), "2".to_string())],
        "{result}"
    );
}

/// Every sample shard `shard`'s replicas hold (raw: each replica's own), once the shard scrapes
/// no more: the count the Querier gives, unchanged for 10 s (five scrape intervals).
async fn settled_samples(query: &ThanosQuery, shard: u32) -> u64 {
    let promql = format!("sum(count_over_time(up{{job=\"targets\", shard=\"{shard}\"}}[1h]))");
    let seen: std::cell::Cell<Option<(std::time::Instant, u64)>> = std::cell::Cell::new(None);
    wait_for(
        &format!("shard {shard}'s sample count, unchanged for 10 s"),
        TIMEOUT,
        || async {
            let count = sample_count(query, &promql).await?;
            match seen.get() {
                Some((since, before)) if before == count => {
                    if since.elapsed() >= Duration::from_secs(10) {
                        return Ok(count);
                    }
                }
                _ => seen.set(Some((std::time::Instant::now(), count))),
            }
            Err(format!("{count} since {:?}", seen.get()))
        },
    )
    .await
}

/// The single value of `promql` (raw), as a whole number; 0 for an empty result.
async fn sample_count(query: &ThanosQuery, promql: &str) -> Result<u64, String> {
    let result = query.query_raw(promql).await?;
    if result.as_array().is_some_and(Vec::is_empty) {
        return Ok(0);
    }
    samples(&result)
        .first()
        .and_then(|(_, value)| value.parse::<f64>().ok())
        .map(|value| value as u64)
        .ok_or(format!("{promql}: {result}"))
}

/// Shard `shard`'s StatefulSet is gone once the bucket holds every one of the `held` samples its
/// replicas held (before: only the blocks the sidecars had shipped, the head missing); and the
/// Querier over the bucket alone counts `held` of them.
async fn a_removed_shard_is_deleted_once_all_it_held_is_in_the_bucket(
    fx: &Fixture,
    from_bucket: &ThanosQuery,
    shard: u32,
    held: u64,
) {
    let promql = format!("sum(count_over_time(up{{job=\"targets\", shard=\"{shard}\"}}[1h]))");
    let shipped = sample_count(from_bucket, &promql).await.unwrap();
    eprintln!(
        "shard {shard}: {held} samples held, {shipped} in the bucket before its final upload"
    );
    assert!(
        shipped < held,
        "the head is not in the bucket before the final upload: {shipped} of {held}"
    );
    let stateful_sets: Api<StatefulSet> = fx.ns.api();
    let name = format!("{NAME}-shard-{shard}");
    wait_for(
        &format!("{name} deleted after its final upload"),
        FINAL_UPLOAD_TIMEOUT,
        || async {
            match stateful_sets
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => {
                    let sprom = fx.sproms.get(NAME).await.map_err(|e| e.to_string())?;
                    Err(format!("{:?}", sprom.status.map(|s| s.conditions)))
                }
            }
        },
    )
    .await;
    wait_for(
        &format!("every sample of shard {shard} through the Querier over the bucket"),
        TIMEOUT,
        || async {
            let count = sample_count(from_bucket, &promql).await?;
            (count == held)
                .then_some(())
                .ok_or(format!("{count} of {held}"))
        },
    )
    .await;
    eprintln!("shard {shard}: {held} samples in the bucket after its deletion");
}

/// Scaled to 1 under Delete with the object store unreachable: shard 1 is kept, retired, and its
/// status says why; the controller is restarted, as after an upgrade whose Thanos image is
/// another (the spec now names the same image under another tag, so the active shard rolls and
/// shard 1's pods keep the sidecar they run); once the store is back, the next attempt uploads
/// with that sidecar's image, the only one the controller's admission policy lets it add, and
/// the shard goes with no sample lost.
async fn an_upload_cut_keeps_the_shard_until_the_store_is_back(
    real: &RealNodes,
    fx: &Fixture,
    query: &ThanosQuery,
    from_bucket: &ThanosQuery,
    bucket: &str,
) {
    let unreachable = objstore_config("127.0.0.1:1", &fx.ns.name);
    set_objstore(fx, &unreachable).await;
    let generation = fx.apply(spec(real, fx, 1, "Delete")).await;
    let held = settled_samples(query, 1).await;
    let wanted = Wanted {
        type_: condition::REMOVED_SHARDS_UPLOADED,
        status: "False",
        reason: reason::UPLOAD_FAILED,
    };
    fx.wait_condition(generation, wanted, FINAL_UPLOAD_TIMEOUT, |message| {
        message.contains("shard 1") && message.contains("attempt 1 failed")
    })
    .await;
    let stateful_sets: Api<StatefulSet> = fx.ns.api();
    assert!(
        stateful_sets
            .get_opt(&format!("{NAME}-shard-1"))
            .await
            .unwrap()
            .is_some(),
        "a shard whose upload failed is kept"
    );
    // A new controller knows the failed attempt only from the pod: the next one is attempt 2.
    let upgraded = format!("{}-upgraded", real.thanos_image);
    real.alias_image(&real.thanos_image, &upgraded);
    let mut next = spec(real, fx, 1, "Delete");
    next["thanos"]["image"] = json!(upgraded);
    let generation = fx.apply(next).await;
    fx.restart_controller();
    set_objstore(fx, bucket).await;
    a_removed_shard_is_deleted_once_all_it_held_is_in_the_bucket(fx, from_bucket, 1, held).await;
    fx.wait_true(
        generation,
        condition::REMOVED_SHARDS_UPLOADED,
        reason::NONE_PENDING,
    )
    .await;
}

/// No block is in the bucket twice: the blocks of each replica do not overlap in time (a
/// snapshot's blocks that the sidecar had shipped already were skipped, and so were those an
/// earlier attempt finished).
async fn no_block_twice_in_the_bucket(s3: SocketAddr, prefix: &str) {
    let mut blocks: BTreeMap<String, Vec<(i64, i64, String)>> = BTreeMap::new();
    for key in block_metas(s3, prefix).await.unwrap() {
        let (_, meta) = e2e::process::http_get_from(s3, &format!("/{BUCKET}/{key}"))
            .await
            .unwrap();
        let meta: Value = serde_json::from_str(&meta).unwrap();
        let replica = meta["thanos"]["labels"]["prometheus_replica"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let range = (
            meta["minTime"].as_i64().unwrap(),
            meta["maxTime"].as_i64().unwrap(),
            key.clone(),
        );
        blocks.entry(replica).or_default().push(range);
    }
    for (replica, mut ranges) in blocks {
        ranges.sort();
        for pair in ranges.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{replica}: blocks overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}
