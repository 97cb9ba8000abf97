//! The drain storm: would-be-allowed evictions of **one** budget at the full rate, through two
//! replicas of the webhook, as a cluster autoscaler or a parallel drain emptying many nodes at
//! once sends them.
//!
//! The budget selects the pods of one ReplicaSet (`ZDB_PERF_STORM_PODS`, 300) spread over the
//! zones. Each request names a pod Ready as far as the driver knows and not evicted yet, and goes
//! to the two replicas in turn (the API server spreads its calls over the Service's endpoints).
//! On an allowed answer the driver does what the API server does next: it deletes the pod (by its
//! uid, at once). The ReplicaSet controller creates a new pod and kwok makes it Ready. (A
//! ReplicaSet, not a StatefulSet: kwok, behind on many deletions, deletes by name, and a
//! StatefulSet's pod recreated under that name was deleted again, over and over.) Two budgets,
//! one storm each (`ZDB_PERF_STORM_MAX_UNAVAILABLE`, "1,100%"):
//!
//! - `maxUnavailable: 1`: each allowed eviction must complete (its new pod Ready) before the next
//!   anywhere, so allowed evictions flow at the pace of recoveries and nearly every request is
//!   refused by the budget;
//! - `maxUnavailable: 100%`: every pod of the first zone to lose one may go, as fast as the
//!   webhook can record them (one status write each), and the other zones wait: a zone emptied
//!   at once, the write-heavy case.
//!
//! What is checked:
//!
//! - **No budget violation**, from an independent ledger: watches of the pods and of the budget,
//!   replayed in resourceVersion order (one etcd's revisions, so the two streams interleave as
//!   they happened). A disruption starts when the budget's status records the pod (the webhook's
//!   write) and ends when a new pod of the ReplicaSet is Ready (the oldest disruption first). A
//!   pod that was Ready and goes away without a record is a disruption too. At every start the
//!   disruptions under way must be in one zone and at most maxUnavailable.
//! - **Every answer in time**: before the API server's webhook timeout (`timeoutSeconds` 5),
//!   which would fail the eviction closed with a 500 that ends `kubectl drain`.
//! - **Memory**: each replica's VmRSS, sampled every 100 ms, and its VmHWM.
//! - **Flow**: allowed (recorded) evictions per second and the longest gap between two. With a
//!   percentage budget (a zone may go at once) at least `ZDB_PERF_STORM_MIN_RATE` (50/s); with a
//!   count, about maxUnavailable per replacement cycle (the median time from a record to the new
//!   pod Ready): at least `ZDB_PERF_STORM_MIN_PER_CYCLE` (0.7) of it.
//! - **Latency**: p99 of the answers within `ZDB_PERF_STORM_P99_MS` (250 ms).
//!
//! [`native`] runs the same storm against a native PodDisruptionBudget (`ZDB_PERF_STORM_NATIVE`,
//! "100%"), and the ZDB storm of the same maxUnavailable must allow at least
//! `ZDB_PERF_STORM_NATIVE_FACTOR` (2) times its rate. [`restart`] runs the storm through the API
//! server instead, while the deployed controller restarts.

pub mod native;
pub mod restart;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ZoneDisruptionBudget;

use super::{Perf, Pool, ServerSide, Target, admission_review, fmt_ms, memory, server_side};
use e2e::perf::{quantile, setting};
use e2e::pods;
use e2e::wait_for;
use e2e::workload::spread_statefulset;

/// The storm's ReplicaSet and budget.
pub const STORM_SET: &str = "storm";

/// The API server's timeout for the webhook (`timeoutSeconds` of config/webhook).
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

pub struct StormSettings {
    pub seconds: u64,
    /// Pods of the storm's ReplicaSet.
    pub pods: usize,
    pub rate: u32,
    /// One storm per value, each on a budget recreated with it.
    pub max_unavailable: Vec<String>,
    pub rss_mib: f64,
    /// Allowed evictions per second at least, with a percentage budget.
    pub min_rate: f64,
    /// Allowed evictions per replacement cycle at least, as a share of a count budget.
    pub min_per_cycle: f64,
    /// p99 of the answers at most (ms).
    pub p99_ms: f64,
    /// maxUnavailable values of the native PodDisruptionBudget storms.
    pub native: Vec<String>,
    /// The ZDB's allowed rate over the native one's, at least.
    pub native_factor: f64,
}

fn values(setting_name: &str, default: &str) -> Vec<String> {
    let list: String = setting(setting_name, default.to_string());
    let values: Vec<String> = list
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    for value in &values {
        assert!(
            limit(value, 100).is_some(),
            "{setting_name}: {value:?} is neither a count nor a percentage"
        );
    }
    values
}

impl StormSettings {
    pub fn from_env(rate: u32) -> StormSettings {
        StormSettings {
            seconds: setting("ZDB_PERF_STORM_SECONDS", 30),
            pods: setting("ZDB_PERF_STORM_PODS", 300),
            rate: setting("ZDB_PERF_STORM_RATE", rate),
            max_unavailable: values("ZDB_PERF_STORM_MAX_UNAVAILABLE", "1,100%"),
            rss_mib: setting("ZDB_PERF_STORM_RSS_MIB", 64.0),
            min_rate: setting("ZDB_PERF_STORM_MIN_RATE", 50.0),
            min_per_cycle: setting("ZDB_PERF_STORM_MIN_PER_CYCLE", 0.7),
            p99_ms: setting("ZDB_PERF_STORM_P99_MS", 250.0),
            native: values("ZDB_PERF_STORM_NATIVE", "100%"),
            native_factor: setting("ZDB_PERF_STORM_NATIVE_FACTOR", 2.0),
        }
    }
}

/// maxUnavailable as the budget's spec takes it: a count, or a percentage ("100%").
fn spec_value(value: &str) -> Value {
    value
        .parse::<u64>()
        .map_or_else(|_| json!(value), |n| json!(n))
}

/// The pods one zone may have unavailable: a count, or a percentage of every expected pod of
/// the budget, rounded up (as the controller resolves it).
fn limit(value: &str, expected: usize) -> Option<usize> {
    match value.strip_suffix('%') {
        Some(percent) => Some((percent.parse::<usize>().ok()? * expected).div_ceil(100)),
        None => value.parse().ok(),
    }
}

/// What the watches saw, with the driver's clock.
#[derive(Debug, Clone)]
enum Seen {
    Pod {
        name: String,
        uid: String,
        /// None: deleted.
        ready: Option<bool>,
        zone: Option<String>,
    },
    /// The budget's records: pod → (zone, time recorded).
    Records(BTreeMap<String, (String, String)>),
}

#[derive(Debug, Default)]
struct Ledger {
    /// (resourceVersion, when it was received, what).
    seen: Mutex<Vec<(u64, Instant, Seen)>>,
    /// Highest resourceVersion received per stream (pods, budget).
    reached: [AtomicU64; 2],
    errors: Mutex<Vec<String>>,
}

fn rv_of(meta: &kube::api::ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

impl Ledger {
    fn push(&self, stream: usize, rv: u64, seen: Seen) {
        self.seen
            .lock()
            .expect("ledger")
            .push((rv, Instant::now(), seen));
        self.reached[stream].fetch_max(rv, Ordering::AcqRel);
    }

    fn error(&self, error: String) {
        self.errors.lock().expect("ledger").push(error);
    }
}

/// Follows `api` from resourceVersion `from` until `stop`, re-watching from the last version
/// seen when a watch ends; every object goes through `seen` into the ledger.
async fn follow<K>(
    api: Api<K>,
    params: WatchParams,
    mut from: String,
    stream: usize,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    seen: impl Fn(&K, bool) -> Seen,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    while !stop.load(Ordering::Acquire) {
        let events = match api.watch(&params, &from).await {
            Ok(events) => events,
            Err(error) => {
                ledger.error(format!("watch: {error}"));
                return;
            }
        };
        let mut events = events.boxed();
        loop {
            let next = tokio::time::timeout(Duration::from_millis(200), events.next()).await;
            if stop.load(Ordering::Acquire) {
                return;
            }
            let event = match next {
                Err(_) => continue,
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    ledger.error(format!("watch: {error}"));
                    return;
                }
                Ok(Some(Ok(event))) => event,
            };
            let (object, deleted) = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
                WatchEvent::Deleted(o) => (o, true),
                WatchEvent::Bookmark(b) => {
                    from = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) => {
                    // A 410 Gone here would leave a hole in the ledger: report it, do not guess.
                    ledger.error(format!("watch error: {e:?}"));
                    return;
                }
            };
            let Some(rv) = rv_of(object.meta()) else {
                ledger.error(format!("no numeric resourceVersion: {object:?}"));
                return;
            };
            from = rv.to_string();
            ledger.push(stream, rv, seen(&object, deleted));
        }
    }
}

/// The storm's figures.
pub struct StormResult {
    pub max_unavailable: String,
    pub sent: usize,
    latencies: Vec<f64>,
    pub allowed_answers: usize,
    /// Allowed answers whose deletion removed the pod judged (the others came for a pod already
    /// deleted by an earlier answer, or for a pod kwok had deleted and its controller recreated
    /// meanwhile: the deletion is by the uid the driver sent the request for).
    pub first_allowed: usize,
    pub refused: usize,
    /// Answers other than allowed or 429, transport errors, answers past the webhook timeout.
    pub wrong: usize,
    example: Option<String>,
    pub late_answers: usize,
    /// Disruptions recorded in the budget (the ledger's starts), per second of the phase.
    pub starts: usize,
    pub completed: Vec<f64>,
    pub longest_gap_s: f64,
    pub violations: Vec<String>,
    pub ledger_errors: Vec<String>,
    pub elapsed: Duration,
    /// Per replica: highest VmRSS sampled, VmHWM at the end, before the storm.
    pub rss_max: [f64; 2],
    pub hwm: [f64; 2],
    pub rss_before: [f64; 2],
    server: [Option<ServerSide>; 2],
    pub delete_errors: usize,
    pub running: [bool; 2],
}

/// One request's end.
enum Answer {
    Allowed,
    Refused,
    Wrong(String),
}

fn classify(answer: &Value, uid: &str) -> Answer {
    let response = &answer["response"];
    if response["uid"] != uid {
        return Answer::Wrong(format!("uid {} for {uid}", response["uid"]));
    }
    match (
        response["allowed"].as_bool(),
        response["status"]["code"].as_i64(),
    ) {
        (Some(true), _) => Answer::Allowed,
        (Some(false), Some(429)) => Answer::Refused,
        _ => Answer::Wrong(format!("unexpected answer: {response}")),
    }
}

/// The pods the driver may name: Ready (uid by name), and not evicted yet.
#[derive(Debug, Default)]
struct Targets {
    ready: BTreeMap<String, String>,
    evicted: HashSet<String>,
}

impl Targets {
    /// The first Ready pod not evicted after `cursor` (wrapping), with its uid.
    fn next_after(&self, cursor: &str) -> Option<(String, String)> {
        let eligible = |(name, _): &(&String, &String)| !self.evicted.contains(*name);
        let after = self
            .ready
            .range::<str, _>((
                std::ops::Bound::Excluded(cursor),
                std::ops::Bound::Unbounded,
            ))
            .find(eligible);
        after
            .or_else(|| self.ready.iter().find(eligible))
            .map(|(name, uid)| (name.clone(), uid.clone()))
    }
}

fn pod_seen(
    zones: &BTreeMap<String, String>,
    targets: Arc<Mutex<Targets>>,
) -> impl Fn(&Pod, bool) -> Seen + use<> {
    let zones = zones.clone();
    move |pod: &Pod, deleted: bool| {
        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
        let ready = (!deleted).then(|| pods::is_ready(pod));
        {
            let mut targets = targets.lock().expect("targets");
            if ready == Some(true) {
                targets.ready.insert(name.clone(), uid.clone());
            } else {
                targets.ready.remove(&name);
            }
        }
        Seen::Pod {
            name,
            uid,
            ready,
            zone: pods::node_of(pod).and_then(|node| zones.get(node).cloned()),
        }
    }
}

fn budget_seen(zdb: &ZoneDisruptionBudget, _deleted: bool) -> Seen {
    let status = zdb.status.clone().unwrap_or_default();
    Seen::Records(
        status
            .disrupted_pods
            .iter()
            .map(|(pod, at)| {
                let zone = status.disrupted_pod_zones.get(pod).cloned();
                let zone = zone.unwrap_or_else(|| "unknown".into());
                (pod.clone(), (zone, format!("{:?}", at.0)))
            })
            .collect(),
    )
}

#[derive(Debug, Clone)]
struct PodState {
    uid: String,
    ready: bool,
    present: bool,
    zone: String,
}

/// A disruption the ledger follows: from the record (or the loss of a Ready pod without one)
/// until a new pod is Ready.
struct Active {
    zone: String,
    since: Instant,
    /// Order of the starts: the oldest disruption ends first.
    order: usize,
}

/// Replays the ledger in resourceVersion order; returns (starts with their time, completed
/// disruption durations in s, violations).
///
/// A start is a record new to the budget (or one whose time changed). A disruption counts in
/// the zone of the pod evicted, even once its new pod is placed in another zone: the budget is
/// about the evictions allowed (the controller counts such a new pod in its zone as soon as it
/// sees it, and the webhook then refuses). A new pod Ready ends the oldest disruption.
fn replay(
    initial: HashMap<String, PodState>,
    mut seen: Vec<(u64, Instant, Seen)>,
    max_unavailable: usize,
) -> (Vec<Instant>, Vec<f64>, Vec<String>) {
    seen.sort_by_key(|(rv, _, _)| *rv);
    let mut pods = initial;
    // Pods seen Ready once: a new one ends a disruption, a lost one without a record starts one.
    let mut serving: HashSet<String> = pods
        .iter()
        .filter(|(_, p)| p.ready)
        .map(|(name, _)| name.clone())
        .collect();
    let mut active: BTreeMap<String, Active> = BTreeMap::new();
    let mut recorded: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut ever_recorded: HashSet<String> = HashSet::new();
    let (mut starts, mut completed, mut violations) = (Vec::new(), Vec::new(), Vec::new());
    let mut order = 0;
    for (rv, at, event) in seen {
        match event {
            Seen::Pod {
                name,
                uid,
                ready,
                zone,
            } => {
                let state = pods.entry(name.clone()).or_insert_with(|| PodState {
                    uid: uid.clone(),
                    ready: false,
                    present: true,
                    zone: String::new(),
                });
                state.uid = uid;
                state.present = ready.is_some();
                state.ready = ready == Some(true);
                if let Some(zone) = zone {
                    state.zone = zone;
                }
                let zone = state.zone.clone();
                if ready == Some(true) {
                    if serving.insert(name.clone())
                        && let Some(oldest) = active
                            .iter()
                            .min_by_key(|(_, a)| a.order)
                            .map(|(key, _)| key.clone())
                        && let Some(ended) = active.remove(&oldest)
                    {
                        completed.push(at.duration_since(ended.since).as_secs_f64());
                    }
                } else if serving.contains(&name)
                    && !ever_recorded.contains(&name)
                    && !active.contains_key(&name)
                {
                    // A pod that served went away without any record.
                    violations.push(format!(
                        "at resourceVersion {rv}, {name} ({zone}) became unavailable without a record"
                    ));
                    order += 1;
                    active.insert(
                        name.clone(),
                        Active {
                            zone,
                            since: at,
                            order,
                        },
                    );
                }
            }
            Seen::Records(records) => {
                for (pod, (zone, at_time)) in &records {
                    if recorded
                        .get(pod)
                        .is_some_and(|(_, before)| before == at_time)
                    {
                        continue;
                    }
                    let mut zones: BTreeSet<&String> = active.values().map(|a| &a.zone).collect();
                    zones.insert(zone);
                    let count = active.len() + usize::from(!active.contains_key(pod));
                    if zones.len() > 1 || count > max_unavailable {
                        let under_way: Vec<String> = active
                            .iter()
                            .map(|(name, a)| format!("{name} ({})", a.zone))
                            .collect();
                        violations.push(format!(
                            "at resourceVersion {rv}, {pod} ({zone}) recorded with {} under way: {}",
                            active.len(),
                            under_way.join(", ")
                        ));
                    }
                    ever_recorded.insert(pod.clone());
                    order += 1;
                    active.insert(
                        pod.clone(),
                        Active {
                            zone: zone.clone(),
                            since: at,
                            order,
                        },
                    );
                    starts.push(at);
                }
                recorded = records;
            }
        }
    }
    (starts, completed, violations)
}

/// The ledger's start: the pods and budget listed now, the pods the driver may name, and the
/// watches feeding the ledger from those versions until `stop`.
type LedgerStart = (
    HashMap<String, PodState>,
    Arc<Mutex<Targets>>,
    Arc<Ledger>,
    Arc<AtomicBool>,
    [tokio::task::JoinHandle<()>; 2],
);

impl Perf {
    async fn start_ledger(&self, selector: &str, set: &str) -> LedgerStart {
        let list = self
            .pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list the budget's pods");
        let node_zones = e2e::nodes::zones(&self.ns.client, "").await;
        let mut initial: HashMap<String, PodState> = HashMap::new();
        for pod in &list.items {
            let zone = pods::node_of(pod)
                .and_then(|n| node_zones.get(n).cloned())
                .unwrap_or_default();
            initial.insert(
                pod.name_any(),
                PodState {
                    uid: pod.uid().unwrap_or_default(),
                    ready: pods::is_ready(pod),
                    present: true,
                    zone,
                },
            );
        }
        let zdb = self.zdbs.get(set).await.expect("the storm's budget");
        let targets = Arc::new(Mutex::new(Targets {
            ready: initial
                .iter()
                .filter(|(_, p)| p.ready)
                .map(|(name, p)| (name.clone(), p.uid.clone()))
                .collect(),
            evicted: HashSet::new(),
        }));
        let ledger = Arc::new(Ledger::default());
        let stop = Arc::new(AtomicBool::new(false));
        let watches = [
            tokio::spawn(follow(
                self.pods.clone(),
                WatchParams::default().labels(selector).timeout(290),
                list.metadata.resource_version.clone().unwrap_or_default(),
                0,
                ledger.clone(),
                stop.clone(),
                pod_seen(&node_zones, targets.clone()),
            )),
            tokio::spawn(follow(
                self.zdbs.clone(),
                WatchParams::default()
                    .fields(&format!("metadata.name={set}"))
                    .timeout(290),
                zdb.resource_version().unwrap_or_default(),
                1,
                ledger.clone(),
                stop.clone(),
                budget_seen,
            )),
        ];

        (initial, targets, ledger, stop, watches)
    }
}

impl Perf {
    /// Creates the storm's ReplicaSet (once) and waits until its pods are Ready.
    async fn storm_pods(&self, storm: &StormSettings) {
        let sets: Api<ReplicaSet> = self.ns.api();
        if sets
            .get_opt(STORM_SET)
            .await
            .expect("read the ReplicaSet")
            .is_none()
        {
            self.wait_for_room(storm.pods).await;
            let mut manifest = spread_statefulset(STORM_SET, storm.pods, "registry.invalid/perf:1");
            manifest["kind"] = json!("ReplicaSet");
            if let Some(spec) = manifest["spec"].as_object_mut() {
                spec.remove("serviceName");
                spec.remove("podManagementPolicy");
            }
            let set: ReplicaSet = serde_json::from_value(manifest).expect("ReplicaSet manifest");
            sets.create(&PostParams::default(), &set)
                .await
                .expect("create the storm's ReplicaSet");
        }
        let want = i32::try_from(storm.pods).unwrap_or(i32::MAX);
        wait_for(
            "the storm's pods Ready",
            Duration::from_secs(300),
            || async {
                let set = sets.get(STORM_SET).await.map_err(|e| e.to_string())?;
                let ready = set.status.and_then(|s| s.ready_replicas).unwrap_or(0);
                if ready == want {
                    Ok(())
                } else {
                    Err(format!("{ready} of {want} Ready"))
                }
            },
        )
        .await;
    }

    /// Runs one storm with budget `max_unavailable` on the storm's ReplicaSet, through the
    /// running controller (`first`) and a second replica started here.
    pub async fn storm(
        &self,
        storm: &StormSettings,
        max_unavailable: &str,
        first: &Target,
        ca: &[u8],
    ) -> StormResult {
        let set = STORM_SET;
        let most_unavailable = limit(max_unavailable, storm.pods).expect("checked setting");
        self.storm_pods(storm).await;
        self.delete_budgets(&[set.to_string()]).await;
        self.create_budgets(&[set.to_string()], &spec_value(max_unavailable))
            .await;
        self.wait_budget(set, storm.pods, &[], Duration::from_secs(300))
            .await;

        // The second replica, and the webhook answering there with the budget cached.
        let listen: SocketAddr = super::loopback();
        let webhook: SocketAddr = super::loopback();
        let mut second_process = self.controller(listen, webhook, "zdb-perf-b");
        eprintln!(
            "zdb-perf: storm: second replica pid {}, log {}",
            second_process.pid(),
            second_process.log.display()
        );
        let second = Target {
            pool: Arc::new(Pool::new(webhook, ca)),
            listen,
            pid: second_process.pid(),
            apiserver: first.apiserver,
            samples: None,
        };
        wait_for(
            "the second replica ready",
            Duration::from_secs(60),
            || async {
                match e2e::process::http_get_from(listen, "/readyz").await {
                    Ok((200, _)) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        for target in [first, &second] {
            target
                .wait_budgets_cached(&self.ns.name, &[set.to_string()])
                .await;
        }

        let selector = format!("app={set}");
        let (initial, targets, ledger, stop, watches) = self.start_ledger(&selector, set).await;

        let pids = [first.pid, second.pid];
        let rss_before = pids.map(|pid| memory(pid).0);
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            std::thread::spawn(move || {
                let mut most = [0.0f64; 2];
                while sampling.load(Ordering::Acquire) {
                    for (i, pid) in pids.iter().enumerate() {
                        let (rss, _) = memory(*pid);
                        if rss.is_nan() || rss > most[i] {
                            most[i] = rss;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                most
            })
        };

        let before = [first.scrape().await, second.scrape().await];
        eprintln!(
            "zdb-perf: storm: {} requests at {}/s for {} s on budget {set} (maxUnavailable {max_unavailable}), two replicas",
            storm.seconds * u64::from(storm.rate),
            storm.rate,
            storm.seconds,
        );
        let pools = [first.pool.clone(), second.pool.clone()];
        let (outcomes, elapsed, delete_errors) = self.send_storm(storm, &pools, targets).await;
        let after = [first.scrape().await, second.scrape().await];
        let hwm = pids.map(|pid| memory(pid).1);
        sampling.store(false, Ordering::Release);
        let rss_max = sampler.join().expect("the memory sampler");
        let running = [
            true, // checked by the caller for the first replica
            second_process.is_running(),
        ];

        // Let every disruption end (new pods Ready) and the ledger catch up with the API server.
        let catch_up = self.settle(&selector, set, storm.pods, &ledger).await;
        stop.store(true, Ordering::Release);
        for watch in watches {
            let _ = watch.await;
        }
        drop(second_process);

        let seen = std::mem::take(&mut *ledger.seen.lock().expect("ledger"));
        let (starts, completed, violations) = replay(initial, seen, most_unavailable);
        let phase_started = starts.first().copied();
        let longest_gap_s = starts
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64())
            .fold(phase_started.map_or(f64::NAN, |_| 0.0), f64::max);
        let mut ledger_errors = std::mem::take(&mut *ledger.errors.lock().expect("ledger"));
        if let Err(error) = catch_up {
            ledger_errors.push(error);
        }

        let mut result = StormResult {
            max_unavailable: max_unavailable.to_string(),
            sent: outcomes.len(),
            latencies: Vec::new(),
            allowed_answers: 0,
            first_allowed: 0,
            refused: 0,
            wrong: 0,
            example: None,
            late_answers: 0,
            starts: starts.len(),
            completed,
            longest_gap_s,
            violations,
            ledger_errors,
            elapsed,
            rss_max,
            hwm,
            rss_before,
            server: [
                Some(server_side(&before[0], &after[0])),
                Some(server_side(&before[1], &after[1])),
            ],
            delete_errors,
            running,
        };
        for (latency_ms, answer, first) in outcomes {
            result.first_allowed += usize::from(first);
            if latency_ms >= WEBHOOK_TIMEOUT.as_secs_f64() * 1000.0 {
                result.late_answers += 1;
            }
            match answer {
                Answer::Allowed => result.allowed_answers += 1,
                Answer::Refused => result.refused += 1,
                Answer::Wrong(problem) => {
                    result.wrong += 1;
                    result.example.get_or_insert(problem);
                }
            }
            result.latencies.push(latency_ms);
        }
        result
            .latencies
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        result
    }

    /// Sends the storm's requests, open loop, alternating between the replicas; an allowed
    /// eviction's pod is deleted (as the API server would) and never named again. Returns each
    /// request's latency (ms), answer and whether it was the first allowed for its pod, the
    /// send time, and the deletions that failed.
    async fn send_storm(
        &self,
        storm: &StormSettings,
        pools: &[Arc<Pool>; 2],
        targets: Arc<Mutex<Targets>>,
    ) -> (Vec<(f64, Answer, bool)>, Duration, usize) {
        let count = usize::try_from(storm.seconds * u64::from(storm.rate)).unwrap_or(usize::MAX);
        let period = Duration::from_secs_f64(1.0 / f64::from(storm.rate));
        let delete_errors = Arc::new(AtomicU64::new(0));
        let runtime = tokio::runtime::Handle::current();
        let namespace = self.ns.name.clone();
        let (pools, api) = (pools.clone(), self.pods.clone());
        let errors_in = delete_errors.clone();
        let started = Instant::now();
        // Paced from a thread, as `drive` is: the runtime timer's tick would add to the latency.
        let pacer = tokio::task::spawn_blocking(move || {
            let mut tasks = Vec::with_capacity(count);
            let mut cursor = String::new();
            for i in 0..count {
                let scheduled = started + period * u32::try_from(i).unwrap_or(u32::MAX);
                if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                // The next Ready pod not evicted; none when every pod is evicted and none is new
                // yet (the slot goes unused).
                let pick = targets.lock().expect("targets").next_after(&cursor);
                let Some((pod, pod_uid)) = pick else { continue };
                cursor.clone_from(&pod);
                let uid = format!("00000000-0000-4000-8000-st{i:010}");
                let body = admission_review(&uid, &namespace, &pod, false);
                let pool = pools[i % 2].clone();
                let (api, targets, errors) = (api.clone(), targets.clone(), errors_in.clone());
                tasks.push(runtime.spawn(async move {
                    let answer = tokio::time::timeout(WEBHOOK_TIMEOUT, pool.post(body)).await;
                    let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
                    let answer = match answer {
                        Err(_) => Answer::Wrong(format!("no answer within {WEBHOOK_TIMEOUT:?}")),
                        Ok(Err(error)) => Answer::Wrong(error),
                        Ok(Ok(answer)) => classify(&answer, &uid),
                    };
                    // What the API server does after an allowed eviction: delete the pod that
                    // was judged, by its uid. Of several allowed answers for one pod (requests
                    // sent before the first was answered) one deletes it; a later answer
                    // cannot delete its replacement.
                    let mut first = false;
                    if matches!(answer, Answer::Allowed) {
                        targets.lock().expect("targets").evicted.insert(pod.clone());
                        // At once (no grace period): kwok, left to finish many graceful
                        // deletions of recreated names, was seen deleting the new pods too.
                        let params =
                            DeleteParams::default()
                                .grace_period(0)
                                .preconditions(Preconditions {
                                    uid: Some(pod_uid),
                                    resource_version: None,
                                });
                        match api.delete(&pod, &params).await {
                            Ok(_) => first = true,
                            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                            Err(error) => {
                                eprintln!("zdb-perf: storm: delete {pod}: {error}");
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    (latency_ms, answer, first)
                }));
            }
            tasks
        });
        let tasks = pacer.await.expect("pacing thread");
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.expect("request task"));
        }
        let elapsed = started.elapsed();
        let errors = usize::try_from(delete_errors.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        (outcomes, elapsed, errors)
    }

    /// Waits until every pod of `selector` is Ready and the budget has no record, then until the
    /// ledger's watches have reached the versions of the pods and the budget listed then.
    async fn settle(
        &self,
        selector: &str,
        set: &str,
        want: usize,
        ledger: &Ledger,
    ) -> Result<(), String> {
        let (pods_rv, budget_rv) = wait_for(
            "the storm's disruptions to end",
            Duration::from_secs(180),
            || async {
                let list = self
                    .pods
                    .list(&ListParams::default().labels(selector))
                    .await
                    .map_err(|e| e.to_string())?;
                let ready = list.items.iter().filter(|p| pods::is_ready(p)).count();
                let zdb = self.zdbs.get(set).await.map_err(|e| e.to_string())?;
                let records = zdb.status.as_ref().map_or(0, |s| s.disrupted_pods.len());
                if ready != want || list.items.len() != want || records > 0 {
                    return Err(format!(
                        "{ready} of {want} Ready, {} pods, {records} records",
                        list.items.len()
                    ));
                }
                let pods_rv = list.items.iter().filter_map(|p| rv_of(&p.metadata)).max();
                Ok((pods_rv.unwrap_or(0), rv_of(&zdb.metadata).unwrap_or(0)))
            },
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if ledger.reached[0].load(Ordering::Acquire) >= pods_rv
                && ledger.reached[1].load(Ordering::Acquire) >= budget_rv
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!(
            "the ledger's watches did not reach resourceVersions {pods_rv} (pods) and {budget_rv} (budget) within 30 s"
        ))
    }
}

impl StormResult {
    pub fn percentile(&self, p: f64) -> f64 {
        quantile(&self.latencies, p / 100.0)
    }

    /// Disruptions recorded (the ledger's starts) per second of the storm.
    pub fn allowed_per_second(&self) -> f64 {
        self.starts as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Allowed evictions per replacement cycle: per median time from a record to the new pod
    /// Ready.
    fn per_cycle(&self) -> f64 {
        let mut durations = self.completed.clone();
        durations.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        self.allowed_per_second() * quantile(&durations, 0.5)
    }

    /// Evictions recorded per status write, from both replicas' batch histograms.
    fn per_write(&self) -> (f64, f64) {
        let sum = |key: &str| -> f64 {
            self.server
                .iter()
                .flatten()
                .filter_map(|s| s.decisions.get(key))
                .sum()
        };
        (sum("batch-records"), sum("batch-writes"))
    }

    pub fn report(&self, storm: &StormSettings) {
        println!();
        println!(
            "drain storm: {} would-be-allowed evictions at {}/s for {} s on one budget (maxUnavailable {}) through two replicas; an allowed pod is deleted as the API server would and replaced by its ReplicaSet",
            self.sent, storm.rate, storm.seconds, self.max_unavailable
        );
        println!(
            "  answers: {} allowed ({} deleted a pod), {} refused with 429, {} other/errors, {} at or past the webhook timeout ({:?}); latency ms p50 {} p99 {} max {}",
            self.allowed_answers,
            self.first_allowed,
            self.refused,
            self.wrong,
            self.late_answers,
            WEBHOOK_TIMEOUT,
            fmt_ms(self.percentile(50.0)),
            fmt_ms(self.percentile(99.0)),
            fmt_ms(self.latencies.last().copied().unwrap_or(f64::NAN)),
        );
        let mut durations = self.completed.clone();
        durations.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        println!(
            "  allowed and recorded: {} ({:.2}/s over {:.1} s); longest gap between two {:.1} s; disruption (record to new pod Ready) p50 {:.2} s max {:.2} s; failed deletions {}",
            self.starts,
            self.starts as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.elapsed.as_secs_f64(),
            self.longest_gap_s,
            quantile(&durations, 0.5),
            durations.last().copied().unwrap_or(f64::NAN),
            self.delete_errors,
        );
        let (records, writes) = self.per_write();
        println!(
            "  group commit: {records} evictions recorded by {writes} status writes ({:.1} per write); {:.2} allowed per replacement cycle",
            records / writes.max(1.0),
            self.per_cycle(),
        );
        println!(
            "  budget violations (ledger of the pod and budget watches, in resourceVersion order): {}",
            self.violations.len()
        );
        for violation in self.violations.iter().take(5) {
            println!("    {violation}");
        }
        for (i, name) in ["first", "second"].iter().enumerate() {
            let decisions = self.server[i].as_ref().map_or_else(String::new, |s| {
                s.decisions
                    .iter()
                    .map(|(k, n)| format!("{k}={n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            println!(
                "  {name} replica: VmRSS {:.1} MiB before, at most {:.1} during (sampled every 100 ms), VmHWM {:.1}; decisions: {decisions}",
                self.rss_before[i], self.rss_max[i], self.hwm[i]
            );
        }
        if let Some(example) = &self.example {
            println!("  e.g.: {example}");
        }
    }

    /// The missed targets, one line each.
    pub fn missed(&self, storm: &StormSettings) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.violations.is_empty() {
            problems.push(format!("{} budget violations", self.violations.len()));
        }
        if !self.ledger_errors.is_empty() {
            problems.push(format!(
                "the ledger is incomplete: {}",
                self.ledger_errors.join("; ")
            ));
        }
        if self.wrong > 0 || self.late_answers > 0 {
            problems.push(format!(
                "{} unexpected answers or errors, {} at or past the webhook timeout",
                self.wrong, self.late_answers
            ));
        }
        if self.starts == 0 {
            problems.push("no eviction was allowed".to_string());
        }
        let p99 = self.percentile(99.0);
        if p99.is_nan() || p99 > storm.p99_ms {
            problems.push(format!("p99 {} ms > {} ms", fmt_ms(p99), storm.p99_ms));
        }
        if self.max_unavailable.ends_with('%') {
            let rate = self.allowed_per_second();
            if rate < storm.min_rate {
                problems.push(format!(
                    "{rate:.1} allowed/s < {} allowed/s",
                    storm.min_rate
                ));
            }
        } else if let Some(count) = limit(&self.max_unavailable, 0) {
            let per_cycle = self.per_cycle();
            let wanted = storm.min_per_cycle * count as f64;
            if per_cycle.is_nan() || per_cycle < wanted {
                problems.push(format!(
                    "{per_cycle:.2} allowed per replacement cycle < {wanted:.2}"
                ));
            }
        }
        // The ledger saw every record the webhooks say they wrote, and at most those plus the
        // decisions abandoned at the deadline (whose write may still have landed).
        let decided = |key: &str| -> f64 {
            self.server
                .iter()
                .flatten()
                .filter_map(|s| s.decisions.get(key))
                .sum()
        };
        let recorded = decided("allowed/Recorded");
        let abandoned = decided("denied/DeadlineExceeded");
        let starts = self.starts as f64;
        if starts + 0.5 < recorded || starts > recorded + abandoned + 0.5 {
            problems.push(format!(
                "the webhooks recorded {recorded} evictions ({abandoned} abandoned at the deadline), the ledger saw {} start",
                self.starts
            ));
        }
        if self.delete_errors > 0 {
            problems.push(format!("{} deletions failed", self.delete_errors));
        }
        for i in 0..2 {
            let most = self.rss_max[i].max(self.hwm[i]);
            if most.is_nan() || most > storm.rss_mib {
                problems.push(format!(
                    "replica {} reached {most:.1} MiB > {} MiB",
                    i + 1,
                    storm.rss_mib
                ));
            }
            if !self.running[i] {
                problems.push(format!("replica {} exited", i + 1));
            }
        }
        problems
            .into_iter()
            .map(|problem| format!("storm (maxUnavailable {}): {problem}", self.max_unavailable))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(uid: &str, zone: &str) -> PodState {
        PodState {
            uid: uid.into(),
            ready: true,
            present: true,
            zone: zone.into(),
        }
    }

    fn records(pods: &[(&str, &str)]) -> Seen {
        Seen::Records(
            pods.iter()
                .map(|(p, z)| ((*p).to_string(), ((*z).to_string(), "t0".to_string())))
                .collect(),
        )
    }

    fn pod(name: &str, ready: Option<bool>, zone: &str) -> Seen {
        Seen::Pod {
            name: name.into(),
            uid: format!("uid-{name}"),
            ready,
            zone: Some(zone.into()),
        }
    }

    #[test]
    fn the_ledger_follows_disruptions_in_resource_version_order() {
        let now = Instant::now();
        let initial: HashMap<String, PodState> = [
            ("a-0".to_string(), state("u0", "a")),
            ("a-1".to_string(), state("u1", "a")),
            ("b-0".to_string(), state("u2", "b")),
        ]
        .into();
        // a-0 recorded and deleted, a new pod Ready; then b-0: no violation.
        let fine = vec![
            (10, now, records(&[("a-0", "a")])),
            (11, now, pod("a-0", None, "a")),
            (12, now, pod("new-0", Some(false), "a")),
            (13, now, records(&[])),
            (14, now, pod("new-0", Some(true), "a")),
            (15, now, records(&[("b-0", "b")])),
        ];
        let (starts, completed, violations) = replay(initial.clone(), fine, 1);
        assert_eq!((starts.len(), completed.len()), (2, 1));
        assert!(violations.is_empty(), "{violations:?}");
        // b-0 recorded before the new pod is Ready: a violation, whatever the order the two
        // watches delivered the events in.
        let racing = vec![
            (15, now, records(&[("b-0", "b")])),
            (10, now, records(&[("a-0", "a")])),
            (12, now, pod("new-0", Some(false), "a")),
            (16, now, pod("new-0", Some(true), "a")),
        ];
        let (_, _, violations) = replay(initial.clone(), racing, 1);
        assert_eq!(violations.len(), 1, "{violations:?}");
        // Two in zone a under maxUnavailable 2 are fine, a third is not.
        let zone = vec![
            (10, now, records(&[("a-0", "a")])),
            (11, now, records(&[("a-0", "a"), ("a-1", "a")])),
        ];
        let (_, _, violations) = replay(initial.clone(), zone.clone(), 2);
        assert!(violations.is_empty(), "{violations:?}");
        let (_, _, violations) = replay(initial.clone(), zone, 1);
        assert_eq!(violations.len(), 1, "{violations:?}");
        // A pod lost without a record is a disruption of its own.
        let lost = vec![(10, now, pod("b-0", None, "b"))];
        let (_, _, violations) = replay(initial, lost, 1);
        assert_eq!(violations.len(), 1, "{violations:?}");
    }

    #[test]
    fn targets_go_round_the_ready_pods_not_evicted() {
        let mut targets = Targets::default();
        for name in ["p-a", "p-b", "p-c"] {
            targets.ready.insert(name.into(), format!("uid-{name}"));
        }
        targets.evicted.insert("p-b".into());
        let next = |t: &Targets, cursor: &str| t.next_after(cursor).map(|(name, _)| name);
        assert_eq!(next(&targets, ""), Some("p-a".into()));
        assert_eq!(next(&targets, "p-a"), Some("p-c".into()));
        assert_eq!(next(&targets, "p-c"), Some("p-a".into()));
        targets
            .evicted
            .extend(["p-a".to_string(), "p-c".to_string()]);
        assert_eq!(next(&targets, "p-c"), None);
    }
}
