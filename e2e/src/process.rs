//! Child processes of a test, each with its output in a log file: a controller binary run against
//! the cluster (its log printed when the test fails), a kubectl command run in the background;
//! and the controllers' health and metrics endpoint.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Cluster;
use crate::identity::ServiceAccountIdentity;
use crate::wait_for;

pub struct ControllerProcess {
    pub name: String,
    pub log: LogFile,
    child: Child,
    /// With `E2E_AS_SERVICE_ACCOUNT=1`: the ServiceAccount the process authenticates as (dropped
    /// after the process is killed).
    pub identity: Option<ServiceAccountIdentity>,
}

/// Distinguishes the log files of several processes of one binary in one test run.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// A process's log file. It is removed when dropped, unless the thread is panicking: a failed
/// test keeps the logs its error names, a passing run leaves nothing behind in the temp dir.
#[derive(Debug)]
pub struct LogFile(PathBuf);

impl std::ops::Deref for LogFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for LogFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// A new log file for a process of `program`, and a second handle on it: its stdout and stderr,
/// in order.
pub(crate) fn log_file(program: &str) -> (LogFile, Stdio, Stdio) {
    let log = std::env::temp_dir().join(format!(
        "e2e-{program}-{}-{}.log",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    let out = std::fs::File::create(&log).expect("a log file");
    let err = out.try_clone().expect("a log file");
    (LogFile(log), Stdio::from(out), Stdio::from(err))
}

/// The flags that keep a controller to one namespace: it watches `namespace` only, keeps its
/// Lease there, and elects a leader or not.
pub fn namespace_args(namespace: &str, leader_elect: bool) -> Vec<String> {
    vec![
        format!("--leader-elect={leader_elect}"),
        "--watch-namespace".to_string(),
        namespace.to_string(),
        "--lease-namespace".to_string(),
        namespace.to_string(),
    ]
}

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
        let (log, out, err) = log_file(binary);
        let child = Command::new(&path)
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(out)
            .stderr(err)
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

    /// Whether the controller came up serving its health endpoint (it logs `serving /healthz`
    /// once it bound its listen address, its first step) rather than exited; panics if it did
    /// neither within 30 s.
    pub fn started_serving(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("serving /healthz") {
                return true;
            }
            if !self.is_running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20)); // polling a child process's log
        }
        panic!("{} neither served nor exited within 30 s", self.name);
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
        .filter(|(k, _)| !matches!(*k, "KUBECONFIG" | "ZAC_KUBE_CONTEXT" | "KUBE_CONTEXT"))
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

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits until the process `child` (`what`, for the messages) answers 200 on `/-/ready` at
/// `address` within `timeout`; panics if it exits first.
pub async fn wait_http_ready(
    child: &mut Child,
    what: &str,
    address: SocketAddr,
    timeout: Duration,
) {
    let exited = wait_for(&format!("{what} to get ready"), timeout, || {
        let exited = child.try_wait();
        async move {
            if let Ok(Some(status)) = exited {
                return Ok(Some(status));
            }
            match http_get_from(address, "/-/ready").await {
                Ok((200, _)) => Ok(None),
                Ok((code, body)) => Err(format!("{code}: {}", body.trim())),
                Err(e) => Err(e),
            }
        }
    })
    .await;
    if let Some(status) = exited {
        panic!("{what} exited ({status}) before it got ready");
    }
}

/// `GET http://<address><path>` over plain HTTP/1.0 (a controller's `/readyz` or `/metrics`): the
/// status code and the body.
pub async fn http_get_from(address: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_get_with_token(address, path, None).await
}

/// [`http_get_from`] with `Authorization: Bearer <token>` when a token is given.
pub async fn http_get_with_token(
    address: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    http_request(address, "GET", path, token).await
}

/// `<method> http://<address><path>` without a body over plain HTTP/1.0, with
/// `Authorization: Bearer <token>` when a token is given: the status code and the body.
pub async fn http_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    http_send(address, method, path, token, None).await
}

/// As [`http_request`], with a JSON body when one is given.
pub async fn http_send(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    json: Option<&str>,
) -> Result<(u16, String), String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let host = address.to_string();
    exchange(stream, &request(method, &host, path, token, json)).await
}

/// An HTTP/1.0 request without keep-alive: `Authorization: Bearer <token>` when a token is
/// given, a JSON body when one is.
pub(crate) fn request(
    method: &str,
    host: &str,
    path: &str,
    token: Option<&str>,
    json: Option<&str>,
) -> String {
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let body = json
        .map(|json| {
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
                json.len()
            )
        })
        .unwrap_or_else(|| "\r\n".to_string());
    format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\n{authorization}Connection: close\r\n{body}"
    )
}

/// Writes `request` to `stream` and reads the answer to its end: the status code and the body.
/// A connection closed without TLS's close_notify after a whole answer still counts.
pub(crate) async fn exchange<S>(mut stream: S, request: &str) -> Result<(u16, String), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    if let Err(error) = stream.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(error.to_string());
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status line in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// `GET http://127.0.0.1:<port><path>` of a controller's health and metrics server: the body when
/// it answered 200, else `None` (not listening yet, or an error).
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    match http_get_from(SocketAddr::from(([127, 0, 0, 1], port)), path).await {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

/// The sum of the samples of `metric` (every label set, or those whose labels contain `label`,
/// e.g. `reason="DryRun"`) that the controller whose metrics listen on `port` exposes now; waits
/// up to 30 s for the endpoint to answer.
pub async fn metric_sum(port: u16, metric: &str, label: Option<&str>) -> f64 {
    let text = wait_for("the metrics endpoint", Duration::from_secs(30), || async {
        http_get(port, "/metrics")
            .await
            .ok_or_else(|| "no answer".to_string())
    })
    .await;
    sum_of(&text, metric, label)
}

/// The sum of the samples of `metric` in the Prometheus text exposition `text`, only those
/// whose line contains `label` if given.
pub fn sum_of(text: &str, metric: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(metric))
        .filter(|line| label.is_none_or(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A kubectl command of the test's admin, run in the background with its output (stdout and
/// stderr, in order) in a file; killed on drop.
pub struct Kubectl {
    child: Child,
    log: LogFile,
}

impl Kubectl {
    pub fn start(args: &[&str]) -> Kubectl {
        let (log, out, err) = log_file("kubectl");
        let child = crate::identity::kubectl(&Cluster::get())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("starting kubectl");
        Kubectl { child, log }
    }

    /// `kubectl drain` of the pods labelled `selector` on `node`, as an operator would run it.
    pub fn drain(node: &str, selector: &str, extra: &[&str]) -> Kubectl {
        let mut args = vec![
            "drain",
            node,
            "--pod-selector",
            selector,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
        ];
        args.extend(extra);
        Kubectl::start(&args)
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the command to exit: whether it succeeded, and its output.
    pub async fn finish(&mut self, timeout: Duration) -> (bool, String) {
        let status = wait_for("kubectl to exit", timeout, || {
            let exited = self.child.try_wait();
            let output = self.output();
            async move {
                match exited {
                    Ok(Some(status)) => Ok(status),
                    _ => Err(output),
                }
            }
        })
        .await;
        (status.success(), self.output())
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
