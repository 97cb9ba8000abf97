//! TLS for webhook tests: a throw-away CA and the serving certificates it signs, an HTTPS server
//! (an axum router behind rustls), what a TLS server presents, and certificates mounted as the
//! kubelet mounts a Secret. Servers listen on 127.0.0.1, where the local zonal cluster's API
//! server runs; against a cluster whose API server runs elsewhere (kind), `E2E_WEBHOOK_HOST`
//! names the address at which the API server reaches this machine.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SerialNumber};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::{TestNamespace, wait_for};

/// A test CA and serving certificates it signs, as cert-manager would issue them.
pub struct TestCa {
    /// The CA certificate, PEM: a webhook's `caBundle`.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A serving certificate and its key, PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Leaf {
    /// The certificate, DER (what a TLS server presents).
    pub fn der(&self) -> Vec<u8> {
        CertificateDer::from_pem_slice(self.cert.as_bytes())
            .expect("a PEM certificate")
            .to_vec()
    }
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for 127.0.0.1 and localhost with serial number `serial`.
    pub fn leaf(&self, serial: u64) -> Leaf {
        self.issue(
            vec!["127.0.0.1".to_string(), "localhost".to_string()],
            Some(serial),
        )
    }

    /// A serving certificate for `names` (a random serial number unless given).
    pub fn issue(&self, names: Vec<String>, serial: Option<u64>) -> Leaf {
        let key = KeyPair::generate().expect("serving key");
        let mut params = CertificateParams::new(names).expect("serving params");
        params.serial_number = serial.map(SerialNumber::from);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("serving certificate");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

pub struct TlsServer {
    pub addr: SocketAddr,
    /// PEM of the CA that signed the serving certificate: the webhook's `caBundle`.
    pub ca_pem: String,
    task: JoinHandle<()>,
    host: String,
}

/// The address at which the cluster's API server reaches webhook servers run by the tests.
pub fn webhook_host() -> String {
    std::env::var("E2E_WEBHOOK_HOST").unwrap_or_else(|_| "127.0.0.1".to_string())
}

impl TlsServer {
    pub async fn start(router: axum::Router) -> TlsServer {
        let ca = TestCa::new("zone-aware e2e webhook CA");
        let host = webhook_host();
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        if !names.contains(&host) {
            names.push(host.clone());
        }
        let leaf = ca.issue(names, None);
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der())],
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("serving key PEM"),
            )
            .expect("rustls server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let bind = if host == "127.0.0.1" {
            "127.0.0.1:0"
        } else {
            "0.0.0.0:0"
        };
        let listener = TcpListener::bind(bind)
            .await
            .expect("bind the webhook port");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let service = TowerToHyperService::new(router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsServer {
            host,
            addr,
            ca_pem: ca.pem,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.host, self.addr.port())
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The roots of a client that trusts only the CA certificates of `ca_pem`.
pub fn client_config(ca_pem: &[u8]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `GET https://<server_name><path>` of the server at `address`, as a client that trusts only
/// `ca_pem` and checks the certificate for `server_name` (Grafana calling a Service): the status
/// code and the body. `Authorization: Bearer <token>` when a token is given.
pub async fn https_get(
    address: std::net::SocketAddr,
    server_name: &str,
    ca_pem: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let request = crate::process::request("GET", server_name, path, token, None);
    https_exchange(address, server_name, ca_pem, &request).await
}

/// `POST https://<server_name><path>` of the server at `address` with a JSON body, as
/// [`https_get`] (no token): what any client that reaches the port can send, e.g. an
/// AdmissionReview that did not come from the API server.
pub async fn https_post(
    address: std::net::SocketAddr,
    server_name: &str,
    ca_pem: &str,
    path: &str,
    json: &str,
) -> Result<(u16, String), String> {
    let request = crate::process::request("POST", server_name, path, None, Some(json));
    https_exchange(address, server_name, ca_pem, &request).await
}

async fn https_exchange(
    address: std::net::SocketAddr,
    server_name: &str,
    ca_pem: &str,
    request: &str,
) -> Result<(u16, String), String> {
    let config = client_config(ca_pem.as_bytes())?;
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    crate::process::exchange(tls, request).await
}

/// The certificate the TLS server on 127.0.0.1:`port` presents (DER), if the handshake
/// succeeds with `ca_pem` as the only trusted root and 127.0.0.1 as the name: what the API
/// server checks when it calls the webhook.
pub async fn served_certificate(port: u16, ca_pem: &str) -> Result<Vec<u8>, String> {
    served_leaf(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "127.0.0.1",
        ca_pem,
    )
    .await
}

/// The certificate (DER) the TLS server at `address` presents to a client that trusts only
/// `ca_pem` and checks the name `server_name`: what the API server checks when it calls a webhook
/// through its Service (`<service>.<namespace>.svc`), here at one pod's IP.
pub async fn served_leaf(
    address: SocketAddr,
    server_name: &str,
    ca_pem: &str,
) -> Result<Vec<u8>, String> {
    let config = client_config(ca_pem.as_bytes())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| cert.to_vec())
        .ok_or_else(|| "no certificate presented".to_string())
}

/// Every certificate of a PEM bundle, DER.
pub fn pem_certificates(pem: &str) -> Result<Vec<Vec<u8>>, String> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|cert| cert.map(|c| c.to_vec()).map_err(|e| e.to_string()))
        .collect()
}

/// Waits until the TLS server on 127.0.0.1:`port` presents `leaf`, verified against `ca_pem`.
pub async fn wait_served(port: u16, ca_pem: &str, leaf: &Leaf, what: &str) {
    let expected = leaf.der();
    wait_for(what, Duration::from_secs(60), || async {
        match served_certificate(port, ca_pem).await {
            Ok(der) if der == expected => Ok(()),
            Ok(_) => Err("another certificate is served".to_string()),
            Err(error) => Err(error),
        }
    })
    .await;
}

/// A directory laid out as the kubelet mounts a Secret: `..<timestamp>/` holds the files,
/// `..data` links to it, `tls.crt` and `tls.key` link through `..data`. Rotation writes a new
/// timestamped directory and renames a new link over `..data` (one atomic step), then removes
/// the old directory. Removed on drop.
pub struct MountedSecret {
    pub dir: PathBuf,
    version: usize,
}

impl MountedSecret {
    /// The mount of `leaf` for the test of `ns`.
    pub fn new(ns: &TestNamespace, leaf: &Leaf) -> MountedSecret {
        Self::named(&format!("zdb-certs-{}", ns.name), leaf)
    }

    /// The mount of `leaf` in a temporary directory named after `name` (unique per test).
    pub fn named(name: &str, leaf: &Leaf) -> MountedSecret {
        let dir = std::env::temp_dir().join(format!("e2e-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the mount directory");
        let mut mounted = MountedSecret { dir, version: 0 };
        let first = mounted.write_version(leaf);
        std::os::unix::fs::symlink(&first, mounted.dir.join("..data")).expect("..data");
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), mounted.dir.join(file))
                .expect("a file link");
        }
        mounted
    }

    fn write_version(&mut self, leaf: &Leaf) -> String {
        self.version += 1;
        let name = format!(
            "..2026_11_23_10_00_0{}.00000000{}",
            self.version, self.version
        );
        let version = self.dir.join(&name);
        std::fs::create_dir(&version).expect("a version directory");
        std::fs::write(version.join("tls.crt"), &leaf.cert).expect("tls.crt");
        std::fs::write(version.join("tls.key"), &leaf.key).expect("tls.key");
        name
    }

    /// Replaces the mounted certificate with `leaf`, as the kubelet does.
    pub fn rotate(&mut self, leaf: &Leaf) {
        let old = std::fs::read_link(self.dir.join("..data")).expect("..data");
        let new = self.write_version(leaf);
        std::os::unix::fs::symlink(&new, self.dir.join("..data_tmp")).expect("..data_tmp");
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data"))
            .expect("the ..data swap");
        std::fs::remove_dir_all(self.dir.join(old)).expect("the old version");
    }
}

impl Drop for MountedSecret {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
