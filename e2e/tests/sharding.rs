//! ShardedPrometheus e2e: the shard controller runs against the local zonal cluster, and every
//! configuration it writes into a shard's config Secret is loaded, unchanged but for the
//! `kubeconfig_file` of its Kubernetes discovery, into a real Prometheus 3.16 process on
//! 127.0.0.1. What those processes report as their active targets is the proof: every pod and
//! static target kept by exactly one shard, zoned targets by a shard of their own zone, no shard
//! idle, and a resize moving only the buckets that end on the new shards. The shards a scale-down
//! retains, and their deletion at the deadline, are tested in `sharding/retention.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::nodes::{TEST_NODE_TAINT, TestNode};
use e2e::process::ControllerProcess;
use e2e::prometheus::{Major, PrometheusProcess, Target, check_config_on, with_kubeconfig};
use e2e::workload::ZONE_LABEL;
use e2e::{Cluster, TestNamespace, fixture, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_topology::hashmod::hashmod;
use zone_topology::sharding::{BUCKETS, owners};

#[path = "sharding/retention.rs"]
mod retention;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const ZONED_PODS: i32 = 200;
const ZONELESS_PODS: i32 = 10;
const STATIC_TARGETS: usize = 20;
const TARGET_PORT: u16 = 8080;
const TIMEOUT: Duration = Duration::from_secs(120);

const MANAGER: &str = "e2e-sharding";

/// A target as the test knows it: its address and the zone it is in (None: no zone).
type Expected = BTreeMap<String, Option<String>>;

struct Fixture {
    ns: TestNamespace,
    _zoneless: TestNode,
    _controller: ControllerProcess,
    /// Pod targets (ip:port) and static targets, with their zones.
    targets: Expected,
    statics: Vec<String>,
    sproms: Api<ShardedPrometheus>,
}

fn target_deployment(name: &str, replicas: i32, placement: Value) -> Deployment {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "app", "image": "registry.invalid/target:1",
                        "ports": [{"name": "metrics", "containerPort": TARGET_PORT}]}],
    });
    spec.as_object_mut()
        .unwrap()
        .extend(placement.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }))
    .unwrap()
}

impl Fixture {
    /// 200 pods spread by the scheduler over the three zones' kwok nodes, 10 pods on a node
    /// with no zone label, 20 static targets, and the shard controller for the namespace.
    async fn new(prefix: &str) -> Fixture {
        let cluster = Cluster::get();
        let ns = TestNamespace::create(&cluster, prefix).await;
        let zoneless = TestNode::create_without_zone(&ns).await;
        let deployments: Api<Deployment> = ns.api();
        let spread = json!({
            "nodeSelector": {"type": "kwok"},
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "zoned"}},
            }],
        });
        let pinned = json!({
            "nodeSelector": {"kubernetes.io/hostname": zoneless.name},
            "tolerations": [{"key": TEST_NODE_TAINT, "operator": "Equal", "value": zoneless.taint, "effect": "NoSchedule"}],
        });
        for (name, replicas, placement) in [
            ("zoned", ZONED_PODS, spread),
            ("zoneless", ZONELESS_PODS, pinned),
        ] {
            deployments
                .create(
                    &PostParams::default(),
                    &target_deployment(name, replicas, placement),
                )
                .await
                .unwrap();
        }
        let node_zones = e2e::nodes::zones(&ns.client, "type=kwok").await;
        let pods: Api<Pod> = ns.api();
        let want = usize::try_from(ZONED_PODS + ZONELESS_PODS).unwrap();
        let mut targets = wait_for(
            &format!("{want} target pods with an IP"),
            TIMEOUT,
            || async {
                let list = pods
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let placed: Expected = list
                    .items
                    .iter()
                    .filter_map(|pod| {
                        let ip = pod.status.as_ref()?.pod_ip.clone()?;
                        let node = pod.spec.as_ref()?.node_name.clone()?;
                        Some((
                            format!("{ip}:{TARGET_PORT}"),
                            node_zones.get(&node).cloned(),
                        ))
                    })
                    .collect();
                if placed.len() == want {
                    Ok(placed)
                } else {
                    Err(format!("{} of {want}", placed.len()))
                }
            },
        )
        .await;
        let zoned = targets.values().filter(|z| z.is_some()).count();
        assert_eq!(
            zoned,
            usize::try_from(ZONED_PODS).unwrap(),
            "zoneless node pods have no zone"
        );
        for zone in ZONES {
            let count = targets
                .values()
                .filter(|z| z.as_deref() == Some(zone))
                .count();
            assert!(
                count >= 60,
                "the scheduler spread the pods: {count} in {zone}"
            );
        }
        // Addresses where nothing listens: discovery is what is being tested, not scraping.
        let statics: Vec<String> = (0..STATIC_TARGETS)
            .map(|i| format!("192.0.2.{}:9100", i + 1))
            .collect();
        targets.extend(statics.iter().map(|s| (s.clone(), None)));
        // Port 0: the suite's tests run in parallel, each with its own controller.
        let controller = fixture::controller(
            "shard-controller",
            &ns.name,
            "127.0.0.1:0",
            &fixture::without_zau_controller(),
        );
        Fixture {
            sproms: ns.api(),
            ns,
            _zoneless: zoneless,
            _controller: controller,
            targets,
            statics,
        }
    }

    fn scrape_configs(&self) -> Value {
        json!([
            {
                "job_name": "pods",
                "scrape_interval": "1m",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [self.ns.name]}}],
                "relabel_configs": [{
                    "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                    "regex": TARGET_PORT.to_string(),
                    "action": "keep",
                }],
            },
            {
                "job_name": "static",
                "scrape_interval": "1m",
                "static_configs": [{"targets": self.statics}],
            },
        ])
    }

    /// Applies `name` with `shards` and `strategy`, and waits until the controller observed it
    /// and wrote exactly `shards` config Secrets; returns their configurations by shard.
    async fn apply(&self, name: &str, shards: u32, strategy: Value) -> Vec<String> {
        self.apply_on(Major::V3, name, shards, strategy).await
    }

    /// [`Fixture::apply`] of a resource whose `version` is `major`'s.
    async fn apply_on(
        &self,
        major: Major,
        name: &str,
        shards: u32,
        strategy: Value,
    ) -> Vec<String> {
        let mut spec = json!({
            "shards": shards,
            "shardingStrategy": strategy,
            "scrapeConfigs": self.scrape_configs(),
        });
        if major == Major::V2 {
            spec["version"] = json!("v2.55.1");
        }
        let generation = self.apply_sprom(name, spec).await;
        let secrets: Api<Secret> = self.ns.api();
        wait_for(
            &format!("{name}: {shards} shard configs for generation {generation}"),
            TIMEOUT,
            || async {
                let sprom = self.sproms.get(name).await.map_err(|e| e.to_string())?;
                let status = sprom.status.unwrap_or_default();
                if status.observed_generation != generation {
                    return Err(format!(
                        "observed generation {}",
                        status.observed_generation
                    ));
                }
                if let Some(invalid) = status.true_reason(zone_api::sprom::condition::INVALID) {
                    panic!("{name} is Invalid: {invalid}");
                }
                let selector = format!("app.kubernetes.io/instance={name}");
                let list = secrets
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut configs: Vec<(u32, String)> = list
                    .items
                    .iter()
                    .filter(|secret| secret.metadata.deletion_timestamp.is_none())
                    .filter_map(shard_config)
                    .collect();
                configs.sort();
                let indices: Vec<u32> = configs.iter().map(|(i, _)| *i).collect();
                if indices != (0..shards).collect::<Vec<_>>() {
                    return Err(format!("shard config Secrets {indices:?}"));
                }
                Ok(configs.into_iter().map(|(_, config)| config).collect())
            },
        )
        .await
    }

    /// Server-side applies the ShardedPrometheus `name` with `spec`; returns the generation.
    async fn apply_sprom(&self, name: &str, spec: Value) -> i64 {
        let sprom = json!({
            "apiVersion": "zonecontrol.k8s.aws/v1",
            "kind": "ShardedPrometheus",
            "metadata": {"name": name},
            "spec": spec,
        });
        let applied = fixture::apply(&self.sproms, name, MANAGER, &sprom).await;
        applied.metadata.generation.unwrap()
    }
}

/// The shard index and `prometheus.yml` of a shard config Secret (None for any other Secret).
fn shard_config(secret: &Secret) -> Option<(u32, String)> {
    let index = secret
        .labels()
        .get("zonecontrol.k8s.aws/shard")?
        .parse()
        .ok()?;
    let config = secret.data.as_ref()?.get("prometheus.yml")?;
    Some((index, String::from_utf8(config.0.clone()).ok()?))
}

/// Runs one real Prometheus per shard configuration and returns what they keep (address → the
/// shards that keep it) once discovery has settled and the shards together keep `expected`
/// targets (discovery may deliver a pool in parts; a wrong total after the timeout is left to
/// the caller's assertions, which name the targets).
async fn run_shards(
    label: &str,
    configs: &[String],
    expected: usize,
) -> BTreeMap<String, Vec<u32>> {
    run_shards_on(Major::V3, label, configs, expected).await
}

/// [`run_shards`] on the Prometheus (and promtool) of `major`.
async fn run_shards_on(
    major: Major,
    label: &str,
    configs: &[String],
    expected: usize,
) -> BTreeMap<String, Vec<u32>> {
    let kubeconfig = Cluster::get().kubeconfig;
    let mut processes = Vec::new();
    for (shard, config) in configs.iter().enumerate() {
        check_config_on(major, config)
            .unwrap_or_else(|e| panic!("{label} shard {shard}: promtool: {e}"));
        let config = with_kubeconfig(config, &kubeconfig);
        let name = format!("{label}-{shard}");
        processes.push(PrometheusProcess::start_on(major, &name, &config, &[]).await);
    }
    for process in &processes {
        process.wait_for_targets(&["pods", "static"], TIMEOUT).await;
    }
    let read = || async {
        let mut kept: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (shard, process) in (0u32..).zip(&processes) {
            let targets: Vec<Target> = process.targets().await;
            for target in targets {
                let address = target.discovered_labels["__address__"].clone();
                kept.entry(address).or_default().push(shard);
            }
        }
        kept
    };
    // Poll (with a deadline) for the expected total; past the deadline the last read goes to the
    // assertions, which name what is missing or doubled.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let kept = read().await;
        let total: usize = kept.values().map(Vec::len).sum();
        if total == expected || std::time::Instant::now() > deadline {
            return kept;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Zone of each shard in Topology mode (`zone(i) = zones[i % Z]`).
fn shard_zone(shard: u32) -> &'static str {
    ZONES[(shard as usize) % ZONES.len()]
}

/// Every target kept exactly once (or, under Drop, the zoneless ones by none); zoned targets by
/// a shard of their own zone when it has one; no shard without targets; zoneless and static
/// targets over more than one shard.
fn assert_coverage(
    label: &str,
    fx: &Fixture,
    kept: &BTreeMap<String, Vec<u32>>,
    shards: u32,
    topology: bool,
    drop_zoneless: bool,
) {
    let zones_with_shard: BTreeSet<&str> = (0..shards.min(3)).map(shard_zone).collect();
    for address in kept.keys() {
        assert!(
            fx.targets.contains_key(address),
            "{label}: unexpected target {address}"
        );
    }
    let mut per_shard = vec![0usize; shards as usize];
    let mut zoneless_shards = BTreeSet::new();
    for (address, zone) in &fx.targets {
        let keepers = kept.get(address).cloned().unwrap_or_default();
        let served = zone.as_deref().filter(|z| zones_with_shard.contains(z));
        if topology && drop_zoneless && served.is_none() {
            assert!(
                keepers.is_empty(),
                "{label}: {address} ({zone:?}) kept by {keepers:?} under Drop"
            );
            continue;
        }
        assert_eq!(
            keepers.len(),
            1,
            "{label}: {address} ({zone:?}) kept by {keepers:?}"
        );
        per_shard[keepers[0] as usize] += 1;
        match served {
            Some(zone) if topology => assert_eq!(
                shard_zone(keepers[0]),
                zone,
                "{label}: {address} of {zone} scraped by shard {}",
                keepers[0]
            ),
            _ => {
                zoneless_shards.insert(keepers[0]);
            }
        }
    }
    assert!(
        per_shard.iter().all(|n| *n > 0),
        "{label}: a shard has no target: {per_shard:?}"
    );
    if !(topology && drop_zoneless) && shards > 1 {
        assert!(
            zoneless_shards.len() > 1,
            "{label}: zoneless targets all on {zoneless_shards:?}"
        );
    }
    eprintln!("{label}: targets per shard {per_shard:?}");
}

fn topology(zoneless: &str) -> Value {
    json!({"mode": "Topology", "topology": {"values": ZONES}, "zonelessTargets": zoneless})
}

#[tokio::test]
#[ignore = "needs the local zonal cluster and Prometheus 3.16 (make e2e)"]
async fn sharding_every_target_is_scraped_exactly_once_by_real_prometheus() {
    every_target_once(Major::V3, "sharding").await;
}

/// The same, for a resource of `version: v2.55.1`, on Prometheus 2.55.1 (its promtool, its
/// relabelling and discovery).
#[tokio::test]
#[ignore = "needs the local zonal cluster and Prometheus 2.55.1 (make e2e)"]
async fn sharding_every_target_is_scraped_exactly_once_by_real_prometheus_2() {
    every_target_once(Major::V2, "sharding-v2").await;
}

/// Topology sharding over 3, 4, 6 and 2 shards (Spread), 3 (Drop) and Classic over 4: the
/// configurations rendered for `major` keep every target exactly once, in its zone, on real
/// Prometheus of that major.
async fn every_target_once(major: Major, prefix: &str) {
    let fx = Fixture::new(prefix).await;
    let all = fx.targets.len();
    for shards in [3u32, 4, 6, 2] {
        let configs = fx.apply_on(major, "topo", shards, topology("Spread")).await;
        let label = format!("topology/{shards}");
        let kept = run_shards_on(major, &label, &configs, all).await;
        assert_coverage(&label, &fx, &kept, shards, true, false);
    }
    let configs = fx.apply_on(major, "topo", 3, topology("Drop")).await;
    let zoned = fx.targets.values().filter(|z| z.is_some()).count();
    let kept = run_shards_on(major, "topology-drop/3", &configs, zoned).await;
    assert_coverage("topology-drop/3", &fx, &kept, 3, true, true);

    let configs = fx
        .apply_on(major, "classic", 4, json!({"mode": "Classic"}))
        .await;
    let kept = run_shards_on(major, "classic/4", &configs, all).await;
    assert_coverage("classic/4", &fx, &kept, 4, false, false);
}

/// The shard that keeps each target, read from real Prometheus.
fn keeper(kept: &BTreeMap<String, Vec<u32>>, address: &str) -> u32 {
    let keepers = &kept[address];
    assert_eq!(keepers.len(), 1, "{address} kept by {keepers:?}");
    keepers[0]
}

/// Resizes `name` from `from` to `to` shards and checks with real Prometheus that every target
/// that changed shard moved onto one of the new shards, in a bucket the assignment moved; returns
/// (share of buckets moved, share of targets moved, share plain hashmod would move).
async fn reshard(fx: &Fixture, name: &str, strategy: Value, from: u32, to: u32) -> (f64, f64, f64) {
    let all = fx.targets.len();
    let configs = fx.apply(name, from, strategy.clone()).await;
    let before = run_shards(&format!("{name}/{from}"), &configs, all).await;
    let configs = fx.apply(name, to, strategy).await;
    let after = run_shards(&format!("{name}/{to}"), &configs, all).await;
    let zones = if name == "classic" {
        1
    } else {
        ZONES.len() as u32
    };
    // Per zone the shard count goes from from/zones to to/zones (both even here).
    let (old_owners, new_owners) = (owners(from / zones), owners(to / zones));
    let moved_buckets = old_owners
        .iter()
        .zip(&new_owners)
        .filter(|(a, b)| a != b)
        .count();
    let mut moved = 0usize;
    let mut moved_by_hashmod = 0usize;
    let zoned: Vec<(&String, &Option<String>)> = fx
        .targets
        .iter()
        .filter(|(_, zone)| name == "classic" || zone.is_some())
        .collect();
    for (address, _) in &zoned {
        let (old, new) = (keeper(&before, address), keeper(&after, address));
        let bucket = hashmod(address, u64::from(BUCKETS)) as usize;
        if old != new {
            moved += 1;
            assert!(
                new >= from,
                "{address} moved from shard {old} to old shard {new}"
            );
            assert_ne!(
                old_owners[bucket], new_owners[bucket],
                "{address} moved though its bucket {bucket} did not"
            );
        } else {
            assert_eq!(
                old_owners[bucket], new_owners[bucket],
                "{address} stayed though its bucket {bucket} moved"
            );
        }
        let (m_old, m_new) = (u64::from(from / zones), u64::from(to / zones));
        if hashmod(address, m_old) != hashmod(address, m_new) {
            moved_by_hashmod += 1;
        }
    }
    (
        moved_buckets as f64 / f64::from(BUCKETS),
        moved as f64 / zoned.len() as f64,
        moved_by_hashmod as f64 / zoned.len() as f64,
    )
}

#[tokio::test]
#[ignore = "needs the local zonal cluster and Prometheus 3.16 (make e2e)"]
async fn sharding_resizes_move_only_the_buckets_of_the_new_shards() {
    let fx = Fixture::new("resharding").await;
    let (buckets, targets, modulo) =
        reshard(&fx, "classic", json!({"mode": "Classic"}), 4, 5).await;
    eprintln!(
        "classic 4->5: {:.1} % of buckets moved (minimum 1/5), {:.1} % of targets; plain hashmod: {:.1} %",
        buckets * 100.0,
        targets * 100.0,
        modulo * 100.0
    );
    assert_eq!((buckets * f64::from(BUCKETS)).round() as u32, BUCKETS / 5);
    assert!(
        modulo > targets,
        "hashmod moves more: {modulo} vs {targets}"
    );

    let (buckets, targets, modulo) = reshard(&fx, "topo", topology("Spread"), 6, 9).await;
    eprintln!(
        "topology 6->9 over 3 zones: {:.1} % of buckets moved per zone (minimum 1/3), {:.1} % of zoned targets; upstream's hashmod: {:.1} %",
        buckets * 100.0,
        targets * 100.0,
        modulo * 100.0
    );
    assert_eq!((buckets * f64::from(BUCKETS)).round() as u32, BUCKETS / 3);
    assert!(
        modulo > targets,
        "hashmod moves more: {modulo} vs {targets}"
    );

    // The StatefulSets of the new shards carry their zone's node selector.
    let sets: Api<StatefulSet> = fx.ns.api();
    for shard in 0..9u32 {
        let sts = sets.get(&format!("topo-shard-{shard}")).await.unwrap();
        let selector = sts
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .node_selector
            .unwrap();
        assert_eq!(selector[ZONE_LABEL], shard_zone(shard));
    }
}
