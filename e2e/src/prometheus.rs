//! The real Prometheus, for proving the configs the shard controller renders: `promtool check
//! config` on a rendered `prometheus.yml`, and a `prometheus` process per shard on 127.0.0.1 that
//! runs exactly that config (pointed at the test cluster by [`with_kubeconfig`]) and reports
//! which targets it keeps and drops. A model of Prometheus's relabelling or service discovery
//! could agree with our renderer and still be wrong; the binary cannot.
//!
//! The binaries are Prometheus 3.16 built by `e2e/cluster/build.sh` into its cache (the version
//! and cache directory are those of `e2e/cluster/versions.sh`), or those in `PROMETHEUS_BIN_DIR`;
//! and Prometheus 2.55.1 beside it ([`Major::V2`]), for the shards of a ShardedPrometheus with
//! version 2.
//! Tests that run them are `#[ignore]`d like the other e2e tests.
//!
//! Also the ServiceAccount the Prometheus pods of a test namespace discover as
//! ([`service_account`]), for the tests that run Prometheus in pods on the real nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::json;

use crate::cluster::DeleteOnDrop;
use crate::{Cluster, TestNamespace, wait_for};

/// How long a Prometheus gets to answer `/-/ready`: it replays an (empty) TSDB and loads its
/// config first, a few seconds on a loaded two-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the targets must stay the same before service discovery counts as settled.
const SETTLED_FOR: Duration = Duration::from_secs(1);

/// Lines of a Prometheus log printed when a test fails.
const LOG_TAIL_LINES: usize = 60;

/// The `prometheus` and `promtool` binaries the tests run.
#[derive(Clone, Debug)]
pub struct PrometheusBinaries {
    /// The server, run per shard by [`PrometheusProcess`].
    pub prometheus: PathBuf,
    /// The config checker behind [`check_config`].
    pub promtool: PathBuf,
}

/// A Prometheus major the tests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    /// Prometheus 3.16 (`PROMETHEUS_VERSION`).
    V3,
    /// Prometheus 2.55.1, the last 2.x (`PROMETHEUS2_VERSION`).
    V2,
}

impl Major {
    pub const ALL: [Major; 2] = [Major::V3, Major::V2];

    /// The env var naming a directory of its binaries instead of build.sh's cache.
    fn bin_dir_var(self) -> &'static str {
        match self {
            Major::V3 => "PROMETHEUS_BIN_DIR",
            Major::V2 => "PROMETHEUS2_BIN_DIR",
        }
    }

    /// build.sh's cache directory of its binaries, in versions.sh's words.
    fn cache_dir(self) -> &'static str {
        match self {
            Major::V3 => "$ZAC_CACHE/prometheus-$PROMETHEUS_VERSION",
            Major::V2 => "$ZAC_CACHE/prometheus-$PROMETHEUS2_VERSION",
        }
    }

    /// The flags that re-read the config file every second: Prometheus 3's own; Prometheus 2
    /// re-reads nothing by itself (its pods get a reloader sidecar; here no test rewrites it).
    fn auto_reload_args(self) -> &'static [&'static str] {
        match self {
            Major::V3 => &["--config.auto-reload", "--config.auto-reload-interval=1s"],
            Major::V2 => &["--web.enable-lifecycle"],
        }
    }
}

/// The Prometheus 3 binaries (see [`binaries_of`]).
pub fn binaries() -> PrometheusBinaries {
    binaries_of(Major::V3)
}

/// The binaries of `major`: those in its `*_BIN_DIR` when set, else the ones
/// `e2e/cluster/build.sh` caches (`$ZAC_CACHE/prometheus-<version>`). Panics, naming the path,
/// when one is missing: a test cannot prove a config without them.
pub fn binaries_of(major: Major) -> PrometheusBinaries {
    let dir = match std::env::var_os(major.bin_dir_var()) {
        Some(dir) => PathBuf::from(dir),
        None => cached_binaries_dir(major, std::env::var("XDG_CACHE_HOME").ok().as_deref()),
    };
    let binaries = PrometheusBinaries {
        prometheus: dir.join("prometheus"),
        promtool: dir.join("promtool"),
    };
    for path in [&binaries.prometheus, &binaries.promtool] {
        assert!(
            path.is_file(),
            "{} is missing: run e2e/cluster/build.sh (or set {})",
            path.display(),
            major.bin_dir_var()
        );
    }
    binaries
}

/// The directory `e2e/cluster/build.sh` builds `major` into, for the cache home `xdg` (the
/// value of `XDG_CACHE_HOME`, `None` when unset).
fn cached_binaries_dir(major: Major, xdg: Option<&str>) -> PathBuf {
    PathBuf::from(crate::cluster::sourced(
        "cluster/versions.sh",
        major.cache_dir(),
        xdg,
    ))
}

/// Distinguishes the temporary directories of several Prometheus runs (and checks) of one test
/// process.
static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A new, empty temporary directory for `what`.
fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "e2e-prometheus-{what}-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Whether Prometheus accepts `yaml` as a config: `promtool check config --syntax-only`, which
/// checks everything in the file itself (relabel rules, service discovery settings) but not the
/// files it names (rule files, credentials), which a rendered config may reference by paths that
/// only exist in the pod. `Err` carries promtool's output.
pub fn check_config(yaml: &str) -> Result<(), String> {
    check_config_on(Major::V3, yaml)
}

/// [`check_config`] with the promtool of `major`.
pub fn check_config_on(major: Major, yaml: &str) -> Result<(), String> {
    // Before the directory exists, so a missing promtool leaves nothing behind.
    let promtool = binaries_of(major).promtool;
    let dir = temp_dir("check");
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, yaml).expect("writing the config to check");
    let output = Command::new(promtool)
        .args(["check", "config", "--syntax-only"])
        .arg(&file)
        .output()
        .expect("running promtool");
    let _ = std::fs::remove_dir_all(&dir);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `yaml` (a Prometheus config) with `kubeconfig_file: <kubeconfig>` in every entry of every
/// scrape config's `kubernetes_sd_configs`, and nothing else changed: a rendered config assumes
/// it runs in a pod (in-cluster credentials), while the tests' Prometheus runs on the host and
/// reaches the test cluster's API server through its kubeconfig.
pub fn with_kubeconfig(yaml: &str, kubeconfig: &Path) -> String {
    let mut config: serde_norway::Value =
        serde_norway::from_str(yaml).expect("a Prometheus config in YAML");
    let kubeconfig = serde_norway::Value::String(kubeconfig.display().to_string());
    let scrape_configs = config
        .get_mut("scrape_configs")
        .and_then(serde_norway::Value::as_sequence_mut);
    for scrape_config in scrape_configs.into_iter().flatten() {
        let sd_configs = scrape_config
            .get_mut("kubernetes_sd_configs")
            .and_then(serde_norway::Value::as_sequence_mut);
        for sd_config in sd_configs.into_iter().flatten() {
            if let Some(sd_config) = sd_config.as_mapping_mut() {
                sd_config.insert("kubeconfig_file".into(), kubeconfig.clone());
            }
        }
    }
    serde_norway::to_string(&config).expect("a config serialises")
}

/// One active target of a Prometheus (an entry of `data.activeTargets` of
/// `/api/v1/targets`): which scrape pool kept it, with which labels, and how scraping it goes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The job (`job_name`) whose relabelling kept the target.
    pub scrape_pool: String,
    /// The labels after relabelling: what the target's series carry.
    pub labels: BTreeMap<String, String>,
    /// The labels service discovery gave the target, before relabelling.
    pub discovered_labels: BTreeMap<String, String>,
    /// `up`, `down` or `unknown` (not scraped yet).
    pub health: String,
    /// The URL it scrapes: which address, port and path the relabelling left.
    pub scrape_url: String,
}

/// One read of `/api/v1/targets?state=any`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TargetsRead {
    active_targets: Vec<Target>,
    /// Scrape pool → how many discovered targets its relabelling dropped. A pool appears here
    /// once service discovery has delivered to it, with 0 when it dropped nothing.
    #[serde(default)]
    dropped_target_counts: BTreeMap<String, usize>,
}

impl TargetsRead {
    fn has_pool(&self, pool: &str) -> bool {
        self.dropped_target_counts.contains_key(pool)
            || self.active_targets.iter().any(|t| t.scrape_pool == pool)
    }

    /// What must stay the same for discovery to count as settled: the targets kept by each pool,
    /// and how many each dropped.
    fn snapshot(&self) -> (BTreeSet<(String, String)>, BTreeMap<String, usize>) {
        let active = self
            .active_targets
            .iter()
            .map(|t| (t.scrape_pool.clone(), t.scrape_url.clone()))
            .collect();
        (active, self.dropped_target_counts.clone())
    }

    /// Pool → (kept, dropped), for a timeout message.
    fn summary(&self) -> String {
        let mut pools: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for target in &self.active_targets {
            pools.entry(&target.scrape_pool).or_default().0 += 1;
        }
        for (pool, dropped) in &self.dropped_target_counts {
            pools.entry(pool).or_default().1 = *dropped;
        }
        format!("pool → (kept, dropped): {pools:?}")
    }
}

/// The ServiceAccount of the Prometheus pods in a test namespace (a ShardedPrometheus's default
/// `serviceAccountName`, and the one the operator's Prometheus objects are given).
pub const SERVICE_ACCOUNT: &str = "prometheus";

/// The ClusterRole (config/prometheus/cluster-role.yaml) that ServiceAccount is bound to: what
/// Kubernetes service discovery reads.
pub const DISCOVERY_CLUSTER_ROLE: &str = "zone-aware-prometheus";

/// Every ClusterRole of config/prometheus/cluster-role.yaml, which [`discovery_service_account`]
/// applies: the discovery one and `zone-aware-prometheus-shared` (what a namespace binds to share
/// its monitors).
pub const HARNESS_CLUSTER_ROLES: [&str; 2] =
    [DISCOVERY_CLUSTER_ROLE, "zone-aware-prometheus-shared"];

/// The field manager of the ServiceAccount, its binding and the ClusterRole.
const MANAGER: &str = "e2e-prometheus";

/// [`discovery_service_account`] in the test namespace, bound by the ClusterRoleBinding
/// `<namespace>-prometheus`: what the Prometheus pods of a ShardedPrometheus in `ns` need to
/// discover their targets and the nodes' zones. The binding is deleted when the guard drops.
pub async fn service_account(ns: &TestNamespace) -> DeleteOnDrop {
    let binding = format!("{}-prometheus", ns.name);
    discovery_service_account(&Cluster::get(), &ns.client, &ns.name, &binding).await
}

/// The ServiceAccount [`SERVICE_ACCOUNT`] in `namespace`, bound by a ClusterRoleBinding named
/// `binding` to the ClusterRole of config/prometheus/cluster-role.yaml (applied here too):
/// discovery in every namespace and of nodes, as a monitor's namespace selector or
/// `attachMetadata` may need. Idempotent (server-side apply). The binding is deleted when the
/// returned guard drops.
pub async fn discovery_service_account(
    cluster: &Cluster,
    client: &Client,
    namespace: &str,
    binding: &str,
) -> DeleteOnDrop {
    let role = crate::deploy::repo_root().join("config/prometheus/cluster-role.yaml");
    let mut kubectl = crate::identity::kubectl(cluster);
    kubectl
        .args(["apply", "--server-side", "--field-manager", MANAGER, "-f"])
        .arg(&role);
    crate::identity::run(kubectl, None);
    let apply = PatchParams::apply(MANAGER).force();
    let account = json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": SERVICE_ACCOUNT},
    });
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(SERVICE_ACCOUNT, &apply, &Patch::Apply(&account))
        .await
        .unwrap_or_else(|e| panic!("applying ServiceAccount {namespace}/{SERVICE_ACCOUNT}: {e}"));
    let binding_object = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DISCOVERY_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
    });
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(binding, &apply, &Patch::Apply(&binding_object))
        .await
        .unwrap_or_else(|e| panic!("applying ClusterRoleBinding {binding}: {e}"));
    DeleteOnDrop::new::<ClusterRoleBinding>(
        cluster.config().await,
        binding,
        DeleteParams::default(),
    )
}

/// `s` percent-encoded for a URL's query string: everything but RFC 3986's unreserved
/// characters, so PromQL's `+`, `{`, `"` and spaces arrive as written.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A `prometheus` process of a test on 127.0.0.1: its config file and TSDB in a temporary
/// directory of its own, its output in a log file (the tail printed when the test fails). The
/// config file is re-read when it changes (`--config.auto-reload`), so a test can hand it the
/// shard controller's next rendering. Killed on drop.
pub struct PrometheusProcess {
    /// Which Prometheus it is.
    pub major: Major,
    /// The name the test gave it (e.g. the shard), in messages.
    pub name: String,
    /// Its stdout and stderr, in order.
    pub log: crate::process::LogFile,
    /// Its config file and TSDB; removed on drop unless the test failed.
    pub dir: PathBuf,
    /// Its API's port on 127.0.0.1, free when it started.
    pub port: u16,
    child: Child,
}

impl PrometheusProcess {
    /// Starts Prometheus with `config_yaml` as its config (written as is) and `extra_args` after
    /// the flags this sets (config file, listen address, TSDB path, config auto-reload every
    /// second), and waits until it is ready (`/-/ready` answers 200, up to 60 s). Panics if it
    /// exits first or never gets ready; its log is printed then.
    pub async fn start(name: &str, config_yaml: &str, extra_args: &[&str]) -> PrometheusProcess {
        Self::start_on(Major::V3, name, config_yaml, extra_args).await
    }

    /// [`PrometheusProcess::start`] with the Prometheus of `major`.
    pub async fn start_on(
        major: Major,
        name: &str,
        config_yaml: &str,
        extra_args: &[&str],
    ) -> PrometheusProcess {
        Self::start_with_files(major, name, config_yaml, &[], extra_args).await
    }

    /// [`PrometheusProcess::start_on`] with `files` (name, content) written beside the config
    /// first: rule files the config names by a relative path.
    pub async fn start_with_files(
        major: Major,
        name: &str,
        config_yaml: &str,
        files: &[(&str, &str)],
        extra_args: &[&str],
    ) -> PrometheusProcess {
        let binaries = binaries_of(major);
        let dir = temp_dir(name);
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, config_yaml).expect("writing the Prometheus config");
        for (file, content) in files {
            std::fs::write(dir.join(file), content).expect("writing a file beside the config");
        }
        let port = crate::localstack::free_port();
        let (log, out, err) = crate::process::log_file(&format!("prometheus-{name}"));
        let child = Command::new(&binaries.prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .args(major.auto_reload_args())
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binaries.prometheus.display()));
        // From here a panic (not ready in time) drops the process, which prints its log.
        let mut process = PrometheusProcess {
            major,
            name: name.to_string(),
            log,
            dir,
            port,
            child,
        };
        let address = process.address();
        crate::process::wait_http_ready(
            &mut process.child,
            &format!("Prometheus {name}"),
            address,
            READY_TIMEOUT,
        )
        .await;
        process
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Its base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address())
    }

    /// Replaces its config file with `yaml`; Prometheus loads it within about a second (poll
    /// [`config_yaml`](Self::config_yaml) or the targets to know when). The file is replaced by a
    /// rename, so the reloader never reads half of it.
    pub fn rewrite_config(&self, yaml: &str) {
        assert_eq!(
            self.major,
            Major::V3,
            "Prometheus {}: only Prometheus 3 re-reads its config by itself",
            self.name
        );
        let next = self.dir.join("prometheus.yml.next");
        std::fs::write(&next, yaml).expect("writing the Prometheus config");
        std::fs::rename(&next, self.dir.join("prometheus.yml")).expect("replacing the config");
    }

    /// `data` of the API's answer at `path`, or why there is none.
    async fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        let (code, body) = crate::process::http_get_from(self.address(), path).await?;
        let mut answer: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: {code}, not JSON ({e}): {body}"))?;
        if code != 200 || answer["status"] != "success" {
            return Err(format!("GET {path}: {code}: {body}"));
        }
        Ok(answer["data"].take())
    }

    /// Like [`api`](Self::api), panicking with the reason: for reads that must work once the
    /// process is ready.
    async fn api_or_panic(&self, path: &str) -> serde_json::Value {
        self.api(path)
            .await
            .unwrap_or_else(|e| panic!("Prometheus {}: {e}", self.name))
    }

    async fn read_targets(&self) -> Result<TargetsRead, String> {
        let data = self.api("/api/v1/targets?state=any").await?;
        serde_json::from_value(data).map_err(|e| format!("targets: {e}"))
    }

    /// Its active targets now: those its relabelling kept, in every scrape pool. Right after a
    /// start or reload service discovery may not have delivered them yet; see
    /// [`wait_for_targets`](Self::wait_for_targets).
    pub async fn targets(&self) -> Vec<Target> {
        self.read_targets()
            .await
            .unwrap_or_else(|e| panic!("Prometheus {}: {e}", self.name))
            .active_targets
    }

    /// Scrape pool → how many discovered targets its relabelling dropped (a shard drops the
    /// targets of the other shards), for the pools service discovery has delivered to.
    pub async fn dropped_target_counts(&self) -> BTreeMap<String, usize> {
        self.read_targets()
            .await
            .unwrap_or_else(|e| panic!("Prometheus {}: {e}", self.name))
            .dropped_target_counts
    }

    /// How many discovered targets its relabelling dropped, over all scrape pools.
    pub async fn dropped_target_count(&self) -> usize {
        self.dropped_target_counts().await.values().sum()
    }

    /// Waits (up to `timeout`) until service discovery has settled, and returns the active
    /// targets: every pool of `pools` has been delivered targets, and the kept targets and
    /// dropped counts stayed the same for a second. Prometheus applies discovery updates every
    /// few seconds, so the first read after a start or reload is often empty or partial. Name
    /// pools that discovery finds targets for: a pool is listed once discovery has delivered to
    /// it. Discovery that arrives in parts more than a second apart (several
    /// `kubernetes_sd_configs` of one pool) can still be read between parts; a test that knows
    /// how many targets to expect should poll for that count too.
    pub async fn wait_for_targets(&self, pools: &[&str], timeout: Duration) -> Vec<Target> {
        // The last read that differed from the one before it, and when it was taken.
        let unchanged_since = Mutex::new(None);
        let unchanged_since = &unchanged_since;
        wait_for(
            &format!(
                "Prometheus {}: the targets of {pools:?} to settle",
                self.name
            ),
            timeout,
            || async move {
                let read = self.read_targets().await?;
                let missing: Vec<&str> = pools
                    .iter()
                    .filter(|pool| !read.has_pool(pool))
                    .copied()
                    .collect();
                let mut unchanged_since = unchanged_since.lock().expect("not poisoned");
                if !missing.is_empty() {
                    *unchanged_since = None;
                    return Err(format!(
                        "no targets for {missing:?} yet; {}",
                        read.summary()
                    ));
                }
                let snapshot = read.snapshot();
                match &*unchanged_since {
                    Some((since, previous)) if *previous == snapshot => {
                        if Instant::now().duration_since(*since) >= SETTLED_FOR {
                            return Ok(read.active_targets);
                        }
                    }
                    _ => *unchanged_since = Some((Instant::now(), snapshot)),
                }
                Err(format!("still changing; {}", read.summary()))
            },
        )
        .await
    }

    /// `data.groups` of `/api/v1/rules`: the recording and alerting rule groups it loaded.
    pub async fn rule_groups(&self) -> serde_json::Value {
        self.api_or_panic("/api/v1/rules").await["groups"].take()
    }

    /// The config it runs now (`/api/v1/status/config`), as Prometheus prints it: how a test sees
    /// that a rewritten config was loaded.
    pub async fn config_yaml(&self) -> String {
        let data = self.api_or_panic("/api/v1/status/config").await;
        data["yaml"]
            .as_str()
            .unwrap_or_else(|| panic!("Prometheus {}: no config yaml in {data}", self.name))
            .to_string()
    }

    /// `data` of an instant query of `promql` (`resultType` and `result`).
    pub async fn query(&self, promql: &str) -> serde_json::Value {
        self.api_or_panic(&format!("/api/v1/query?query={}", url_encode(promql)))
            .await
    }

    /// `data` of a range query of `promql` from `start` to `end` (Unix seconds) every `step`
    /// seconds.
    pub async fn query_range(
        &self,
        promql: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> serde_json::Value {
        self.api_or_panic(&format!(
            "/api/v1/query_range?query={}&start={start}&end={end}&step={step}",
            url_encode(promql)
        ))
        .await
    }
}

impl Drop for PrometheusProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- Prometheus {} log ({}; config and TSDB in {}), last {LOG_TAIL_LINES} lines ----\n{}",
                self.name,
                self.log.display(),
                self.dir.display(),
                crate::process::tail(&self.log, LOG_TAIL_LINES)
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_names_every_cluster_role_of_config_prometheus() {
        let path = crate::cluster::e2e_dir().join("../config/prometheus/cluster-role.yaml");
        let text = std::fs::read_to_string(path).expect("config/prometheus/cluster-role.yaml");
        let names: Vec<String> = crate::identity::yaml_to_json(&text)
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        assert_eq!(names, HARNESS_CLUSTER_ROLES);
    }

    #[test]
    fn kubeconfig_is_added_to_every_kubernetes_sd_config_and_nothing_else_changes() {
        let yaml = r#"
global:
  scrape_interval: 30s
scrape_configs:
  - job_name: pods
    kubernetes_sd_configs:
      - role: pod
        attach_metadata: {node: true}
      - role: pod
        namespaces: {names: [a, b]}
    relabel_configs:
      - {source_labels: [__address__], modulus: 12, target_label: __tmp_hash, action: hashmod}
  - job_name: static
    static_configs: [{targets: ["127.0.0.1:9100"]}]
  - job_name: endpoints
    kubernetes_sd_configs: [{role: endpoints}]
"#;
        let out = with_kubeconfig(yaml, Path::new("/tmp/kube config"));
        let mut out: serde_norway::Value = serde_norway::from_str(&out).unwrap();
        let mut added = 0;
        for scrape_config in out["scrape_configs"].as_sequence_mut().unwrap() {
            let Some(sds) = scrape_config
                .get_mut("kubernetes_sd_configs")
                .and_then(serde_norway::Value::as_sequence_mut)
            else {
                continue;
            };
            for sd in sds {
                let sd = sd.as_mapping_mut().unwrap();
                let file = sd.remove("kubeconfig_file").unwrap();
                assert_eq!(file.as_str(), Some("/tmp/kube config"));
                added += 1;
            }
        }
        assert_eq!(added, 3);
        let input: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        assert_eq!(out, input, "only kubeconfig_file was added");
    }

    #[test]
    fn a_config_without_scrape_configs_is_left_alone() {
        let yaml = "global: {scrape_interval: 15s}\n";
        let out: serde_norway::Value =
            serde_norway::from_str(&with_kubeconfig(yaml, Path::new("/k"))).unwrap();
        assert_eq!(
            out,
            serde_norway::from_str::<serde_norway::Value>(yaml).unwrap()
        );
    }

    #[test]
    fn promql_is_percent_encoded() {
        assert_eq!(
            url_encode(r#"sum(up{job="a b"}) + 1"#),
            "sum%28up%7Bjob%3D%22a%20b%22%7D%29%20%2B%201"
        );
        assert_eq!(url_encode("a-b_c.d~9"), "a-b_c.d~9");
    }

    #[test]
    fn targets_are_read_with_prometheus_3_field_names() {
        let data = serde_json::json!({
            "activeTargets": [{
                "discoveredLabels": {"__address__": "127.0.0.1:2", "job": "a"},
                "labels": {"instance": "127.0.0.1:2", "job": "a"},
                "scrapePool": "a",
                "scrapeUrl": "http://127.0.0.1:2/metrics",
                "globalUrl": "http://host:2/metrics",
                "lastError": "",
                "health": "unknown"
            }],
            "droppedTargets": [],
            "droppedTargetCounts": {"a": 1, "b": 0}
        });
        let read: TargetsRead = serde_json::from_value(data).unwrap();
        assert_eq!(read.active_targets[0].scrape_pool, "a");
        assert_eq!(read.active_targets[0].labels["instance"], "127.0.0.1:2");
        assert_eq!(
            read.active_targets[0].discovered_labels["__address__"],
            "127.0.0.1:2"
        );
        assert_eq!(
            read.active_targets[0].scrape_url,
            "http://127.0.0.1:2/metrics"
        );
        assert!(read.has_pool("a") && read.has_pool("b") && !read.has_pool("c"));
        assert_eq!(read.dropped_target_counts["a"], 1);
    }

    #[test]
    fn the_cached_binaries_follow_xdg_cache_home() {
        for (major, prefix) in [(Major::V3, "prometheus-3."), (Major::V2, "prometheus-2.")] {
            let dir = cached_binaries_dir(major, Some("/xdg"));
            let dir = dir.to_str().unwrap();
            let expected = format!("/xdg/zone-aware-controllers/{prefix}");
            assert!(dir.starts_with(&expected), "{dir}");
        }
    }

    /// The targets on 127.0.0.1 of the self-test: ports nothing listens on (scrapes fail, which
    /// does not matter: the test is about which targets are kept).
    fn addresses(ports: std::ops::RangeInclusive<u16>) -> Vec<String> {
        ports.map(|port| format!("127.0.0.1:{port}")).collect()
    }

    /// A config of a plain job and a hashmod-sharded one that keeps even buckets, plus `extra`
    /// jobs.
    fn self_test_config(extra: &str) -> String {
        let plain = serde_json::to_string(&addresses(1..=2)).unwrap();
        let sharded = serde_json::to_string(&addresses(1..=16)).unwrap();
        format!(
            r#"
global:
  scrape_interval: 1h
scrape_configs:
  - job_name: plain
    static_configs: [{{targets: {plain}}}]
  - job_name: sharded
    static_configs: [{{targets: {sharded}}}]
    relabel_configs:
      - {{source_labels: [__address__], modulus: 1024, target_label: __tmp_hash, action: hashmod}}
      - {{source_labels: [__tmp_hash], target_label: bucket, action: replace}}
      - {{source_labels: [__tmp_hash], regex: "[0-9]*[02468]", action: keep}}
{extra}"#
        )
    }

    #[tokio::test]
    #[ignore = "needs the Prometheus 3.16 binary (e2e/cluster/build.sh builds it)"]
    async fn prometheus_keeps_the_targets_our_hashmod_predicts_and_reloads_its_config() {
        let config = self_test_config("");
        check_config(&config).expect("promtool accepts the self-test config");
        let refused =
            check_config("scrape_configs: [{job_name: x, relabel_configs: [{action: hashmod}]}]\n")
                .expect_err("promtool refuses hashmod without a modulus");
        assert!(refused.contains("requires non-zero modulus"), "{refused}");

        let prometheus = PrometheusProcess::start("self-test", &config, &[]).await;
        let timeout = Duration::from_secs(60);
        let targets = prometheus
            .wait_for_targets(&["plain", "sharded"], timeout)
            .await;

        let pool = |name: &str| -> BTreeSet<String> {
            targets
                .iter()
                .filter(|t| t.scrape_pool == name)
                .map(|t| t.labels["instance"].clone())
                .collect()
        };
        assert_eq!(pool("plain"), addresses(1..=2).into_iter().collect());
        // Prometheus kept exactly the addresses whose bucket, by our hashmod, is even.
        let expected: BTreeSet<String> = addresses(1..=16)
            .into_iter()
            .filter(|a| zone_topology::hashmod::hashmod(a, 1024).is_multiple_of(2))
            .collect();
        assert!(
            !expected.is_empty() && expected.len() < 16,
            "the regex splits the targets"
        );
        assert_eq!(pool("sharded"), expected);
        for target in targets.iter().filter(|t| t.scrape_pool == "sharded") {
            let address = &target.discovered_labels["__address__"];
            assert_eq!(
                target.labels["bucket"],
                zone_topology::hashmod::hashmod(address, 1024).to_string(),
                "Prometheus's hashmod bucket of {address}"
            );
            assert_eq!(target.scrape_url, format!("http://{address}/metrics"));
        }
        let dropped = prometheus.dropped_target_counts().await;
        assert_eq!(dropped.get("sharded"), Some(&(16 - expected.len())));
        assert_eq!(dropped.get("plain"), Some(&0));
        assert_eq!(prometheus.dropped_target_count().await, 16 - expected.len());

        assert_eq!(prometheus.rule_groups().await, serde_json::json!([]));
        let sum = prometheus.query(r#"sum(vector(1) + 1)"#).await;
        assert_eq!(sum["resultType"], "vector");
        assert_eq!(sum["result"][0]["value"][1], "2", "{sum}");

        // Auto-reload: a third job appears without a restart.
        let added = format!(
            "  - job_name: added\n    static_configs: [{{targets: {}}}]\n",
            serde_json::to_string(&addresses(20..=20)).unwrap()
        );
        let config = self_test_config(&added);
        check_config(&config).expect("promtool accepts the rewritten config");
        prometheus.rewrite_config(&config);
        let targets = prometheus
            .wait_for_targets(&["plain", "sharded", "added"], timeout)
            .await;
        let added: Vec<&Target> = targets
            .iter()
            .filter(|t| t.scrape_pool == "added")
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].labels["instance"], "127.0.0.1:20");
        assert!(prometheus.config_yaml().await.contains("job_name: added"));
    }
}
