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
use std::time::{Duration, Instant};

use e2e::wait_for;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::evict::Evictions;
use super::{STORM_SET, StormResult, Tally};
use crate::figures::{TICKS_PER_SECOND, fmt_ms, process_ticks};
use crate::settings::{StormSettings, spec_value};
use crate::setup::Perf;

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
    /// The evictions (allowed: answers 201; refused: 429; gone: 404/409, the pod deleted or
    /// replaced meanwhile).
    pub evictions: Tally,
    pub elapsed: Duration,
    /// CPU time of the API server and the kube-controller-manager during the storm (s).
    apiserver_cpu_s: f64,
    pub watch_errors: Vec<String>,
}

impl NativeResult {
    pub fn allowed_per_second(&self) -> f64 {
        self.evictions.allowed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn percentile(&self, p: f64) -> f64 {
        self.evictions.percentile(p)
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
        // The watch keeps the targets (the Ready pods); its ledger is not replayed: a budget
        // without zones has nothing to violate at 100 %.
        let watched = self.watch_storm(&format!("app={STORM_SET}"), None).await;
        eprintln!(
            "zdb-perf: native storm: {} evictions at {}/s for {} s against PodDisruptionBudget {STORM_SET} (maxUnavailable {max_unavailable})",
            storm.seconds * u64::from(storm.rate),
            storm.rate,
            storm.seconds,
        );
        let cpu_before = control_plane_ticks();
        let count = usize::try_from(storm.seconds * u64::from(storm.rate)).unwrap_or(usize::MAX);
        let evictions = Evictions {
            grace_period: Some(0),
            timeout: EVICTION_TIMEOUT,
            in_flight: Some(MAX_IN_FLIGHT),
        };
        let targets = watched.targets.clone();
        let (outcomes, elapsed) = evictions
            .send(&self.pods, Instant::now(), storm.rate, count, targets)
            .await;
        let apiserver_cpu_s = (control_plane_ticks() - cpu_before) / TICKS_PER_SECOND;
        let (_, _, watch_errors) = watched.stop().await;

        // Every pod back and Ready, and the PodDisruptionBudget gone, before anything else runs.
        self.storm_pods(storm).await;
        let pdbs: Api<PodDisruptionBudget> = self.ns.api();
        let _ = pdbs.delete(STORM_SET, &DeleteParams::default()).await;
        let ends = outcomes.into_iter();
        NativeResult {
            max_unavailable: max_unavailable.to_string(),
            evictions: Tally::of(ends.map(|(_, latency_ms, evicted)| (latency_ms, evicted.end()))),
            elapsed,
            apiserver_cpu_s,
            watch_errors,
        }
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
        .map(|pid| process_ticks(Some(pid)))
        .filter(|ticks| !ticks.is_nan())
        .sum()
}

impl NativeResult {
    pub fn report(&self, storm: &StormSettings) {
        println!();
        println!(
            "native PodDisruptionBudget storm: {} evictions (POST pods/eviction) at {}/s for {} s on the same pods, against a policy/v1 PodDisruptionBudget with maxUnavailable {} (the API server's own check)",
            self.evictions.sent, storm.rate, storm.seconds, self.max_unavailable
        );
        println!(
            "  evictions: {} allowed ({:.2}/s over {:.1} s), {} refused with 429, {} for a pod gone meanwhile, {} other errors{}; latency ms p50 {} p99 {} max {}; API server + controller-manager CPU {:.1} s",
            self.evictions.allowed,
            self.allowed_per_second(),
            self.elapsed.as_secs_f64(),
            self.evictions.refused,
            self.evictions.gone,
            self.evictions.wrong,
            self.evictions
                .example
                .as_ref()
                .map(|e| format!(" (e.g. {e})"))
                .unwrap_or_default(),
            fmt_ms(self.percentile(50.0)),
            fmt_ms(self.percentile(99.0)),
            fmt_ms(self.evictions.max()),
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
    if native.evictions.allowed == 0 {
        missed.push(format!(
            "native storm (maxUnavailable {}): no eviction was allowed{}",
            native.max_unavailable,
            native
                .evictions
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
