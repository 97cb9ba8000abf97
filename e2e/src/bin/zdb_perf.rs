//! Load driver for the ZoneDisruptionBudget eviction webhook (`make perf`, `e2e/perf/zdb.sh`).
//!
//! On the local zonal cluster it creates a namespace with StatefulSets whose pods (3,000 by
//! default) are selected by ZoneDisruptionBudgets, starts the release `zdb-controller` (webhook
//! on 127.0.0.1, self-signed), waits for every budget's status, then sends AdmissionReview v1
//! requests for `pods/eviction` CREATE straight to the webhook over HTTPS, open loop at a fixed
//! rate, one class of decision at a time:
//!
//! - `denied`: pods of budget `s0`, whose zone-a has an unready pod and maxUnavailable 1: pods of
//!   zone-a exceed the zone's budget, pods of the other zones wait for zone-a (a 429 each);
//! - `unselected`: pods of the namespace that no budget selects (the webhook reads the pod and
//!   matches it against the budgets of the namespace);
//! - `no-budget-ns`: a namespace without budgets (answered from the budget cache alone);
//! - `allowed`: distinct healthy pods of budgets `s1..` (maxUnavailable 100%), one zone per
//!   budget, so every request is allowed and recorded by a status PUT. Records are never
//!   cleared (nothing is evicted), so after each round the budgets are recreated.
//!
//! Latency is client side, from the scheduled send time to the parsed answer (a late send counts
//! against the webhook, as it would for the API server). The webhook's own latency histogram is
//! read from its `/metrics` before and after each class for a cross-check. The controller's
//! memory (VmRSS, VmHWM) is read from `/proc` after the load.
//!
//! Settings (environment): `ZDB_PERF_PODS` (3000), `ZDB_PERF_SETS` (6: one for denials, the
//! others for allowed decisions), `ZDB_PERF_RATE` (200 requests/s), `ZDB_PERF_SECONDS` (30 per
//! class), `ZDB_PERF_ALLOWED_SECONDS` (15: allowed decisions, in rounds),
//! `ZDB_PERF_WARMUP_SECONDS` (3, unmeasured requests first), `ZDB_PERF_P99_MS` (10),
//! `ZDB_PERF_RSS_MIB` (50), `ZDB_PERF_POD_TIMEOUT` (900 s for the pods to become Ready).
//!
//! Exit status: 0 when the targets are met (denied and unselected p99 within `ZDB_PERF_P99_MS`,
//! VmRSS within `ZDB_PERF_RSS_MIB`, every answer as expected), 1 otherwise.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use e2e::localstack::free_port;
use e2e::process::ControllerProcess;
use e2e::{Cluster, TestNamespace, pods, wait_for};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;
use zone_api::ZoneDisruptionBudget;

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const SECRET: &str = "zdb-webhook-tls";
const PATH: &str = "/validate-eviction";
const UNSELECTED_SET: &str = "free";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a valid value")),
        Err(_) => default,
    }
}

struct Settings {
    pods: usize,
    sets: usize,
    rate: u32,
    seconds: u64,
    allowed_seconds: u64,
    warmup_seconds: u64,
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
            allowed_seconds: setting("ZDB_PERF_ALLOWED_SECONDS", 15),
            warmup_seconds: setting("ZDB_PERF_WARMUP_SECONDS", 3),
            p99_ms: setting("ZDB_PERF_P99_MS", 10.0),
            rss_mib: setting("ZDB_PERF_RSS_MIB", 50.0),
            pod_timeout: Duration::from_secs(setting("ZDB_PERF_POD_TIMEOUT", 900)),
        };
        assert!(settings.sets >= 2, "ZDB_PERF_SETS must be at least 2");
        assert!(
            settings.pods >= settings.sets * 6,
            "ZDB_PERF_PODS must give each set at least 2 pods per zone"
        );
        assert!(settings.rate > 0, "ZDB_PERF_RATE must be positive");
        settings
    }
}

fn set_name(index: usize) -> String {
    format!("s{index}")
}

fn statefulset(name: &str, replicas: usize) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": ZONE_LABEL,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": name}},
                    }],
                    "containers": [{"name": "app", "image": "registry.invalid/perf:1"}],
                },
            },
        },
    }))
    .expect("StatefulSet manifest")
}

fn budget(name: &str, max_unavailable: Value) -> ZoneDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneDisruptionBudget",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "maxUnavailable": max_unavailable,
        },
    }))
    .expect("ZoneDisruptionBudget manifest")
}

/// The AdmissionReview the API server sends for `POST pods/<pod>/eviction`.
fn admission_review(uid: &str, namespace: &str, pod: &str) -> Vec<u8> {
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
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    }))
    .expect("AdmissionReview JSON")
}

/// Keep-alive HTTPS connections to the webhook, as the API server keeps them: a request takes
/// an idle connection or opens a new one.
struct Pool {
    address: SocketAddr,
    connector: TlsConnector,
    idle: Mutex<Vec<SendRequest<Body>>>,
    opened: AtomicUsize,
}

impl Pool {
    fn new(address: SocketAddr, ca_pem: &[u8]) -> Pool {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots
                .add(cert.expect("the webhook CA is PEM"))
                .expect("the webhook CA is a certificate");
        }
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
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
            self.idle.lock().await.push(sender);
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

/// A plain HTTP GET on 127.0.0.1 (the controller's `/readyz` and `/metrics`).
async fn http_get(address: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status line in {head:?}"))?;
    Ok((code, body.to_string()))
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
    }
}

/// The result of one class of requests.
struct ClassResult {
    name: &'static str,
    /// Client-side latencies of the answered requests, in ms, sorted.
    latencies: Vec<f64>,
    sent: usize,
    /// Answers other than expected (wrong decision, HTTP or transport error), with one example.
    unexpected: usize,
    example: Option<String>,
    elapsed: Duration,
    /// Sends that left more than 1 ms after their scheduled time (the driver fell behind).
    late_sends: usize,
    server: Option<ServerSide>,
    rounds: usize,
}

impl ClassResult {
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        // Nearest rank.
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What the answer to one request should be.
#[derive(Clone, Copy)]
enum Expect {
    Allowed,
    Denied429,
}

struct Outcome {
    latency_ms: f64,
    late: bool,
    problem: Option<String>,
}

fn check(answer: &Value, uid: &str, expect: Expect) -> Option<String> {
    let response = &answer["response"];
    if response["uid"] != uid {
        return Some(format!("uid {} for {uid}", response["uid"]));
    }
    let allowed = response["allowed"].as_bool();
    match expect {
        Expect::Allowed if allowed == Some(true) => None,
        Expect::Denied429 if allowed == Some(false) && response["status"]["code"] == 429 => None,
        _ => Some(format!("unexpected answer: {response}")),
    }
}

/// Sends one request per target at `rate` per second, open loop: each request leaves at its
/// scheduled time whether or not earlier ones were answered.
async fn drive(
    pool: &Arc<Pool>,
    namespace: &str,
    targets: &[String],
    rate: u32,
    expect: Expect,
    tag: &str,
) -> (Vec<Outcome>, Duration) {
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(targets.len());
    for (i, pod) in targets.iter().enumerate() {
        let scheduled = interval.tick().await.into_std();
        let pool = pool.clone();
        let uid = format!("00000000-0000-4000-8000-{tag}{i:010}");
        let body = admission_review(&uid, namespace, pod);
        tasks.push(tokio::spawn(async move {
            let late = scheduled.elapsed() > Duration::from_millis(1);
            let result = pool.post(body).await;
            let latency_ms = scheduled.elapsed().as_secs_f64() * 1000.0;
            let problem = match result {
                Ok(answer) => check(&answer, &uid, expect),
                Err(error) => Some(error),
            };
            Outcome {
                latency_ms,
                late,
                problem,
            }
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.expect("request task"));
    }
    (outcomes, started.elapsed())
}

fn summarize(name: &'static str, runs: Vec<(Vec<Outcome>, Duration)>) -> ClassResult {
    let rounds = runs.len();
    let mut result = ClassResult {
        name,
        latencies: Vec::new(),
        sent: 0,
        unexpected: 0,
        example: None,
        elapsed: Duration::ZERO,
        late_sends: 0,
        server: None,
        rounds,
    };
    for (outcomes, elapsed) in runs {
        result.elapsed += elapsed;
        for outcome in outcomes {
            result.sent += 1;
            result.late_sends += usize::from(outcome.late);
            match outcome.problem {
                None => result.latencies.push(outcome.latency_ms),
                Some(problem) => {
                    result.unexpected += 1;
                    result.example.get_or_insert(problem);
                }
            }
        }
    }
    result
        .latencies
        .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    result
}

/// `count` targets cycling through `pods`.
fn cycle(pods: &[String], count: usize) -> Vec<String> {
    pods.iter().cycle().take(count).cloned().collect()
}

fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct Perf {
    settings: Settings,
    ns: TestNamespace,
    other_ns: TestNamespace,
    pods: Api<Pod>,
    zdbs: Api<ZoneDisruptionBudget>,
    per_set: usize,
}

impl Perf {
    /// Creates the StatefulSets and waits until every pod is Ready; returns how long it took.
    async fn create_pods(&self) -> Duration {
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
        let total = self.per_set * self.settings.sets + 3;
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
        let nodes: Api<Node> = Api::all(self.ns.client.clone());
        let node_zone: HashMap<String, String> = nodes
            .list(&ListParams::default())
            .await
            .expect("list nodes")
            .items
            .into_iter()
            .filter_map(|n| Some((n.name_any(), n.labels().get(ZONE_LABEL)?.clone())))
            .collect();
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
            let Some(zone) = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .and_then(|node| node_zone.get(node))
            else {
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
            wait_for(
                &format!("the status of ZoneDisruptionBudget {name}"),
                timeout,
                || async {
                    let zdb = self.zdbs.get(name).await.map_err(|e| e.to_string())?;
                    let status = zdb.status.clone().unwrap_or_default();
                    let expected: i32 = status.expected_pods.values().sum();
                    let computed = Some(status.observed_generation) == zdb.metadata.generation;
                    if computed
                        && usize::try_from(expected).unwrap_or(0) == self.per_set
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

    fn controller(&self, listen: SocketAddr, webhook: SocketAddr) -> ControllerProcess {
        let (listen, webhook) = (listen.to_string(), webhook.to_string());
        let config_name = format!("zdb-perf-{}", self.ns.name);
        let args = [
            "--identity",
            "zdb-perf",
            "--leader-elect=false",
            "--watch-namespace",
            &self.ns.name,
            "--lease-namespace",
            &self.ns.name,
            "--listen-address",
            &listen,
            "--webhook-address",
            &webhook,
            "--self-signed",
            "--tls-secret-name",
            SECRET,
            "--tls-secret-namespace",
            &self.ns.name,
            "--service-name",
            "zdb-webhook",
            "--service-namespace",
            &self.ns.name,
            // No configuration of that name exists: the requests go straight to the webhook,
            // the API server never calls it.
            "--webhook-config-name",
            &config_name,
        ];
        ControllerProcess::start("zdb-controller", &args, &[])
    }
}

fn fmt_ms(value: f64) -> String {
    if value.is_nan() {
        "-".to_string()
    } else {
        format!("{value:.2}")
    }
}

async fn run(settings: Settings) -> bool {
    let cluster = Cluster::get();
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

    let listen: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    let webhook: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    let started = Instant::now();
    let mut controller = perf.controller(listen, webhook);
    let pid = controller.pid();
    eprintln!(
        "zdb-perf: zdb-controller pid {pid}, log {}",
        controller.log.display()
    );
    wait_for("zdb-controller ready", Duration::from_secs(120), || async {
        match http_get(listen, "/readyz").await {
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
            .get_opt(SECRET)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        secret
            .data
            .and_then(|d| d.get("ca.crt").map(|b| b.0.clone()))
            .ok_or_else(|| "no ca.crt yet".to_string())
    })
    .await;
    let pool = Arc::new(Pool::new(webhook, &ca));
    // The webhook serves once its certificate and node cache are there.
    wait_for("the webhook answering", Duration::from_secs(60), || async {
        pool.post(admission_review("warm-up", &perf.other_ns.name, "warm-up"))
            .await
            .map(|_| ())
    })
    .await;
    let (rss_before, _) = memory(pid);

    let count = usize::try_from(settings.seconds).unwrap_or(usize::MAX)
        * usize::try_from(settings.rate).unwrap_or(usize::MAX);
    let mut results = Vec::new();
    let scrape = || async {
        let (code, body) = http_get(listen, "/metrics")
            .await
            .expect("GET /metrics of zdb-controller");
        assert_eq!(code, 200, "GET /metrics: {body}");
        parse_metrics(&body)
    };

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
    // Warm-up, not measured: the webhook's connections to the API server and the driver's to
    // the webhook are open in the steady state the targets are about.
    if settings.warmup_seconds > 0 {
        let warmup = usize::try_from(settings.warmup_seconds).unwrap_or(usize::MAX)
            * usize::try_from(settings.rate).unwrap_or(usize::MAX);
        eprintln!(
            "zdb-perf: warm-up: {warmup} unselected requests at {}/s",
            settings.rate
        );
        let (outcomes, _) = drive(
            &pool,
            &perf.ns.name,
            &cycle(&free_pods, warmup),
            settings.rate,
            Expect::Allowed,
            "wu",
        )
        .await;
        let failed = outcomes.iter().filter(|o| o.problem.is_some()).count();
        assert_eq!(failed, 0, "warm-up requests failed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let classes: [(&'static str, &str, Vec<String>, Expect); 3] = [
        ("denied", &perf.ns.name, deny_pods, Expect::Denied429),
        (
            "unselected",
            &perf.ns.name,
            free_pods.clone(),
            Expect::Allowed,
        ),
        (
            "no-budget-ns",
            &perf.other_ns.name,
            elsewhere,
            Expect::Allowed,
        ),
    ];
    for (tag, (name, namespace, targets, expect)) in classes.into_iter().enumerate() {
        eprintln!("zdb-perf: {name}: {count} requests at {}/s", settings.rate);
        let before = scrape().await;
        let run = drive(
            &pool,
            namespace,
            &cycle(&targets, count),
            settings.rate,
            expect,
            &format!("{tag:02}"),
        )
        .await;
        let mut result = summarize(name, vec![run]);
        result.server = Some(server_side(&before, &scrape().await));
        results.push(result);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Allowed decisions: in rounds of one zone per budget (zone-a for s1, zone-b for s2, ...),
    // interleaved across budgets as a node drain would be; the budgets are recreated between
    // rounds to clear the records.
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
    let wanted = usize::try_from(settings.allowed_seconds).unwrap_or(usize::MAX)
        * usize::try_from(settings.rate).unwrap_or(usize::MAX);
    let mut runs = Vec::new();
    let mut sent = 0;
    let before = scrape().await;
    let mut server_before = before.clone();
    let mut server_total: Option<ServerSide> = None;
    while sent < wanted {
        if sent > 0 {
            perf.delete_budgets(&allowed_sets).await;
            perf.create_budgets(&allowed_sets, &json!("100%")).await;
            perf.wait_budgets(&allowed_sets, &[], Duration::from_secs(300))
                .await;
            // The webhook's budget cache follows its own watch.
            tokio::time::sleep(Duration::from_secs(1)).await;
            server_before = scrape().await;
        }
        let take = per_round.len().min(wanted - sent);
        eprintln!(
            "zdb-perf: allowed, round {}: {take} requests at {}/s",
            runs.len() + 1,
            settings.rate
        );
        let run = drive(
            &pool,
            &perf.ns.name,
            &per_round[..take],
            settings.rate,
            Expect::Allowed,
            &format!("9{:01}", runs.len() % 10),
        )
        .await;
        sent += take;
        runs.push(run);
        // Only the rounds count, not the status writes of the resets.
        let after = scrape().await;
        let round = server_side(&server_before, &after);
        server_total = Some(match server_total {
            None => round,
            Some(total) => merge(total, round),
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut allowed = summarize("allowed (status write)", runs);
    allowed.server = server_total;
    results.push(allowed);

    let (rss, hwm) = memory(pid);
    let running = controller.is_running();
    let opened = pool.opened.load(Ordering::Relaxed);

    // The report.
    println!();
    println!(
        "ZDB webhook load: {selected} selected pods in {} budgets (+3 unselected), {} requests/s open loop over HTTPS on loopback, {opened} connection(s) opened",
        settings.sets, settings.rate
    );
    println!(
        "time to create {selected} pods and see them Ready: {:.1} s; controller ready with every budget computed: {:.1} s",
        pod_time.as_secs_f64(),
        status_time.as_secs_f64()
    );
    println!();
    println!(
        "{:<24} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} | {:>9} {:>6} {:>7} {:>8}",
        "class",
        "sent",
        "req/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "wrong",
        "late",
        "srv mean",
        "<=5ms",
        "<=10ms",
        "srv p99<="
    );
    for r in &results {
        let server = r.server.as_ref();
        println!(
            "{:<24} {:>6} {:>7.1} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} | {:>9} {:>6} {:>7} {:>8}",
            r.name,
            r.sent,
            r.rate(),
            fmt_ms(r.percentile(50.0)),
            fmt_ms(r.percentile(90.0)),
            fmt_ms(r.percentile(99.0)),
            fmt_ms(r.latencies.last().copied().unwrap_or(f64::NAN)),
            r.unexpected,
            r.late_sends,
            server.map_or("-".to_string(), |s| fmt_ms(s.mean_ms)),
            server.map_or("-".to_string(), |s| format!("{:.1}%", s.within_5ms * 100.0)),
            server.map_or("-".to_string(), |s| format!(
                "{:.1}%",
                s.within_10ms * 100.0
            )),
            server.map_or("-".to_string(), |s| fmt_ms(s.p99_bound_ms)),
        );
    }
    println!();
    for r in &results {
        if let Some(server) = &r.server {
            let decisions: Vec<String> = server
                .decisions
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            println!(
                "{:<24} webhook counted {} answers: {}",
                r.name,
                server.count,
                decisions.join(" ")
            );
        }
        if r.rounds > 1 {
            println!(
                "{:<24} in {} rounds (budgets recreated between rounds); req/s is over the rounds' send time",
                r.name, r.rounds
            );
        }
        if let Some(example) = &r.example {
            println!("{:<24} e.g.: {example}", r.name);
        }
    }
    println!();
    println!(
        "zdb-controller memory with {selected} selected pods: VmRSS {rss:.1} MiB after the load ({rss_before:.1} MiB before), VmHWM {hwm:.1} MiB"
    );
    println!(
        "columns: latency from the scheduled send to the parsed answer (client side); wrong = answers other than expected or errors; late = sends >1 ms behind schedule; srv = the webhook's own histogram (zone_aware_zdb_webhook_duration_seconds)"
    );

    // The verdict.
    let mut ok = true;
    let mut miss = |what: String| {
        println!("MISSED: {what}");
        ok = false;
    };
    if !running {
        miss("zdb-controller exited during the run".to_string());
    }
    for r in &results {
        if r.unexpected > 0 {
            miss(format!("{}: {} unexpected answers", r.name, r.unexpected));
        }
        let gated = matches!(r.name, "denied" | "unselected" | "no-budget-ns");
        let p99 = r.percentile(99.0);
        if gated && (p99.is_nan() || p99 > settings.p99_ms) {
            miss(format!(
                "{}: p99 {} ms > {} ms",
                r.name,
                fmt_ms(r.percentile(99.0)),
                settings.p99_ms
            ));
        }
    }
    if let Some(allowed) = results.last().and_then(|r| r.server.as_ref()) {
        let recorded = allowed
            .decisions
            .get("allowed/Recorded")
            .copied()
            .unwrap_or(0.0);
        let sent = results.last().map_or(0, |r| r.sent);
        if (recorded - sent as f64).abs() > 0.5 {
            miss(format!(
                "allowed: the webhook recorded {recorded} of {sent} allowed evictions (the others did not reach the status write)"
            ));
        }
    }
    if rss.is_nan() || rss > settings.rss_mib {
        miss(format!("VmRSS {rss:.1} MiB > {} MiB", settings.rss_mib));
    }
    if ok {
        println!(
            "zdb perf: targets met (p99 <= {} ms for denied, unselected, no-budget-ns; VmRSS <= {} MiB)",
            settings.p99_ms, settings.rss_mib
        );
    }
    drop(controller);
    ok
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
    }
}

fn main() -> ExitCode {
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The namespaces and the controller are dropped (deleted, killed) when `run` returns or
    // panics, or when SIGINT/SIGTERM drops it half-way.
    let ok = runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("SIGTERM handler");
        tokio::select! {
            ok = run(settings) => ok,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("zdb-perf: interrupted; cleaning up");
                false
            }
            _ = terminate.recv() => {
                eprintln!("zdb-perf: terminated; cleaning up");
                false
            }
        }
    });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
