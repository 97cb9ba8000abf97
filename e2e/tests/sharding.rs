//! ShardedPrometheus e2e: the shard controller runs against the local zonal cluster, and every
//! configuration it writes into a shard's config Secret is loaded, unchanged but for the
//! `kubeconfig_file` of its Kubernetes discovery, into a real Prometheus 3.16 process on
//! 127.0.0.1. What those processes report as their active targets is the proof: every pod and
//! static target kept by exactly one shard, zoned targets by a shard of their own zone, no shard
//! idle, and a resize moving only the buckets that end on the new shards.
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
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_topology::hashmod::hashmod;
use zone_topology::sharding::{BUCKETS, owners};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const ZONED_PODS: i32 = 200;
const ZONELESS_PODS: i32 = 10;
const STATIC_TARGETS: usize = 20;
const TARGET_PORT: u16 = 8080;
const TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until `pick` finds what it looks for among the namespace's events (`what` says what).
async fn wait_event<T>(ns: &TestNamespace, what: &str, pick: impl Fn(&[Event]) -> Option<T>) -> T {
    let events: Api<Event> = ns.api();
    let pick = &pick;
    wait_for(what, TIMEOUT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        pick(&list.items).ok_or(format!("{} events, none is {what}", list.items.len()))
    })
    .await
}
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
        let controller = fixture::controller("shard-controller", &ns.name, "127.0.0.1:0", &[]);
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

/// How long the retention test keeps retained shards whose deletion it waits for.
const RETENTION_SECONDS: i64 = 20;
/// The retention of the test's last phases, which check retained shards without waiting for
/// their deadline: long enough that a loaded machine (a list of the status taking over 15 s) still
/// sees them before they go.
const LONG_RETENTION_SECONDS: i64 = 300;

impl Fixture {
    /// Server-side applies `name` with `shards` and the rest of `spec` (strategy, scrape configs
    /// added); returns the generation.
    async fn apply_spec(&self, name: &str, shards: u32, mut spec: Value) -> i64 {
        let extra = spec.as_object_mut().unwrap();
        extra.insert("shards".into(), json!(shards));
        extra.insert("shardingStrategy".into(), topology("Spread"));
        extra.insert("scrapeConfigs".into(), self.scrape_configs());
        self.apply_sprom(name, spec).await
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

    /// `kubectl scale sprom/<name> --replicas <shards>`: the scale subresource, as an operator
    /// (or an autoscaler) sets it.
    async fn kubectl_scale(&self, name: &str, shards: u32) {
        let replicas = format!("--replicas={shards}");
        let target = format!("shardedprometheus/{name}");
        let mut kubectl =
            e2e::process::Kubectl::start(&["scale", "-n", &self.ns.name, &target, &replicas]);
        let (ok, output) = kubectl.finish(Duration::from_secs(30)).await;
        assert!(ok, "kubectl scale: {output}");
        let sprom = self.sproms.get(name).await.unwrap();
        assert_eq!(
            u32::try_from(sprom.spec.shards).ok(),
            Some(shards),
            "kubectl scale sets spec.shards"
        );
    }

    /// Waits until `name`'s status (of the current generation) has `active` shards and the
    /// retained shards `retained`; returns it.
    async fn wait_shards(
        &self,
        name: &str,
        active: i32,
        retained: &[i32],
    ) -> zone_api::ShardedPrometheusStatus {
        let what = format!("{name}: {active} active shards, retained {retained:?}");
        let sprom = fixture::wait_object(&self.sproms, name, &what, TIMEOUT, |sprom| {
            let generation = sprom.metadata.generation.unwrap_or(0);
            let status = fixture::status_of(sprom);
            let indices: Vec<i32> = status.retained_shards.iter().map(|r| r.index).collect();
            if status.observed_generation == generation
                && status.shards == active
                && indices == retained
            {
                Ok(())
            } else {
                Err(format!(
                    "generation {generation}, observed {}: shards {}, retained {indices:?}",
                    status.observed_generation, status.shards
                ))
            }
        })
        .await;
        fixture::status_of(&sprom)
    }

    /// The StatefulSets of `name` by shard index: (uid, deletion-deadline annotation).
    async fn shard_sets(&self, name: &str) -> BTreeMap<u32, (String, Option<String>)> {
        let sets: Api<StatefulSet> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={name}");
        sets.list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|sts| sts.metadata.deletion_timestamp.is_none())
            .map(|sts| {
                let index = sts.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap();
                let deadline = sts
                    .annotations()
                    .get("zonecontrol.k8s.aws/deletion-deadline")
                    .cloned();
                (index, (sts.uid().unwrap(), deadline))
            })
            .collect()
    }

    /// The `prometheus.yml` of every shard config Secret of `name`, by index.
    async fn shard_configs(&self, name: &str) -> BTreeMap<u32, String> {
        let secrets: Api<Secret> = self.ns.api();
        let selector = format!("app.kubernetes.io/instance={name}");
        secrets
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(shard_config)
            .collect()
    }

    /// The shard index of each pod `selector` lists (the scale subresource's selector).
    async fn selected_shards(&self, selector: &str) -> Vec<u32> {
        let pods: Api<Pod> = self.ns.api();
        let mut shards: Vec<u32> = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .iter()
            .map(|pod| pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap())
            .collect();
        shards.sort_unstable();
        shards
    }

    /// Waits until every shard `0..shards` has its `replicas` pods (kwok runs them).
    async fn wait_shard_pods(&self, name: &str, shards: u32, replicas: usize) {
        let pods: Api<Pod> = self.ns.api();
        let selector = format!(
            "app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=shard-controller"
        );
        wait_for(
            &format!("{name}: {replicas} pods per shard"),
            TIMEOUT,
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
                for pod in list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    *per_shard
                        .entry(pod.labels()["zonecontrol.k8s.aws/shard"].parse().unwrap())
                        .or_default() += 1;
                }
                (0..shards)
                    .all(|shard| per_shard.get(&shard) == Some(&replicas))
                    .then_some(())
                    .ok_or(format!("{per_shard:?}"))
            },
        )
        .await;
    }
}

/// Runs the shard configurations of a scaled-down resource in real Prometheus: the active shards
/// (`0..active`) must keep every target exactly once in its zone and load the rule file; every
/// retained one must load no scrape config and no rule, and keep no target once the active ones
/// have found theirs.
async fn check_retained_configs(
    fx: &Fixture,
    label: &str,
    configs: &BTreeMap<u32, String>,
    active: u32,
    rules_dir: &std::path::Path,
) {
    let kubeconfig = Cluster::get().kubeconfig;
    let rules = rules_dir.display().to_string();
    let mut retained = Vec::new();
    for (index, config) in configs.range(active..) {
        check_config_on(Major::V3, config)
            .unwrap_or_else(|e| panic!("{label} retained {index}: {e}"));
        assert!(
            !config.contains("scrape_configs") && !config.contains("rule_files"),
            "{label} retained {index}:\n{config}"
        );
        let config = with_kubeconfig(config, &kubeconfig);
        retained.push((
            *index,
            PrometheusProcess::start(&format!("{label}-retained-{index}"), &config, &[]).await,
        ));
    }
    let active_configs: Vec<String> = (0..active)
        .map(|index| configs[&index].replace("/etc/prometheus/rules", &rules))
        .collect();
    // The active shards, with the rule file where their configuration looks for it.
    let mut processes = Vec::new();
    for (index, config) in active_configs.iter().enumerate() {
        let config = with_kubeconfig(config, &kubeconfig);
        processes
            .push(PrometheusProcess::start(&format!("{label}-active-{index}"), &config, &[]).await);
    }
    for process in &processes {
        process.wait_for_targets(&["pods", "static"], TIMEOUT).await;
        let groups = process.rule_groups().await;
        assert_eq!(
            groups.as_array().map(Vec::len),
            Some(1),
            "{label}: an active shard evaluates the rule: {groups}"
        );
    }
    drop(processes);
    let kept = run_shards(
        &format!("{label}-coverage"),
        &active_configs,
        fx.targets.len(),
    )
    .await;
    assert_coverage(label, fx, &kept, active, true, false);
    for (index, process) in &retained {
        assert!(
            process.targets().await.is_empty(),
            "{label}: retained shard {index} keeps targets"
        );
        let groups = process.rule_groups().await;
        assert_eq!(
            groups.as_array().map(Vec::len),
            Some(0),
            "{label}: retained shard {index} evaluates {groups}"
        );
        let loaded = process.config_yaml().await;
        assert!(
            !loaded.contains("job_name"),
            "{label}: retained shard {index} loaded a scrape job:\n{loaded}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local zonal cluster and Prometheus 3.16 (make e2e)"]
async fn scaling_keeps_retained_shards_out_of_the_selector_and_deletes_them_at_their_deadline() {
    let fx = Fixture::new("retain").await;
    let rules_dir = prepare_shard_pods_and_rules(&fx).await;
    fx.apply_spec(SCALED, 3, retain("Retain", RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 3, &[]).await;

    status_shards_follow_the_statefulsets_that_exist(&fx).await;
    a_scale_down_retains_shards_and_a_scale_up_reuses_them(&fx).await;
    retained_shards_scrape_nothing_and_go_at_their_deadline(&fx, &rules_dir).await;

    // Down to 1 shard: the two retained shards still scrape nothing, shard 0 everything.
    fx.apply_spec(SCALED, 3, retain("Retain", LONG_RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 3, &[]).await;
    fx.kubectl_scale(SCALED, 1).await;
    fx.wait_shards(SCALED, 1, &[1, 2]).await;
    let configs = fx.shard_configs(SCALED).await;
    check_retained_configs(&fx, "retain/1", &configs, 1, &rules_dir).await;

    under_delete_retained_shards_keep_their_deadline_and_removed_ones_go_at_once(&fx).await;
    let _ = std::fs::remove_dir_all(&rules_dir);
}

/// The resource the retention test scales.
const SCALED: &str = "scaled";

/// The spec of the retention test beyond shards, strategy and scrape configs: two replicas, the
/// rule file `alerts`, and `whenScaled: <when>` with a retention of `seconds`.
fn retain(when: &str, seconds: i64) -> Value {
    json!({
        "replicas": 2,
        "ruleFiles": [{"configMap": "alerts"}],
        "shardRetentionPolicy": {"whenScaled": when, "retain": {"retentionPeriod": format!("{seconds}s")}},
    })
}

/// The ServiceAccount the shards' pods (run by kwok) need, and a rule file whose alert fires
/// wherever it is evaluated (`absent()` of a series nobody has): in the ConfigMap `alerts`, and
/// in a local directory as the shards mount it (returned).
async fn prepare_shard_pods_and_rules(fx: &Fixture) -> std::path::PathBuf {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = fx.ns.api();
    let account = serde_json::from_value(json!({"metadata": {"name": "prometheus"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let rules_cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "alerts"},
        "data": {"absent.yaml": "groups:\n- name: absent\n  rules:\n  - alert: NothingThere\n    expr: absent(up{job=\"nothing\"})\n"},
    }))
    .unwrap();
    let config_maps: Api<ConfigMap> = fx.ns.api();
    config_maps
        .create(&PostParams::default(), &rules_cm)
        .await
        .unwrap();
    let rules_dir = std::env::temp_dir().join(format!("e2e-rules-{}", fx.ns.name));
    std::fs::create_dir_all(rules_dir.join("alerts")).unwrap();
    std::fs::write(
        rules_dir.join("alerts/absent.yaml"),
        rules_cm.data.as_ref().unwrap()["absent.yaml"].as_bytes(),
    )
    .unwrap();
    rules_dir
}

/// status.shards is observed: with room for only 7 StatefulSets, a scale to 9 leaves it where
/// it was while spec.shards says 9; once there is room, 9 shards, one pod of each selected.
async fn status_shards_follow_the_statefulsets_that_exist(fx: &Fixture) {
    let quota = e2e::quota::PodQuota::hold_count(fx.ns.api(), "count/statefulsets.apps", 7).await;
    fx.kubectl_scale(SCALED, 9).await;
    wait_for("7 StatefulSets under the quota", TIMEOUT, || async {
        let sets = fx.shard_sets(SCALED).await;
        (sets.len() == 7)
            .then_some(())
            .ok_or(format!("{:?}", sets.keys()))
    })
    .await;
    let lagging = fx.sproms.get(SCALED).await.unwrap();
    let status = lagging.status.unwrap_or_default();
    eprintln!(
        "scale to 9 with 7 StatefulSets possible: spec.shards {}, status.shards {}",
        lagging.spec.shards, status.shards
    );
    assert!(
        status.shards < 9,
        "status.shards {} before the StatefulSets exist",
        status.shards
    );
    quota.release().await;
    let status = fx.wait_shards(SCALED, 9, &[]).await;
    fx.wait_shard_pods(SCALED, 9, 2).await;
    assert_eq!(
        fx.selected_shards(&status.selector).await,
        (0..9).collect::<Vec<_>>(),
        "one pod per active shard: {}",
        status.selector
    );
}

/// 9 -> 6: shards 6-8 retained, out of the selector while their pods run. Back to 9 before the
/// deadline: the same StatefulSets, active again, unmarked, with their full configuration.
async fn a_scale_down_retains_shards_and_a_scale_up_reuses_them(fx: &Fixture) {
    fx.kubectl_scale(SCALED, 6).await;
    let status = fx.wait_shards(SCALED, 6, &[6, 7, 8]).await;
    assert!(
        status
            .retained_shards
            .iter()
            .all(|r| r.deletion_deadline.is_some()),
        "{status:?}"
    );
    let sets = fx.shard_sets(SCALED).await;
    let retained_uids: BTreeMap<u32, String> = (6..9).map(|i| (i, sets[&i].0.clone())).collect();
    for index in 6..9 {
        assert!(
            sets[&index].1.is_some(),
            "shard {index} carries the deadline: {sets:?}"
        );
    }
    assert_eq!(
        fx.selected_shards(&status.selector).await,
        (0..6).collect::<Vec<_>>(),
        "{}",
        status.selector
    );
    fx.wait_shard_pods(SCALED, 9, 2).await;

    fx.kubectl_scale(SCALED, 9).await;
    fx.wait_shards(SCALED, 9, &[]).await;
    let sets = fx.shard_sets(SCALED).await;
    for (index, uid) in &retained_uids {
        assert_eq!(&sets[index].0, uid, "shard {index} reused");
        assert_eq!(sets[index].1, None, "shard {index} unmarked");
    }
    // Their full configuration is back: the nine cover every target exactly once again.
    let configs: Vec<String> = wait_for("nine active shard configs", TIMEOUT, || async {
        let configs = fx.shard_configs(SCALED).await;
        let active: Vec<String> = configs
            .values()
            .filter(|config| config.contains("scrape_configs"))
            .cloned()
            .collect();
        if active.len() == 9 {
            Ok(active)
        } else {
            Err(format!("{} active configs", active.len()))
        }
    })
    .await;
    let kept = run_shards("retain-reused/9", &configs, fx.targets.len()).await;
    assert_coverage("retain-reused/9", fx, &kept, 9, true, false);
}

/// 9 -> 3: six retained shards scrape and evaluate nothing; the active ones cover everything.
/// The retained shards are deleted when due: not before the deadline, within seconds after it.
async fn retained_shards_scrape_nothing_and_go_at_their_deadline(
    fx: &Fixture,
    rules_dir: &std::path::Path,
) {
    fx.kubectl_scale(SCALED, 3).await;
    let status = fx.wait_shards(SCALED, 3, &[3, 4, 5, 6, 7, 8]).await;
    let configs = fx.shard_configs(SCALED).await;
    assert_eq!(
        configs.keys().copied().collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );
    check_retained_configs(fx, "retain/3", &configs, 3, rules_dir).await;

    let deadline: k8s_openapi::jiff::Timestamp = status.retained_shards[0]
        .deletion_deadline
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let gone_at = wait_for(
        "the retained shards deleted",
        Duration::from_secs(RETENTION_SECONDS as u64 + 60),
        || async {
            let sets = fx.shard_sets(SCALED).await;
            let now = k8s_openapi::jiff::Timestamp::now();
            if sets.keys().any(|i| *i >= 3) {
                return Err(format!("{:?} at {now}", sets.keys()));
            }
            Ok(now)
        },
    )
    .await;
    // When the controller deleted them, from the event it records as it does: this test's own
    // view can lag behind by as long as a list takes on a loaded API server (17 s once, with the
    // controller's log showing the deletion within a second of the deadline).
    let deleted_at = wait_event(
        &fx.ns,
        "the event of the retained shards' deletion",
        |events| {
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("RetainedShardsDeleted"))
                .filter_map(|e| e.event_time.as_ref().map(|at| at.0))
                .min()
        },
    )
    .await;
    let late = deadline.duration_until(deleted_at).as_secs_f64();
    let seen = deadline.duration_until(gone_at).as_secs_f64();
    eprintln!(
        "retained shards deleted {late:.1} s after their deadline {deadline} (seen gone after {seen:.1} s)"
    );
    // The event is recorded once every child of the six shards is deleted: on an idle machine
    // about a second after the deadline, 12.5 s once with other suites loading the API server
    // (the test saw the deletions begin 8 s after it). Not before the deadline, and not left
    // to some later event.
    assert!(
        (0.0..30.0).contains(&late),
        "deleted {late} s after the deadline"
    );
    fx.wait_shards(SCALED, 3, &[]).await;
}

/// Switching to Delete keeps the retained shards until their deadline; a shard removed from
/// then on goes at once.
async fn under_delete_retained_shards_keep_their_deadline_and_removed_ones_go_at_once(
    fx: &Fixture,
) {
    fx.apply_spec(SCALED, 1, retain("Delete", LONG_RETENTION_SECONDS))
        .await;
    fx.wait_shards(SCALED, 1, &[1, 2]).await;
    wait_event(
        &fx.ns,
        "an event saying the retained shards keep their deadline",
        |events| {
            events.iter().find(|e| {
                e.reason.as_deref() == Some("ShardsRetained")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("keep their deadline"))
            })?;
            Some(())
        },
    )
    .await;
    fx.kubectl_scale(SCALED, 4).await;
    fx.wait_shards(SCALED, 4, &[]).await;
    fx.kubectl_scale(SCALED, 2).await;
    fx.wait_shards(SCALED, 2, &[]).await;
    let sets = fx.shard_sets(SCALED).await;
    assert_eq!(
        sets.keys().copied().collect::<Vec<_>>(),
        vec![0, 1],
        "removed at once under Delete"
    );
}
