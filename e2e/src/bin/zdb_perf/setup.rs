//! Set-up: the settings, the cluster objects the measurement runs on (StatefulSets, budgets,
//! pods by zone) and the controller it measures.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::localstack::free_port;
use e2e::process::ControllerProcess;
use e2e::webhook::{self_signed_args, zdb_args};
use e2e::workload::{spread_statefulset, to_statefulset, zone_disruption_budget};
use e2e::{Cluster, TestNamespace, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ZoneDisruptionBudget;

use crate::settings::Settings;

pub const UNSELECTED_SET: &str = "free";
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

pub fn set_name(index: usize) -> String {
    format!("s{index}")
}

pub fn statefulset(name: &str, replicas: usize) -> StatefulSet {
    to_statefulset(spread_statefulset(
        name,
        replicas,
        "registry.invalid/perf:1",
    ))
}

pub fn budget(name: &str, max_unavailable: Value) -> ZoneDisruptionBudget {
    zone_disruption_budget(
        name,
        json!({
            "selector": {"matchLabels": {"app": name}},
            "maxUnavailable": max_unavailable,
        }),
    )
}

/// The API server of the local cluster, whose CPU time is reported next to the controller's.
pub fn apiserver_pid() -> Option<u32> {
    let file = e2e::cluster::e2e_dir().join(".cluster/pids/kube-apiserver.pid");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

pub struct Perf {
    pub settings: Settings,
    pub ns: TestNamespace,
    pub other_ns: TestNamespace,
    pub pods: Api<Pod>,
    pub zdbs: Api<ZoneDisruptionBudget>,
    pub per_set: usize,
}

/// A pod count of a node's allocatable (`110`, `1k`).
pub fn pod_quantity(quantity: &str) -> Option<usize> {
    match quantity.strip_suffix('k') {
        Some(thousands) => thousands.parse::<usize>().ok().map(|n| n * 1000),
        None => quantity.parse().ok(),
    }
}

impl Perf {
    /// Waits (up to 3 minutes: namespaces of earlier runs may still be terminating) until the
    /// nodes have room for `needed` more pods; panics naming who holds the room otherwise.
    pub async fn wait_for_room(&self, needed: usize) {
        let nodes: Api<Node> = Api::all(self.ns.client.clone());
        let pods: Api<Pod> = Api::all(self.ns.client.clone());
        let started = Instant::now();
        let mut reported = false;
        loop {
            let capacity: usize = nodes
                .list(&ListParams::default())
                .await
                .expect("list nodes")
                .items
                .iter()
                .filter(|n| {
                    n.spec
                        .as_ref()
                        .is_none_or(|s| s.unschedulable != Some(true))
                })
                .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get("pods"))
                .filter_map(|q| pod_quantity(&q.0))
                .sum();
            let used = pods
                .list_metadata(
                    &ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
                )
                .await
                .expect("list pods")
                .items;
            let free = capacity.saturating_sub(used.len());
            if free >= needed {
                return;
            }
            let mut by_namespace: BTreeMap<String, usize> = BTreeMap::new();
            for pod in &used {
                *by_namespace
                    .entry(pod.namespace().unwrap_or_default())
                    .or_default() += 1;
            }
            let mut holders: Vec<(String, usize)> = by_namespace.into_iter().collect();
            holders.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
            let holders: Vec<String> = holders
                .iter()
                .take(4)
                .map(|(ns, n)| format!("{ns}: {n}"))
                .collect();
            let state = format!(
                "the nodes have room for {free} more pods ({capacity} allocatable, {} in use; {}); this measurement needs {needed}",
                used.len(),
                holders.join(", ")
            );
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "{state}: wait for other runs to end or delete their namespaces"
            );
            if !reported {
                eprintln!("zdb-perf: waiting: {state}");
                reported = true;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// Creates the StatefulSets and waits until every pod is Ready; returns how long it took.
    pub async fn create_pods(&self) -> Duration {
        let total = self.per_set * self.settings.sets + 3;
        self.wait_for_room(total).await;
        let sets: Api<StatefulSet> = self.ns.api();
        let started = Instant::now();
        for index in 0..self.settings.sets {
            sets.create(
                &PostParams::default(),
                &statefulset(&set_name(index), self.per_set),
            )
            .await
            .expect("create a StatefulSet");
        }
        sets.create(&PostParams::default(), &statefulset(UNSELECTED_SET, 3))
            .await
            .expect("create the unselected StatefulSet");
        let mut last_report = Instant::now();
        wait_for(
            &format!("{total} pods Ready"),
            self.settings.pod_timeout,
            || {
                let sets = sets.clone();
                let report = last_report.elapsed() >= Duration::from_secs(15);
                if report {
                    last_report = Instant::now();
                }
                async move {
                    // The StatefulSets' counters: far cheaper than listing thousands of pods.
                    let list = sets
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    let ready: i32 = list
                        .items
                        .iter()
                        .filter_map(|s| s.status.as_ref())
                        .map(|s| s.ready_replicas.unwrap_or(0))
                        .sum();
                    let created: i32 = list
                        .items
                        .iter()
                        .filter_map(|s| s.status.as_ref())
                        .map(|s| s.replicas)
                        .sum();
                    if report {
                        eprintln!(
                            "zdb-perf: {:>4.0} s: {created} pods created, {ready} Ready of {total}",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    if usize::try_from(ready).unwrap_or(0) == total {
                        Ok(())
                    } else {
                        Err(format!("{created} created, {ready} Ready of {total}"))
                    }
                }
            },
        )
        .await;
        started.elapsed()
    }

    /// Set -> zone -> Ready pod names, sorted.
    pub async fn pods_by_zone(&self) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
        let node_zone = e2e::nodes::zones(&self.ns.client, "").await;
        let mut by_set: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        let list = self
            .pods
            .list(&ListParams::default())
            .await
            .expect("list pods");
        for pod in list.items {
            let Some(set) = pod.labels().get("app").cloned() else {
                continue;
            };
            let Some(zone) = pods::node_of(&pod).and_then(|node| node_zone.get(node)) else {
                continue;
            };
            if pods::is_ready(&pod) {
                by_set
                    .entry(set)
                    .or_default()
                    .entry(zone.clone())
                    .or_default()
                    .push(pod.name_any());
            }
        }
        for zones in by_set.values_mut() {
            for names in zones.values_mut() {
                names.sort();
            }
        }
        by_set
    }

    pub async fn create_budgets(&self, names: &[String], max_unavailable: &Value) {
        for name in names {
            self.zdbs
                .create(
                    &PostParams::default(),
                    &budget(name, max_unavailable.clone()),
                )
                .await
                .unwrap_or_else(|e| panic!("create ZoneDisruptionBudget {name}: {e}"));
        }
    }

    /// Waits until the controller computed each budget of `names`, every pod expected, with
    /// `disrupted` as the disrupted zones.
    pub async fn wait_budgets(&self, names: &[String], disrupted: &[&str], timeout: Duration) {
        for name in names {
            self.wait_budget(name, self.per_set, disrupted, timeout)
                .await;
        }
    }

    /// Waits until the controller computed budget `name` with `pods` pods expected and
    /// `disrupted` as the disrupted zones.
    pub async fn wait_budget(
        &self,
        name: &str,
        pods: usize,
        disrupted: &[&str],
        timeout: Duration,
    ) {
        wait_for(
            &format!("the status of ZoneDisruptionBudget {name}"),
            timeout,
            || async {
                let zdb = self.zdbs.get(name).await.map_err(|e| e.to_string())?;
                let status = zdb.status.clone().unwrap_or_default();
                let expected: i32 = status.expected_pods.values().sum();
                let computed = Some(status.observed_generation) == zdb.metadata.generation;
                if computed
                    && usize::try_from(expected).unwrap_or(0) == pods
                    && status.disrupted_zones == disrupted
                    && status.disrupted_pods.is_empty()
                {
                    Ok(())
                } else {
                    Err(serde_json::to_string(&status).unwrap_or_default())
                }
            },
        )
        .await;
    }

    /// Deletes the budgets `names` and waits until they are gone.
    pub async fn delete_budgets(&self, names: &[String]) {
        for name in names {
            let _ = self.zdbs.delete(name, &DeleteParams::default()).await;
        }
        for name in names {
            wait_for(
                &format!("ZoneDisruptionBudget {name} deleted"),
                Duration::from_secs(60),
                || async {
                    match self.zdbs.get_opt(name).await {
                        Ok(None) => Ok(()),
                        other => Err(format!("{:?}", other.map(|z| z.is_some()))),
                    }
                },
            )
            .await;
        }
    }

    /// A replica of the controller, leader-elected as deployed (the storm runs a second one).
    pub fn controller(
        &self,
        listen: SocketAddr,
        webhook: SocketAddr,
        identity: &str,
    ) -> ControllerProcess {
        // No configuration of that name exists: the requests go straight to the webhook, the
        // API server never calls it.
        let config_name = format!("zdb-perf-{}", self.ns.name);
        let mut args = zdb_args(
            identity,
            true,
            &self.ns.name,
            &listen.to_string(),
            &webhook.to_string(),
            &config_name,
        );
        args.extend(self_signed_args(&self.ns.name));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ControllerProcess::start("zdb-controller", &args, &[])
    }
}

impl Perf {
    /// Recreates the budgets `names` (clearing their records) and waits for their status.
    pub async fn reset_budgets(&self, names: &[String]) {
        self.delete_budgets(names).await;
        self.create_budgets(names, &json!("100%")).await;
        self.wait_budgets(names, &[], Duration::from_secs(300))
            .await;
    }
}

/// A free port on 127.0.0.1.
pub fn loopback() -> SocketAddr {
    format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address")
}

impl Perf {
    /// The measurement's namespaces: `name` for the budgets and their pods, `{name}-nobudget`
    /// without any budget.
    pub async fn create(cluster: &Cluster, settings: Settings, name: &str) -> Perf {
        let ns = TestNamespace::create(cluster, name).await;
        let other_ns = TestNamespace::create(cluster, &format!("{name}-nobudget")).await;
        Perf {
            pods: ns.api(),
            zdbs: ns.api(),
            ns,
            other_ns,
            per_set: settings.pods / settings.sets,
            settings,
        }
    }
}

/// The cluster objects measured: the StatefulSets' pods Ready, their budgets created.
pub struct Objects {
    /// Pods the budgets select.
    pub selected: usize,
    /// How long the pods took to be Ready.
    pub pod_time: Duration,
    /// Set -> zone -> Ready pod names.
    pub zones: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// The set whose budget denies (maxUnavailable 1, zone-a disrupted by `unready`).
    pub deny_set: String,
    pub unready: String,
    /// The sets whose budgets allow (maxUnavailable 100%).
    pub allowed_sets: Vec<String>,
}

impl Perf {
    /// Creates the StatefulSets, waits for their pods, makes one pod of the denying set unready
    /// and creates the budgets.
    pub async fn create_objects(&self) -> Objects {
        let settings = &self.settings;
        let per_set = self.per_set;
        let selected = per_set * settings.sets;
        eprintln!(
            "zdb-perf: namespace {}: {} StatefulSets x {per_set} pods ({selected} selected) + {UNSELECTED_SET} x 3 unselected",
            self.ns.name, settings.sets
        );
        let pod_time = self.create_pods().await;
        eprintln!(
            "zdb-perf: {selected} selected pods Ready in {:.1} s",
            pod_time.as_secs_f64()
        );
        let zones = self.pods_by_zone().await;
        let deny_set = set_name(0);
        let allowed_sets: Vec<String> = (1..settings.sets).map(set_name).collect();
        // One unready pod in zone-a of s0: zone-a is disrupted for good (kwok leaves a Running
        // pod's condition alone), so with maxUnavailable 1 every other pod of s0 is refused.
        let unready = zones[&deny_set]["zone-a"][0].clone();
        pods::set_ready(&self.pods, &unready, false).await;
        self.create_budgets(std::slice::from_ref(&deny_set), &json!(1))
            .await;
        self.create_budgets(&allowed_sets, &json!("100%")).await;
        Objects {
            selected,
            pod_time,
            zones,
            deny_set,
            unready,
            allowed_sets,
        }
    }
}
