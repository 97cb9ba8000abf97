//! Thanos (one static binary from `e2e/cluster/build.sh thanos`: `thanos sidecar`, `query`, `store`,
//! `rule`) for the tests that join the shards of a ShardedPrometheus again: a Querier run on the
//! host ([`ThanosQuery`]) that reads the sidecars' StoreAPI at the pods' IPs (routable from this
//! host) and deduplicates the replicas of each shard. The real nodes run the shards' sidecars
//! from the image of `RealNodes::thanos_image`.
//!
//! The binary is `THANOS_BIN` of `e2e/cluster/lib.sh` (from the version and cache directory of
//! `e2e/cluster/versions.sh`), or the one in `THANOS_BIN_DIR`. Tests that run the binary are `#[ignore]`d like the other e2e
//! tests.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::prometheus::url_encode;
use crate::wait_for;

/// The label each replica of a shard carries as an external label, which the Querier removes to
/// merge the replicas' series (`--query.replica-label`).
pub const REPLICA_LABEL: &str = "prometheus_replica";

/// The sidecar's gRPC (StoreAPI) port in a pod: what [`ThanosQuery::start`] is given as
/// `<pod IP>:10901`.
pub const SIDECAR_GRPC_PORT: u16 = 10901;

/// The bucket in LocalStack's S3 the e2e tests' sidecars upload to; each test writes under a
/// prefix of its own (its namespace's name).
pub const BUCKET: &str = "e2e-thanos";

/// LocalStack's S3 as the real nodes' pods reach it (`E2E_POD_S3_ENDPOINT`; this host reaches
/// it there too), with [`BUCKET`] made. Returns its address.
pub async fn pod_s3(cluster: &crate::Cluster) -> SocketAddr {
    let endpoint = cluster
        .var("E2E_POD_S3_ENDPOINT")
        .filter(|endpoint| !endpoint.is_empty())
        .expect("E2E_POD_S3_ENDPOINT: LocalStack's S3 as the real nodes' pods reach it");
    let s3: SocketAddr = endpoint
        .parse()
        .unwrap_or_else(|e| panic!("E2E_POD_S3_ENDPOINT {endpoint}: {e}"));
    let (code, body) = crate::process::http_request(s3, "PUT", &format!("/{BUCKET}"), None)
        .await
        .unwrap_or_else(|e| panic!("creating the bucket {BUCKET}: {e}"));
    assert_eq!(code, 200, "creating the bucket {BUCKET}: {body}");
    s3
}

/// The objstore configuration of the test's part (`prefix`) of [`BUCKET`] at `endpoint`.
pub fn objstore_config(endpoint: &str, prefix: &str) -> String {
    format!(
        "type: S3\nconfig:\n  bucket: {BUCKET}\n  endpoint: {endpoint}\n  insecure: true\n  \
         access_key: test\n  secret_key: test\n  region: us-east-1\n  bucket_lookup_type: path\n\
         prefix: {prefix}\n"
    )
}

/// The S3 listing of the test's part of the bucket (its objstore `prefix`): a bucket other runs
/// wrote to holds blocks of pods of the same names.
pub fn listing_of(prefix: &str) -> String {
    format!("/{BUCKET}?list-type=2&prefix={prefix}/")
}

/// The keys of the `meta.json` files (one per complete block) under `prefix` in [`BUCKET`].
pub async fn block_metas(s3: SocketAddr, prefix: &str) -> Result<Vec<String>, String> {
    let (code, listing) = crate::process::http_get_from(s3, &listing_of(prefix)).await?;
    if code != 200 {
        return Err(format!("{code}: {listing}"));
    }
    Ok(listing
        .split("<Key>")
        .skip(1)
        .filter_map(|k| k.split("</Key>").next())
        .filter(|key| key.ends_with("/meta.json"))
        .map(str::to_string)
        .collect())
}

/// How long a Thanos process gets to answer `/-/ready`. The Querier waits for its first round of
/// endpoint checks (up to 30 s when an endpoint does not answer) before it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of a Thanos log printed when a test fails.
const LOG_TAIL_LINES: usize = 60;

/// The `thanos` binary: the one in `THANOS_BIN_DIR` when set, else the one
/// `e2e/cluster/build.sh` caches (`THANOS_BIN` of `e2e/cluster/lib.sh`). Panics, naming the
/// path, when it is missing.
pub fn binary() -> PathBuf {
    let path = match std::env::var_os("THANOS_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("thanos"),
        None => PathBuf::from(crate::cluster::sourced(
            "cluster/lib.sh",
            "$THANOS_BIN",
            std::env::var("XDG_CACHE_HOME").ok().as_deref(),
        )),
    };
    assert!(
        path.is_file(),
        "{} is missing: run e2e/cluster/build.sh thanos (or set THANOS_BIN_DIR)",
        path.display()
    );
    path
}

/// A `thanos <component>` process on the host, its stdout and stderr in a log file (the tail
/// printed when the test fails). Killed on drop.
struct ThanosProcess {
    /// What it is in messages, e.g. `query`.
    name: String,
    log: crate::process::LogFile,
    child: Child,
}

impl ThanosProcess {
    /// Starts `thanos <args>` (the component first) and waits until it answers `/-/ready` with
    /// 200 on `http`. Panics if it exits first or is not ready in time; its log is printed then.
    async fn start(name: &str, args: &[String], http: SocketAddr) -> ThanosProcess {
        let binary = binary();
        let (log, out, err) = crate::process::log_file(&format!("thanos-{name}"));
        let child = Command::new(&binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        // From here a panic drops the process, which prints its log.
        let mut process = ThanosProcess {
            name: name.to_string(),
            log,
            child,
        };
        crate::process::wait_http_ready(
            &mut process.child,
            &format!("thanos {name}"),
            http,
            READY_TIMEOUT,
        )
        .await;
        process
    }
}

impl Drop for ThanosProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- thanos {} log ({}), last {LOG_TAIL_LINES} lines ----\n{}",
                self.name,
                self.log.display(),
                crate::process::tail(&self.log, LOG_TAIL_LINES)
            );
        }
    }
}

/// Two distinct free ports on 127.0.0.1.
fn two_free_ports() -> (u16, u16) {
    let first = crate::localstack::free_port();
    loop {
        let second = crate::localstack::free_port();
        if second != first {
            return (first, second);
        }
    }
}

/// `data` of the answer of the Thanos (or Prometheus) HTTP API at `address` to `GET path`: a
/// Querier or Ruler pod, or one through its Service IP.
pub async fn api_at(address: SocketAddr, path: &str) -> Result<Value, String> {
    let (code, body) = crate::process::http_get_from(address, path).await?;
    api_data(path, code, &body)
}

/// `data` of a Thanos HTTP API answer (`{"status": "success", "data": ...}`) to `GET <path>`
/// that answered `code` with `body`, or why there is none.
fn api_data(path: &str, code: u16, body: &str) -> Result<Value, String> {
    let mut answer: Value = serde_json::from_str(body)
        .map_err(|e| format!("GET {path}: {code}, not JSON ({e}): {body}"))?;
    if code != 200 || answer["status"] != "success" {
        return Err(format!("GET {path}: {code}: {body}"));
    }
    Ok(answer["data"].take())
}

/// The endpoints of a `/api/v1/stores` answer's `data` (component type → its endpoints) that are
/// connected and healthy: listed with no `lastError`, as `<type> <address>`. An endpoint the
/// Querier never reached is not listed at all; one that failed after it was reached is listed
/// with its error until `--store.unhealthy-timeout`.
pub fn healthy_endpoints(stores: &Value) -> Vec<String> {
    let mut healthy = Vec::new();
    for (kind, endpoints) in stores.as_object().into_iter().flatten() {
        for endpoint in endpoints.as_array().into_iter().flatten() {
            let error = &endpoint["lastError"];
            if error.is_null() || error == "" {
                healthy.push(format!(
                    "{kind} {}",
                    endpoint["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    healthy.sort();
    healthy
}

/// A Thanos Store Gateway (`thanos store`) of a test on 127.0.0.1 over a bucket: the blocks
/// uploaded there, listed again every 5 s. Killed on drop.
pub struct ThanosStore {
    /// Its gRPC (StoreAPI) address, for [`ThanosQuery::start`].
    pub grpc: String,
    // Dropped in this order: the process, then its directory.
    _process: ThanosProcess,
    _dir: ScratchDir,
}

/// A directory of a Thanos process of a test (its data, its configuration), removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `e2e-thanos-<component>-<pid>-<port>` in the temporary directory, created.
    fn new(component: &str, port: u16) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!(
            "e2e-thanos-{component}-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("a directory for thanos {component}: {e}"));
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ThanosStore {
    /// Starts `thanos store` over the bucket of `objstore` (an objstore configuration, YAML) and
    /// waits until it is ready.
    pub async fn start(objstore: &str) -> ThanosStore {
        let (http_port, grpc_port) = two_free_ports();
        let dir = ScratchDir::new("store", grpc_port);
        let config = dir.0.join("objstore.yml");
        std::fs::write(&config, objstore).expect("writing the objstore configuration");
        let args = vec![
            "store".to_string(),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--grpc-address=127.0.0.1:{grpc_port}"),
            format!("--data-dir={}", dir.0.join("data").display()),
            format!("--objstore.config-file={}", config.display()),
            "--sync-block-duration=5s".to_string(),
        ];
        let http = SocketAddr::from(([127, 0, 0, 1], http_port));
        let process = ThanosProcess::start("store", &args, http).await;
        ThanosStore {
            grpc: format!("127.0.0.1:{grpc_port}"),
            _process: process,
            _dir: dir,
        }
    }
}

/// A Thanos Querier (`thanos query`) of a test on 127.0.0.1, reading the StoreAPI endpoints it
/// was started with (the shards' sidecars) and deduplicating along [`REPLICA_LABEL`]. Its output
/// is in a log file, the tail printed when the test fails; killed on drop.
pub struct ThanosQuery {
    /// The addresses it was given (`--endpoint`).
    pub endpoints: Vec<String>,
    /// Its HTTP API's port on 127.0.0.1, free when it started.
    pub http_port: u16,
    /// Its own gRPC (StoreAPI) port on 127.0.0.1, free when it started.
    pub grpc_port: u16,
    /// Kept for its drop: the process is killed, its log shown if the test failed.
    _process: ThanosProcess,
}

impl ThanosQuery {
    /// Starts `thanos query` on `endpoints` (`host:port` of StoreAPI servers, e.g. the sidecars'
    /// `<pod IP>:10901`; none is allowed), with [`REPLICA_LABEL`] as the replica label and no
    /// automatic downsampling, and waits until it is ready (`/-/ready`: after its first round of
    /// endpoint checks). The endpoints may not be connected yet: see
    /// [`wait_endpoints`](Self::wait_endpoints).
    pub async fn start(endpoints: &[String]) -> ThanosQuery {
        let (http_port, grpc_port) = two_free_ports();
        let mut args = vec![
            "query".to_string(),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--grpc-address=127.0.0.1:{grpc_port}"),
            format!("--query.replica-label={REPLICA_LABEL}"),
            "--no-query.auto-downsampling".to_string(),
        ];
        args.extend(endpoints.iter().map(|e| format!("--endpoint={e}")));
        let http = SocketAddr::from(([127, 0, 0, 1], http_port));
        let process = ThanosProcess::start("query", &args, http).await;
        ThanosQuery {
            endpoints: endpoints.to_vec(),
            http_port,
            grpc_port,
            _process: process,
        }
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http_port))
    }

    /// The process id (e.g. for its CPU time in `/proc/<pid>/stat`).
    pub fn pid(&self) -> u32 {
        self._process.child.id()
    }

    /// `data` of the API's answer at `path` (`/api/v1/rules`, ...), or why there is none.
    pub async fn api(&self, path: &str) -> Result<Value, String> {
        api_at(self.address(), path).await
    }

    /// `data.result` of an instant query of `promql` now, deduplicated (`dedup=true`) and
    /// failing rather than answering from part of the endpoints (`partial_response=false`).
    /// `Err` carries the HTTP status and body (e.g. an endpoint that failed the query).
    pub async fn query(&self, promql: &str) -> Result<Value, String> {
        let path = format!(
            "/api/v1/query?query={}&dedup=true&partial_response=false",
            url_encode(promql)
        );
        let mut data = self.api(&path).await?;
        match data["result"].take() {
            Value::Null => Err(format!("GET {path}: no data.result in {data}")),
            result => Ok(result),
        }
    }

    /// `data.result` of an instant query of `promql` now without deduplication (`dedup=false`):
    /// every replica's series.
    pub async fn query_raw(&self, promql: &str) -> Result<Value, String> {
        let path = format!("/api/v1/query?query={}&dedup=false", url_encode(promql));
        let mut data = self.api(&path).await?;
        Ok(data["result"].take())
    }

    /// `data` of `/api/v1/stores`: component type (`sidecar`, `store`, `rule`, ...) → the
    /// endpoints of that type it has reached, each with `name` (its address), `lastCheck`,
    /// `lastError`, `labelSets`, `minTime` and `maxTime`.
    pub async fn stores(&self) -> Value {
        self.api("/api/v1/stores")
            .await
            .unwrap_or_else(|e| panic!("thanos query: {e}"))
    }

    /// Waits (up to `timeout`) until at least `n` endpoints are connected and healthy (see
    /// [`healthy_endpoints`]). The Querier checks its endpoints every 5 s, so one that started
    /// after it is seen within about that.
    pub async fn wait_endpoints(&self, n: usize, timeout: Duration) {
        wait_for(
            &format!(
                "thanos query: {n} healthy endpoints of {:?}",
                self.endpoints
            ),
            timeout,
            || async move {
                let stores = self.api("/api/v1/stores").await?;
                if healthy_endpoints(&stores).len() >= n {
                    Ok(())
                } else {
                    Err(stores.to_string())
                }
            },
        )
        .await;
    }
}

/// The gRPC addresses (`<pod IP>:10901`) of the ready sidecars behind the headless Service
/// `service` of `ns`, once there are `n`.
pub async fn sidecar_endpoints(
    ns: &crate::TestNamespace,
    service: &str,
    n: usize,
    timeout: Duration,
) -> Vec<String> {
    let slices: kube::Api<EndpointSlice> = ns.api();
    let selector = format!("kubernetes.io/service-name={service}");
    wait_for(
        &format!("{n} ready sidecars behind {service}"),
        timeout,
        || async {
            let listed = slices
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            let mut addresses = Vec::new();
            for slice in &listed.items {
                let port = slice
                    .ports
                    .iter()
                    .flatten()
                    .find(|port| port.name.as_deref() == Some("grpc"))
                    .and_then(|port| port.port);
                assert_eq!(port, Some(i32::from(SIDECAR_GRPC_PORT)), "{slice:?}");
                for endpoint in &slice.endpoints {
                    let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
                    if ready == Some(true) {
                        addresses.extend(
                            endpoint
                                .addresses
                                .iter()
                                .map(|ip| format!("{ip}:{SIDECAR_GRPC_PORT}")),
                        );
                    }
                }
            }
            (addresses.len() == n)
                .then_some(addresses.clone())
                .ok_or(format!("{addresses:?}"))
        },
    )
    .await
}

/// The labels and value of each sample of an instant vector.
pub fn samples(result: &Value) -> Vec<(BTreeMap<String, String>, String)> {
    result
        .as_array()
        .into_iter()
        .flatten()
        .map(|sample| {
            let labels = serde_json::from_value(sample["metric"].clone()).unwrap_or_default();
            (
                labels,
                sample["value"][1].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A Thanos sidecar (`thanos sidecar`) of a test on 127.0.0.1 beside a [`PrometheusProcess`],
/// without an object store: its gRPC APIs (the Rules API among them) over that Prometheus.
/// Killed on drop.
pub struct ThanosSidecar {
    /// Its gRPC address (`127.0.0.1:<port>`).
    pub grpc: String,
    _process: ThanosProcess,
}

impl ThanosSidecar {
    /// Starts a sidecar of `prometheus` (which must have external labels) and waits until it is
    /// ready (it has read them).
    pub async fn start(prometheus: &crate::prometheus::PrometheusProcess) -> ThanosSidecar {
        Self::start_with(prometheus, &[]).await
    }

    /// [`ThanosSidecar::start`] with `extra` flags (its gRPC server's TLS:
    /// `--grpc-server-tls-cert`, `-key`, `-client-ca`).
    pub async fn start_with(
        prometheus: &crate::prometheus::PrometheusProcess,
        extra: &[String],
    ) -> ThanosSidecar {
        let (http_port, grpc_port) = two_free_ports();
        let mut args = vec![
            "sidecar".to_string(),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--grpc-address=127.0.0.1:{grpc_port}"),
            format!("--prometheus.url={}", prometheus.url()),
            format!("--tsdb.path={}", prometheus.dir.join("data").display()),
        ];
        args.extend(extra.iter().cloned());
        let http = SocketAddr::from(([127, 0, 0, 1], http_port));
        let process = ThanosProcess::start("sidecar", &args, http).await;
        ThanosSidecar {
            grpc: format!("127.0.0.1:{grpc_port}"),
            _process: process,
        }
    }
}

/// A Thanos Ruler (`thanos rule`) of a test on 127.0.0.1, run with the flags of
/// `config/thanos`'s Ruler that matter to evaluation and alerting: it evaluates the rule files
/// of a directory (the test writes the keys of the shard controller's
/// `<name>-global-rulefiles-N` ConfigMaps there) through a Querier's HTTP API, deduplicated,
/// and sends its alerts to one Alertmanager with the replica label dropped. Killed on drop, its
/// directory removed.
pub struct ThanosRuler {
    http_port: u16,
    /// Its gRPC address (`127.0.0.1:<port>`): the StoreAPI and the Rules API.
    pub grpc: String,
    // Dropped in this order: the process, then its directories (the rule files' is shared by
    // the test's replicas: the first dropped removes it).
    _process: ThanosProcess,
    _dir: ScratchDir,
    _rules: ScratchDir,
}

/// The label telling a Ruler's replicas apart, dropped from the alerts they send
/// (`--alert.label-drop`), as `config/thanos` runs them.
pub const RULER_REPLICA_LABEL: &str = "thanos_ruler_replica";

impl ThanosRuler {
    /// Starts `thanos rule` over the rule files `files` (name, content), querying the Querier
    /// at `query` (its HTTP API) and alerting the Alertmanager at `alertmanager`
    /// (`http://host:port`); waits until it is ready.
    pub async fn start(
        files: &[(String, String)],
        query: &ThanosQuery,
        alertmanager: &str,
    ) -> ThanosRuler {
        Self::start_replica(files, query, alertmanager, "ruler-0").await
    }

    /// [`ThanosRuler::start`] as the replica `replica` ([`RULER_REPLICA_LABEL`]'s value): two
    /// replicas evaluate the same rules, their rules and alerts told apart by that label.
    pub async fn start_replica(
        files: &[(String, String)],
        query: &ThanosQuery,
        alertmanager: &str,
        replica: &str,
    ) -> ThanosRuler {
        let (http_port, grpc_port) = two_free_ports();
        let dir = ScratchDir::new("rule", grpc_port);
        // The same path for every replica of the test, as the replicas of a StatefulSet mount
        // their rule files: a group is told apart by its file and name.
        let rules_dir = std::env::temp_dir().join(format!(
            "e2e-thanos-rules-{}-{}",
            std::process::id(),
            files.first().map_or("none", |(name, _)| name.as_str())
        ));
        std::fs::create_dir_all(&rules_dir).expect("a directory for thanos rule");
        for (name, content) in files {
            std::fs::write(rules_dir.join(name), content).expect("writing a rule file");
        }
        let args = vec![
            "rule".to_string(),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--grpc-address=127.0.0.1:{grpc_port}"),
            format!("--data-dir={}", dir.0.join("data").display()),
            format!("--rule-file={}/*.yaml", rules_dir.display()),
            format!("--query=127.0.0.1:{}", query.http_port),
            format!("--alertmanagers.url={alertmanager}"),
            format!("--label={RULER_REPLICA_LABEL}=\"{replica}\""),
            format!("--alert.label-drop={RULER_REPLICA_LABEL}"),
            "--eval-interval=5s".to_string(),
            "--resend-delay=5s".to_string(),
        ];
        let http = SocketAddr::from(([127, 0, 0, 1], http_port));
        let process = ThanosProcess::start("rule", &args, http).await;
        ThanosRuler {
            http_port,
            grpc: format!("127.0.0.1:{grpc_port}"),
            _process: process,
            _dir: dir,
            _rules: ScratchDir(rules_dir),
        }
    }

    /// `data` of the Ruler's API at `path` (`/api/v1/rules`, `/api/v1/alerts`).
    pub async fn api(&self, path: &str) -> Result<Value, String> {
        api_at(SocketAddr::from(([127, 0, 0, 1], self.http_port)), path).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::prometheus::PrometheusProcess;

    #[test]
    fn the_image_and_binary_are_those_of_lib_sh() {
        let image = crate::cluster::sourced("cluster/lib.sh", "$THANOS_IMAGE", None);
        assert!(
            image.starts_with("localhost/zone-aware-e2e/thanos:v0."),
            "{image}"
        );
        let binary = crate::cluster::sourced("cluster/lib.sh", "$THANOS_BIN", Some("/xdg"));
        assert!(
            binary.starts_with("/xdg/zone-aware-controllers/thanos-v0.")
                && binary.ends_with("/thanos"),
            "{binary}"
        );
        let version = image.rsplit(':').next().unwrap();
        assert!(binary.contains(&format!("thanos-{version}/")), "{binary}");
    }

    #[test]
    fn healthy_endpoints_are_those_without_an_error() {
        let stores = json!({
            "sidecar": [
                {"name": "10.245.1.5:10901", "lastCheck": "2026-01-01T00:00:00Z", "lastError": null,
                 "labelSets": [{"shard": "0", "prometheus_replica": "a"}], "minTime": 0, "maxTime": 1},
                {"name": "10.245.2.5:10901", "lastCheck": "2026-01-01T00:00:00Z",
                 "lastError": "rpc error: code = Unavailable", "labelSets": [], "minTime": 0, "maxTime": 0},
            ],
            "store": [{"name": "10.245.3.5:10901", "lastError": null}],
        });
        assert_eq!(
            healthy_endpoints(&stores),
            ["sidecar 10.245.1.5:10901", "store 10.245.3.5:10901"]
        );
        assert!(healthy_endpoints(&json!({})).is_empty());
    }

    #[test]
    fn api_answers_are_checked() {
        let data = api_data("/x", 200, r#"{"status":"success","data":{"a":1}}"#).unwrap();
        assert_eq!(data, json!({"a": 1}));
        let error = api_data("/x", 422, r#"{"status":"error","error":"bad"}"#).unwrap_err();
        assert!(error.contains("422") && error.contains("bad"), "{error}");
        assert!(api_data("/x", 502, "<html>").is_err());
    }

    /// A `thanos sidecar` on the host in front of `prometheus` (its API and TSDB directory).
    async fn sidecar(prometheus: &PrometheusProcess) -> (ThanosProcess, String) {
        let (http_port, grpc_port) = two_free_ports();
        let args = vec![
            "sidecar".to_string(),
            format!("--prometheus.url={}", prometheus.url()),
            format!("--tsdb.path={}", prometheus.dir.join("data").display()),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--grpc-address=127.0.0.1:{grpc_port}"),
        ];
        let http = SocketAddr::from(([127, 0, 0, 1], http_port));
        let process =
            ThanosProcess::start(&format!("sidecar-{}", prometheus.name), &args, http).await;
        (process, format!("127.0.0.1:{grpc_port}"))
    }

    /// A replica of shard 0 that scrapes one target nothing listens on: `up` is 0, with the same
    /// labels in every replica but the replica label.
    fn replica_config(replica: &str) -> String {
        format!(
            r#"
global:
  scrape_interval: 1s
  external_labels: {{shard: "0", {REPLICA_LABEL}: "{replica}"}}
scrape_configs:
  - job_name: unreachable
    static_configs: [{{targets: ["127.0.0.1:1"]}}]
    relabel_configs: [{{target_label: instance, replacement: target}}]
"#
        )
    }

    #[tokio::test]
    #[ignore = "needs the Thanos and Prometheus binaries (e2e/cluster/build.sh builds them)"]
    async fn the_querier_answers_alone_and_deduplicates_two_replicas_behind_sidecars() {
        let timeout = Duration::from_secs(60);
        let alone = ThanosQuery::start(&[]).await;
        let result = alone.query("vector(1)").await.expect("vector(1)");
        assert_eq!(result.as_array().map(Vec::len), Some(1), "{result}");
        assert_eq!(result[0]["value"][1], "1", "{result}");
        assert_eq!(alone.stores().await, json!({}));
        alone.wait_endpoints(0, timeout).await;
        let refused = alone
            .query("sum(")
            .await
            .expect_err("a PromQL syntax error");
        assert!(refused.contains("400"), "{refused}");
        drop(alone);

        let a = PrometheusProcess::start("replica-a", &replica_config("a"), &[]).await;
        let b = PrometheusProcess::start("replica-b", &replica_config("b"), &[]).await;
        let (_sidecar_a, endpoint_a) = sidecar(&a).await;
        let (_sidecar_b, endpoint_b) = sidecar(&b).await;
        let query = ThanosQuery::start(&[endpoint_a, endpoint_b]).await;
        query.wait_endpoints(2, timeout).await;
        let stores = query.stores().await;
        assert_eq!(healthy_endpoints(&stores).len(), 2, "{stores}");
        assert!(
            healthy_endpoints(&stores)
                .iter()
                .all(|e| e.starts_with("sidecar ")),
            "{stores}"
        );

        // Both replicas scraped: one series, without the replica label.
        let result = wait_for("both replicas to scrape", timeout, || async {
            let result = query.query(r#"up{job="unreachable"}"#).await?;
            let raw = query.query_raw(r#"up{job="unreachable"}"#).await?;
            match raw.as_array().map(Vec::len) {
                Some(2) => Ok(result),
                _ => Err(format!("without dedup: {raw}")),
            }
        })
        .await;
        assert_eq!(
            result,
            json!([{
                "metric": {"__name__": "up", "instance": "target", "job": "unreachable", "shard": "0"},
                "value": result[0]["value"],
            }]),
        );
        assert_eq!(result[0]["value"][1], "0");
    }
}
