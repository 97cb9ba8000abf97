//! Load driver for the ZoneDisruptionBudget eviction webhook (`make perf`, `e2e/perf/zdb.sh`).
//!
//! On the local zonal cluster it creates a namespace with StatefulSets whose pods (3,000 by
//! default) are selected by ZoneDisruptionBudgets, starts the release `zdb-controller` (webhook
//! on 127.0.0.1, self-signed), waits for every budget's status, then sends AdmissionReview v1
//! requests for `pods/eviction` CREATE straight to the webhook over HTTPS (kept-alive
//! connections, as the API server keeps them), open loop at a fixed rate, one class at a time:
//!
//! - `denied`: pods of budget `s0`, whose zone-a has an unready pod and maxUnavailable 1: pods of
//!   zone-a exceed the zone's budget, pods of the other zones wait for zone-a (a 429 each);
//! - `unselected`: pods of the namespace that no budget selects (the webhook reads the pod and
//!   matches it against the budgets of the namespace);
//! - `no-budget-ns`: a namespace without budgets (answered from the budget cache alone);
//! - `allowed @N/s`: distinct healthy pods of budgets `s1..` (maxUnavailable 100%), one zone per
//!   budget, so every request is allowed and recorded by a status PUT carrying the
//!   resourceVersion. Nothing is evicted, so records stay: after a round of every such pod the
//!   budgets are recreated. Run at a drain-like rate (reported, not gated);
//! - the drain storm ([`storm`]): would-be-allowed evictions of one budget with maxUnavailable 1
//!   and 100% at the full rate for 30 s through two replicas, each allowed pod deleted and
//!   recreated as a drain would have it; gated on no budget violation, every answer before the
//!   API server's webhook timeout, the answers' p99, each replica's memory, and the allowed
//!   rate; then the same storm against a native PodDisruptionBudget ([`storm::native`]),
//!   reported side by side.
//!
//! Latency is client side, from the scheduled send time to the parsed answer (a late send counts
//! against the webhook, as it would for the API server). The webhook's own latency histogram and
//! decision counters are read from its `/metrics` around each class, with the CPU time the
//! controller and the API server spent. The controller's memory (VmRSS, VmHWM) is read from
//! `/proc` before the load and after the measured load (the gated classes and the drain-rate
//! allowed decisions), and sampled every 100 ms for both replicas during the storm.
//!
//! Settings (environment): `ZDB_PERF_PODS` (3000), `ZDB_PERF_SETS` (6: one for denials, the
//! others for allowed decisions), `ZDB_PERF_RATE` (200 requests/s), `ZDB_PERF_SECONDS` (30 per
//! gated class), `ZDB_PERF_WARMUP_SECONDS` (3, unmeasured), `ZDB_PERF_ALLOWED_RATE` (20),
//! `ZDB_PERF_ALLOWED_COUNT` (600), `ZDB_PERF_STORM_SECONDS` (30; 0 skips the storm),
//! `ZDB_PERF_STORM_RATE` (`ZDB_PERF_RATE`), `ZDB_PERF_STORM_MAX_UNAVAILABLE` ("1,100%"),
//! `ZDB_PERF_STORM_RSS_MIB` (64, per replica), `ZDB_PERF_STORM_P99_MS` (250),
//! `ZDB_PERF_STORM_MIN_RATE` (50 allowed/s with a percentage budget),
//! `ZDB_PERF_STORM_MIN_PER_CYCLE` (0.7 of a count budget per replacement cycle),
//! `ZDB_PERF_STORM_NATIVE` ("100%": the native PodDisruptionBudget storms; empty skips them),
//! `ZDB_PERF_STORM_NATIVE_FACTOR` (2), `ZDB_PERF_P99_MS` (5), `ZDB_PERF_RSS_MIB` (50),
//! `ZDB_PERF_POD_TIMEOUT` (900 s), `ZDB_PERF_SAMPLES` (a file to append every request's class,
//! send offset and latency to), `ZDB_PERF_RESTART=1` (only the storm through the API server
//! while the deployed controller restarts: [`storm::restart`]).
//!
//! Exit status: 0 when the targets are met (denied, unselected and no-budget-ns p99 within
//! `ZDB_PERF_P99_MS`; VmRSS after the measured load within `ZDB_PERF_RSS_MIB`; every answer as
//! expected and every allowed one recorded; the storm's targets), 1 otherwise (a panic, exit 101,
//! when the set-up fails).
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod storm;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use e2e::localstack::free_port;
use e2e::perf::{memory_kib, mib, quantile, setting, until_signalled};
use e2e::process::{ControllerProcess, http_get_from};
use e2e::webhook::{TLS_SECRET, self_signed_args, zdb_args};
use e2e::workload::{spread_statefulset, to_statefulset, zone_disruption_budget};
use e2e::{Cluster, TestNamespace, pods, wait_for, wait_until_no_namespace_terminates};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;
use zone_api::ZoneDisruptionBudget;

const PATH: &str = "/validate-eviction";
const UNSELECTED_SET: &str = "free";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Decision reasons of an eviction refused because the webhook is overloaded, not by a budget.
const OVERLOAD_REFUSALS: [&str; 3] = ["/TooManyConflicts", "/DeadlineExceeded", "/Shed"];

struct Settings {
    pods: usize,
    sets: usize,
    rate: u32,
    seconds: u64,
    warmup_seconds: u64,
    allowed_rate: u32,
    allowed_count: usize,
    storm: storm::StormSettings,
    p99_ms: f64,
    rss_mib: f64,
    pod_timeout: Duration,
}

impl Settings {
    fn from_env() -> Settings {
        let settings = Settings {
            pods: setting("ZDB_PERF_PODS", 3000),
            sets: setting("ZDB_PERF_SETS", 6),
            rate: setting("ZDB_PERF_RATE", 200),
            seconds: setting("ZDB_PERF_SECONDS", 30),
            warmup_seconds: setting("ZDB_PERF_WARMUP_SECONDS", 3),
            allowed_rate: setting("ZDB_PERF_ALLOWED_RATE", 20),
            allowed_count: setting("ZDB_PERF_ALLOWED_COUNT", 600),
            storm: storm::StormSettings::from_env(setting("ZDB_PERF_RATE", 200)),
            p99_ms: setting("ZDB_PERF_P99_MS", 5.0),
            rss_mib: setting("ZDB_PERF_RSS_MIB", 50.0),
            pod_timeout: Duration::from_secs(setting("ZDB_PERF_POD_TIMEOUT", 900)),
        };
        assert!(settings.sets >= 2, "ZDB_PERF_SETS must be at least 2");
        assert!(
            settings.pods >= settings.sets * 6,
            "ZDB_PERF_PODS must give each set at least 2 pods per zone"
        );
        assert!(
            settings.rate > 0 && settings.allowed_rate > 0,
            "ZDB_PERF_RATE and ZDB_PERF_ALLOWED_RATE must be positive"
        );
        settings
    }
}

fn set_name(index: usize) -> String {
    format!("s{index}")
}

fn statefulset(name: &str, replicas: usize) -> StatefulSet {
    to_statefulset(spread_statefulset(
        name,
        replicas,
        "registry.invalid/perf:1",
    ))
}

fn budget(name: &str, max_unavailable: Value) -> ZoneDisruptionBudget {
    zone_disruption_budget(
        name,
        json!({
            "selector": {"matchLabels": {"app": name}},
            "maxUnavailable": max_unavailable,
        }),
    )
}

/// The AdmissionReview the API server sends for `POST pods/<pod>/eviction` (`dry_run`: as for
/// `kubectl drain --dry-run=server`, decided and not recorded).
fn admission_review(uid: &str, namespace: &str, pod: &str, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": pod,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:perf-drain", "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace, "creationTimestamp": null},
            },
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    }))
    .expect("AdmissionReview JSON")
}

/// Idle connections a [`Pool`] keeps, at most: client-go's transports (the API server's webhook
/// client among them) keep 25 per host and close the others once their answer is read.
const MAX_IDLE: usize = 25;

/// Keep-alive HTTPS connections to the webhook, as the API server keeps them: a request takes
/// an idle connection or opens a new one, and at most [`MAX_IDLE`] stay open idle.
struct Pool {
    address: SocketAddr,
    connector: TlsConnector,
    idle: Mutex<Vec<SendRequest<Body>>>,
    opened: AtomicUsize,
}

impl Pool {
    fn new(address: SocketAddr, ca_pem: &[u8]) -> Pool {
        let mut config = e2e::tls::client_config(ca_pem).expect("the webhook CA");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Pool {
            address,
            connector: TlsConnector::from(Arc::new(config)),
            idle: Mutex::new(Vec::new()),
            opened: AtomicUsize::new(0),
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, String> {
        let tcp = TcpStream::connect(self.address)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let name = ServerName::IpAddress(self.address.ip().into());
        let tls = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(connection);
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    async fn checkout(&self) -> Result<SendRequest<Body>, String> {
        loop {
            let candidate = self.idle.lock().await.pop();
            match candidate {
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                None => return self.connect().await,
            }
        }
    }

    /// POSTs `body` to the webhook path and returns the parsed AdmissionReview.
    async fn post(&self, body: Vec<u8>) -> Result<Value, String> {
        let mut sender = self.checkout().await?;
        let request = hyper::Request::post(PATH)
            .header("host", self.address.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Body::from(body))
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), 1 << 20)
            .await
            .map_err(|e| format!("body: {e}"))?;
        if !sender.is_closed() {
            let mut idle = self.idle.lock().await;
            if idle.len() < MAX_IDLE {
                idle.push(sender);
            }
        }
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("response JSON: {e}"))
    }
}

/// The webhook's histogram and decision counters at one moment.
#[derive(Debug, Default, Clone)]
struct Scrape {
    /// (upper bound in seconds, cumulative count), ascending, `+Inf` last.
    buckets: Vec<(f64, f64)>,
    count: f64,
    sum: f64,
    /// `result/reason` -> count.
    decisions: BTreeMap<String, f64>,
    /// Reconciliations of the status controller, and the time they took.
    reconciles: f64,
    reconcile_seconds: f64,
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim().trim_matches('"'))
}

fn parse_metrics(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        match name {
            "zone_aware_zdb_webhook_duration_seconds_bucket" => {
                let le = label(labels, "le").unwrap_or("+Inf");
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                scrape.buckets.push((bound, value));
            }
            "zone_aware_zdb_webhook_duration_seconds_count" => scrape.count = value,
            "zone_aware_zdb_webhook_duration_seconds_sum" => scrape.sum = value,
            "zone_aware_reconciliations_total" => scrape.reconciles += value,
            "zone_aware_reconcile_duration_seconds_sum" => scrape.reconcile_seconds += value,
            // Overload counters, next to the decisions: `shed/<why>`, `conflict-retries`.
            "zone_aware_zdb_webhook_shed_total" => {
                let key = format!("shed/{}", label(labels, "why").unwrap_or("?"));
                scrape.decisions.insert(key, value);
            }
            // Group commit: evictions recorded, and the status writes that recorded them.
            "zone_aware_zdb_webhook_batch_size_sum" => {
                scrape.decisions.insert("batch-records".to_string(), value);
            }
            "zone_aware_zdb_webhook_batch_size_count" => {
                scrape.decisions.insert("batch-writes".to_string(), value);
            }
            "zone_aware_zdb_webhook_conflict_retries_total" => {
                scrape
                    .decisions
                    .insert("conflict-retries".to_string(), value);
            }
            "zone_aware_zdb_webhook_decisions_total" => {
                let key = format!(
                    "{}/{}",
                    label(labels, "result").unwrap_or("?"),
                    label(labels, "reason").unwrap_or("?")
                );
                scrape.decisions.insert(key, value);
            }
            _ => {}
        }
    }
    scrape
        .buckets
        .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    scrape
}

/// What the webhook's histogram says about the requests between two scrapes.
struct ServerSide {
    count: f64,
    mean_ms: f64,
    /// Share of requests answered within 5 ms and 10 ms.
    within_5ms: f64,
    within_10ms: f64,
    /// The upper bound of the bucket holding the 99th percentile.
    p99_bound_ms: f64,
    decisions: BTreeMap<String, f64>,
    /// Reconciliations of the status controller meanwhile, and their total time in ms.
    reconciles: f64,
    reconcile_ms: f64,
}

fn server_side(before: &Scrape, after: &Scrape) -> ServerSide {
    let count = after.count - before.count;
    let at = |scrape: &Scrape, bound: f64| {
        scrape
            .buckets
            .iter()
            .find(|(le, _)| (*le - bound).abs() < 1e-9)
            .map_or(0.0, |(_, n)| *n)
    };
    let within = |bound: f64| {
        if count > 0.0 {
            (at(after, bound) - at(before, bound)) / count
        } else {
            0.0
        }
    };
    let p99_bound_ms = after
        .buckets
        .iter()
        .find(|(le, n)| *n - at(before, *le) >= 0.99 * count)
        .map_or(f64::NAN, |(le, _)| le * 1000.0);
    let decisions = after
        .decisions
        .iter()
        .map(|(key, n)| (key.clone(), n - before.decisions.get(key).unwrap_or(&0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    ServerSide {
        count,
        mean_ms: if count > 0.0 {
            (after.sum - before.sum) * 1000.0 / count
        } else {
            f64::NAN
        },
        within_5ms: within(0.005),
        within_10ms: within(0.01),
        p99_bound_ms,
        decisions,
        reconciles: after.reconciles - before.reconciles,
        reconcile_ms: (after.reconcile_seconds - before.reconcile_seconds) * 1000.0,
    }
}

/// CPU time and host load, to tell a slow webhook from a saturated machine.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    /// Clock ticks (user + system) of the controller, the API server and this driver.
    controller_ticks: f64,
    apiserver_ticks: f64,
    driver_ticks: f64,
    /// Busy and total ticks of the whole machine (`/proc/stat`).
    host_busy: f64,
    host_total: f64,
}

/// Linux reports process CPU times in clock ticks of 1/100 s (USER_HZ on x86_64 and arm64).
const TICKS_PER_SECOND: f64 = 100.0;

fn process_ticks(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else {
        return f64::NAN;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The command may contain spaces: the fields after it start past the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    field(11) + field(12)
}

fn host_ticks() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (f64::NAN, f64::NAN);
    };
    let values: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = values.iter().sum();
    // idle and iowait
    let idle = values.get(3).unwrap_or(&0.0) + values.get(4).unwrap_or(&0.0);
    (total - idle, total)
}

impl Usage {
    fn now(controller: u32, apiserver: Option<u32>) -> Usage {
        let (host_busy, host_total) = host_ticks();
        Usage {
            controller_ticks: process_ticks(Some(controller)),
            apiserver_ticks: process_ticks(apiserver),
            driver_ticks: process_ticks(Some(std::process::id())),
            host_busy,
            host_total,
        }
    }

    fn since(self, before: Usage) -> Usage {
        Usage {
            controller_ticks: self.controller_ticks - before.controller_ticks,
            apiserver_ticks: self.apiserver_ticks - before.apiserver_ticks,
            driver_ticks: self.driver_ticks - before.driver_ticks,
            host_busy: self.host_busy - before.host_busy,
            host_total: self.host_total - before.host_total,
        }
    }

    fn add(self, other: Usage) -> Usage {
        Usage {
            controller_ticks: self.controller_ticks + other.controller_ticks,
            apiserver_ticks: self.apiserver_ticks + other.apiserver_ticks,
            driver_ticks: self.driver_ticks + other.driver_ticks,
            host_busy: self.host_busy + other.host_busy,
            host_total: self.host_total + other.host_total,
        }
    }
}

/// The API server of the local cluster, whose CPU time is reported next to the controller's.
fn apiserver_pid() -> Option<u32> {
    let file = e2e::cluster::e2e_dir().join(".cluster/pids/kube-apiserver.pid");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The result of one class of requests.
struct ClassResult {
    name: String,
    /// Requests per second asked for.
    rate: u32,
    /// Whether the p99 target applies.
    gated: bool,
    /// Client-side latencies of the expected answers, in ms, sorted.
    latencies: Vec<f64>,
    sent: usize,
    /// Allowed evictions refused with 429 under load: the budget kept changing under concurrent
    /// writes, or no decision came within the webhook's deadline (the reasons are in the
    /// webhook's decision counters).
    refused: usize,
    /// Answers other than expected (wrong decision, HTTP or transport error), with one example.
    unexpected: usize,
    example: Option<String>,
    /// Send time: from the first scheduled send to the last answer.
    elapsed: Duration,
    /// Sends that left more than one interval after their scheduled time (the driver fell
    /// behind).
    late_sends: usize,
    server: Option<ServerSide>,
    usage: Usage,
    rounds: usize,
}

impl ClassResult {
    fn new(name: String, rate: u32, gated: bool) -> ClassResult {
        ClassResult {
            name,
            rate,
            gated,
            latencies: Vec::new(),
            sent: 0,
            refused: 0,
            unexpected: 0,
            example: None,
            elapsed: Duration::ZERO,
            late_sends: 0,
            server: None,
            usage: Usage::default(),
            rounds: 0,
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        quantile(&self.latencies, p / 100.0)
    }

    fn achieved_rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds one round: its outcomes, duration, the webhook's histogram and CPU use.
    fn add(&mut self, outcomes: Vec<Outcome>, elapsed: Duration, server: ServerSide, usage: Usage) {
        self.rounds += 1;
        self.elapsed += elapsed;
        self.usage = self.usage.add(usage);
        self.server = Some(match self.server.take() {
            None => server,
            Some(total) => merge(total, server),
        });
        for outcome in outcomes {
            self.sent += 1;
            self.late_sends += usize::from(outcome.late);
            match outcome.verdict {
                Verdict::Expected => self.latencies.push(outcome.latency_ms),
                Verdict::Refused => {
                    self.refused += 1;
                    self.latencies.push(outcome.latency_ms);
                }
                Verdict::Wrong(problem) => {
                    self.unexpected += 1;
                    self.example.get_or_insert(problem);
                }
            }
        }
        self.latencies
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    }

    /// CPU milliseconds per request.
    fn cpu_ms_per_request(&self, ticks: f64) -> f64 {
        ticks * 1000.0 / TICKS_PER_SECOND / (self.sent as f64).max(1.0)
    }

    fn host_busy_percent(&self) -> f64 {
        100.0 * self.usage.host_busy / self.usage.host_total.max(1.0)
    }
}

/// What the answer to one request should be.
#[derive(Clone, Copy)]
enum Expect {
    Allowed,
    Denied429,
    /// Allowed, or refused with 429 under load (counted apart; the decision counters tell
    /// why, and a budget denial there fails the run).
    AllowedOrRefused,
}

enum Verdict {
    Expected,
    Refused,
    Wrong(String),
}

struct Outcome {
    latency_ms: f64,
    late: bool,
    verdict: Verdict,
}

fn check(answer: &Value, uid: &str, expect: Expect) -> Verdict {
    let response = &answer["response"];
    if response["uid"] != uid {
        return Verdict::Wrong(format!("uid {} for {uid}", response["uid"]));
    }
    let allowed = response["allowed"].as_bool();
    let code_429 = response["status"]["code"] == 429;
    match expect {
        Expect::Allowed | Expect::AllowedOrRefused if allowed == Some(true) => Verdict::Expected,
        Expect::Denied429 if allowed == Some(false) && code_429 => Verdict::Expected,
        Expect::AllowedOrRefused if allowed == Some(false) && code_429 => Verdict::Refused,
        _ => Verdict::Wrong(format!("unexpected answer: {response}")),
    }
}

/// Sends one request per target at `rate` per second, open loop: each request leaves at its
/// scheduled time whether or not earlier ones were answered.
///
/// The pacing is a thread of its own sleeping to each send time: the runtime's timer has a
/// millisecond tick and would add up to a millisecond of the driver's own to every latency.
async fn drive(
    pool: &Arc<Pool>,
    namespace: &str,
    targets: &[String],
    rate: u32,
    expect: Expect,
    tag: &str,
) -> (Vec<Outcome>, Duration) {
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let requests: Vec<(String, Vec<u8>)> = targets
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            let uid = format!("00000000-0000-4000-8000-{tag}{i:010}");
            let body = admission_review(&uid, namespace, pod, false);
            (uid, body)
        })
        .collect();
    let runtime = tokio::runtime::Handle::current();
    let pool = pool.clone();
    let started = Instant::now();
    let pacer = tokio::task::spawn_blocking(move || {
        let mut tasks = Vec::with_capacity(requests.len());
        for (i, (uid, body)) in requests.into_iter().enumerate() {
            let scheduled = started + period * u32::try_from(i).unwrap_or(u32::MAX);
            if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let pool = pool.clone();
            tasks.push(runtime.spawn(async move {
                // Late: the driver fell behind by more than one interval (starved of CPU).
                let late = scheduled.elapsed() > period;
                let result = pool.post(body).await;
                let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
                let verdict = match result {
                    Ok(answer) => check(&answer, &uid, expect),
                    Err(error) => Verdict::Wrong(error),
                };
                Outcome {
                    latency_ms,
                    late,
                    verdict,
                }
            }));
        }
        tasks
    });
    let tasks = pacer.await.expect("pacing thread");
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.expect("request task"));
    }
    (outcomes, started.elapsed())
}

/// Appends one line per request to `path`: class, scheduled send (ms from the class's start),
/// latency (ms). For looking at when the slow answers came.
fn write_samples(path: &std::path::Path, class: &str, rate: u32, outcomes: &[Outcome]) {
    use std::io::Write;
    let period_ms = 1000.0 / f64::from(rate);
    let mut lines = String::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        lines.push_str(&format!(
            "{class}\t{:.1}\t{:.3}\n",
            i as f64 * period_ms,
            outcome.latency_ms
        ));
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(lines.as_bytes()));
    if let Err(error) = written {
        eprintln!(
            "zdb-perf: cannot write the samples to {}: {error}",
            path.display()
        );
    }
}

/// `count` targets cycling through `pods`.
fn cycle(pods: &[String], count: usize) -> Vec<String> {
    pods.iter().cycle().take(count).cloned().collect()
}

/// VmRSS and VmHWM of a process, in MiB (NaN once it is gone).
fn memory(pid: u32) -> (f64, f64) {
    memory_kib(pid).map_or((f64::NAN, f64::NAN), |(rss, hwm)| (mib(rss), mib(hwm)))
}

struct Perf {
    settings: Settings,
    ns: TestNamespace,
    other_ns: TestNamespace,
    pods: Api<Pod>,
    zdbs: Api<ZoneDisruptionBudget>,
    per_set: usize,
}

/// A pod count of a node's allocatable (`110`, `1k`).
fn pod_quantity(quantity: &str) -> Option<usize> {
    match quantity.strip_suffix('k') {
        Some(thousands) => thousands.parse::<usize>().ok().map(|n| n * 1000),
        None => quantity.parse().ok(),
    }
}

impl Perf {
    /// Waits (up to 3 minutes: namespaces of earlier runs may still be terminating) until the
    /// nodes have room for `needed` more pods; panics naming who holds the room otherwise.
    async fn wait_for_room(&self, needed: usize) {
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
    async fn create_pods(&self) -> Duration {
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
    async fn pods_by_zone(&self) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
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

    async fn create_budgets(&self, names: &[String], max_unavailable: &Value) {
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
    async fn wait_budgets(&self, names: &[String], disrupted: &[&str], timeout: Duration) {
        for name in names {
            self.wait_budget(name, self.per_set, disrupted, timeout)
                .await;
        }
    }

    /// Waits until the controller computed budget `name` with `pods` pods expected and
    /// `disrupted` as the disrupted zones.
    async fn wait_budget(&self, name: &str, pods: usize, disrupted: &[&str], timeout: Duration) {
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
    async fn delete_budgets(&self, names: &[String]) {
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
    fn controller(
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
/// The running controller and the connections to it.
struct Target {
    pool: Arc<Pool>,
    listen: SocketAddr,
    pid: u32,
    apiserver: Option<u32>,
    /// `ZDB_PERF_SAMPLES`: where to append every request's latency.
    samples: Option<std::path::PathBuf>,
}

impl Target {
    /// Waits until the webhook's budget cache (its own watch) holds the budget of each of
    /// `sets`: a dry-run review of one of its pods is no longer decided "no budget".
    async fn wait_budgets_cached(&self, namespace: &str, sets: &[String]) {
        let no_budget = |scrape: &Scrape| scrape.decisions.get("allowed/NoBudget").copied();
        for set in sets {
            let pod = format!("{set}-0");
            wait_for(
                &format!("the webhook to cache budget {set}"),
                Duration::from_secs(30),
                || async {
                    let before = no_budget(&self.scrape().await);
                    let body = admission_review("cache-probe", namespace, &pod, true);
                    self.pool.post(body).await?;
                    let after = no_budget(&self.scrape().await);
                    if after == before {
                        Ok(())
                    } else {
                        Err(format!("{pod} decided NoBudget"))
                    }
                },
            )
            .await;
        }
    }

    async fn scrape(&self) -> Scrape {
        let (code, body) = http_get_from(self.listen, "/metrics")
            .await
            .expect("GET /metrics of zdb-controller");
        assert_eq!(code, 200, "GET /metrics: {body}");
        parse_metrics(&body)
    }

    fn usage(&self) -> Usage {
        Usage::now(self.pid, self.apiserver)
    }

    /// One measured run of `targets` at the class's rate, added to `result`.
    async fn round(
        &self,
        result: &mut ClassResult,
        namespace: &str,
        targets: &[String],
        expect: Expect,
        tag: &str,
    ) {
        let before = self.scrape().await;
        let usage_before = self.usage();
        let (outcomes, elapsed) =
            drive(&self.pool, namespace, targets, result.rate, expect, tag).await;
        let usage = self.usage().since(usage_before);
        let after = self.scrape().await;
        if let Some(path) = &self.samples {
            write_samples(path, &result.name, result.rate, &outcomes);
        }
        result.add(outcomes, elapsed, server_side(&before, &after), usage);
    }
}

impl Perf {
    /// Recreates the budgets `names` (clearing their records) and waits for their status.
    async fn reset_budgets(&self, names: &[String]) {
        self.delete_budgets(names).await;
        self.create_budgets(names, &json!("100%")).await;
        self.wait_budgets(names, &[], Duration::from_secs(300))
            .await;
    }

    /// `count` allowed evictions at `rate`, in rounds of distinct pods (`per_round`), the
    /// budgets recreated before each round that follows another.
    #[allow(clippy::too_many_arguments)]
    async fn allowed_class(
        &self,
        target: &Target,
        rate: u32,
        count: usize,
        per_round: &[String],
        sets: &[String],
        dirty: &mut bool,
        tag: char,
    ) -> ClassResult {
        let mut result = ClassResult::new(format!("allowed @{rate}/s"), rate, false);
        let mut sent = 0;
        while sent < count {
            if *dirty {
                self.reset_budgets(sets).await;
                target.wait_budgets_cached(&self.ns.name, sets).await;
            }
            let take = per_round.len().min(count - sent);
            eprintln!(
                "zdb-perf: {}, round {}: {take} requests at {rate}/s",
                result.name,
                result.rounds + 1
            );
            *dirty = true;
            let round_tag = format!("{tag}{}", result.rounds % 10);
            target
                .round(
                    &mut result,
                    &self.ns.name,
                    &per_round[..take],
                    Expect::AllowedOrRefused,
                    &round_tag,
                )
                .await;
            sent += take;
            // A quiet second between rounds, so one round's tail does not run into the next
            // round's figures.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        result
    }
}

fn fmt_ms(value: f64) -> String {
    if value.is_nan() {
        "-".to_string()
    } else {
        format!("{value:.2}")
    }
}

/// A free port on 127.0.0.1.
fn loopback() -> SocketAddr {
    format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address")
}

fn per_second(seconds: u64, rate: u32) -> usize {
    usize::try_from(seconds.saturating_mul(u64::from(rate))).unwrap_or(usize::MAX)
}

async fn run(settings: Settings) -> bool {
    let cluster = Cluster::get();
    // The namespace of an earlier run may still be emptied of its pods: minutes of work for the
    // control plane, which would be measured with the webhook.
    let waited =
        wait_until_no_namespace_terminates(&cluster.client().await, settings.pod_timeout).await;
    if waited > Duration::from_secs(1) {
        eprintln!(
            "zdb-perf: waited {:.0} s for the namespaces of an earlier run to be deleted",
            waited.as_secs_f64()
        );
    }
    let ns = TestNamespace::create(&cluster, "zdb-perf").await;
    let other_ns = TestNamespace::create(&cluster, "zdb-perf-nobudget").await;
    let per_set = settings.pods / settings.sets;
    let perf = Perf {
        pods: ns.api(),
        zdbs: ns.api(),
        ns,
        other_ns,
        per_set,
        settings,
    };
    let settings = &perf.settings;
    let selected = per_set * settings.sets;
    eprintln!(
        "zdb-perf: namespace {}: {} StatefulSets x {per_set} pods ({selected} selected) + {UNSELECTED_SET} x 3 unselected",
        perf.ns.name, settings.sets
    );

    let pod_time = perf.create_pods().await;
    eprintln!(
        "zdb-perf: {selected} selected pods Ready in {:.1} s",
        pod_time.as_secs_f64()
    );

    let zones = perf.pods_by_zone().await;
    let deny_set = set_name(0);
    let allowed_sets: Vec<String> = (1..settings.sets).map(set_name).collect();
    // One unready pod in zone-a of s0: zone-a is disrupted for good (kwok leaves a Running
    // pod's condition alone), so with maxUnavailable 1 every other pod of s0 is refused.
    let unready = zones[&deny_set]["zone-a"][0].clone();
    pods::set_ready(&perf.pods, &unready, false).await;
    perf.create_budgets(std::slice::from_ref(&deny_set), &json!(1))
        .await;
    perf.create_budgets(&allowed_sets, &json!("100%")).await;

    let (listen, webhook) = (loopback(), loopback());
    let started = Instant::now();
    let mut controller = perf.controller(listen, webhook, "zdb-perf-a");
    let pid = controller.pid();
    eprintln!(
        "zdb-perf: zdb-controller pid {pid}, log {}",
        controller.log.display()
    );
    wait_for("zdb-controller ready", Duration::from_secs(120), || async {
        match http_get_from(listen, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    perf.wait_budgets(
        std::slice::from_ref(&deny_set),
        &["zone-a"],
        Duration::from_secs(300),
    )
    .await;
    perf.wait_budgets(&allowed_sets, &[], Duration::from_secs(300))
        .await;
    let status_time = started.elapsed();
    eprintln!(
        "zdb-perf: controller ready and every budget computed {:.1} s after start",
        status_time.as_secs_f64()
    );
    let secrets: Api<Secret> = perf.ns.api();
    let ca = wait_for("the webhook Secret", Duration::from_secs(60), || async {
        let secret = secrets
            .get_opt(TLS_SECRET)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        secret
            .data
            .and_then(|d| d.get("ca.crt").map(|b| b.0.clone()))
            .ok_or_else(|| "no ca.crt yet".to_string())
    })
    .await;
    let target = Target {
        pool: Arc::new(Pool::new(webhook, &ca)),
        listen,
        pid,
        apiserver: apiserver_pid(),
        samples: std::env::var_os("ZDB_PERF_SAMPLES").map(Into::into),
    };
    // The webhook serves once its certificate and node cache are there.
    wait_for("the webhook answering", Duration::from_secs(60), || async {
        target
            .pool
            .post(admission_review(
                "warm-up",
                &perf.other_ns.name,
                "warm-up",
                false,
            ))
            .await
            .map(|_| ())
    })
    .await;

    // Denials: every pod of s0 but the unready one.
    let deny_pods: Vec<String> = zones[&deny_set]
        .values()
        .flatten()
        .filter(|p| **p != unready)
        .cloned()
        .collect();
    // Unselected pods in the budgets' namespace, and any pod of a namespace without budgets.
    let free_pods: Vec<String> = zones[UNSELECTED_SET].values().flatten().cloned().collect();
    let elsewhere: Vec<String> = (0..100).map(|i| format!("elsewhere-{i}")).collect();
    // Allowed: one zone per budget (zone-a for s1, zone-b for s2, ...), interleaved across the
    // budgets as a drain of several nodes would be.
    let mut per_round: Vec<String> = Vec::new();
    {
        let lists: Vec<&Vec<String>> = allowed_sets
            .iter()
            .enumerate()
            .map(|(i, set)| &zones[set][ZONES[i % ZONES.len()]])
            .collect();
        let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
        for i in 0..longest {
            for list in &lists {
                if let Some(pod) = list.get(i) {
                    per_round.push(pod.clone());
                }
            }
        }
    }

    // Warm-up, not measured: the webhook's connections to the API server and the driver's to
    // the webhook are open in the steady state the targets are about.
    if settings.warmup_seconds > 0 {
        let warmup = per_second(settings.warmup_seconds, settings.rate);
        eprintln!(
            "zdb-perf: warm-up: {warmup} unselected requests at {}/s",
            settings.rate
        );
        let (outcomes, _) = drive(
            &target.pool,
            &perf.ns.name,
            &cycle(&free_pods, warmup),
            settings.rate,
            Expect::Allowed,
            "wu",
        )
        .await;
        let failed = outcomes
            .iter()
            .filter(|o| !matches!(o.verdict, Verdict::Expected))
            .count();
        assert_eq!(failed, 0, "warm-up requests failed");
        // A quiet second before the measured classes and the memory reading.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let memory_before = memory(pid);

    let count = per_second(settings.seconds, settings.rate);
    let mut results = Vec::new();
    let classes: [(&str, &str, Vec<String>, Expect); 3] = [
        ("denied", &perf.ns.name, deny_pods, Expect::Denied429),
        ("unselected", &perf.ns.name, free_pods, Expect::Allowed),
        (
            "no-budget-ns",
            &perf.other_ns.name,
            elsewhere,
            Expect::Allowed,
        ),
    ];
    for (tag, (name, namespace, targets, expect)) in classes.into_iter().enumerate() {
        eprintln!("zdb-perf: {name}: {count} requests at {}/s", settings.rate);
        let mut result = ClassResult::new(name.to_string(), settings.rate, true);
        target
            .round(
                &mut result,
                namespace,
                &cycle(&targets, count),
                expect,
                &format!("{tag:02}"),
            )
            .await;
        results.push(result);
        // A quiet gap between classes: each class's CPU and latency figures are its own.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Allowed decisions at a drain-like rate; the controller's memory after them.
    let mut dirty = false;
    if settings.allowed_count > 0 {
        let result = perf
            .allowed_class(
                &target,
                settings.allowed_rate,
                settings.allowed_count,
                &per_round,
                &allowed_sets,
                &mut dirty,
                'a',
            )
            .await;
        results.push(result);
    }
    let memory_after = memory(pid);

    // The drain storms on the first allowed set's budget, through a second replica as well.
    let mut storms = Vec::new();
    if settings.storm.seconds > 0 {
        for max_unavailable in &settings.storm.max_unavailable {
            let mut result = perf
                .storm(&settings.storm, max_unavailable, &target, &ca)
                .await;
            result.running[0] = controller.is_running();
            storms.push(result);
        }
    }
    let running = controller.is_running();
    let opened = target.pool.opened.load(Ordering::Relaxed);
    // The same storm against native PodDisruptionBudgets, last: it deletes the storm's
    // ZoneDisruptionBudget, and it loads the API server enough that the controller (which
    // takes no part in it) may miss a lease renewal and exit, as a leader must.
    let mut natives = Vec::new();
    if settings.storm.seconds > 0 {
        for max_unavailable in &settings.storm.native {
            natives.push(perf.native_storm(&settings.storm, max_unavailable).await);
        }
    }

    report(&Report {
        settings,
        selected,
        opened,
        pod_time,
        status_time,
        results: &results,
        memory_before,
        memory_after,
        apiserver: target.apiserver.is_some(),
    });
    let mut missed = Vec::new();
    for storm in &storms {
        storm.report(&settings.storm);
        missed.extend(storm.missed(&settings.storm));
    }
    for native in &natives {
        native.report(&settings.storm);
    }
    for (zdb, native) in storm::native::pairs(&storms, &natives) {
        missed.extend(storm::native::compare(zdb, native, &settings.storm));
    }
    let ok = verdict(settings, running, &results, memory_after.0, &missed);
    drop(controller);
    ok
}

struct Report<'a> {
    settings: &'a Settings,
    selected: usize,
    opened: usize,
    pod_time: Duration,
    status_time: Duration,
    results: &'a [ClassResult],
    memory_before: (f64, f64),
    memory_after: (f64, f64),
    apiserver: bool,
}

fn report(r: &Report) {
    let settings = r.settings;
    println!();
    println!(
        "ZDB webhook: {} selected pods in {} budgets (+3 unselected); AdmissionReviews over HTTPS on loopback, open loop; {} connection(s) opened",
        r.selected, settings.sets, r.opened
    );
    println!(
        "{} pods created and Ready in {:.1} s; controller ready with every budget computed {:.1} s after its start",
        r.selected,
        r.pod_time.as_secs_f64(),
        r.status_time.as_secs_f64()
    );
    println!();
    println!("client-side latency (ms, from the scheduled send to the parsed answer):");
    println!(
        "{:<20} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>7}",
        "class", "sent", "req/s", "p50", "p90", "p99", "max", "429", "wrong", "late", "target"
    );
    for c in r.results {
        let target = if c.gated {
            let ok = c.percentile(99.0) <= settings.p99_ms;
            if ok { "met" } else { "MISSED" }.to_string()
        } else {
            "-".to_string()
        };
        println!(
            "{:<20} {:>6} {:>7.1} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>7}",
            c.name,
            c.sent,
            c.achieved_rate(),
            fmt_ms(c.percentile(50.0)),
            fmt_ms(c.percentile(90.0)),
            fmt_ms(c.percentile(99.0)),
            fmt_ms(c.latencies.last().copied().unwrap_or(f64::NAN)),
            c.refused,
            c.unexpected,
            c.late_sends,
            target,
        );
    }
    println!();
    println!(
        "server side (the webhook's zone_aware_zdb_webhook_duration_seconds) and CPU per request:"
    );
    println!(
        "{:<20} {:>8} {:>9} {:>7} {:>7} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "class",
        "answers",
        "mean ms",
        "<=5ms",
        "<=10ms",
        "p99 <=ms",
        "ctrl cpu",
        "apisrv cpu",
        "driver cpu",
        "host busy"
    );
    for c in r.results {
        let Some(s) = &c.server else { continue };
        let apiserver = if r.apiserver {
            format!("{:.2} ms", c.cpu_ms_per_request(c.usage.apiserver_ticks))
        } else {
            "-".to_string()
        };
        println!(
            "{:<20} {:>8} {:>9} {:>6.1}% {:>6.1}% {:>9} {:>7.2} ms {:>10} {:>7.2} ms {:>8.0}%",
            c.name,
            s.count,
            fmt_ms(s.mean_ms),
            s.within_5ms * 100.0,
            s.within_10ms * 100.0,
            fmt_ms(s.p99_bound_ms),
            c.cpu_ms_per_request(c.usage.controller_ticks),
            apiserver,
            c.cpu_ms_per_request(c.usage.driver_ticks),
            c.host_busy_percent(),
        );
    }
    println!();
    for c in r.results {
        if let Some(s) = &c.server {
            let decisions: Vec<String> = s
                .decisions
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            println!(
                "{:<20} decisions: {}; status controller meanwhile: {} reconciliations, {} ms",
                c.name,
                decisions.join(" "),
                s.reconciles,
                fmt_ms(s.reconcile_ms)
            );
        }
        if c.rounds > 1 {
            println!(
                "{:<20} {} rounds of distinct pods, budgets recreated between them; req/s over the rounds' send time",
                c.name, c.rounds
            );
        }
        if let Some(example) = &c.example {
            println!("{:<20} e.g.: {example}", c.name);
        }
    }
    println!();
    let (rss0, hwm0) = r.memory_before;
    let (rss1, hwm1) = r.memory_after;
    println!(
        "zdb-controller memory with {} selected pods (MiB): before the load VmRSS {rss0:.1} (VmHWM {hwm0:.1}); after the load above (denied, unselected, allowed @{}/s) VmRSS {rss1:.1} (VmHWM {hwm1:.1})",
        r.selected, settings.allowed_rate
    );
    println!(
        "429 = allowed evictions refused with 429 under load (write conflicts, load shed at once, or the webhook's decision deadline: see the decisions); wrong = other answers than expected or errors; late = sends more than one interval behind schedule (driver starved of CPU); ctrl/apisrv/driver cpu = CPU time of the controller / the API server / this driver during the class per request (the API server's includes whatever else it served meanwhile); host busy = the whole machine during the class"
    );
}

/// Prints every missed target; true when none was missed.
fn verdict(
    settings: &Settings,
    running: bool,
    results: &[ClassResult],
    rss: f64,
    storm: &[String],
) -> bool {
    let mut missed = storm.to_vec();
    if !running {
        missed.push("zdb-controller exited during the run".to_string());
    }
    for c in results {
        if c.unexpected > 0 {
            missed.push(format!("{}: {} unexpected answers", c.name, c.unexpected));
        }
        let p99 = c.percentile(99.0);
        if c.gated && (p99.is_nan() || p99 > settings.p99_ms) {
            missed.push(format!(
                "{}: p99 {} ms > {} ms",
                c.name,
                fmt_ms(p99),
                settings.p99_ms
            ));
        }
        if let (false, Some(server)) = (c.gated, &c.server) {
            // Every allowed answer must have come from the status write.
            let recorded = server
                .decisions
                .get("allowed/Recorded")
                .copied()
                .unwrap_or(0.0);
            let allowed = (c.sent - c.refused - c.unexpected) as f64;
            if (recorded - allowed).abs() > 0.5 {
                missed.push(format!(
                    "{}: {recorded} recorded for {allowed} allowed answers",
                    c.name
                ));
            }
            // Refusals under load are expected there; a budget's denial is not.
            let denials: Vec<String> = server
                .decisions
                .iter()
                .filter(|(key, _)| key.starts_with("denied/"))
                .filter(|(key, _)| !OVERLOAD_REFUSALS.iter().any(|r| key.ends_with(r)))
                .map(|(key, n)| format!("{key}={n}"))
                .collect();
            if !denials.is_empty() {
                missed.push(format!(
                    "{}: refused by the budget: {}",
                    c.name,
                    denials.join(" ")
                ));
            }
        }
    }
    if rss.is_nan() || rss > settings.rss_mib {
        missed.push(format!("VmRSS {rss:.1} MiB > {} MiB", settings.rss_mib));
    }
    for miss in &missed {
        println!("MISSED: {miss}");
    }
    if missed.is_empty() {
        println!(
            "zdb perf: targets met (p99 <= {} ms for denied, unselected, no-budget-ns; VmRSS <= {} MiB; storm: no violation, every answer in time, VmRSS <= {} MiB per replica)",
            settings.p99_ms, settings.rss_mib, settings.storm.rss_mib
        );
    }
    missed.is_empty()
}

fn merge(a: ServerSide, b: ServerSide) -> ServerSide {
    let count = a.count + b.count;
    let weighted = |x: f64, y: f64| {
        if count > 0.0 {
            (x * a.count + y * b.count) / count
        } else {
            f64::NAN
        }
    };
    let mut decisions = a.decisions;
    for (key, n) in b.decisions {
        *decisions.entry(key).or_default() += n;
    }
    ServerSide {
        count,
        mean_ms: weighted(a.mean_ms, b.mean_ms),
        within_5ms: weighted(a.within_5ms, b.within_5ms),
        within_10ms: weighted(a.within_10ms, b.within_10ms),
        // A bound over all rounds: the larger of the rounds' bounds.
        p99_bound_ms: a.p99_bound_ms.max(b.p99_bound_ms),
        decisions,
        reconciles: a.reconciles + b.reconciles,
        reconcile_ms: a.reconcile_ms + b.reconcile_ms,
    }
}

/// `ZDB_PERF_RESTART=1`: the restart storm alone ([`storm::restart`]), against the deployed
/// controller.
async fn run_restart(settings: Settings) -> bool {
    let cluster = Cluster::get();
    wait_until_no_namespace_terminates(&cluster.client().await, settings.pod_timeout).await;
    let ns = TestNamespace::create(&cluster, "zdb-restart").await;
    let other_ns = TestNamespace::create(&cluster, "zdb-restart-nobudget").await;
    let perf = Perf {
        pods: ns.api(),
        zdbs: ns.api(),
        ns,
        other_ns,
        per_set: settings.pods / settings.sets,
        settings,
    };
    let restart = storm::restart::RestartSettings::from_env();
    perf.restart_storm(&perf.settings.storm, &restart).await
}

fn main() -> ExitCode {
    let settings = Settings::from_env();
    let restart = setting("ZDB_PERF_RESTART", 0) == 1;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The namespaces and the controller are dropped (deleted, killed) when `run` returns or
    // panics, or when SIGINT/SIGTERM drops it half-way.
    let ok = runtime.block_on(async {
        let measured = async {
            if restart {
                run_restart(settings).await
            } else {
                run(settings).await
            }
        };
        until_signalled(measured).await.unwrap_or_else(|signal| {
            eprintln!("zdb-perf: {signal}; cleaning up");
            false
        })
    });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
