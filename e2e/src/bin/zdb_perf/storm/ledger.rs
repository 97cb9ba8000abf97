//! The storm's ledger: watches of the pods and of the budget, replayed in resourceVersion order
//! to find budget violations ([`Watched`]); and the pods the driver may name ([`Targets`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::{pods, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use zone_api::ZoneDisruptionBudget;

use crate::setup::Perf;

/// What the watches saw, with the driver's clock.
#[derive(Debug, Clone)]
pub enum Seen {
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

/// The pods the driver may name: Ready (uid by name), and not evicted yet.
#[derive(Debug, Default)]
pub struct Targets {
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

    /// What a storm names in slot `i`, in turn: the next Ready pod not evicted after the last one
    /// named, with its uid; none when every pod is evicted and none is new yet.
    pub fn picker(
        targets: Arc<Mutex<Targets>>,
    ) -> impl FnMut(usize) -> Option<(usize, String, String)> + Send + 'static {
        let mut cursor = String::new();
        move |i| {
            let (pod, uid) = targets.lock().expect("targets").next_after(&cursor)?;
            cursor.clone_from(&pod);
            Some((i, pod, uid))
        }
    }

    /// `pod` was evicted: it is never named again.
    pub fn evicted(targets: &Mutex<Targets>, pod: String) {
        targets.lock().expect("targets").evicted.insert(pod);
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
pub struct PodState {
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

/// What the ledger's replay found: the starts of disruptions with their time, the durations of
/// those completed (s), and the violations.
#[derive(Debug, Default)]
pub struct Replayed {
    pub starts: Vec<Instant>,
    pub completed: Vec<f64>,
    pub violations: Vec<String>,
}

/// The state of a replay: the pods as last seen, and the disruptions under way.
struct Replay {
    pods: HashMap<String, PodState>,
    /// Pods seen Ready once: a new one ends a disruption, a lost one without a record starts one.
    serving: HashSet<String>,
    active: BTreeMap<String, Active>,
    recorded: BTreeMap<String, (String, String)>,
    ever_recorded: HashSet<String>,
    order: usize,
    max_unavailable: usize,
    found: Replayed,
}

impl Replay {
    fn new(initial: HashMap<String, PodState>, max_unavailable: usize) -> Replay {
        let serving = initial
            .iter()
            .filter(|(_, p)| p.ready)
            .map(|(name, _)| name.clone())
            .collect();
        Replay {
            pods: initial,
            serving,
            active: BTreeMap::new(),
            recorded: BTreeMap::new(),
            ever_recorded: HashSet::new(),
            order: 0,
            max_unavailable,
            found: Replayed::default(),
        }
    }

    /// A disruption of `name` in `zone` starts at `at`.
    fn start(&mut self, name: &str, zone: String, at: Instant) {
        self.order += 1;
        self.active.insert(
            name.to_string(),
            Active {
                zone,
                since: at,
                order: self.order,
            },
        );
    }

    /// A pod seen (`ready` None: deleted): a new pod Ready ends the oldest disruption, a pod
    /// that served and goes away without a record starts one.
    fn pod(
        &mut self,
        rv: u64,
        at: Instant,
        name: String,
        uid: String,
        ready: Option<bool>,
        zone: Option<String>,
    ) {
        let state = self.pods.entry(name.clone()).or_insert_with(|| PodState {
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
            if self.serving.insert(name)
                && let Some(oldest) = self
                    .active
                    .iter()
                    .min_by_key(|(_, a)| a.order)
                    .map(|(key, _)| key.clone())
                && let Some(ended) = self.active.remove(&oldest)
            {
                let took = at.duration_since(ended.since).as_secs_f64();
                self.found.completed.push(took);
            }
        } else if self.serving.contains(&name)
            && !self.ever_recorded.contains(&name)
            && !self.active.contains_key(&name)
        {
            // A pod that served went away without any record.
            self.found.violations.push(format!(
                "at resourceVersion {rv}, {name} ({zone}) became unavailable without a record"
            ));
            self.start(&name, zone, at);
        }
    }

    fn records(&mut self, rv: u64, at: Instant, records: BTreeMap<String, (String, String)>) {
        for (pod, (zone, at_time)) in &records {
            if self
                .recorded
                .get(pod)
                .is_some_and(|(_, before)| before == at_time)
            {
                continue;
            }
            let mut zones: BTreeSet<&String> = self.active.values().map(|a| &a.zone).collect();
            zones.insert(zone);
            let count = self.active.len() + usize::from(!self.active.contains_key(pod));
            if zones.len() > 1 || count > self.max_unavailable {
                let under_way: Vec<String> = self
                    .active
                    .iter()
                    .map(|(name, a)| format!("{name} ({})", a.zone))
                    .collect();
                self.found.violations.push(format!(
                    "at resourceVersion {rv}, {pod} ({zone}) recorded with {} under way: {}",
                    self.active.len(),
                    under_way.join(", ")
                ));
            }
            self.ever_recorded.insert(pod.clone());
            self.start(pod, zone.clone(), at);
            self.found.starts.push(at);
        }
        self.recorded = records;
    }
}

/// Replays the ledger in resourceVersion order.
///
/// A start is a record new to the budget (or one whose time changed). A disruption counts in
/// the zone of the pod evicted, even once its new pod is placed in another zone: the budget is
/// about the evictions allowed (the controller counts such a new pod in its zone as soon as it
/// sees it, and the webhook then refuses). A new pod Ready ends the oldest disruption.
fn replay(
    initial: HashMap<String, PodState>,
    mut seen: Vec<(u64, Instant, Seen)>,
    max_unavailable: usize,
) -> Replayed {
    seen.sort_by_key(|(rv, _, _)| *rv);
    let mut replay = Replay::new(initial, max_unavailable);
    for (rv, at, event) in seen {
        match event {
            Seen::Pod {
                name,
                uid,
                ready,
                zone,
            } => replay.pod(rv, at, name, uid, ready, zone),
            Seen::Records(records) => replay.records(rv, at, records),
        }
    }
    replay.found
}

/// A storm's pods watched from its start: the pods listed then, the pods the driver may name
/// (kept by the pod watch), and the watches feeding the ledger from the versions listed (the
/// pods', and the budget's when a ZoneDisruptionBudget judges them) until the storm ends.
pub struct Watched {
    selector: String,
    /// The ZoneDisruptionBudget followed, if any.
    budget: Option<String>,
    initial: HashMap<String, PodState>,
    pub targets: Arc<Mutex<Targets>>,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    watches: Vec<tokio::task::JoinHandle<()>>,
}

impl Perf {
    /// Lists the pods of `selector` (and reads `budget`) and starts the ledger's watches.
    pub async fn watch_storm(&self, selector: &str, budget: Option<&str>) -> Watched {
        let list = self
            .pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list the storm's pods");
        let node_zones = e2e::nodes::zones(&self.ns.client, "").await;
        let initial: HashMap<String, PodState> = list
            .items
            .iter()
            .map(|pod| (pod.name_any(), PodState::listed(pod, &node_zones)))
            .collect();
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
        let mut watches = vec![tokio::spawn(follow(
            self.pods.clone(),
            WatchParams::default().labels(selector).timeout(290),
            list.metadata.resource_version.clone().unwrap_or_default(),
            0,
            ledger.clone(),
            stop.clone(),
            pod_seen(&node_zones, targets.clone()),
        ))];
        if let Some(set) = budget {
            let zdb = self.zdbs.get(set).await.expect("the storm's budget");
            watches.push(tokio::spawn(follow(
                self.zdbs.clone(),
                WatchParams::default()
                    .fields(&format!("metadata.name={set}"))
                    .timeout(290),
                zdb.resource_version().unwrap_or_default(),
                1,
                ledger.clone(),
                stop.clone(),
                budget_seen,
            )));
        }
        Watched {
            selector: selector.to_string(),
            budget: budget.map(str::to_string),
            initial,
            targets,
            ledger,
            stop,
            watches,
        }
    }
}

impl Watched {
    /// Stops the watches; returns what they saw and their errors.
    pub async fn stop(
        self,
    ) -> (
        HashMap<String, PodState>,
        Vec<(u64, Instant, Seen)>,
        Vec<String>,
    ) {
        self.stop.store(true, Ordering::Release);
        for watch in self.watches {
            let _ = watch.await;
        }
        let seen = std::mem::take(&mut *self.ledger.seen.lock().expect("ledger"));
        let errors = std::mem::take(&mut *self.ledger.errors.lock().expect("ledger"));
        (self.initial, seen, errors)
    }

    /// Lets every disruption end (new pods Ready) and the ledger catch up with the API server,
    /// stops the watches and replays the ledger against `max_unavailable`; returns what the
    /// replay found and the ledger's errors.
    pub async fn finish(
        self,
        perf: &Perf,
        pods: usize,
        max_unavailable: usize,
    ) -> (Replayed, Vec<String>) {
        let set = self.budget.clone().unwrap_or_default();
        let catch_up = perf.settle(&self.selector, &set, pods, &self.ledger).await;
        let (initial, seen, mut errors) = self.stop().await;
        let replayed = replay(initial, seen, max_unavailable);
        if let Err(error) = catch_up {
            errors.push(error);
        }
        (replayed, errors)
    }
}

impl PodState {
    /// A pod as listed at the storm's start.
    fn listed(pod: &Pod, node_zones: &BTreeMap<String, String>) -> PodState {
        let zone = pods::node_of(pod)
            .and_then(|n| node_zones.get(n).cloned())
            .unwrap_or_default();
        PodState {
            uid: pod.uid().unwrap_or_default(),
            ready: pods::is_ready(pod),
            present: true,
            zone,
        }
    }
}

impl Perf {
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
        let Replayed {
            starts,
            completed,
            violations,
        } = replay(initial.clone(), fine, 1);
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
        let violations = replay(initial.clone(), racing, 1).violations;
        assert_eq!(violations.len(), 1, "{violations:?}");
        // Two in zone a under maxUnavailable 2 are fine, a third is not.
        let zone = vec![
            (10, now, records(&[("a-0", "a")])),
            (11, now, records(&[("a-0", "a"), ("a-1", "a")])),
        ];
        let violations = replay(initial.clone(), zone.clone(), 2).violations;
        assert!(violations.is_empty(), "{violations:?}");
        let violations = replay(initial.clone(), zone, 1).violations;
        assert_eq!(violations.len(), 1, "{violations:?}");
        // A pod lost without a record is a disruption of its own.
        let lost = vec![(10, now, pod("b-0", None, "b"))];
        let violations = replay(initial, lost, 1).violations;
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
