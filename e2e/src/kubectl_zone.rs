//! `kubectl zone` through the real kubectl, which finds the plugin on PATH (the workspace's
//! build in the target dir, first), with a kubeconfig of the test's choosing: the admin's, or a
//! user's with only the bindings a test gives it.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::Cluster;

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
    let path = format!(
        "{}:{}",
        crate::process::target_dir().display(),
        crate::identity::path_with_cluster_tools(cluster)
    );
    let out = Command::new("kubectl")
        .env("PATH", path)
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

/// `kubectl zone <args> -o json` as the cluster's admin, which must succeed: its answer.
pub fn json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let answer = run(cluster, &cluster.kubeconfig, &args);
    assert_eq!(answer.code, 0, "kubectl zone {args:?}: {}", answer.stderr);
    answer.json()
}
