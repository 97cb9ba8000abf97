//! cert-manager for the tests of the certManager modes: its CRDs (applied cluster-wide and left
//! there, as any installation of cert-manager leaves them), and its controller and CA injector
//! run on the host against the cluster, limited to one namespace, killed when dropped. The
//! binaries and the CRDs are `CERT_MANAGER_DIR` of `e2e/cluster/lib.sh` (`e2e/cluster/build.sh
//! cert-manager` builds them). A renewal is triggered as `cmctl renew` does it (cmctl is not
//! served by the module proxy): the Certificate's `Issuing` condition set through its status.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{Cluster, identity, wait_for};

/// Lines of a cert-manager log printed when a test fails.
const LOG_TAIL_LINES: usize = 40;

/// The cache directory of `e2e/cluster/build.sh cert-manager`: `controller`, `cainjector`,
/// `crds.yaml`. Panics, naming it, when the build is missing.
pub fn dir() -> PathBuf {
    let dir = PathBuf::from(crate::cluster::sourced(
        "cluster/lib.sh",
        "$CERT_MANAGER_DIR",
        std::env::var("XDG_CACHE_HOME").ok().as_deref(),
    ));
    for file in ["controller", "cainjector", "crds.yaml"] {
        assert!(
            dir.join(file).is_file(),
            "{} is missing: run e2e/cluster/build.sh cert-manager",
            dir.join(file).display()
        );
    }
    dir
}

/// Applies cert-manager's CRDs (server-side: idempotent, whoever applied them before) and waits
/// until they are established.
pub fn install_crds(cluster: &Cluster) {
    let crds = dir().join("crds.yaml");
    let mut apply = identity::kubectl(cluster);
    apply
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(&crds);
    identity::run(apply, None);
    let mut wait = identity::kubectl(cluster);
    wait.args(["wait", "--for=condition=Established", "--timeout=60s", "-f"])
        .arg(&crds);
    identity::run(wait, None);
}

/// The `cert-manager.io/v1` kind `kind` (Certificate, Issuer, ...) in `namespace`.
pub fn api(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("cert-manager.io", "v1", kind));
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// cert-manager's controller and CA injector, as processes on the host that manage `namespace`
/// only (with the cluster's admin credentials). Killed when dropped; their logs are printed then
/// if the test is failing.
pub struct CertManager {
    kubeconfig: PathBuf,
    namespace: String,
    processes: Vec<(String, crate::process::LogFile, Child)>,
}

/// The CA injector's flags that make it replace a caBundle with the new CA, as cert-manager did
/// before v1.19, instead of appending the new CA to it (feature gate CAInjectorMerging, on by
/// default since v1.19).
pub const REPLACING_CA_INJECTOR: &[&str] = &["--feature-gates=CAInjectorMerging=false"];

impl CertManager {
    pub fn start(cluster: &Cluster, namespace: &str) -> CertManager {
        let mut manager = CertManager {
            kubeconfig: cluster.kubeconfig.clone(),
            namespace: namespace.to_string(),
            processes: Vec::new(),
        };
        manager.spawn("controller", &[]);
        manager.spawn("cainjector", &[]);
        manager
    }

    /// Replaces the CA injector by one started with `args` besides the namespace's.
    pub fn restart_ca_injector(&mut self, args: &[&str]) {
        if let Some(at) = self
            .processes
            .iter()
            .position(|(b, _, _)| b == "cainjector")
        {
            let (_, _log, mut child) = self.processes.remove(at);
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn("cainjector", args);
    }

    fn spawn(&mut self, binary: &str, args: &[&str]) {
        let (log, out, err) = crate::process::log_file(&format!("cert-manager-{binary}"));
        let child = Command::new(dir().join(binary))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--namespace", &self.namespace])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting cert-manager's {binary}: {e}"));
        self.processes.push((binary.to_string(), log, child));
    }

    /// Panics (printing the logs) if a process has exited.
    pub fn assert_running(&mut self) {
        for (binary, _, child) in &mut self.processes {
            let status = child
                .try_wait()
                .expect("the state of a cert-manager process");
            assert!(
                status.is_none(),
                "cert-manager's {binary} exited: {status:?}"
            );
        }
    }
}

impl Drop for CertManager {
    fn drop(&mut self) {
        for (binary, log, child) in &mut self.processes {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!(
                    "---- cert-manager {binary} log ({}), last {LOG_TAIL_LINES} lines ----\n{}",
                    log.display(),
                    crate::process::tail(log, LOG_TAIL_LINES)
                );
            }
        }
    }
}

/// The status of condition `kind` of a cert-manager object (`True`, `False`), if it has one.
pub fn condition(object: &DynamicObject, kind: &str) -> Option<String> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// Waits until the Certificate `name` is Ready and not issuing.
pub async fn wait_ready(certificates: &Api<DynamicObject>, name: &str, timeout: Duration) {
    wait_for(
        &format!("the Certificate {name} Ready"),
        timeout,
        || async {
            let certificate = certificates.get(name).await.map_err(|e| e.to_string())?;
            let ready = condition(&certificate, "Ready");
            let issuing = condition(&certificate, "Issuing");
            if ready.as_deref() == Some("True") && issuing.as_deref() != Some("True") {
                Ok(())
            } else {
                Err(format!("status {}", certificate.data["status"]))
            }
        },
    )
    .await;
}

/// Triggers a renewal of the Certificate `name` now, as `cmctl renew` does: condition `Issuing`
/// True with reason `ManuallyTriggered`, through the status subresource. The Certificate must not
/// be issuing already (the condition is appended).
pub async fn trigger_renewal(certificates: &Api<DynamicObject>, name: &str) {
    let certificate = certificates.get(name).await.expect("the Certificate");
    assert_eq!(
        condition(&certificate, "Issuing"),
        None,
        "the Certificate {name} is issuing already"
    );
    let generation = certificate.metadata.generation.unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let issuing = json!({
        "type": "Issuing",
        "status": "True",
        "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": now,
        "observedGeneration": generation,
    });
    let mut conditions = certificate.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.push(issuing);
    // The resourceVersion makes a concurrent status update fail the patch (409) instead of
    // being overwritten.
    let patch = json!({
        "metadata": {"resourceVersion": certificate.metadata.resource_version},
        "status": {"conditions": conditions},
    });
    certificates
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("setting the Issuing condition");
}

/// A key of the Secret `name` (PEM), or why it is not there.
pub async fn secret_pem(secrets: &Api<Secret>, name: &str, key: &str) -> Result<String, String> {
    let secret = secrets.get(name).await.map_err(|e| e.to_string())?;
    let data: Option<ByteString> = secret.data.and_then(|mut data| data.remove(key));
    let bytes = data
        .ok_or_else(|| format!("no {key} in the Secret {name}"))?
        .0;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}
