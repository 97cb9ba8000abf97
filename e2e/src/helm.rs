//! The real `helm` from a test: the binary `e2e/cluster/build.sh chart` caches, the chart
//! (`E2E_HELM_CHART`, e.g. the package `make release` writes to dist/, or charts/ packaged here),
//! and a release that is uninstalled if the test ends before it uninstalled it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::Cluster;
use crate::deploy::repo_root;
use crate::identity;

/// `$ZAC_CACHE/helm-$HELM_VERSION/helm` of e2e/cluster/versions.sh (`make chart-tools` builds it).
pub fn binary() -> PathBuf {
    let mut command = Command::new("bash");
    command.arg("-c").arg(
        "source e2e/cluster/versions.sh && printf '%s' \"$ZAC_CACHE/helm-$HELM_VERSION/helm\"",
    );
    command.current_dir(repo_root());
    let path = PathBuf::from(identity::run(command, None));
    assert!(
        path.is_file(),
        "{} missing: build it with `make chart-tools`",
        path.display()
    );
    path
}

/// The chart package to install: `E2E_HELM_CHART` when set, else charts/zone-aware-controllers
/// packaged into `dir`.
pub fn chart(dir: &Path) -> PathBuf {
    if let Some(chart) = std::env::var_os("E2E_HELM_CHART").filter(|c| !c.is_empty()) {
        return PathBuf::from(chart);
    }
    let mut command = Command::new(binary());
    command
        .arg("package")
        .arg(repo_root().join("charts/zone-aware-controllers"))
        .arg("--destination")
        .arg(dir);
    identity::run(command, None);
    let packaged: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the package directory")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "tgz"))
        .collect();
    match packaged.as_slice() {
        [chart] => chart.clone(),
        other => panic!("helm package wrote {other:?}"),
    }
}

/// A release of a test: its name and namespace, and a temporary directory for the chart package
/// and values files. Dropped before [`Release::uninstall`] (a failed test), it uninstalls.
pub struct Release<'a> {
    cluster: &'a Cluster,
    pub name: String,
    pub namespace: String,
    pub dir: PathBuf,
    installed: bool,
}

impl<'a> Release<'a> {
    pub fn new(cluster: &'a Cluster, name: &str, namespace: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("e2e-helm-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the release's temporary directory");
        Release {
            cluster,
            name: name.to_string(),
            namespace: namespace.to_string(),
            dir,
            installed: false,
        }
    }

    /// `helm <args>` against the cluster, in the release's namespace; stdout, or a panic with
    /// stderr.
    pub fn helm(&self, args: &[&str]) -> String {
        identity::run(self.command(args), None)
    }

    /// `helm <args>` as [`Release::helm`], for a command that may fail: stdout, or stdout and
    /// stderr of the failure.
    pub fn try_helm(&self, args: &[&str]) -> Result<String, String> {
        let output = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("starting helm {args:?}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(binary());
        self.isolate(&mut command)
            .env("PATH", identity::path_with_cluster_tools(self.cluster))
            .arg("--kubeconfig")
            .arg(&self.cluster.kubeconfig)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args);
        command
    }

    /// Runs `script` with bash (`-euo pipefail`) as a user would: `helm` and `kubectl` on the
    /// PATH, the cluster's kubeconfig in KUBECONFIG; stdout, or a panic with stderr. From then on
    /// the release counts as installed (uninstalled on drop).
    pub fn run_script(&mut self, script: &str) -> String {
        self.installed = true;
        let helm_dir = binary()
            .parent()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default();
        let mut command = Command::new("bash");
        self.isolate(&mut command)
            .env(
                "PATH",
                format!(
                    "{helm_dir}:{}",
                    identity::path_with_cluster_tools(self.cluster)
                ),
            )
            .env("KUBECONFIG", &self.cluster.kubeconfig)
            .args(["-euo", "pipefail", "-c", script]);
        identity::run(command, None)
    }

    /// No state of the user's helm (repositories, plugins, cache) is read or written.
    fn isolate<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .env("HELM_CONFIG_HOME", self.dir.join("config"))
            .env("HELM_CACHE_HOME", self.dir.join("cache"))
            .env("HELM_DATA_HOME", self.dir.join("data"))
    }

    /// Writes `values` (JSON is YAML) into the release's directory and returns its path.
    pub fn values_file(&self, file: &str, values: &Value) -> String {
        let path = self.dir.join(file);
        std::fs::write(&path, values.to_string()).expect("writing the values file");
        path.display().to_string()
    }

    /// `helm install` of `chart` with the values file, waiting for the Deployments.
    pub fn install(&mut self, chart: &Path, values: &str) -> String {
        self.install_from(&[&chart.display().to_string()], values)
    }

    /// `helm install` of the chart `source` names (a file, or an `oci://` reference and its
    /// flags) with the values file, waiting for the Deployments.
    fn install_from(&mut self, source: &[&str], values: &str) -> String {
        self.installed = true;
        let name = self.name.clone();
        let mut args = vec!["install", name.as_str()];
        args.extend_from_slice(source);
        args.extend(["--values", values, "--wait", "--timeout", "5m"]);
        self.helm(&args)
    }

    /// Pushes `chart` to `registry` as `make release CHART_REGISTRY=...` does (mk/chart-push.sh,
    /// with this release's helm state); returns its `oci://` reference and version.
    pub fn push_chart(&self, chart: &Path, registry: &Registry) -> (String, String) {
        let mut command = Command::new("bash");
        self.isolate(&mut command)
            .current_dir(repo_root())
            .env("HELM", binary())
            .env("CHART_PLAIN_HTTP", "1")
            .arg("mk/chart-push.sh")
            .arg(chart)
            .arg(registry.url());
        let out = identity::run(command, None);
        let pushed = out
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("chart-push: "))
            .and_then(|line| line.split(' ').next())
            .unwrap_or_else(|| panic!("chart-push.sh said nothing of the push: {out}"));
        let (reference, version) = pushed
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("no version in {pushed}"));
        (reference.to_string(), version.to_string())
    }

    /// `helm install` of the chart `reference` (`oci://...`) at `version` from the plain-HTTP
    /// registry, with the values file, waiting for the Deployments.
    pub fn install_from_registry(
        &mut self,
        reference: &str,
        version: &str,
        values: &str,
    ) -> String {
        self.install_from(&[reference, "--version", version, "--plain-http"], values)
    }

    /// `helm upgrade` to `chart` with exactly these values files (no value of the last release is
    /// reused), waiting for the Deployments.
    pub fn upgrade(&self, chart: &Path, values: &[&str]) -> String {
        let chart = chart.display().to_string();
        let mut args = vec!["upgrade", &self.name, &chart, "--wait", "--timeout", "5m"];
        for file in values {
            args.extend(["--values", file]);
        }
        self.helm(&args)
    }

    /// `helm uninstall`, waiting until its objects are gone.
    pub fn uninstall(&mut self) -> String {
        let out = self.helm(&["uninstall", &self.name, "--wait", "--timeout", "3m"]);
        self.installed = false;
        out
    }

    /// The objects of the release's current revision (`helm get manifest`).
    pub fn manifest(&self) -> Vec<Value> {
        identity::yaml_to_json(&self.helm(&["get", "manifest", &self.name]))
    }
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if self.installed {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.helm(&["uninstall", &self.name, "--ignore-not-found", "--wait"])
            }));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// go-containerregistry's registry (`e2e/cluster/build.sh chart` caches it): an OCI registry in
/// memory on a free port of localhost, stopped when dropped. The helm suite pushes the chart to
/// it and installs it from there by `oci://`.
pub struct Registry {
    child: std::process::Child,
    port: u16,
}

impl Registry {
    pub async fn start() -> Self {
        let mut command = Command::new("bash");
        command.current_dir(repo_root()).arg("-c").arg(
            "source e2e/cluster/versions.sh && printf '%s' \"$ZAC_CACHE/registry-$REGISTRY_VERSION/registry\"",
        );
        let path = PathBuf::from(identity::run(command, None));
        assert!(
            path.is_file(),
            "{} missing: build it with `make chart-tools`",
            path.display()
        );
        let port = crate::localstack::free_port();
        let child = Command::new(&path)
            .arg("-port")
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
        let registry = Registry { child, port };
        crate::wait_for(
            &format!("the registry listening on {port}"),
            std::time::Duration::from_secs(30),
            || async {
                tokio::net::TcpStream::connect(("localhost", port))
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        registry
    }

    /// Where charts go: `oci://localhost:<port>/charts`.
    pub fn url(&self) -> String {
        format!("oci://localhost:{}/charts", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shell block of docs/helm.md that moves an installation (`make deploy`, install.yaml) to
/// the chart, as written but for the chart and the values file.
pub fn documented_move_to_the_chart(chart: &Path, values: &str) -> String {
    let doc = std::fs::read_to_string(crate::deploy::repo_root().join("docs/helm.md"))
        .expect("reading docs/helm.md");
    let marker = "<!-- upgrade-e2e:";
    let after = &doc[doc.find(marker).expect("docs/helm.md marks the block")..];
    let block = &after[after.find("```sh\n").expect("a sh block after the marker") + 6..];
    block[..block.find("```").expect("the block ends")]
        .replace(
            "zone-aware-controllers-X.Y.Z.tgz",
            &chart.display().to_string(),
        )
        .replace("my-values.yaml", values)
}

/// The chart's values for the project's local image on the real nodes, with `more` over them:
/// the image `make image` imported into the nodes (a released chart pins its image by digest: the
/// digest must go for the local image), the real nodes' `nodeSelector` and toleration.
pub fn on_real_nodes(real: &crate::real::RealNodes, more: Value) -> Value {
    let (repository, tag) = crate::installed::split_image(real.project_image());
    let mut values = serde_json::json!({
        "image": {"repository": repository, "tag": tag, "digest": "", "pullPolicy": "Never"},
        "nodeSelector": {"type": "real"},
        "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
    });
    if let (Some(values), Value::Object(more)) = (values.as_object_mut(), more) {
        values.extend(more);
    }
    values
}

/// A namespace for a release (`prefix` and the run's suffix), labelled as docs/helm.md says: out
/// of the eviction webhook (its own replicas stay evictable while it is down) and Pod Security
/// restricted.
pub async fn release_namespace(
    cluster: &Cluster,
    client: &kube::Client,
    prefix: &str,
) -> crate::TestNamespace {
    let home = crate::TestNamespace::create(cluster, prefix).await;
    let patch = serde_json::json!({"metadata": {"labels": {
        "zonecontrol.k8s.aws/eviction-webhook": "disabled",
        "pod-security.kubernetes.io/enforce": "restricted",
    }}});
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &home.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling the namespace {}: {e}", home.name));
    home
}
