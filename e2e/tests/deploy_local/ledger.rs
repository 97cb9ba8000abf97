//! The deployed shard-controller's traffic ledger against what the targets served: nine metrics
//! targets on the real nodes (three per zone, discovered as pods, so with their node's zone),
//! scraped every 5 s by the sample's 3 shards × 2 replicas. Each target counts the bytes of
//! the bodies it served to each client address (`GET /served`); the client's zone is its
//! shard pod's node's. Over the same window (one of the ledger's rounds, read from the
//! controller's `zone_aware_sprom_scrape_bytes_total` and the end of its last window):
//!
//! - Topology with zoneless targets dropped: 0 cross-zone bytes, the same-zone bytes within 10 %
//!   of what the targets served; `status.traffic` and `kubectl zone shards --cost` say so, with
//!   Classic's estimate at two thirds (the pods are 2 per zone);
//! - Classic: about two thirds cross-zone, within 10 % of what the targets served across zones.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use e2e::process::{http_get_from, http_request};
use e2e::real::RealNodes;
use k8s_openapi::api::coordination::v1::Lease;
use zone_api::ShardedPrometheus;

use super::budgets::SHARD_PODS;
use super::*;

const TIMEOUT: Duration = Duration::from_secs(300);
/// The ledger's round: the windows it counts end this often.
const ROUND: Duration = Duration::from_secs(60);
/// The controllers' /metrics port (plain HTTP).
const METRICS_PORT: u16 = 8080;
const TARGETS: &str = "ledger";

/// Bytes served by target (address) and client (IP).
type Served = BTreeMap<(String, String), f64>;

/// What the ledger counted for the sample, from the leader's /metrics.
#[derive(Debug, Clone, Copy, Default)]
struct Counted {
    /// The end of its last window (Unix seconds).
    end: f64,
    same: f64,
    cross: f64,
    zoneless: f64,
}

impl std::ops::Sub for Counted {
    type Output = Counted;
    fn sub(self, earlier: Counted) -> Counted {
        Counted {
            end: self.end,
            same: self.same - earlier.same,
            cross: self.cross - earlier.cross,
            zoneless: self.zoneless - earlier.zoneless,
        }
    }
}

/// Where the ledger is read: the deployed shard-controller's leader.
pub struct Deployed<'a> {
    pub pods: &'a Api<Pod>,
    pub leases: &'a Api<Lease>,
}

impl Deployed<'_> {
    async fn counted(&self, victim: &str) -> Result<Counted, String> {
        let leader = lease_holder(self.leases, "shard-controller").await?;
        let pod = self.pods.get(&leader).await.map_err(|e| e.to_string())?;
        let ip = pod
            .status
            .and_then(|s| s.pod_ip)
            .ok_or("the leader has no IP")?;
        let address = format!("{ip}:{METRICS_PORT}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let text = match http_get_from(address, "/metrics").await? {
            (200, text) => text,
            (code, body) => return Err(format!("{code}: {body}")),
        };
        // The sample's series, whatever the order of their labels.
        let ours = [
            format!("namespace=\"{victim}\""),
            "name=\"prometheus\"".to_string(),
        ];
        let sum = |metric: &str, traffic: Option<&str>| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(metric))
                .filter(|line| ours.iter().all(|label| line.contains(label.as_str())))
                .filter(|line| traffic.is_none_or(|t| line.contains(&format!("traffic=\"{t}\""))))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let end = sum("zone_aware_sprom_traffic_measured_timestamp_seconds", None);
        if end == 0.0 {
            return Err("no window measured yet".into());
        }
        let bytes = "zone_aware_sprom_scrape_bytes_total";
        Ok(Counted {
            end,
            same: sum(bytes, Some("same-zone")),
            cross: sum(bytes, Some("cross-zone")),
            zoneless: sum(bytes, Some("zoneless")),
        })
    }

    /// The counters once a window has ended at or after `after` (Unix seconds).
    async fn counted_after(&self, victim: &str, after: f64) -> Counted {
        wait_for(
            &format!("a ledger window ending after {after:.0}"),
            ROUND * 3,
            || async {
                let counted = self.counted(victim).await?;
                (counted.end >= after)
                    .then_some(counted)
                    .ok_or(format!("last window ended {:.0}", counted.end))
            },
        )
        .await
    }
}

/// Every target's `/served`, read every half second into a timeline, until dropped.
struct Timeline {
    readings: Arc<Mutex<Vec<(f64, Served)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn served_now(targets: &[std::net::SocketAddr]) -> Result<Served, String> {
    let mut served = Served::new();
    for target in targets {
        let (_, body) = http_request(*target, "GET", "/served", None).await?;
        for line in body.lines() {
            let Some(rest) = line.strip_prefix("served_bytes{client=\"") else {
                continue;
            };
            let Some((client, value)) = rest.split_once("\"} ") else {
                continue;
            };
            let value: f64 = value.trim().parse().map_err(|e| format!("{line}: {e}"))?;
            served.insert((target.to_string(), client.to_string()), value);
        }
    }
    Ok(served)
}

impl Timeline {
    /// Starts reading, once a first reading is in.
    async fn start(targets: Vec<std::net::SocketAddr>) -> Timeline {
        let first = wait_for("the targets' /served", TIMEOUT, || served_now(&targets)).await;
        let readings = Arc::new(Mutex::new(vec![(unix_now(), first)]));
        let kept = readings.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(500));
            loop {
                every.tick().await;
                let before = unix_now();
                if let Ok(served) = served_now(&targets).await {
                    let after = unix_now();
                    kept.lock().unwrap().push(((before + after) / 2.0, served));
                }
            }
        });
        Timeline { readings, task }
    }

    /// What had been served at `at` (Unix seconds): the readings around it, interpolated;
    /// why not when there is no reading on either side yet.
    fn at(&self, at: f64) -> Result<Served, String> {
        let readings = self.readings.lock().unwrap();
        let after = readings
            .iter()
            .position(|(time, _)| *time >= at)
            .ok_or(format!("no reading after {at:.1} yet"))?;
        if after == 0 {
            return Err(format!("no reading before {at:.1}"));
        }
        let (t0, before) = &readings[after - 1];
        let (t1, later) = &readings[after];
        let weight = if t1 > t0 { (at - t0) / (t1 - t0) } else { 0.0 };
        Ok(later
            .iter()
            .map(|(key, v1)| {
                let v0 = before.get(key).copied().unwrap_or(0.0);
                (key.clone(), v0 + (v1 - v0) * weight)
            })
            .collect())
    }
}

/// Bytes served in `(from, to]` to clients of the same zone as the target and of another.
fn split(
    from: &Served,
    to: &Served,
    target_zone: &BTreeMap<String, String>,
    client_zone: &BTreeMap<String, String>,
) -> (f64, f64) {
    let (mut same, mut cross) = (0.0, 0.0);
    for (key, bytes) in to {
        let served = bytes - from.get(key).copied().unwrap_or(0.0);
        if served <= 0.0 {
            continue;
        }
        let (target, client) = key;
        match (target_zone.get(target), client_zone.get(client)) {
            (Some(t), Some(c)) if t == c => same += served,
            (Some(_), Some(_)) => cross += served,
            other => panic!("{target} served {client} ({other:?}): not a shard pod"),
        }
    }
    (same, cross)
}

/// The zones of the shard pods' IPs.
async fn shard_pod_zones(
    victim: &TestNamespace,
    real: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let pods: Api<Pod> = victim.api();
    pods.list(&ListParams::default().labels(SHARD_PODS))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|pod| {
            let ip = pod.status.as_ref()?.pod_ip.clone()?;
            Some((ip, real.get(node_of(pod))?.clone()))
        })
        .collect()
}

/// One measurement over a round (the first that starts after now, about 540 scrapes) once every
/// target is scraped by two pods: the ledger's bytes and the served ones, same-zone and
/// cross-zone.
struct Measured {
    ledger: Counted,
    served_same: f64,
    served_cross: f64,
}

async fn measure(
    victim: &TestNamespace,
    deployed: &Deployed<'_>,
    timeline: &Timeline,
    target_zone: &BTreeMap<String, String>,
    real: &BTreeMap<String, String>,
) -> Measured {
    let start = deployed.counted_after(&victim.name, unix_now()).await;
    let end = deployed
        .counted_after(&victim.name, start.end + ROUND.as_secs_f64() - 5.0)
        .await;
    let clients = shard_pod_zones(victim, real).await;
    let (served_same, served_cross) = split(
        &timeline.at(start.end).unwrap(),
        &timeline.at(end.end).unwrap(),
        target_zone,
        &clients,
    );
    Measured {
        ledger: end - start,
        served_same,
        served_cross,
    }
}

fn within_ten_percent(what: &str, counted: f64, served: f64) {
    assert!(
        (counted - served).abs() <= 0.1 * served,
        "{what}: the ledger counted {counted:.0} bytes, the targets served {served:.0}"
    );
}

/// Waits until every target has served two clients since `since` (the sample's conditions are
/// the reason given on timeout).
async fn scraped_by_two(
    targets: &[std::net::SocketAddr],
    timeline: &Timeline,
    since: f64,
    sproms: &Api<ShardedPrometheus>,
) {
    let state = || async {
        let (from, to) = (timeline.at(since)?, timeline.at(unix_now() - 1.0)?);
        let mut clients: BTreeMap<String, usize> = BTreeMap::new();
        for (key, bytes) in &to {
            if *bytes > from.get(key).copied().unwrap_or(0.0) {
                *clients.entry(key.0.clone()).or_default() += 1;
            }
        }
        if targets
            .iter()
            .all(|t| clients.get(&t.to_string()) == Some(&2))
        {
            return Ok(());
        }
        let sprom = sproms.get("prometheus").await.map_err(|e| e.to_string())?;
        let conditions: Vec<String> = (sprom.status.unwrap_or_default().conditions.iter())
            .map(|c| format!("{} {} {}: {}", c.type_, c.status, c.reason, c.message))
            .collect();
        Err(format!("clients per target {clients:?}; {conditions:?}"))
    };
    wait_for("every target scraped by two shard pods", TIMEOUT, state).await;
}

pub async fn the_ledger_counts_what_the_targets_served(
    victim: &TestNamespace,
    real_nodes: &RealNodes,
    deployed: &Deployed<'_>,
) {
    let real = e2e::real::nodes(&victim.client).await;
    let sproms: Api<ShardedPrometheus> = victim.api();
    // The sample's Prometheus discovers pods with the deployed ClusterRole, bound as its
    // ServiceAccount's comment says.
    let role = format!("zone-aware-prometheus-{}", victim.suffix());
    e2e::deploy::bind_cluster_role(&Cluster::get(), victim, "prometheus", &role);
    let pods = real_nodes
        .run_metrics_targets(victim, TARGETS, 9, TIMEOUT)
        .await;
    let targets: Vec<std::net::SocketAddr> = pods
        .iter()
        .map(|pod| {
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
            std::net::SocketAddr::new(ip.parse().unwrap(), 8080)
        })
        .collect();
    let target_zone: BTreeMap<String, String> = pods
        .iter()
        .zip(&targets)
        .map(|(pod, target)| (target.to_string(), real[node_of(pod)].clone()))
        .collect();
    let timeline = Timeline::start(targets.clone()).await;

    // The sample's own jobs (not the rollout test's static one) and the targets, discovered as
    // pods: their zone is their node's. Zoneless targets dropped: the sample's static job too.
    let sample = sproms.get("prometheus").await.unwrap();
    let mut jobs: Vec<serde_json::Value> = sample
        .spec
        .scrape_configs
        .iter()
        .filter(|job| job["job_name"] != "scraped")
        .cloned()
        .collect();
    jobs.push(json!({
        "job_name": TARGETS,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"own_namespace": true}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": TARGETS, "action": "keep"},
        ],
    }));
    let strategy = json!({"mode": "Topology", "topology": {"values": ["zone-a", "zone-b", "zone-c"]}, "zonelessTargets": "Drop"});
    let changed = unix_now();
    let patch = json!({"spec": {"scrapeConfigs": jobs, "shardingStrategy": strategy}});
    sproms
        .patch("prometheus", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    scraped_by_two(&targets, &timeline, changed, &sproms).await;
    let topology = measure(victim, deployed, &timeline, &target_zone, &real).await;
    println!(
        "traffic ledger, Topology, zoneless dropped: counted {:.0} same-zone, {:.0} cross-zone, \
         {:.0} zoneless bytes; the targets served {:.0} same-zone, {:.0} cross-zone",
        topology.ledger.same,
        topology.ledger.cross,
        topology.ledger.zoneless,
        topology.served_same,
        topology.served_cross
    );
    assert_eq!(
        topology.served_cross, 0.0,
        "a target was scraped from another zone"
    );
    assert_eq!(topology.ledger.cross, 0.0);
    assert_eq!(
        topology.ledger.zoneless, 0.0,
        "zoneless targets are dropped"
    );
    within_ten_percent("same-zone", topology.ledger.same, topology.served_same);
    the_status_and_the_cost_say_so(victim, &sproms).await;

    // Classic: the targets hashed over every shard, wherever its pods run. The pods rolled
    // all at once: the zone-by-zone rollout has had its test.
    let classic = json!({"spec": {
        "shardingStrategy": {"mode": "Classic", "topology": null, "zonelessTargets": null},
        "rollout": {"strategy": "RollingUpdate"},
    }});
    sproms
        .patch(
            "prometheus",
            &PatchParams::default(),
            &Patch::Merge(&classic),
        )
        .await
        .unwrap();
    wait_for("the shards rolled to Classic", TIMEOUT, || async {
        let sprom = sproms.get("prometheus").await.map_err(|e| e.to_string())?;
        let status = sprom.status.unwrap_or_default();
        let zoned = status.shard_statuses.iter().any(|s| !s.zone.is_empty());
        let shard_pods: Api<Pod> = victim.api();
        let list = shard_pods
            .list(&ListParams::default().labels(SHARD_PODS))
            .await
            .map_err(|e| e.to_string())?
            .items;
        // Unpinned: no pod selects a zone any more.
        let pinned = list.iter().filter(|pod| {
            pod.spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .is_some_and(|selector| selector.contains_key(e2e::workload::ZONE_LABEL))
        });
        let (pinned, all) = (pinned.count(), list.len());
        let ready = list.iter().filter(|pod| pods::is_available(pod)).count();
        (!zoned && pinned == 0 && all == 6 && ready == 6 && status.ready_shards == 3)
            .then_some(())
            .ok_or(format!("{pinned} of {all} pods pinned, {ready} ready"))
    })
    .await;
    scraped_by_two(&targets, &timeline, unix_now(), &sproms).await;
    let classic = measure(victim, deployed, &timeline, &target_zone, &real).await;
    let share = classic.served_cross / (classic.served_same + classic.served_cross);
    println!(
        "traffic ledger, Classic: counted {:.0} same-zone, {:.0} cross-zone bytes; the targets \
         served {:.0} same-zone, {:.0} cross-zone ({:.0} % cross-zone)",
        classic.ledger.same,
        classic.ledger.cross,
        classic.served_same,
        classic.served_cross,
        share * 100.0
    );
    within_ten_percent("cross-zone", classic.ledger.cross, classic.served_cross);
    within_ten_percent("same-zone", classic.ledger.same, classic.served_same);
    assert!(
        (0.45..=0.9).contains(&share),
        "Classic over 3 zones scrapes about two thirds across zones, not {:.0} %",
        share * 100.0
    );
}

/// `status.traffic` (since the spec changed, refreshed after its first round) has same-zone
/// bytes and no cross-zone ones (its first round may hold the dropped targets' last scrapes as
/// zoneless); Classic's estimate is two thirds of the zoned ones (the pods are 2 per zone),
/// which `kubectl zone shards --cost` prices.
async fn the_status_and_the_cost_say_so(victim: &TestNamespace, sproms: &Api<ShardedPrometheus>) {
    let traffic = wait_for(
        "status.traffic without cross-zone bytes",
        ROUND * 6,
        || async {
            let sprom = sproms.get("prometheus").await.map_err(|e| e.to_string())?;
            let traffic = sprom
                .status
                .and_then(|s| s.traffic)
                .ok_or("no status.traffic")?;
            let t = &traffic.total;
            (t.cross_zone_bytes_per_day == 0 && t.same_zone_bytes_per_day > 0)
                .then_some(traffic.clone())
                .ok_or(format!("{traffic:?}"))
        },
    )
    .await;
    let same = traffic.total.same_zone_bytes_per_day as f64;
    let classic = traffic.classic_cross_zone_bytes_per_day as f64;
    assert!(
        (classic / same - 2.0 / 3.0).abs() < 0.01,
        "Classic's estimate: {classic} of {same}"
    );
    let cluster = Cluster::get();
    let answer = e2e::kubectl_zone::run(
        &cluster,
        &cluster.kubeconfig,
        &[
            "shards",
            "prometheus",
            "-n",
            &victim.name,
            "--cost",
            "--price-per-gib",
            "0.02",
            "-o",
            "json",
        ],
    );
    assert_eq!(answer.code, 0, "{}", answer.stderr);
    let cost = &answer.json()["cost"];
    assert_eq!(cost["total"]["crossZoneBytes"], 0, "{cost}");
    assert_eq!(cost["total"]["price"], 0.0, "{cost}");
    assert!(cost["saving"].as_f64().unwrap() > 0.0, "{cost}");
    println!(
        "status.traffic: {} same-zone bytes per day, Classic would send {} across zones: \
         kubectl zone shards --cost: {}",
        traffic.total.same_zone_bytes_per_day, traffic.classic_cross_zone_bytes_per_day, cost
    );
}
