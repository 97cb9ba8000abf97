//! prometheus-operator v0.85 as an oracle: a real operator, run as a host process against the
//! test cluster, that turns ServiceMonitor, PodMonitor, Probe, ScrapeConfig and PrometheusRule
//! objects into a running Prometheus. What ShardedPrometheus makes of the same objects can then
//! be compared with what the upstream implementation makes of them.
//!
//! The operator, its config reloader and its CRDs are those `e2e/cluster/build.sh` caches
//! (`$PROMETHEUS_OPERATOR_DIR` of `e2e/cluster/lib.sh`); the reloader runs from the image
//! `e2e/cluster/images.sh` imports into the real nodes. Its Prometheus pods run the local
//! Prometheus 3.16 image on a real node, and the test process reaches their API at the pod IP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::cluster::DeleteOnDrop;
use crate::prometheus::Target;
use crate::real::RealNodes;
use crate::{Cluster, TestNamespace, wait_for};

/// The field manager of everything this module applies.
const MANAGER: &str = "e2e-prometheus-operator";

/// The Prometheus version the operator's Prometheus objects name (the local image's).
pub const PROMETHEUS_VERSION: &str = "v3.16.0";

/// The ServiceAccount of the operator's Prometheus pods in a test namespace.
pub use crate::prometheus::SERVICE_ACCOUNT;

/// How long the operator gets to serve `/healthz` after it started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a CRD gets to become Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

/// The port of the Prometheus container (the operator's default `web` port).
const PROMETHEUS_PORT: u16 = 9090;

/// Lines of the operator's log printed when a test fails.
const LOG_TAIL_LINES: usize = 80;

/// What `e2e/cluster/build.sh` and `images.sh` made of prometheus-operator.
#[derive(Clone, Debug)]
pub struct OperatorBuild {
    /// The operator binary (static), run on the host.
    pub operator: PathBuf,
    /// The `monitoring.coreos.com` CRDs of the same tag, one YAML file each.
    pub crds: PathBuf,
    /// The prometheus-config-reloader image on the real nodes.
    pub config_reloader_image: String,
}

impl OperatorBuild {
    /// Reads the paths and the image name from `e2e/cluster/lib.sh` (sourced, not parsed: they
    /// are whatever its shell expressions make them, as for build.sh). Panics, naming the path,
    /// when the build is missing.
    pub fn get() -> OperatorBuild {
        let lib = crate::cluster::e2e_dir().join("cluster/lib.sh");
        let output = Command::new("bash")
            .arg("-c")
            .arg(r#"source "$1" && printf '%s\n%s\n' "$PROMETHEUS_OPERATOR_DIR" "$CONFIG_RELOADER_IMAGE""#)
            .arg("bash")
            .arg(&lib)
            .output()
            .unwrap_or_else(|e| panic!("sourcing {}: {e}", lib.display()));
        assert!(
            output.status.success(),
            "sourcing {}: {}",
            lib.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut lines = stdout.lines();
        let (Some(dir), Some(image)) = (lines.next(), lines.next()) else {
            panic!(
                "{} named no operator directory and image: {stdout:?}",
                lib.display()
            );
        };
        let dir = PathBuf::from(dir);
        let build = OperatorBuild {
            operator: dir.join("prometheus-operator"),
            crds: dir.join("crds"),
            config_reloader_image: image.to_string(),
        };
        assert!(
            build.operator.is_file() && build.crds.join(".complete").is_file(),
            "{} is missing or incomplete: run e2e/cluster/build.sh",
            dir.display()
        );
        build
    }

    /// The names of the CRDs in [`crds`](Self::crds) (`<plural>.monitoring.coreos.com`, from
    /// the files' names `monitoring.coreos.com_<plural>.yaml`).
    pub fn crd_names(&self) -> Vec<String> {
        let entries = std::fs::read_dir(&self.crds)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.crds.display()));
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter_map(|file| {
                let plural = file
                    .strip_prefix("monitoring.coreos.com_")?
                    .strip_suffix(".yaml")?;
                Some(format!("{plural}.monitoring.coreos.com"))
            })
            .collect();
        names.sort();
        names
    }
}

/// Installs the operator's CRDs (server-side apply, so a second run or a second test changes
/// nothing) and waits until each is Established. They stay installed: other tests may use them.
pub async fn install_crds(cluster: &Cluster) {
    let build = OperatorBuild::get();
    let mut kubectl = crate::identity::kubectl(cluster);
    kubectl
        .args(["apply", "--server-side", "--force-conflicts"])
        .args(["--field-manager", MANAGER, "-f"])
        .arg(&build.crds);
    crate::identity::run(kubectl, None);
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client().await);
    let names = build.crd_names();
    assert!(
        names.len() >= 6,
        "too few CRDs in {}: {names:?}",
        build.crds.display()
    );
    for name in &names {
        wait_for(&format!("CRD {name} Established"), CRD_TIMEOUT, || {
            let crds = crds.clone();
            async move {
                let crd = crds.get(name).await.map_err(|e| e.to_string())?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established
                    .then_some(())
                    .ok_or_else(|| format!("conditions: {:?}", crd.status))
            }
        })
        .await;
    }
}

/// A prometheus-operator process of a test, on the host with the cluster's admin kubeconfig,
/// restricted to the test's namespaces. Its web server (metrics, `/healthz`) listens on a free
/// port of 127.0.0.1 without TLS; no kubelet Service is managed. Killed (by PID) on drop; its
/// log's tail is printed when the test fails. On the local cluster its PID is also recorded in
/// `e2e/.cluster/pids/`, so `make cluster-down` stops one that outlived its test (a killed test
/// process).
pub struct Operator {
    /// Its stdout and stderr, in order.
    pub log: crate::process::LogFile,
    /// Its web server's port on 127.0.0.1.
    pub port: u16,
    child: Child,
    /// Its PID file in the local cluster's `pids/` directory (none for other clusters).
    pid_file: Option<PathBuf>,
}

impl Operator {
    /// Starts the operator for the objects of `namespaces` (`--namespaces`: Prometheus objects,
    /// monitors, rules and the Secrets and ConfigMaps they name) and waits until it serves
    /// `/healthz`, which it does once its controllers are set up. Install the CRDs first
    /// ([`install_crds`]): without them it has no controller to run and exits.
    pub async fn start(cluster: &Cluster, namespaces: &[&str]) -> Operator {
        assert!(!namespaces.is_empty(), "the operator needs a namespace");
        let build = OperatorBuild::get();
        let port = crate::localstack::free_port();
        let (log, out, err) = crate::process::log_file("prometheus-operator");
        let child = Command::new(&build.operator)
            .arg(format!("--namespaces={}", namespaces.join(",")))
            .arg(format!(
                "--prometheus-config-reloader={}",
                build.config_reloader_image
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", build.operator.display()));
        // Recorded for `make cluster-down`, which stops an operator that outlived its test.
        let pid_file = cluster.var("E2E_LOGS").and_then(|logs| {
            let pids = Path::new(&logs).parent()?.join("pids");
            let file = pids.join(format!("prometheus-operator-{}.pid", child.id()));
            std::fs::write(&file, child.id().to_string()).ok()?;
            Some(file)
        });
        // From here a panic drops the process, which prints its log.
        let mut operator = Operator {
            log,
            port,
            child,
            pid_file,
        };
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let child = &mut operator.child;
        let exited = wait_for(
            "prometheus-operator to serve /healthz",
            START_TIMEOUT,
            || {
                let exited = child.try_wait();
                async move {
                    if let Ok(Some(status)) = exited {
                        return Ok(Some(status));
                    }
                    match crate::process::http_get_from(address, "/healthz").await {
                        Ok((200, _)) => Ok(None),
                        Ok((code, body)) => Err(format!("{code}: {}", body.trim())),
                        Err(e) => Err(e),
                    }
                }
            },
        )
        .await;
        if let Some(status) = exited {
            panic!("prometheus-operator exited ({status}) before it served /healthz");
        }
        operator
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(file) = &self.pid_file {
            let _ = std::fs::remove_file(file);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- prometheus-operator log ({}), last {LOG_TAIL_LINES} lines ----\n{}",
                self.log.display(),
                crate::process::tail(&self.log, LOG_TAIL_LINES)
            );
        }
    }
}

/// The `monitoring.coreos.com/v1` resource of `kind` (plural `plural`), for dynamic APIs.
pub fn monitoring_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind),
        plural,
    )
}

/// A `Prometheus` object of the operator in a test namespace (1 shard, 1 replica, the local
/// Prometheus 3.16 image on a real node, discovering as [`SERVICE_ACCOUNT`]), and its pod's API.
pub struct OperatorPrometheus {
    pub name: String,
    pub namespace: String,
    client: Client,
    _binding: DeleteOnDrop,
}

impl OperatorPrometheus {
    /// The spec [`create`](Self::create) starts from: 1 shard and 1 replica of the local image
    /// (`imagePullPolicy: Never`, which the operator gives the config reloader too) on the real
    /// nodes, the ServiceAccount [`SERVICE_ACCOUNT`], scrapes and rule evaluations every 5 s, and
    /// no selector (the operator then selects no monitor and no rule).
    pub fn base_spec(real: &RealNodes) -> Value {
        json!({
            "image": real.prometheus_image,
            "version": PROMETHEUS_VERSION,
            "imagePullPolicy": "Never",
            "shards": 1,
            "replicas": 1,
            "serviceAccountName": SERVICE_ACCOUNT,
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
            "scrapeInterval": "5s",
            "evaluationInterval": "5s",
        })
    }

    /// Applies the Prometheus `name` in `ns`: [`base_spec`](Self::base_spec) with the top-level
    /// fields of `spec` (an object: the selectors, e.g. `serviceMonitorSelector`,
    /// `podMonitorSelector`, `probeSelector`, `scrapeConfigSelector`, `ruleSelector` and their
    /// namespace selectors, or any other field) set over it. Creates the discovery
    /// ServiceAccount and its binding first. Does not wait: see [`wait_ready`](Self::wait_ready).
    pub async fn create(
        cluster: &Cluster,
        ns: &TestNamespace,
        name: &str,
        spec: Value,
    ) -> OperatorPrometheus {
        let real = RealNodes::of(cluster);
        let binding = crate::prometheus::discovery_service_account(
            cluster,
            &ns.client,
            &ns.name,
            &format!("{}-{name}-prometheus", ns.name),
        )
        .await;
        let mut full = Self::base_spec(&real);
        let Value::Object(fields) = spec else {
            panic!("the Prometheus spec must be an object: {spec}");
        };
        for (field, value) in fields {
            full[field] = value;
        }
        let object = json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": name},
            "spec": full,
        });
        let prometheus = OperatorPrometheus {
            name: name.to_string(),
            namespace: ns.name.clone(),
            client: ns.client.clone(),
            _binding: binding,
        };
        prometheus
            .api_object()
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .unwrap_or_else(|e| panic!("applying Prometheus {}/{name}: {e}", ns.name));
        prometheus
    }

    /// The dynamic API of the Prometheus objects of its namespace.
    pub fn api_object(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &monitoring_resource("Prometheus", "prometheuses"),
        )
    }

    /// The label selector of its pods.
    pub fn pod_selector(&self) -> String {
        format!(
            "app.kubernetes.io/name=prometheus,operator.prometheus.io/name={}",
            self.name
        )
    }

    /// Its pod, once it has an IP.
    pub async fn pod(&self) -> Result<Pod, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let listed = pods
            .list(&ListParams::default().labels(&self.pod_selector()))
            .await
            .map_err(|e| e.to_string())?;
        match listed.items.as_slice() {
            [pod]
                if pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_ref())
                    .is_some() =>
            {
                Ok(pod.clone())
            }
            [pod] => Err(format!(
                "pod {:?} has no IP yet",
                pod.metadata.name.as_deref().unwrap_or_default()
            )),
            pods => Err(format!("{} pods, want 1", pods.len())),
        }
    }

    /// Its Prometheus API's address: the pod IP, port 9090 (the real nodes' pod network is
    /// routed from the host).
    pub async fn address(&self) -> Result<SocketAddr, String> {
        let pod = self.pod().await?;
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .ok_or("no pod IP")?;
        format!("{ip}:{PROMETHEUS_PORT}")
            .parse()
            .map_err(|e| format!("pod IP {ip}: {e}"))
    }

    /// Waits (up to `timeout`) until the operator reports it Available for its current
    /// generation and its pod's Prometheus answers `/-/ready`.
    pub async fn wait_ready(&self, timeout: Duration) {
        let api = self.api_object();
        wait_for(
            &format!("Prometheus {}/{} ready", self.namespace, self.name),
            timeout,
            || {
                let api = api.clone();
                async move {
                    let object = api.get(&self.name).await.map_err(|e| e.to_string())?;
                    let generation = object.metadata.generation;
                    let status = &object.data["status"];
                    let available =
                        status["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| {
                                c["type"] == "Available"
                                    && c["status"] == "True"
                                    && c["observedGeneration"].as_i64() == generation
                            });
                    if !available {
                        return Err(format!("status: {status}"));
                    }
                    let address = self.address().await?;
                    match crate::process::http_get_from(address, "/-/ready").await? {
                        (200, _) => Ok(()),
                        (code, body) => Err(format!("/-/ready: {code}: {}", body.trim())),
                    }
                }
            },
        )
        .await;
    }

    /// `data` of its API's answer at `path` (e.g. `/api/v1/targets`), or why there is none.
    pub async fn api(&self, path: &str) -> Result<Value, String> {
        let address = self.address().await?;
        let (code, body) = crate::process::http_get_from(address, path).await?;
        let mut answer: Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: {code}, not JSON ({e}): {body}"))?;
        if code != 200 || answer["status"] != "success" {
            return Err(format!("GET {path}: {code}: {body}"));
        }
        Ok(answer["data"].take())
    }

    /// Its active targets (`/api/v1/targets?state=active`), in every scrape pool.
    pub async fn targets(&self) -> Result<Vec<Target>, String> {
        let mut data = self.api("/api/v1/targets?state=active").await?;
        serde_json::from_value(data["activeTargets"].take()).map_err(|e| format!("targets: {e}"))
    }

    /// `data.groups` of `/api/v1/rules`: the rule groups it loaded.
    pub async fn rule_groups(&self) -> Result<Value, String> {
        Ok(self.api("/api/v1/rules").await?["groups"].take())
    }

    /// `data` of an instant query of `promql` (`resultType` and `result`).
    pub async fn query(&self, promql: &str) -> Result<Value, String> {
        self.api(&format!("/api/v1/query?query={}", percent_encode(promql)))
            .await
    }

    /// The config it runs now (`/api/v1/status/config`), as Prometheus prints it.
    pub async fn config_yaml(&self) -> Result<String, String> {
        let data = self.api("/api/v1/status/config").await?;
        data["yaml"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no config yaml in {data}"))
    }

    /// The config the operator generated, as it wrote it: `prometheus.yaml.gz` of the Secret
    /// `prometheus-<name>`, unzipped (before the reloader substitutes environment variables).
    pub async fn generated_config(&self) -> Result<String, String> {
        use std::io::Read;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret_name = format!("prometheus-{}", self.name);
        let secret = secrets
            .get(&secret_name)
            .await
            .map_err(|e| format!("Secret {secret_name}: {e}"))?;
        let zipped = secret
            .data
            .as_ref()
            .and_then(|data| data.get("prometheus.yaml.gz"))
            .ok_or_else(|| format!("no prometheus.yaml.gz in Secret {secret_name}"))?;
        let mut yaml = String::new();
        flate2::read::GzDecoder::new(zipped.0.as_slice())
            .read_to_string(&mut yaml)
            .map_err(|e| format!("unzipping prometheus.yaml.gz of {secret_name}: {e}"))?;
        Ok(yaml)
    }
}

/// `s` percent-encoded for a URL's query string: everything but RFC 3986's unreserved
/// characters.
fn percent_encode(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promql_is_percent_encoded() {
        assert_eq!(
            percent_encode(r#"up{job="a b"} == 1"#),
            "up%7Bjob%3D%22a%20b%22%7D%20%3D%3D%201"
        );
    }

    #[test]
    fn crd_names_follow_the_file_names() {
        let dir = std::env::temp_dir().join(format!("e2e-operator-crds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for file in [
            "monitoring.coreos.com_servicemonitors.yaml",
            "monitoring.coreos.com_prometheuses.yaml",
            ".complete",
            "notes.txt",
        ] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        let build = OperatorBuild {
            operator: dir.join("prometheus-operator"),
            crds: dir.clone(),
            config_reloader_image: String::new(),
        };
        let names = build.crd_names();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            names,
            [
                "prometheuses.monitoring.coreos.com",
                "servicemonitors.monitoring.coreos.com"
            ]
        );
    }
}
