//! The final upload of a removed shard, end to end (`make perf`, `e2e/perf/upload.sh`), on the
//! local zonal cluster's real nodes against LocalStack's S3, with the release shard-controller.
//!
//! A ShardedPrometheus of 2 shards × 1 replica with `spec.thanos` (a bucket of its own) and
//! `Retain` for [`RETAINED_FOR`]; shard 1's pod is given a TSDB block of `UPLOAD_PERF_MIB` (1024)
//! MiB; the resource is scaled to 1. Measured: from shard 1's deletion deadline
//! (`status.retainedShards`) to its StatefulSet gone, with the controller's events in between.
//! Checked: the bucket then holds the block, every byte of it. Target: `UPLOAD_PERF_TARGET_S`
//! (120) seconds.
//!
//! The block: promtool makes one from a few samples 6 to 8 hours old (before the pod: it overlaps
//! no block Prometheus cuts, so it is never compacted with one); its chunk segment is padded with
//! random bytes to the size (Prometheus maps the segment and reads only what the index points at;
//! random bytes do not compress on the way); its meta.json says compaction level 2, so the
//! sidecar, which ships level-1 blocks only, leaves all of it to the final upload
//! (`--shipper.upload-compacted`). It is written into the pod's emptyDir on its node, owned by
//! the pod's user, and Prometheus (given --web.enable-lifecycle for this) is restarted through
//! `/-/quit`: blocks are loaded when the TSDB opens.
//!
//! Settings (environment): `UPLOAD_PERF_MIB` (1024), `UPLOAD_PERF_TARGET_S` (120),
//! `UPLOAD_PERF_TIMEOUT_SECONDS` (600). Exit status: 0 when the target is met, 1 otherwise.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::fixture::{self, on_real_nodes};
use e2e::perf::{exit_on_targets, setting};
use e2e::process::http_request;
use e2e::real::RealNodes;
use e2e::{Cluster, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::{Value, json};

const NAME: &str = "perf";
const MANAGER: &str = "upload-perf";
const BUCKET: &str = "upload-perf";
/// The shard removed by the scale-down.
const SHARD: u32 = 1;
/// Long enough for the retained shard's pod to settle on its retired configuration (about 75 s)
/// before the deadline, as it has under any real retention period: what is measured is the
/// deadline's own work.
const RETAINED_FOR: &str = "3m";
const PROMETHEUS_PORT: u16 = 9090;
/// The pods' user (the shard controller's securityContext).
const POD_USER: u32 = 65534;

fn timeout() -> Duration {
    Duration::from_secs(setting("UPLOAD_PERF_TIMEOUT_SECONDS", 600))
}

type Fixture = fixture::Sprom;

/// `shards` shards of one replica on the real nodes, scraping themselves, uploading to the bucket
/// of the Secret `objstore`; shards removed are retained for [`RETAINED_FOR`].
fn spec(real: &RealNodes, shards: u32) -> Value {
    on_real_nodes(
        real,
        json!({
            "shards": shards,
            "replicas": 1,
            "shardRetentionPolicy": {"whenScaled": "Retain", "retain": {"retentionPeriod": RETAINED_FOR}},
            "additionalArgs": [{"name": "web.enable-lifecycle"}],
            "scrapeConfigs": [{
                "job_name": "self",
                "static_configs": [{"targets": [format!("localhost:{PROMETHEUS_PORT}")]}],
            }],
            "thanos": {
                "image": real.thanos_image,
                "objectStorageConfig": {"name": "objstore", "key": "objstore.yml"},
            },
        }),
    )
}

/// The bucket [`BUCKET`] (made if missing) and the Secret `objstore` pointing the pods at the
/// namespace's part of it. Returns the address of LocalStack's S3.
async fn objstore(cluster: &Cluster, fx: &Fixture) -> SocketAddr {
    let endpoint = cluster
        .var("E2E_POD_S3_ENDPOINT")
        .filter(|endpoint| !endpoint.is_empty())
        .expect("E2E_POD_S3_ENDPOINT: LocalStack's S3 as the real nodes' pods reach it");
    let s3: SocketAddr = endpoint.parse().unwrap();
    let (code, body) = http_request(s3, "PUT", &format!("/{BUCKET}"), None)
        .await
        .unwrap();
    assert_eq!(code, 200, "creating the bucket: {body}");
    let config = format!(
        "type: S3\nconfig:\n  bucket: {BUCKET}\n  endpoint: {endpoint}\n  insecure: true\n  \
         access_key: test\n  secret_key: test\n  region: us-east-1\n  bucket_lookup_type: path\n\
         prefix: {}\n",
        fx.ns.name
    );
    let secrets: Api<Secret> = fx.ns.api();
    fixture::create(
        &secrets,
        json!({"metadata": {"name": "objstore"}, "stringData": {"objstore.yml": config}}),
    )
    .await;
    s3
}

/// The keys and sizes of the bucket's objects under `prefix` (one listing page: a block is a
/// handful of objects).
async fn objects(s3: SocketAddr, prefix: &str) -> Result<Vec<(String, u64)>, String> {
    let (code, body) = http_request(
        s3,
        "GET",
        &format!("/{BUCKET}?list-type=2&prefix={prefix}"),
        None,
    )
    .await?;
    if code != 200 {
        return Err(format!("listing {prefix}: {code} {body}"));
    }
    let tag = |text: &str, name: &str| -> Vec<String> {
        text.split(&format!("<{name}>"))
            .skip(1)
            .filter_map(|rest| rest.split(&format!("</{name}>")).next())
            .map(str::to_string)
            .collect()
    };
    Ok(tag(&body, "Contents")
        .iter()
        .filter_map(|object| {
            let key = tag(object, "Key").pop()?;
            let size = tag(object, "Size").pop()?.parse().ok()?;
            Some((key, size))
        })
        .collect())
}

/// Removes the namespace's objects from the bucket: LocalStack keeps them on disk otherwise.
async fn empty_bucket(s3: SocketAddr, prefix: &str) {
    for (key, _) in objects(s3, prefix).await.unwrap_or_default() {
        let _ = http_request(s3, "DELETE", &format!("/{BUCKET}/{key}"), None).await;
    }
}

/// The data volume of `pod` as its node's kubelet keeps it on this host.
fn data_volume(pod: &Pod, zones: &BTreeMap<String, String>) -> PathBuf {
    let node = e2e::pods::node_of(pod).expect("the pod is scheduled");
    let zone = zones.get(node).expect("the pod's node is a real node");
    let uid = pod.metadata.uid.as_deref().expect("the pod's uid");
    e2e::cluster::e2e_dir()
        .join(".cluster/nodes")
        .join(zone)
        .join("root/var/lib/kubelet/pods")
        .join(uid)
        .join("volumes/kubernetes.io~empty-dir/data")
}

/// Makes the block in `volume` (see the module's header): `mib` MiB, owned by the pod's user.
/// Returns its ULID.
fn put_block(volume: &Path, mib: u64) -> String {
    let staging = volume.join("upload-perf-staging");
    std::fs::create_dir_all(&staging).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start = (now - 8 * 3600) / 7200 * 7200 + 600;
    let mut input = String::from("# TYPE upload_perf_padding gauge\n");
    for i in 0..10 {
        input.push_str(&format!("upload_perf_padding {i} {}\n", start + i * 60));
    }
    input.push_str("# EOF\n");
    let input_file = staging.join("input.om");
    std::fs::write(&input_file, input).unwrap();
    let blocks = staging.join("blocks");
    let promtool = e2e::prometheus::binaries().promtool;
    let output = std::process::Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input_file)
        .arg(&blocks)
        .output()
        .unwrap();
    assert!(output.status.success(), "promtool: {output:?}");
    let made: Vec<_> = std::fs::read_dir(&blocks).unwrap().flatten().collect();
    assert_eq!(made.len(), 1, "one block from promtool: {made:?}");
    let ulid = made[0].file_name().to_string_lossy().into_owned();
    let block = made[0].path();
    pad_chunks(&block.join("chunks/000001"), mib * 1024 * 1024);
    let meta_file = block.join("meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_file).unwrap()).unwrap();
    meta["compaction"]["level"] = json!(2);
    std::fs::write(&meta_file, serde_json::to_vec(&meta).unwrap()).unwrap();
    chown_tree(&block);
    // In place at once: the TSDB sees a whole block or none.
    std::fs::rename(&block, volume.join(&ulid)).unwrap();
    std::fs::remove_dir_all(&staging).unwrap();
    ulid
}

/// Appends random bytes to the chunk segment `file` until it is `size` bytes.
fn pad_chunks(file: &Path, size: u64) {
    let mut segment = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    let have = segment.metadata().unwrap().len();
    let mut random = std::fs::File::open("/dev/urandom").unwrap();
    std::io::copy(
        &mut std::io::Read::take(&mut random, size.saturating_sub(have)),
        &mut segment,
    )
    .unwrap();
    segment.flush().unwrap();
}

/// Gives `dir` and what is in it (two levels: a block) to the pod's user.
fn chown_tree(dir: &Path) {
    std::os::unix::fs::chown(dir, Some(POD_USER), Some(POD_USER)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            chown_tree(&path);
        } else {
            std::os::unix::fs::chown(&path, Some(POD_USER), Some(POD_USER)).unwrap();
        }
    }
}

/// Prometheus's `prometheus_tsdb_storage_blocks_bytes` at `address`.
async fn loaded_bytes(address: SocketAddr) -> Result<f64, String> {
    let (code, body) = http_request(address, "GET", "/metrics", None).await?;
    if code != 200 {
        return Err(format!("/metrics: {code}"));
    }
    body.lines()
        .find_map(|line| line.strip_prefix("prometheus_tsdb_storage_blocks_bytes "))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| "no prometheus_tsdb_storage_blocks_bytes".to_string())
}

/// The deletion deadline of the retained shard [`SHARD`].
async fn deadline(fx: &Fixture) -> Result<Timestamp, String> {
    let sprom = fx.sproms.get(NAME).await.map_err(|e| e.to_string())?;
    let retained = sprom.status.map(|s| s.retained_shards).unwrap_or_default();
    retained
        .iter()
        .find(|shard| shard.index == SHARD as i32)
        .and_then(|shard| shard.deletion_deadline.as_deref())
        .ok_or(format!("retained: {retained:?}"))?
        .parse()
        .map_err(|e| format!("{e}"))
}

/// The shard's pod with the block loaded by its Prometheus: the pod and the block's ULID.
async fn shard_holding_a_block(cluster: &Cluster, fx: &Fixture, mib: u64) -> (Pod, String) {
    let pods: Api<Pod> = fx.ns.api();
    let pod = pods.get(&format!("{NAME}-shard-{SHARD}-0")).await.unwrap();
    let zones = e2e::real::nodes(&cluster.client().await).await;
    let volume = data_volume(&pod, &zones);
    println!("-- writing a block of {mib} MiB into {}", volume.display());
    let ulid = put_block(&volume, mib);
    let ip: std::net::IpAddr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .expect("the pod's IP")
        .parse()
        .unwrap();
    let address = SocketAddr::new(ip, PROMETHEUS_PORT);
    let (code, body) = http_request(address, "POST", "/-/quit", None)
        .await
        .unwrap();
    assert_eq!(code, 200, "/-/quit: {body}");
    #[allow(clippy::cast_precision_loss)]
    let size = (mib * 1024 * 1024) as f64;
    let loaded = wait_for("Prometheus restarted with the block", timeout(), || async {
        let bytes = loaded_bytes(address).await?;
        (bytes >= size)
            .then_some(bytes)
            .ok_or(format!("{bytes} bytes of blocks"))
    })
    .await;
    println!("-- shard {SHARD}'s Prometheus restarted, {loaded} bytes of blocks loaded");
    (pod, ulid)
}

async fn measure(cluster: &Cluster) -> BTreeMap<&'static str, bool> {
    let mib: u64 = setting("UPLOAD_PERF_MIB", 1024);
    let target_s: f64 = setting("UPLOAD_PERF_TARGET_S", 120.0);
    let real = RealNodes::of(cluster);
    let fx = Fixture::new("upload-perf", NAME, MANAGER, timeout()).await;
    fx.prometheus_service_account().await;
    let s3 = objstore(cluster, &fx).await;
    let generation = fx.apply(spec(&real, 2)).await;
    fx.wait_ready_shards("2 shards with their sidecars", generation, 2)
        .await;
    let (_, ulid) = shard_holding_a_block(cluster, &fx, mib).await;

    let generation = fx.apply(spec(&real, 1)).await;
    let deadline = wait_for("shard 1 retained", timeout(), || deadline(&fx)).await;
    println!("-- scaled to 1 (generation {generation}): shard {SHARD} retained until {deadline}");
    let stateful_sets: Api<StatefulSet> = fx.ns.api();
    let name = format!("{NAME}-shard-{SHARD}");
    let deleted = wait_for(&format!("{name} deleted"), timeout(), || async {
        match stateful_sets.get_opt(&name).await {
            Ok(None) => Ok(Timestamp::now()),
            Ok(Some(_)) => Err("still there".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let took = deleted.duration_since(deadline).as_secs_f64();

    for event in fixture::events(&fx.ns, |e| {
        e.reason.as_deref().is_some_and(|r| r.starts_with("Shard"))
    })
    .await
    {
        let at = event.event_time.as_ref().map(|t| t.0.to_string());
        println!(
            "   event {}: {} ({})",
            at.unwrap_or_default(),
            event.reason.unwrap_or_default(),
            event.note.unwrap_or_default()
        );
    }
    let uploaded = objects(s3, &format!("{}/{ulid}/", fx.ns.name))
        .await
        .unwrap();
    let bytes: u64 = uploaded.iter().map(|(_, size)| size).sum();
    println!(
        "upload perf: deadline {deadline} -> StatefulSet {name} deleted {deleted}: {took:.1} s for a shard holding {mib} MiB; block {ulid}: {} objects, {bytes} bytes in the bucket (target <= {target_s} s)",
        uploaded.len()
    );
    empty_bucket(s3, &fx.ns.name).await;
    let whole = bytes >= mib * 1024 * 1024;
    if !whole {
        eprintln!("upload perf: the bucket holds {bytes} bytes of the block, not {mib} MiB");
    }
    let Fixture { ns, .. } = fx;
    ns.delete_and_wait(timeout()).await;
    BTreeMap::from([
        ("deadline_to_deletion", took <= target_s),
        ("block_uploaded", whole),
    ])
}

#[tokio::main]
async fn main() -> ExitCode {
    let cluster = Cluster::get();
    exit_on_targets("upload perf", measure(&cluster)).await
}
