//! The same drain storm against Kubernetes' own **PodDisruptionBudget**: the anchor users compare
//! a ZoneDisruptionBudget with.
//!
//! Same pods (the storm's ReplicaSet, its ZoneDisruptionBudget deleted first so nothing else
//! judges them), same rate, same choice of pods (the next Ready pod not evicted yet, from a watch
//! of the pods), but each request is a real eviction (`POST pods/<pod>/eviction`, grace period 0
//! and the pod's uid as a precondition, as the ZDB storm deletes) that the API server checks
//! against a `policy/v1` PodDisruptionBudget with the same maxUnavailable, whose status the
//! kube-controller-manager's disruption controller keeps. The API server's check decrements
//! `disruptionsAllowed` with a status write per eviction (an update carrying the
//! resourceVersion; on a conflict it re-reads after 500 ms, up to 20 times), so concurrent
//! evictions of one budget take turns there too.
//!
//! At most 250 evictions are in flight at once, as over one client-go HTTP/2 connection
//! ([`MAX_IN_FLIGHT`]). Reported: evictions allowed per second (answers 201; the pod is then deleted by the API
//! server), refused (429), answered for a pod gone meanwhile (404/409) and other errors, and the
//! latency from the scheduled send. Compared with the ZDB storm of the same maxUnavailable in
//! [`compare`].

use std::collections::HashMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::EvictParams;

use super::*;

/// How long one eviction may take: the API server retries a conflicting budget write for up to
/// 20 x 500 ms before it answers.
const EVICTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Evictions in flight at once, at most; the others wait for a slot (their latency counts from
/// their scheduled send). A drain client (client-go) multiplexes its requests over one HTTP/2
/// connection, 250 streams at most by Go's default; without a bound the driver's HTTP/1.1 client
/// would open a connection per eviction waiting in the API server's retries, thousands, and
/// measure the API server's TLS handshakes rather than its eviction check.
const MAX_IN_FLIGHT: usize = 250;

/// The native storm's figures.
pub struct NativeResult {
    pub max_unavailable: String,
    pub sent: usize,
    /// Sorted, ms.
    latencies: Vec<f64>,
    pub allowed: usize,
    pub refused: usize,
    pub gone: usize,
    pub other: usize,
    example: Option<String>,
    pub elapsed: Duration,
    /// CPU time of the API server and the kube-controller-manager during the storm (s).
    apiserver_cpu_s: f64,
    pub watch_errors: Vec<String>,
}

impl NativeResult {
    pub fn allowed_per_second(&self) -> f64 {
        self.allowed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn percentile(&self, p: f64) -> f64 {
        quantile(&self.latencies, p / 100.0)
    }
}

/// An eviction's end, as the API server answered it.
enum Evicted {
    Allowed,
    Refused,
    /// 404 or 409: the pod was deleted or replaced meanwhile.
    Gone,
    Other(String),
}

fn classify(result: Result<kube::core::Status, kube::Error>) -> Evicted {
    match result {
        Ok(_) => Evicted::Allowed,
        Err(kube::Error::Api(status)) if status.code == 429 => Evicted::Refused,
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Evicted::Gone,
        Err(kube::Error::Api(status)) => {
            Evicted::Other(format!("{} {}", status.code, status.message))
        }
        Err(error) => Evicted::Other(error.to_string()),
    }
}

fn pdb_manifest(max_unavailable: &str) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": STORM_SET},
        "spec": {
            "selector": {"matchLabels": {"app": STORM_SET}},
            "maxUnavailable": spec_value(max_unavailable),
        },
    }))
    .expect("PodDisruptionBudget manifest")
}

impl Perf {
    /// Creates the storm's PodDisruptionBudget and waits until the disruption controller has
    /// computed it with every pod healthy.
    async fn native_budget(&self, storm: &StormSettings, max_unavailable: &str) {
        let pdbs: Api<PodDisruptionBudget> = self.ns.api();
        let _ = pdbs.delete(STORM_SET, &DeleteParams::default()).await;
        wait_for(
            "the old PodDisruptionBudget deleted",
            Duration::from_secs(60),
            || async {
                match pdbs.get_opt(STORM_SET).await {
                    Ok(None) => Ok(()),
                    other => Err(format!("{:?}", other.map(|p| p.is_some()))),
                }
            },
        )
        .await;
        pdbs.create(&PostParams::default(), &pdb_manifest(max_unavailable))
            .await
            .expect("create the storm's PodDisruptionBudget");
        let want = i32::try_from(storm.pods).unwrap_or(i32::MAX);
        wait_for(
            "the PodDisruptionBudget computed by the disruption controller",
            Duration::from_secs(120),
            || async {
                let pdb = pdbs.get(STORM_SET).await.map_err(|e| e.to_string())?;
                let status = pdb.status.clone().unwrap_or_default();
                let computed = status.observed_generation == pdb.metadata.generation;
                if computed && status.expected_pods == want && status.current_healthy == want {
                    Ok(())
                } else {
                    Err(format!("{status:?}"))
                }
            },
        )
        .await;
    }

    /// The storm of `storm` against a native PodDisruptionBudget with `max_unavailable`.
    pub async fn native_storm(&self, storm: &StormSettings, max_unavailable: &str) -> NativeResult {
        self.storm_pods(storm).await;
        // Nothing but the PodDisruptionBudget judges these pods meanwhile, and no status
        // controller of ours works on them.
        self.delete_budgets(&[STORM_SET.to_string()]).await;
        self.native_budget(storm, max_unavailable).await;

        let selector = format!("app={STORM_SET}");
        let list = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list the storm's pods");
        let node_zones = e2e::nodes::zones(&self.ns.client, "").await;
        let targets = Arc::new(Mutex::new(Targets {
            ready: list
                .items
                .iter()
                .filter(|p| pods::is_ready(p))
                .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
                .collect::<BTreeMap<_, _>>(),
            evicted: HashSet::new(),
        }));
        // The watch keeps the targets (the Ready pods); its ledger is not replayed: a budget
        // without zones has nothing to violate at 100 %.
        let ledger = Arc::new(Ledger::default());
        let stop = Arc::new(AtomicBool::new(false));
        let watch = tokio::spawn(follow(
            self.pods.clone(),
            WatchParams::default().labels(&selector).timeout(290),
            list.metadata.resource_version.clone().unwrap_or_default(),
            0,
            ledger.clone(),
            stop.clone(),
            pod_seen(&node_zones, targets.clone()),
        ));

        eprintln!(
            "zdb-perf: native storm: {} evictions at {}/s for {} s against PodDisruptionBudget {STORM_SET} (maxUnavailable {max_unavailable})",
            storm.seconds * u64::from(storm.rate),
            storm.rate,
            storm.seconds,
        );
        let cpu_before = control_plane_ticks();
        let (outcomes, elapsed) = self.send_evictions(storm, targets).await;
        let apiserver_cpu_s = (control_plane_ticks() - cpu_before) / crate::TICKS_PER_SECOND;
        stop.store(true, Ordering::Release);
        let _ = watch.await;
        let watch_errors = std::mem::take(&mut *ledger.errors.lock().expect("ledger"));

        // Every pod back and Ready, and the PodDisruptionBudget gone, before anything else runs.
        self.storm_pods(storm).await;
        let pdbs: Api<PodDisruptionBudget> = self.ns.api();
        let _ = pdbs.delete(STORM_SET, &DeleteParams::default()).await;

        let mut result = NativeResult {
            max_unavailable: max_unavailable.to_string(),
            sent: outcomes.len(),
            latencies: Vec::with_capacity(outcomes.len()),
            allowed: 0,
            refused: 0,
            gone: 0,
            other: 0,
            example: None,
            elapsed,
            apiserver_cpu_s,
            watch_errors,
        };
        for (latency_ms, evicted) in outcomes {
            result.latencies.push(latency_ms);
            match evicted {
                Evicted::Allowed => result.allowed += 1,
                Evicted::Refused => result.refused += 1,
                Evicted::Gone => result.gone += 1,
                Evicted::Other(problem) => {
                    result.other += 1;
                    result.example.get_or_insert(problem);
                }
            }
        }
        result
            .latencies
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        result
    }

    /// Sends the storm's evictions, open loop and paced from a thread as the ZDB storm's
    /// requests are; returns each one's latency (ms) and end, and the time from the first send to
    /// the last answer.
    async fn send_evictions(
        &self,
        storm: &StormSettings,
        targets: Arc<Mutex<Targets>>,
    ) -> (Vec<(f64, Evicted)>, Duration) {
        let count = usize::try_from(storm.seconds * u64::from(storm.rate)).unwrap_or(usize::MAX);
        let period = Duration::from_secs_f64(1.0 / f64::from(storm.rate));
        let runtime = tokio::runtime::Handle::current();
        let api = self.pods.clone();
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let started = Instant::now();
        let pacer = tokio::task::spawn_blocking(move || {
            let mut tasks = Vec::with_capacity(count);
            let mut cursor = String::new();
            for i in 0..count {
                let scheduled = started + period * u32::try_from(i).unwrap_or(u32::MAX);
                if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let pick = targets.lock().expect("targets").next_after(&cursor);
                let Some((pod, uid)) = pick else { continue };
                cursor.clone_from(&pod);
                let (api, targets, slots) = (api.clone(), targets.clone(), slots.clone());
                tasks.push(runtime.spawn(async move {
                    // Never closed: the slot is always had.
                    let _slot = slots.acquire_owned().await;
                    let params = EvictParams {
                        delete_options: Some(DeleteParams {
                            grace_period_seconds: Some(0),
                            preconditions: Some(Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..DeleteParams::default()
                        }),
                        ..EvictParams::default()
                    };
                    let result =
                        tokio::time::timeout(EVICTION_TIMEOUT, api.evict(&pod, &params)).await;
                    let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
                    let evicted = match result {
                        Err(_) => Evicted::Other(format!("no answer within {EVICTION_TIMEOUT:?}")),
                        Ok(result) => classify(result),
                    };
                    if matches!(evicted, Evicted::Allowed) {
                        targets.lock().expect("targets").evicted.insert(pod);
                    }
                    (latency_ms, evicted)
                }));
            }
            tasks
        });
        let tasks = pacer.await.expect("pacing thread");
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.expect("eviction task"));
        }
        (outcomes, started.elapsed())
    }
}

/// CPU ticks of the API server and the kube-controller-manager (the PodDisruptionBudget's
/// check and its disruption controller).
fn control_plane_ticks() -> f64 {
    let pids_dir = e2e::cluster::e2e_dir().join(".cluster/pids");
    ["kube-apiserver", "kube-controller-manager"]
        .iter()
        .filter_map(|name| {
            let pid = std::fs::read_to_string(pids_dir.join(format!("{name}.pid"))).ok()?;
            pid.trim().parse::<u32>().ok()
        })
        .map(|pid| crate::process_ticks(Some(pid)))
        .filter(|ticks| !ticks.is_nan())
        .sum()
}

impl NativeResult {
    pub fn report(&self, storm: &StormSettings) {
        println!();
        println!(
            "native PodDisruptionBudget storm: {} evictions (POST pods/eviction) at {}/s for {} s on the same pods, against a policy/v1 PodDisruptionBudget with maxUnavailable {} (the API server's own check)",
            self.sent, storm.rate, storm.seconds, self.max_unavailable
        );
        println!(
            "  evictions: {} allowed ({:.2}/s over {:.1} s), {} refused with 429, {} for a pod gone meanwhile, {} other errors{}; latency ms p50 {} p99 {} max {}; API server + controller-manager CPU {:.1} s",
            self.allowed,
            self.allowed_per_second(),
            self.elapsed.as_secs_f64(),
            self.refused,
            self.gone,
            self.other,
            self.example
                .as_ref()
                .map(|e| format!(" (e.g. {e})"))
                .unwrap_or_default(),
            fmt_ms(self.percentile(50.0)),
            fmt_ms(self.percentile(99.0)),
            fmt_ms(self.latencies.last().copied().unwrap_or(f64::NAN)),
            self.apiserver_cpu_s,
        );
    }
}

/// The side-by-side line of a ZDB storm and the native one of the same maxUnavailable, and the
/// missed targets: the ZDB allows at least `native_factor` times the native rate.
pub fn compare(zdb: &StormResult, native: &NativeResult, storm: &StormSettings) -> Vec<String> {
    let zdb_rate = zdb.allowed_per_second();
    let native_rate = native.allowed_per_second();
    let ratio = zdb_rate / native_rate.max(1e-9);
    println!();
    println!(
        "side by side at maxUnavailable {}: ZoneDisruptionBudget {zdb_rate:.1} allowed/s (p99 {} ms, two webhook replicas) vs native PodDisruptionBudget {native_rate:.1} allowed/s (p99 {} ms): {ratio:.1}x (target >= {}x)",
        zdb.max_unavailable,
        fmt_ms(zdb.percentile(99.0)),
        fmt_ms(native.percentile(99.0)),
        storm.native_factor,
    );
    let mut missed = Vec::new();
    if native.allowed == 0 {
        missed.push(format!(
            "native storm (maxUnavailable {}): no eviction was allowed{}",
            native.max_unavailable,
            native
                .example
                .as_ref()
                .map(|e| format!(" (e.g. {e})"))
                .unwrap_or_default()
        ));
    } else if ratio < storm.native_factor {
        missed.push(format!(
            "storm (maxUnavailable {}): {zdb_rate:.1} allowed/s is {ratio:.2}x the native PodDisruptionBudget's {native_rate:.1}/s < {}x",
            zdb.max_unavailable, storm.native_factor
        ));
    }
    if !native.watch_errors.is_empty() {
        missed.push(format!(
            "native storm: the pod watch failed: {}",
            native.watch_errors.join("; ")
        ));
    }
    missed
}

/// The ZDB storm of each native one, by maxUnavailable.
pub fn pairs<'a>(
    zdb: &'a [StormResult],
    native: &'a [NativeResult],
) -> Vec<(&'a StormResult, &'a NativeResult)> {
    let by_value: HashMap<&str, &StormResult> = zdb
        .iter()
        .map(|s| (s.max_unavailable.as_str(), s))
        .collect();
    native
        .iter()
        .filter_map(|n| Some((*by_value.get(n.max_unavailable.as_str())?, n)))
        .collect()
}
