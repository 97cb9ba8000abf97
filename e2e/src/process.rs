//! A controller binary run as a child process against the cluster, its output in a log file that
//! is printed when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::identity::ServiceAccountIdentity;

pub struct ControllerProcess {
    pub name: String,
    pub log: PathBuf,
    child: Child,
    /// With `E2E_AS_SERVICE_ACCOUNT=1`: the ServiceAccount the process authenticates as (dropped
    /// after the process is killed).
    pub identity: Option<ServiceAccountIdentity>,
}

/// Distinguishes the log files of several processes of one binary in one test run.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// The directory the controller binaries are taken from: `E2E_BIN_DIR` when set (the perf
/// scripts point it at release builds), else cargo's debug output (respects `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("E2E_BIN_DIR") {
        return PathBuf::from(dir);
    }
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("debug");
    }
    crate::cluster::e2e_dir().join("../target/debug")
}

impl ControllerProcess {
    /// Starts `binary` (from the target dir) with `args` and `env`, logging to a temp file.
    pub fn start(binary: &str, args: &[&str], env: &[(&str, String)]) -> ControllerProcess {
        let identity = ServiceAccountIdentity::for_process(binary, args, env);
        Self::start_as(binary, args, env, identity)
    }

    /// Starts `binary` authenticated as `identity` (its kubeconfig replaces any `--kubeconfig`,
    /// `--kube-context` and `KUBECONFIG` of the test), or as the test's admin when `None`.
    pub fn start_as(
        binary: &str,
        args: &[&str],
        env: &[(&str, String)],
        identity: Option<ServiceAccountIdentity>,
    ) -> ControllerProcess {
        let (args, env) = match &identity {
            Some(identity) => with_kubeconfig(args, env, &identity.kubeconfig),
            None => {
                let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
                let mut env: Vec<(String, String)> = env
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), v.clone()))
                    .collect();
                // The local cluster's admin kubeconfig, unless the test chose one: the test
                // process itself may have found the cluster through its env file only.
                let chosen = args.iter().any(|a| a.starts_with("--kubeconfig"))
                    || env.iter().any(|(k, _)| k == "KUBECONFIG");
                if !chosen {
                    let kubeconfig = crate::cluster::Cluster::get().kubeconfig;
                    env.push(("KUBECONFIG".to_string(), kubeconfig.display().to_string()));
                }
                (args, env)
            }
        };
        let path = target_dir().join(binary);
        let log = std::env::temp_dir().join(format!(
            "e2e-{binary}-{}-{}.log",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&log).expect("controller log file");
        let err = out.try_clone().expect("controller log file");
        let child = Command::new(&path)
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {}: {e} (run `cargo build --bins`)",
                    path.display()
                )
            });
        ControllerProcess {
            name: binary.to_string(),
            log,
            child,
            identity,
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The OS process id (e.g. to read its memory from `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `args`/`env` with the test's cluster credentials replaced by `kubeconfig`.
fn with_kubeconfig(
    args: &[&str],
    env: &[(&str, String)],
    kubeconfig: &Path,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if *arg == "--kubeconfig" || *arg == "--kube-context" {
            iter.next();
        } else if !arg.starts_with("--kubeconfig=") && !arg.starts_with("--kube-context=") {
            out.push((*arg).to_string());
        }
    }
    out.push("--kubeconfig".to_string());
    out.push(kubeconfig.display().to_string());
    let env = env
        .iter()
        .filter(|(k, _)| *k != "KUBECONFIG" && *k != "KUBE_CONTEXT")
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    (out, env)
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!(
                "---- {} log ({}) ----\n{logs}",
                self.name,
                self.log.display()
            );
        }
    }
}

/// `GET http://127.0.0.1:<port><path>` of a controller's health and metrics server: the whole
/// response when it answered 200, else `None` (not listening yet, or an error).
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.contains(" 200 ").then_some(response)
}
