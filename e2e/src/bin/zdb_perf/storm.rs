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

mod evict;
mod ledger;
pub mod native;
pub mod restart;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::perf::quantile;
use e2e::process::ControllerProcess;
use e2e::wait_for;
use e2e::workload::spread_statefulset;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use serde_json::{Value, json};

use crate::client::{Pool, admission_review};
use crate::drive::paced;
use crate::figures::{ServerSide, fmt_ms, memory, server_side};
use crate::settings::{StormSettings, limit, spec_value};
use crate::setup::{Perf, loopback};
use crate::target::{Target, wait_ready};
use ledger::Targets;

/// The storm's ReplicaSet and budget.
pub const STORM_SET: &str = "storm";

/// The API server's timeout for the webhook (`timeoutSeconds` of config/webhook).
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// How one request of a storm ended.
pub enum End {
    Allowed,
    /// 429: refused by the budget (or under load).
    Refused,
    /// 404 or 409: the pod was deleted or replaced meanwhile.
    Gone,
    Wrong(String),
}

/// A storm's requests tallied by their end, with their latencies (ms).
#[derive(Default)]
pub struct Tally {
    pub sent: usize,
    /// Sorted once tallied by [`Tally::of`].
    latencies: Vec<f64>,
    pub allowed: usize,
    pub refused: usize,
    pub gone: usize,
    /// Ends other than the above: unexpected answers, errors, timeouts; with one example.
    pub wrong: usize,
    pub example: Option<String>,
}

impl Tally {
    /// The requests' (latency, end), tallied.
    pub fn of(outcomes: impl IntoIterator<Item = (f64, End)>) -> Tally {
        let mut tally = Tally::default();
        for (latency_ms, end) in outcomes {
            tally.latencies.push(latency_ms);
            tally.count(end);
        }
        tally
            .latencies
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        tally
    }

    /// Counts one request that ended with `end`.
    pub fn count(&mut self, end: End) {
        self.sent += 1;
        match end {
            End::Allowed => self.allowed += 1,
            End::Refused => self.refused += 1,
            End::Gone => self.gone += 1,
            End::Wrong(problem) => {
                self.wrong += 1;
                self.example.get_or_insert(problem);
            }
        }
    }

    pub fn percentile(&self, p: f64) -> f64 {
        quantile(&self.latencies, p / 100.0)
    }

    /// The longest latency (NaN without any).
    pub fn max(&self) -> f64 {
        self.latencies.last().copied().unwrap_or(f64::NAN)
    }
}

/// The storm's figures.
pub struct StormResult {
    pub max_unavailable: String,
    /// The answers (refused: 429; wrong: answers other than allowed or 429, transport errors,
    /// answers past the webhook timeout).
    pub answers: Tally,
    /// Allowed answers whose deletion removed the pod judged (the others came for a pod already
    /// deleted by an earlier answer, or for a pod kwok had deleted and its controller recreated
    /// meanwhile: the deletion is by the uid the driver sent the request for).
    pub first_allowed: usize,
    pub late_answers: usize,
    /// Disruptions recorded in the budget (the ledger's starts), per second of the phase.
    pub starts: usize,
    pub completed: Vec<f64>,
    pub longest_gap_s: f64,
    pub violations: Vec<String>,
    pub ledger_errors: Vec<String>,
    pub elapsed: Duration,
    /// Per replica: highest VmRSS sampled, VmHWM at the end, before the storm.
    pub memory: Memory,
    server: [Option<ServerSide>; 2],
    pub delete_errors: usize,
    pub running: [bool; 2],
}

fn classify(answer: &Value, uid: &str) -> End {
    let response = &answer["response"];
    if response["uid"] != uid {
        return End::Wrong(format!("uid {} for {uid}", response["uid"]));
    }
    match (
        response["allowed"].as_bool(),
        response["status"]["code"].as_i64(),
    ) {
        (Some(true), _) => End::Allowed,
        (Some(false), Some(429)) => End::Refused,
        _ => End::Wrong(format!("unexpected answer: {response}")),
    }
}

/// Each replica's memory: VmRSS before the storm, the highest sampled during it, VmHWM at its end.
pub struct Memory {
    pub rss_before: [f64; 2],
    pub rss_max: [f64; 2],
    pub hwm: [f64; 2],
}

/// Samples the replicas' VmRSS every 100 ms from a thread of its own.
struct Sampler {
    pids: [u32; 2],
    rss_before: [f64; 2],
    sampling: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<[f64; 2]>,
}

impl Sampler {
    fn start(pids: [u32; 2]) -> Sampler {
        let rss_before = pids.map(|pid| memory(pid).0);
        let sampling = Arc::new(AtomicBool::new(true));
        let thread = {
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
        Sampler {
            pids,
            rss_before,
            sampling,
            thread,
        }
    }

    /// VmHWM now, then the sampling stopped.
    fn stop(self) -> Memory {
        let hwm = self.pids.map(|pid| memory(pid).1);
        self.sampling.store(false, Ordering::Release);
        let rss_max = self.thread.join().expect("the memory sampler");
        Memory {
            rss_before: self.rss_before,
            rss_max,
            hwm,
        }
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

    /// The storm's pods Ready and its ZoneDisruptionBudget recreated with `max_unavailable`, its
    /// status computed.
    async fn storm_budget(&self, storm: &StormSettings, max_unavailable: &str) {
        let set = STORM_SET;
        self.storm_pods(storm).await;
        self.delete_budgets(&[set.to_string()]).await;
        self.create_budgets(&[set.to_string()], &spec_value(max_unavailable))
            .await;
        self.wait_budget(set, storm.pods, &[], Duration::from_secs(300))
            .await;
    }

    /// The second replica, and the webhook answering there; both replicas with the storm's budget
    /// cached.
    async fn second_replica(&self, first: &Target, ca: &[u8]) -> (ControllerProcess, Target) {
        let (listen, webhook) = (loopback(), loopback());
        let process = self.controller(listen, webhook, "zdb-perf-b");
        eprintln!(
            "zdb-perf: storm: second replica pid {}, log {}",
            process.pid(),
            process.log.display()
        );
        let second = Target::new(webhook, ca, listen, process.pid(), first.apiserver);
        wait_ready(listen, "the second replica ready", Duration::from_secs(60)).await;
        for target in [first, &second] {
            target
                .wait_budgets_cached(&self.ns.name, &[STORM_SET.to_string()])
                .await;
        }
        (process, second)
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
        self.storm_budget(storm, max_unavailable).await;
        let (mut second_process, second) = self.second_replica(first, ca).await;
        let watched = self.watch_storm(&format!("app={set}"), Some(set)).await;
        let sampler = Sampler::start([first.pid, second.pid]);
        let before = [first.scrape().await, second.scrape().await];
        eprintln!(
            "zdb-perf: storm: {} requests at {}/s for {} s on budget {set} (maxUnavailable {max_unavailable}), two replicas",
            storm.seconds * u64::from(storm.rate),
            storm.rate,
            storm.seconds,
        );
        let pools = [first.pool.clone(), second.pool.clone()];
        let (outcomes, elapsed, delete_errors) = self
            .send_storm(storm, &pools, watched.targets.clone())
            .await;
        let after = [first.scrape().await, second.scrape().await];
        let memory = sampler.stop();
        let running = [
            true, // checked by the caller for the first replica
            second_process.is_running(),
        ];
        let (replayed, ledger_errors) = watched.finish(self, storm.pods, most_unavailable).await;
        drop(second_process);
        let (answers, first_allowed, late_answers) = tally(outcomes);
        StormResult {
            max_unavailable: max_unavailable.to_string(),
            answers,
            first_allowed,
            late_answers,
            starts: replayed.starts.len(),
            longest_gap_s: longest_gap(&replayed.starts),
            completed: replayed.completed,
            violations: replayed.violations,
            ledger_errors,
            elapsed,
            memory,
            server: [0, 1].map(|i| Some(server_side(&before[i], &after[i]))),
            delete_errors,
            running,
        }
    }

    /// Sends the storm's requests, open loop ([`paced`]), alternating between the replicas; an
    /// allowed eviction's pod is deleted (as the API server would) and never named again.
    /// Returns each request's latency (ms), end and whether it was the first allowed for its
    /// pod, the send time, and the deletions that failed.
    async fn send_storm(
        &self,
        storm: &StormSettings,
        pools: &[Arc<Pool>; 2],
        targets: Arc<Mutex<Targets>>,
    ) -> (Vec<(f64, End, bool)>, Duration, usize) {
        let count = usize::try_from(storm.seconds * u64::from(storm.rate)).unwrap_or(usize::MAX);
        let delete_errors = Arc::new(AtomicU64::new(0));
        let namespace = self.ns.name.clone();
        let (pools, api) = (pools.clone(), self.pods.clone());
        let errors = delete_errors.clone();
        let pick = Targets::picker(targets.clone());
        let send = move |(i, pod, pod_uid): (usize, String, String), scheduled: Instant| {
            let uid = format!("00000000-0000-4000-8000-st{i:010}");
            let body = admission_review(&uid, &namespace, &pod, false);
            let pool = pools[i % 2].clone();
            let (api, targets, errors) = (api.clone(), targets.clone(), errors.clone());
            async move {
                let answer = tokio::time::timeout(WEBHOOK_TIMEOUT, pool.post(body)).await;
                let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
                let end = match answer {
                    Err(_) => End::Wrong(format!("no answer within {WEBHOOK_TIMEOUT:?}")),
                    Ok(Err(error)) => End::Wrong(error),
                    Ok(Ok(answer)) => classify(&answer, &uid),
                };
                let mut first = false;
                if matches!(end, End::Allowed) {
                    Targets::evicted(&targets, pod.clone());
                    first = delete_judged(&api, &pod, pod_uid, &errors).await;
                }
                (latency_ms, end, first)
            }
        };
        let (outcomes, elapsed) = paced(Instant::now(), storm.rate, count, pick, send).await;
        let errors = usize::try_from(delete_errors.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        (outcomes, elapsed, errors)
    }
}

/// The storm's answers tallied, the first allowed for their pod, and those at or past the
/// webhook timeout.
fn tally(outcomes: Vec<(f64, End, bool)>) -> (Tally, usize, usize) {
    let mut first_allowed = 0;
    let mut late_answers = 0;
    let answers = Tally::of(outcomes.into_iter().map(|(latency_ms, end, first)| {
        first_allowed += usize::from(first);
        if latency_ms >= WEBHOOK_TIMEOUT.as_secs_f64() * 1000.0 {
            late_answers += 1;
        }
        (latency_ms, end)
    }));
    (answers, first_allowed, late_answers)
}

/// The longest time between two starts (s): 0 with one, NaN with none.
fn longest_gap(starts: &[Instant]) -> f64 {
    let phase_started = starts.first().copied();
    starts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .fold(phase_started.map_or(f64::NAN, |_| 0.0), f64::max)
}

/// What the API server does after an allowed eviction: delete the pod that was judged, by its
/// uid; true when this deleted it. Of several allowed answers for one pod (requests sent before
/// the first was answered) one deletes it; a later answer cannot delete its replacement.
async fn delete_judged(api: &Api<Pod>, pod: &str, uid: String, errors: &AtomicU64) -> bool {
    // At once (no grace period): kwok, left to finish many graceful deletions of recreated
    // names, was seen deleting the new pods too.
    let params = DeleteParams::default()
        .grace_period(0)
        .preconditions(Preconditions {
            uid: Some(uid),
            resource_version: None,
        });
    match api.delete(pod, &params).await {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => false,
        Err(error) => {
            eprintln!("zdb-perf: storm: delete {pod}: {error}");
            errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

impl StormResult {
    pub fn percentile(&self, p: f64) -> f64 {
        self.answers.percentile(p)
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

    /// The decision counter `key` of both replicas, summed.
    fn decided(&self, key: &str) -> f64 {
        self.server
            .iter()
            .flatten()
            .filter_map(|s| s.decisions.get(key))
            .sum()
    }

    /// Evictions recorded per status write, from both replicas' batch histograms.
    fn per_write(&self) -> (f64, f64) {
        (self.decided("batch-records"), self.decided("batch-writes"))
    }

    pub fn report(&self, storm: &StormSettings) {
        println!();
        println!(
            "drain storm: {} would-be-allowed evictions at {}/s for {} s on one budget (maxUnavailable {}) through two replicas; an allowed pod is deleted as the API server would and replaced by its ReplicaSet",
            self.answers.sent, storm.rate, storm.seconds, self.max_unavailable
        );
        println!(
            "  answers: {} allowed ({} deleted a pod), {} refused with 429, {} other/errors, {} at or past the webhook timeout ({:?}); latency ms p50 {} p99 {} max {}",
            self.answers.allowed,
            self.first_allowed,
            self.answers.refused,
            self.answers.wrong,
            self.late_answers,
            WEBHOOK_TIMEOUT,
            fmt_ms(self.percentile(50.0)),
            fmt_ms(self.percentile(99.0)),
            fmt_ms(self.answers.max()),
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
                self.memory.rss_before[i], self.memory.rss_max[i], self.memory.hwm[i]
            );
        }
        if let Some(example) = &self.answers.example {
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
        if self.answers.wrong > 0 || self.late_answers > 0 {
            problems.push(format!(
                "{} unexpected answers or errors, {} at or past the webhook timeout",
                self.answers.wrong, self.late_answers
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
        let recorded = self.decided("allowed/Recorded");
        let abandoned = self.decided("denied/DeadlineExceeded");
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
            let most = self.memory.rss_max[i].max(self.memory.hwm[i]);
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

    #[test]
    fn a_tally_counts_each_end_and_sorts_the_latencies() {
        let tally = Tally::of([
            (3.0, End::Allowed),
            (1.0, End::Refused),
            (2.0, End::Wrong("first".into())),
            (5.0, End::Wrong("second".into())),
            (4.0, End::Gone),
        ]);
        let counts = (
            tally.sent,
            tally.allowed,
            tally.refused,
            tally.gone,
            tally.wrong,
        );
        assert_eq!(counts, (5, 1, 1, 1, 2));
        assert_eq!(tally.example.as_deref(), Some("first"));
        assert_eq!((tally.percentile(50.0), tally.max()), (3.0, 5.0));
        assert!(Tally::default().max().is_nan());
    }
}
