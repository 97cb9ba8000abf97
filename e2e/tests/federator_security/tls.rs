//! TLS on both sides of the federator: HTTPS backends (a CA of their own, the name in their
//! certificate, a client certificate they ask for, a bearer token rotated in its file), the
//! federator's own port served from a mounted directory whose certificate is replaced, and the
//! start refused, with a reason, when a TLS file is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use axum::response::IntoResponse;
use e2e::tls::{Leaf, MountedSecret, TestCa, client_config};
use e2e::wait_for;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{RULES, TIMEOUT, federator, get, prometheus, wait_ready};

/// The name in the backends' certificates: a Service's, while they are dialled by IP.
const BACKEND_NAME: &str = "prometheus.monitoring.svc";

/// rustls's process-wide provider, as the other test helpers install it.
fn crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// An HTTPS backend serving [`RULES`] with `serving`, asking for a client certificate signed by
/// `clients` when given; its base URL and the Authorization headers it received.
async fn https_backend(
    serving: &Leaf,
    clients: Option<&TestCa>,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let router = Router::new().fallback(move |request: Request| {
        let recorded = recorded.clone();
        async move {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            recorded.lock().unwrap().push(authorization);
            ([(header::CONTENT_TYPE, "application/json")], RULES).into_response()
        }
    });
    let chain = vec![CertificateDer::from(serving.der())];
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder();
    let config = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    }
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(router.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            });
        }
    });
    (url, seen)
}

/// A directory of this test's files, removed on drop.
struct Files(PathBuf);

impl Files {
    fn new(what: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("e2e-fedtls-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }

    /// Writes `content` to `name` at once (a rename, as the kubelet swaps a projected token).
    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        let next = self.0.join(format!(".{name}.next"));
        std::fs::write(&next, content).unwrap();
        std::fs::rename(&next, &path).unwrap();
        path
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn arg(flag: &str, path: &Path) -> String {
    format!("{flag}={}", path.display())
}

/// `GET /api/v1/rules` of the federator on `port`: the answer and its warnings.
async fn rules(port: u16) -> (Value, Vec<String>) {
    let (code, _, body) = get(port, "/api/v1/rules", None).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let warnings = match answer.get("warnings") {
        Some(warnings) => serde_json::from_value(warnings.clone()).unwrap(),
        None => Vec::new(),
    };
    (answer, warnings)
}

/// The names of the rules of the merged answer's first group, with their shard.
fn shards_of_rules(answer: &Value) -> Vec<String> {
    answer["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| format!("{}@{}", rule["name"], rule["labels"]["shard"]))
        .collect()
}

#[tokio::test]
#[ignore = "needs the built binaries (make e2e); HTTPS backends with their own CA"]
async fn federator_security_https_backends_with_a_ca_file_client_certificate_and_rotated_token() {
    crypto();
    let backend_ca = TestCa::new("e2e Prometheus CA");
    let clients = TestCa::new("e2e federator clients CA");
    let serving = backend_ca.issue(vec![BACKEND_NAME.to_string()], None);
    let client = clients.issue(vec!["rules-federator".to_string()], None);
    let files = Files::new("backends");
    let ca_file = files.write("ca.crt", &backend_ca.pem);
    let cert_file = files.write("client.crt", &client.cert);
    let key_file = files.write("client.key", &client.key);
    let token_file = files.write("token", "first-token\n");
    let (tls, tls_tokens) = https_backend(&serving, None).await;
    let (mtls, mtls_tokens) = https_backend(&serving, Some(&clients)).await;
    let plain = prometheus().await;
    let env = [("KUBECONFIG", "/dev/null".to_string())];
    let name = format!("--backend-server-name={BACKEND_NAME}");

    // Everything given: both backends federated, the token sent to each.
    let (_full, port) = federator(
        &[
            format!("{tls}#shard=0&replica=a"),
            format!("{mtls}#shard=1&replica=a"),
        ],
        &[
            &arg("--backend-ca-file", &ca_file),
            &arg("--backend-cert-file", &cert_file),
            &arg("--backend-key-file", &key_file),
            &arg("--backend-bearer-token-file", &token_file),
            &name,
        ],
        &env,
    );
    wait_ready(port).await;
    let (answer, warnings) = rules(port).await;
    assert_eq!(warnings, Vec::<String>::new(), "{answer}");
    assert_eq!(shards_of_rules(&answer), [r#""Up"@"0""#, r#""Up"@"1""#]);
    assert_eq!(
        tls_tokens.lock().unwrap().as_slice(),
        ["Bearer first-token"]
    );
    assert_eq!(
        mtls_tokens.lock().unwrap().as_slice(),
        ["Bearer first-token"]
    );

    // The kubelet rotates a projected token in place: the new one goes out without a restart.
    files.write("token", "second-token");
    let started = Instant::now();
    wait_for("the rotated token sent", TIMEOUT, || async {
        let (_, warnings) = rules(port).await;
        assert_eq!(warnings, Vec::<String>::new());
        let last = tls_tokens
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default();
        match last.as_str() {
            "Bearer second-token" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;
    println!(
        "federator TLS backends: rotated token sent after {:?}",
        started.elapsed()
    );

    // Without the CA file the system's roots do not know the backends' CA: a warning names the
    // backend, the others still merge.
    let warning = only_the_plain_backend_merged(&plain, &tls, &[&name], &env).await;
    assert!(warning.contains("invalid peer certificate"), "{warning}");

    // Without a client certificate the backend that asks for one refuses the handshake.
    let warnings = [only_the_plain_backend_merged(
        &plain,
        &mtls,
        &[&arg("--backend-ca-file", &ca_file), &name],
        &env,
    )
    .await];
    println!(
        "federator TLS backends: unknown CA and a missing client certificate are warnings: {warnings:?}"
    );
}

/// A federator over `plain` (shard 0) and `failing` (shard 1) started with `extra`: shard 0's
/// rule is merged and the one warning names `failing` as unreachable; that warning.
async fn only_the_plain_backend_merged(
    plain: &str,
    failing: &str,
    extra: &[&str],
    env: &[(&str, String)],
) -> String {
    let (_federator, port) = federator(
        &[
            format!("{plain}#shard=0&replica=a"),
            format!("{failing}#shard=1&replica=a"),
        ],
        extra,
        env,
    );
    wait_ready(port).await;
    let (answer, mut warnings) = rules(port).await;
    assert_eq!(shards_of_rules(&answer), [r#""Up"@"0""#]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings.remove(0);
    assert!(
        warning.starts_with(&format!("endpoint {failing}: cannot connect: ")),
        "{warning}"
    );
    warning
}

/// `GET path` over HTTPS from the federator on `port`, trusting the CAs of `trust`: the status,
/// the body and the certificate it presented (DER).
async fn https_get(port: u16, path: &str, trust: &str) -> Result<(u16, String, Vec<u8>), String> {
    let config = client_config(trust.as_bytes())?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| cert.to_vec())
        .ok_or("no certificate presented")?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    // A close without close_notify after a whole answer still leaves it readable.
    let _ = tls.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or(format!("no answer: {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    Ok((code, body.to_string(), presented))
}

/// Polls over HTTPS until `leaf` is presented; every request meanwhile must be answered 200 (a
/// replacement is never a failed request).
async fn wait_presented(port: u16, trust: &str, leaf: &Leaf, what: &str) -> Duration {
    let expected = leaf.der();
    let started = Instant::now();
    wait_for(what, TIMEOUT, || async {
        let (code, body, presented) = https_get(port, "/api/v1/rules", trust)
            .await
            .unwrap_or_else(|error| panic!("a request failed during the replacement: {error}"));
        assert_eq!(code, 200, "{body}");
        match presented == expected {
            true => Ok(()),
            false => Err("the previous certificate is still presented".to_string()),
        }
    })
    .await;
    started.elapsed()
}

#[tokio::test]
#[ignore = "needs the built binaries (make e2e); serves the federator over HTTPS"]
async fn federator_security_serves_https_only_from_a_cert_dir_replaced_in_place() {
    crypto();
    let ca = TestCa::new("e2e federator serving CA");
    let next_ca = TestCa::new("e2e federator next serving CA");
    // Clients trust both CAs before the CA changes, as a rotation of the CA needs.
    let trust = format!("{}{}", ca.pem, next_ca.pem);
    let first = ca.leaf(1);
    let mut mount = MountedSecret::named(&format!("fedtls-serving-{}", std::process::id()), &first);
    let upstream = prometheus().await;
    let dir = arg("--tls-cert-dir", &mount.dir);
    let (_federator, port) = federator(
        &[format!("{upstream}#shard=0&replica=a")],
        &[&dir],
        &[("KUBECONFIG", "/dev/null".to_string())],
    );
    wait_for("the federator ready over HTTPS", TIMEOUT, || async {
        match https_get(port, "/readyz", &trust).await {
            Ok((200, _, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for path in ["/healthz", "/metrics", "/api/v1/alerts"] {
        let (code, body, _) = https_get(port, path, &trust).await.unwrap();
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (code, body, presented) = https_get(port, "/api/v1/rules", &trust).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(presented, first.der());
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer["data"]["groups"][0]["rules"][0]["name"], "Up",
        "{answer}"
    );
    let plain = get(port, "/healthz", None).await;
    assert!(plain.is_err(), "plain HTTP is not served: {plain:?}");
    let untrusting = https_get(port, "/healthz", &TestCa::new("stranger").pem).await;
    assert!(untrusting.is_err(), "{untrusting:?}");

    let renewed = ca.leaf(2);
    mount.rotate(&renewed);
    let took = wait_presented(port, &trust, &renewed, "the renewed certificate presented").await;
    println!("federator HTTPS: renewed certificate (same CA) presented after {took:?}");
    let replaced = next_ca.leaf(3);
    mount.rotate(&replaced);
    let took = wait_presented(
        port,
        &trust,
        &replaced,
        "the new CA's certificate presented",
    )
    .await;
    println!("federator HTTPS: new CA's certificate presented after {took:?}");
}

/// Runs the federator with `args` until it exits (at most 30 s): its exit code and stderr.
fn exit_of(args: &[&str]) -> (Option<i32>, String) {
    let path = e2e::process::target_dir().join("rules-federator");
    let mut child = Command::new(&path)
        .args([
            "--listen-address=127.0.0.1:0",
            "--endpoint=http://127.0.0.1:1",
        ])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rules-federator {args:?} still runs after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20)); // polling a child process
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

#[test]
#[ignore = "needs the built binaries (make e2e)"]
fn federator_security_a_missing_tls_file_stops_the_start_with_its_reason() {
    // The flags, the reason on the first error line, and what else stderr names.
    let cases: [(&[&str], &str, &str); 5] = [
        (
            &["--tls-cert-dir=/nonexistent/certs"],
            "error: cannot load the certificate to serve HTTPS with",
            "/nonexistent/certs/tls.crt",
        ),
        (
            &["--backend-ca-file=/nonexistent/ca.crt"],
            "error: --backend-ca-file /nonexistent/ca.crt: cannot read",
            "No such file",
        ),
        (
            &["--backend-bearer-token-file=/nonexistent/token"],
            "error: --backend-bearer-token-file /nonexistent/token: cannot read",
            "No such file",
        ),
        (
            &[
                "--backend-cert-file=/nonexistent/tls.crt",
                "--backend-key-file=/nonexistent/tls.key",
            ],
            "error: --backend-cert-file /nonexistent/tls.crt: cannot read",
            "No such file",
        ),
        (
            &["--backend-cert-file=/nonexistent/tls.crt"],
            "error: the following required arguments were not provided",
            "--backend-key-file",
        ),
    ];
    for (args, reason, named) in cases {
        let (code, stderr) = exit_of(args);
        assert!(
            matches!(code, Some(code) if code != 0),
            "{args:?}: {code:?}\n{stderr}"
        );
        let first = stderr
            .lines()
            .find(|line| line.starts_with("error:"))
            .unwrap_or_else(|| panic!("{args:?}: no error line in\n{stderr}"));
        assert!(
            first.starts_with(reason),
            "{args:?}: {first:?} is not {reason:?}"
        );
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `--tls-self-signed-secret`: the first replica creates the Secret (a CA, and a certificate
/// for `rules-federator.<namespace>.svc`), a second replica serves the same certificate from it,
/// a client that trusts only the Secret's `ca.crt` and dials the Service's name gets answers,
/// and a renewal (a short validity) is served by the same process under the same CA. As its
/// ServiceAccount (`E2E_AS_SERVICE_ACCOUNT=1`) this also proves the shipped Role.
#[tokio::test]
#[ignore = "needs the local cluster (make e2e)"]
async fn federator_security_self_signed_secret_shared_by_replicas_and_renewed_in_place() {
    use k8s_openapi::api::core::v1::Secret;
    crypto();
    let cluster = e2e::Cluster::get();
    let ns = e2e::TestNamespace::create(&cluster, "fedtls-self").await;
    let upstream = prometheus().await;
    let endpoints = [format!("{upstream}#shard=0&replica=a")];
    let namespace = format!("--tls-secret-namespace={}", ns.name);
    let extra = [
        "--tls-self-signed-secret=rules-federator-tls",
        namespace.as_str(),
        "--tls-cert-validity=60s",
        "--tls-cert-renew-before=40s",
    ];
    let (mut first, port) = federator(&endpoints, &extra, &[]);
    let pid = first.pid();
    let secrets: kube::Api<Secret> = ns.api();
    let ca = wait_for("the Secret's ca.crt", TIMEOUT, || async {
        let secret = secrets
            .get("rules-federator-tls")
            .await
            .map_err(|e| e.to_string())?;
        let ca = secret.data.unwrap_or_default().remove("ca.crt");
        String::from_utf8(ca.ok_or("no ca.crt")?.0).map_err(|e| e.to_string())
    })
    .await;
    let service = format!("rules-federator.{}.svc", ns.name);
    let address: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for("the federator ready over HTTPS", TIMEOUT, || async {
        match e2e::tls::https_get(address, &service, &ca, "/readyz", None).await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, body) = e2e::tls::https_get(address, &service, &ca, "/api/v1/rules", None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""name":"Up""#), "{body}");
    let plain = get(port, "/healthz", None).await;
    assert!(plain.is_err(), "plain HTTP is not served: {plain:?}");
    let served = e2e::tls::served_certificate(port, &ca).await.unwrap();

    let (_second, second_port) = federator(&endpoints, &extra, &[]);
    let second_served = wait_for("the second replica serving", TIMEOUT, || {
        e2e::tls::served_certificate(second_port, &ca)
    })
    .await;
    assert_eq!(second_served, served, "one certificate, from the Secret");

    // Renewed 20 s after issue (60 s valid, renewed 40 s before the end); every replica re-reads
    // the Secret every 10 s.
    let started = Instant::now();
    let renewed = wait_for("the renewed certificate served", TIMEOUT, || async {
        match e2e::tls::served_certificate(port, &ca).await {
            Ok(der) if der != served => Ok(der),
            Ok(_) => Err("the first certificate".to_string()),
            Err(error) => Err(error),
        }
    })
    .await;
    println!(
        "federator self-signed: renewed certificate (same CA) served after {:?}",
        started.elapsed()
    );
    assert_ne!(renewed, served);
    assert!(first.is_running(), "the first replica exited");
    assert_eq!(first.pid(), pid);
}
