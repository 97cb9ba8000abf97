//! Measurements of the ZoneAwareUpdate controller (`make perf`, `e2e/perf/zau.sh`) on the local
//! zonal cluster, with the release `zau-controller`:
//!
//! 1. Latency. Rollouts of one StatefulSet (60 pods, 20 per zone), alternating `maxUnavailable:
//!    1` / factor 1 and `maxUnavailable: 2` / factor 2, until at least 100 batch boundaries were
//!    crossed. For every batch after the first of a rollout, from the API server's audit log: the
//!    time from the last pod of the previous batch turning Ready (the API server receiving kwok's
//!    `pods/status` write of the replacement pod) to the API server receiving the
//!    batch's first eviction. Everything in between is the controller: watch delivery, planning,
//!    the lease check, the eviction request. Targets: p50 <= 100 ms, p99 <= 500 ms.
//! 2. Memory. 3,000 pods in 10 StatefulSets, each with a ZoneAwareUpdate; the controller is
//!    started once they are Ready and a rollout is started on every set; its VmRSS is sampled
//!    every second for 30 s, then VmHWM read. Target: <= 50 MiB.
//!
//! Settings (environment): `ZAU_PERF_REPLICAS` (60), `ZAU_PERF_MIN_BATCHES` (100),
//! `ZAU_PERF_P50_MS` (100), `ZAU_PERF_P99_MS` (500), `ZAU_PERF_PODS` (3000), `ZAU_PERF_SETS` (10),
//! `ZAU_PERF_RSS_SECONDS` (30), `ZAU_PERF_RSS_MIB` (50), `ZAU_PERF_ONLY` (`latency` or `memory`).
//!
//! Exit status: 0 when every target is met, 1 otherwise.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use e2e::localstack::{aws_env, free_port};
use e2e::perf::{exit_on_targets, memory_kib, mib, quantile, setting};
use e2e::process::{ControllerProcess, namespace_args};
use e2e::workload::{self, spread_statefulset, to_statefulset, zone_aware_update};
use e2e::{Cluster, TestNamespace, audit, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use zone_api::ZoneAwareUpdate;

/// The evictions of one batch are sent one after the other, each as soon as the previous one is
/// answered; batches are seconds apart (termination grace, recreation, kwok's Ready delay). An
/// eviction received less than this after the previous one was answered belongs to its batch.
const BATCH_GAP_MS: f64 = 700.0;

/// One eviction by the controller, from the audit log.
struct Eviction {
    received: Timestamp,
    answered: Timestamp,
    pod: String,
}

impl std::fmt::Debug for Eviction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.pod, self.received)
    }
}

fn statefulset(name: &str, replicas: usize, image: u32) -> StatefulSet {
    let mut manifest =
        spread_statefulset(name, replicas, &format!("registry.invalid/perf:{image}"));
    manifest["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    to_statefulset(manifest)
}

/// The namespace the measurement works in, deleted (and waited for, so the next measurement
/// starts on an idle cluster) at the end.
struct Workspace {
    ns: TestNamespace,
    sets: Api<StatefulSet>,
    pods: Api<Pod>,
    zaus: Api<ZoneAwareUpdate>,
}

impl Workspace {
    async fn new(cluster: &Cluster, prefix: &str) -> Workspace {
        let ns = TestNamespace::create(cluster, prefix).await;
        Workspace {
            sets: ns.api(),
            pods: ns.api(),
            zaus: ns.api(),
            ns,
        }
    }

    fn controller(&self, cluster: &Cluster) -> ControllerProcess {
        let mut args = namespace_args(&self.ns.name, false);
        args.extend([
            "--listen-address".to_string(),
            format!("127.0.0.1:{}", free_port()),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ControllerProcess::start("zau-controller", &args, &aws_env(&cluster.aws_endpoint()))
    }

    async fn create_set(&self, name: &str, replicas: usize) {
        self.sets
            .create(&PostParams::default(), &statefulset(name, replicas, 1))
            .await
            .expect("create the StatefulSet");
    }

    async fn create_zau(&self, set: &str, max_unavailable: u32, factor: &str) {
        let zau = zone_aware_update(
            set,
            json!({"statefulset": set, "maxUnavailable": max_unavailable, "exponentialFactor": factor}),
        );
        self.zaus
            .create(&PostParams::default(), &zau)
            .await
            .expect("create the ZoneAwareUpdate");
    }

    /// Sets the ZAU's batch parameters and waits for the controller to observe them.
    async fn set_zau(&self, set: &str, max_unavailable: u32, factor: &str) {
        let patch =
            json!({"spec": {"maxUnavailable": max_unavailable, "exponentialFactor": factor}});
        let zau = self
            .zaus
            .patch(set, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch the ZoneAwareUpdate");
        let generation = zau.metadata.generation;
        wait_for(
            "the controller to observe the ZAU",
            Duration::from_secs(60),
            || async {
                let zau = self.zaus.get(set).await.map_err(|e| e.to_string())?;
                let observed = zau.status.and_then(|s| s.observed_generation);
                if observed == generation {
                    Ok(())
                } else {
                    Err(format!("{observed:?} of {generation:?}"))
                }
            },
        )
        .await;
    }

    /// Sets the image of `set` and returns its new updateRevision.
    async fn set_image(&self, set: &str, image: u32) -> String {
        let image = format!("registry.invalid/perf:{image}");
        workload::set_image(&self.sets, set, &image, Duration::from_secs(60)).await
    }

    /// Waits until `replicas` pods of `selector` are Ready, not terminating and (when given) at
    /// `revision`.
    async fn wait_pods(
        &self,
        selector: &str,
        replicas: usize,
        revision: Option<&str>,
        timeout: Duration,
    ) {
        pods::wait_all_available(&self.pods, selector, replicas, revision, timeout).await;
    }

    /// Deletes the namespace and waits until it is gone (its pods deleted).
    async fn delete(self) {
        drop(self.sets);
        drop(self.pods);
        drop(self.zaus);
        self.ns.delete_and_wait(Duration::from_secs(900)).await;
    }
}

/// Milliseconds from `earlier` to `later`.
fn ms_between(earlier: Timestamp, later: Timestamp) -> f64 {
    later.duration_since(earlier).as_secs_f64() * 1000.0
}

fn parse_time(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("audit timestamp {text:?}: {e}"))
}

/// One rollout's window and the evictions the controller made in it.
struct Rollout {
    label: String,
    started: Timestamp,
    ended: Timestamp,
}

/// The controller's evictions in `namespace` that succeeded, from the audit log.
fn controller_evictions(events: &[audit::AuditEvent], namespace: &str) -> Vec<Eviction> {
    audit::removals(events, namespace)
        .filter(|e| e.sent_by("zau-controller") && e.succeeded())
        .filter_map(|e| {
            Some(Eviction {
                received: parse_time(&e.request_received_timestamp),
                answered: parse_time(&e.stage_timestamp),
                pod: e.object_ref.as_ref()?.name.clone(),
            })
        })
        .collect()
}

/// kwok's status writes (the pod turning Ready): pod -> received times, in order. The received
/// time, not the answered one: the watch event of the write can reach the controller before the
/// API server has finished answering kwok, and the controller's eviction can then be received
/// before the write is answered. Counting from the receipt includes the write's own handling (a
/// few ms) in the figure: it errs against the controller.
fn ready_writes(events: &[audit::AuditEvent], namespace: &str) -> HashMap<String, Vec<Timestamp>> {
    let mut ready_writes: HashMap<String, Vec<Timestamp>> = HashMap::new();
    for event in events {
        let Some(object) = &event.object_ref else {
            continue;
        };
        if object.namespace == namespace
            && object.resource == "pods"
            && object.subresource == "status"
            && event.sent_by("kwok")
            && event.succeeded()
        {
            ready_writes
                .entry(object.name.clone())
                .or_default()
                .push(parse_time(&event.request_received_timestamp));
        }
    }
    ready_writes
}

/// The evictions of `rollout`, in batches (each received less than [`BATCH_GAP_MS`] after the
/// previous one was answered).
fn batches<'a>(evictions: &'a [Eviction], rollout: &Rollout) -> Vec<Vec<&'a Eviction>> {
    let mut batches: Vec<Vec<&Eviction>> = Vec::new();
    for eviction in evictions
        .iter()
        .filter(|e| e.received >= rollout.started && e.received <= rollout.ended)
    {
        match batches.last_mut() {
            Some(batch)
                if ms_between(batch.last().unwrap().answered, eviction.received) < BATCH_GAP_MS =>
            {
                batch.push(eviction);
            }
            _ => batches.push(vec![eviction]),
        }
    }
    batches
}

/// From the last Ready write of each batch's pods to the next batch's first eviction (ms), for
/// every boundary between `batches`; and the number of boundaries whose Ready write could not be
/// found.
fn boundary_latencies(
    batches: &[Vec<&Eviction>],
    ready_writes: &HashMap<String, Vec<Timestamp>>,
) -> (Vec<f64>, usize) {
    let mut own = Vec::new();
    let mut unmatched = 0;
    for pair in batches.windows(2) {
        // The previous batch's pods are Ready again when kwok's first status write after
        // their eviction lands; the last of them is what the controller waited for.
        let ready: Option<Vec<Timestamp>> = pair[0]
            .iter()
            .map(|eviction| {
                ready_writes
                    .get(&eviction.pod)?
                    .iter()
                    .find(|t| **t > eviction.received)
                    .copied()
            })
            .collect();
        match ready.and_then(|r| r.into_iter().max()) {
            Some(ready) => {
                let latency = ms_between(ready, pair[1][0].received);
                if latency < 0.0 {
                    println!(
                        "  batch {:?} removed {:.1} ms before the previous batch {:?} was Ready at {ready}",
                        pair[1], -latency, pair[0]
                    );
                }
                own.push(latency);
            }
            None => unmatched += 1,
        }
    }
    (own, unmatched)
}

/// Controller-added latencies (ms) of every batch after the first of each rollout, from the
/// audit log, and the number of boundaries whose Ready write could not be found.
fn latencies(
    events: &[audit::AuditEvent],
    namespace: &str,
    rollouts: &[Rollout],
) -> (Vec<f64>, usize) {
    let evictions = controller_evictions(events, namespace);
    let ready_writes = ready_writes(events, namespace);
    let mut out = Vec::new();
    let mut unmatched = 0;
    for rollout in rollouts {
        let batches = batches(&evictions, rollout);
        let (own, missing) = boundary_latencies(&batches, &ready_writes);
        unmatched += missing;
        println!(
            "  {}: {} batches, {} boundaries measured",
            rollout.label,
            batches.len(),
            own.len()
        );
        out.extend(own);
    }
    (out, unmatched)
}

/// Part 1. Returns whether the targets were met.
async fn measure_latency(cluster: &Cluster) -> bool {
    let replicas: usize = setting("ZAU_PERF_REPLICAS", 60);
    let min_batches: usize = setting("ZAU_PERF_MIN_BATCHES", 100);
    let p50_target: f64 = setting("ZAU_PERF_P50_MS", 100.0);
    let p99_target: f64 = setting("ZAU_PERF_P99_MS", 500.0);
    let audit_log = cluster
        .audit_log()
        .expect("the latency is read from the local cluster's audit log");

    println!("latency: {replicas} pods, rollouts until {min_batches} batch boundaries");
    let work = Workspace::new(cluster, "perf-zau-latency").await;
    work.create_set("web", replicas).await;
    work.wait_pods("app=web", replicas, None, Duration::from_secs(600))
        .await;
    work.create_zau("web", 1, "1").await;
    let controller = work.controller(cluster);
    let rollouts = work.rollouts(replicas, min_batches).await;
    drop(controller);
    let events = audit::read(&audit_log);
    let (mut values, unmatched) = latencies(&events, &work.ns.name, &rollouts);
    work.delete().await;

    values.sort_by(f64::total_cmp);
    let targets = LatencyTargets {
        min_batches,
        p50: p50_target,
        p99: p99_target,
    };
    targets.met(&values, unmatched)
}

/// What part 1 must show.
struct LatencyTargets {
    min_batches: usize,
    p50: f64,
    p99: f64,
}

impl LatencyTargets {
    /// Prints the figures of `values` (sorted) and every missed target; true when none was.
    fn met(&self, values: &[f64], unmatched: usize) -> bool {
        let (min_batches, p50_target, p99_target) = (self.min_batches, self.p50, self.p99);
        let (p50, p99) = (quantile(values, 0.50), quantile(values, 0.99));
        let max = values.last().copied().unwrap_or(f64::NAN);
        let negative = values.iter().filter(|v| **v < 0.0).count();
        println!(
            "latency: {} batch boundaries ({unmatched} without a Ready write in the audit log)",
            values.len()
        );
        println!(
            "  last Ready -> next eviction: p50 {p50:.1} ms, p90 {:.1} ms, p99 {p99:.1} ms, max {max:.1} ms (targets: p50 <= {p50_target} ms, p99 <= {p99_target} ms)",
            quantile(values, 0.90)
        );
        let mut met = true;
        if values.len() < min_batches {
            println!("  MISSED: fewer than {min_batches} boundaries measured");
            met = false;
        }
        if negative > 0 {
            println!("  MISSED: {negative} batches removed before the previous batch was Ready");
            met = false;
        }
        if p50.is_nan() || p50 > p50_target || p99 > p99_target {
            println!("  MISSED: latency target");
            met = false;
        }
        met
    }
}

impl Workspace {
    /// Rollouts of StatefulSet `web` (`replicas` pods), alternating the ZAU's shape, until about
    /// `min_batches` batch boundaries.
    async fn rollouts(&self, replicas: usize, min_batches: usize) -> Vec<Rollout> {
        let shapes = [(1u32, "1"), (2, "2")];
        let mut rollouts = Vec::new();
        let mut boundaries = 0usize;
        let mut image = 1;
        while boundaries < min_batches {
            let (max, factor) = shapes[rollouts.len() % shapes.len()];
            self.set_zau("web", max, factor).await;
            image += 1;
            let started = Timestamp::now();
            let clock = Instant::now();
            let revision = self.set_image("web", image).await;
            self.wait_pods(
                "app=web",
                replicas,
                Some(&revision),
                Duration::from_secs(1800),
            )
            .await;
            let ended = Timestamp::now();
            let label = format!(
                "rollout {} (maxUnavailable {max}, factor {factor})",
                rollouts.len() + 1
            );
            println!(
                "  {label}: converged in {:.0} s",
                clock.elapsed().as_secs_f64()
            );
            rollouts.push(Rollout {
                label,
                started,
                ended,
            });
            // Boundaries so far, estimated from the shape: the figures count the real ones.
            boundaries += if max == 1 { replicas - 1 } else { replicas / 2 };
        }
        rollouts
    }
}

impl Workspace {
    /// `sets` StatefulSets of `per_set` pods with a ZoneAwareUpdate each, their pods Ready.
    async fn create_sets(&self, sets: usize, per_set: usize) {
        let clock = Instant::now();
        for i in 0..sets {
            self.create_set(&format!("s{i}"), per_set).await;
            self.create_zau(&format!("s{i}"), 1, "1").await;
        }
        for i in 0..sets {
            self.wait_pods(
                &format!("app=s{i}"),
                per_set,
                None,
                Duration::from_secs(1800),
            )
            .await;
        }
        println!(
            "  {} pods Ready in {:.0} s",
            per_set * sets,
            clock.elapsed().as_secs_f64()
        );
    }

    /// Waits until the controller observed each of the `sets` ZoneAwareUpdates.
    async fn wait_observed(&self, sets: usize) {
        wait_for("every ZAU observed", Duration::from_secs(300), || async {
            let zaus = self
                .zaus
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let observed = zaus
                .iter()
                .filter(|z| {
                    z.status.as_ref().is_some_and(|s| {
                        s.observed_generation.is_some() && !s.update_revision.is_empty()
                    })
                })
                .count();
            if observed == sets {
                Ok(())
            } else {
                Err(format!("{observed} of {sets}"))
            }
        })
        .await;
    }

    /// The batches the ZoneAwareUpdates removed so far (their update steps, summed).
    async fn batches_removed(&self) -> i64 {
        self.zaus
            .list(&ListParams::default())
            .await
            .expect("list the ZAUs")
            .items
            .iter()
            .filter_map(|z| z.status.as_ref().map(|s| i64::from(s.update_step)))
            .sum()
    }
}

/// The highest VmRSS (KiB) of process `pid`, sampled every second for `seconds`.
async fn peak_rss(pid: u32, seconds: u64) -> u64 {
    let mut peak_rss = 0;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if let Some((rss, _)) = memory_kib(pid) {
            peak_rss = peak_rss.max(rss);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    peak_rss
}

/// Part 2. Returns whether the target was met.
async fn measure_memory(cluster: &Cluster) -> bool {
    let total: usize = setting("ZAU_PERF_PODS", 3000);
    let sets: usize = setting("ZAU_PERF_SETS", 10);
    let seconds: u64 = setting("ZAU_PERF_RSS_SECONDS", 30);
    let target_mib: f64 = setting("ZAU_PERF_RSS_MIB", 50.0);
    let per_set = total / sets;

    println!(
        "memory: {} pods in {sets} StatefulSets with a ZoneAwareUpdate each",
        per_set * sets
    );
    let work = Workspace::new(cluster, "perf-zau-memory").await;
    work.create_sets(sets, per_set).await;
    let controller = work.controller(cluster);
    let pid = controller.pid();
    work.wait_observed(sets).await;
    let idle = memory_kib(pid);
    for i in 0..sets {
        work.set_image(&format!("s{i}"), 2).await;
    }
    let peak_rss = peak_rss(pid, seconds).await;
    let (rss, hwm) = memory_kib(pid).expect("the controller is running");
    let removed = work.batches_removed().await;
    drop(controller);
    work.delete().await;

    if let Some((idle_rss, _)) = idle {
        println!(
            "  VmRSS with the caches synced, before the rollouts: {:.1} MiB",
            mib(idle_rss)
        );
    }
    println!(
        "  during {seconds} s of {sets} concurrent rollouts ({removed} batches removed): VmRSS peak {:.1} MiB, at the end {:.1} MiB, VmHWM {:.1} MiB (target <= {target_mib} MiB)",
        mib(peak_rss),
        mib(rss),
        mib(hwm)
    );
    let met = mib(hwm) <= target_mib;
    if !met {
        println!("  MISSED: memory target");
    }
    met
}

async fn measure(cluster: &Cluster) -> BTreeMap<&'static str, bool> {
    let only: String = setting("ZAU_PERF_ONLY", String::new());
    let mut met = BTreeMap::new();
    if only.is_empty() || only == "latency" {
        met.insert("latency", measure_latency(cluster).await);
    }
    if only.is_empty() || only == "memory" {
        met.insert("memory", measure_memory(cluster).await);
    }
    met
}

#[tokio::main]
async fn main() -> ExitCode {
    let cluster = Cluster::get();
    // On SIGINT/SIGTERM the measurement is dropped: its namespace is deleted and its controller
    // stopped by their guards.
    exit_on_targets("zau perf", measure(&cluster)).await
}
