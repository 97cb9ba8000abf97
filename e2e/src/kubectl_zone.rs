//! `kubectl zone` through the real kubectl, which finds the plugin on PATH (the workspace's
//! build in the target dir, first), with a kubeconfig of the test's choosing: the admin's, or a
//! user's with only the bindings a test gives it.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::Cluster;

/// PATH with the plugin first (the workspace's build in the target dir), its completion helper
/// (`bins/kubectl-zone/kubectl_complete-zone`, beside it as the release archive puts it), then
/// the cluster's kubectl.
fn path(cluster: &Cluster) -> String {
    format!(
        "{}:{}:{}",
        crate::process::target_dir().display(),
        crate::deploy::repo_root()
            .join("bins/kubectl-zone")
            .display(),
        crate::identity::path_with_cluster_tools(cluster)
    )
}

/// What one `kubectl zone` run answered.
#[derive(Debug)]
pub struct Answer {
    /// The exit status (-1 when killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Answer {
    /// stdout as JSON (for `-o json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// `kubectl zone <args>` with `kubeconfig` (from KUBECONFIG: kubectl passes no flag given before
/// a plugin's name on to it).
pub fn run(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> Answer {
    let out = Command::new("kubectl")
        .env("PATH", path(cluster))
        .env("KUBECONFIG", kubeconfig)
        .arg("zone")
        .args(args)
        .output()
        .expect("running kubectl zone");
    Answer {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What kubectl's own completion offers for `kubectl zone <words>` (`kubectl __complete`, which
/// runs the plugin's `kubectl_complete-zone`, found on PATH beside the plugin as the release
/// archive puts it): the candidates.
pub fn completions(cluster: &Cluster, words: &[&str]) -> Vec<String> {
    let path = format!(
        "{}:{}:{}",
        crate::process::target_dir().display(),
        crate::deploy::repo_root()
            .join("bins/kubectl-zone")
            .display(),
        crate::identity::path_with_cluster_tools(cluster)
    );
    let out = Command::new("kubectl")
        .env("PATH", path)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .args(["__complete", "zone"])
        .args(words)
        .output()
        .expect("running kubectl __complete");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.starts_with(':'))
        .map(str::to_string)
        .collect()
}

/// `kubectl zone <args> -o json` as the cluster's admin, which must succeed: its answer.
pub fn json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let answer = run(cluster, &cluster.kubeconfig, &args);
    assert_eq!(answer.code, 0, "kubectl zone {args:?}: {}", answer.stderr);
    answer.json()
}

/// A kubeconfig of the ServiceAccount `viewer` of `ns`, which holds in `ns` only what a user with
/// the built-in `view` role holds once the project is installed: `view`, and the project's kinds
/// to read (the rules `config/rbac/aggregate-to-roles.yaml` aggregates into `view`, in a Role of
/// the namespace so that nothing cluster-wide changes).
pub async fn viewer(cluster: &Cluster, ns: &crate::TestNamespace) -> Kubeconfig {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let aggregated = crate::deploy::repo_root().join("config/rbac/aggregate-to-roles.yaml");
    let roles = crate::identity::yaml_to_json(
        &std::fs::read_to_string(&aggregated).expect("config/rbac/aggregate-to-roles.yaml"),
    );
    let view_rules = roles
        .iter()
        .find(|role| {
            role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
        })
        .expect("the view aggregation")["rules"]
        .clone();
    let create = kube::api::PostParams::default();
    let accounts: kube::Api<ServiceAccount> = ns.api();
    let account = serde_json::from_value(serde_json::json!({"metadata": {"name": "viewer"}}));
    accounts
        .create(&create, &account.expect("a ServiceAccount"))
        .await
        .expect("the viewer");
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zone-aware-view"}, "rules": view_rules,
    }))
    .expect("a Role");
    ns.api::<Role>()
        .create(&create, &role)
        .await
        .expect("the Role");
    for (kind, name) in [("ClusterRole", "view"), ("Role", "zone-aware-view")] {
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("viewer-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns.name}],
        }))
        .expect("a RoleBinding");
        ns.api::<RoleBinding>()
            .create(&create, &binding)
            .await
            .expect("the binding");
    }
    Kubeconfig(crate::identity::write_token_kubeconfig(
        cluster, &ns.name, "viewer",
    ))
}

/// A kubeconfig file holding a ServiceAccount's token, removed when dropped (the test's end,
/// however it ends): the token is not left on the host.
pub struct Kubeconfig(std::path::PathBuf);

impl std::ops::Deref for Kubeconfig {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Kubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
