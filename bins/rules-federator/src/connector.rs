//! How `https://` backends are dialled: the roots their certificates are verified against
//! (`--backend-ca-file`, else the system's), the name verified (`--backend-server-name`: pods are
//! dialled by IP), and the client certificate presented (`--backend-cert-file` and
//! `--backend-key-file`). `http://` backends go through the same connector, in plain.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::{ConfigBuilderExt as _, FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ConfigBuilder, RootCertStore, WantsVerifier};

/// The files and name of the flags, as given.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    /// The client certificate and its key: both or neither (the flags require each other).
    pub client: Option<(PathBuf, PathBuf)>,
    pub server_name: Option<String>,
}

/// Why the backends' TLS cannot be set up; the start fails with it.
#[derive(Debug, thiserror::Error)]
pub enum BackendTlsError {
    #[error("{flag} {path}: cannot read")]
    Read {
        flag: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{flag} {path}: no PEM certificate in it")]
    NoCertificate { flag: &'static str, path: String },
    #[error("{flag} {path}: unreadable PEM")]
    Pem {
        flag: &'static str,
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("--backend-ca-file {path}: a certificate is unusable as a root")]
    Root {
        path: String,
        #[source]
        source: rustls::Error,
    },
    #[error("--backend-cert-file and --backend-key-file: the key does not fit the certificate")]
    ClientCertificate(#[source] rustls::Error),
    #[error("--backend-server-name {0:?}: not a DNS name or IP address")]
    ServerName(String),
    #[error("cannot configure TLS")]
    Config(#[source] rustls::Error),
}

/// The TLS side of the backends' client.
#[derive(Clone)]
pub struct BackendTls {
    config: ClientConfig,
    server_name: Option<ServerName<'static>>,
}

impl BackendTls {
    /// Reads and checks the files now, so a bad one fails the start rather than every request.
    pub fn load(files: &TlsFiles) -> Result<Self, BackendTlsError> {
        let server_name = files
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_string())
                    .map_err(|_| BackendTlsError::ServerName(name.to_string()))
            })
            .transpose()?;
        let verifying = match &files.ca {
            Some(path) => builder()?.with_root_certificates(read_roots(path)?),
            None => builder()?.with_native_roots().or_else(|error| {
                // Not fatal: backends are often all http://. An https:// one fails its
                // handshake, named in a warning.
                tracing::warn!(error = %error, "no system CA certificates; https:// backends need --backend-ca-file");
                Ok(builder()?.with_root_certificates(RootCertStore::empty()))
            })?,
        };
        let config = match &files.client {
            None => verifying.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_certificates("--backend-cert-file", cert)?;
                let key = read_key(key)?;
                verifying
                    .with_client_auth_cert(chain, key)
                    .map_err(BackendTlsError::ClientCertificate)?
            }
        };
        Ok(Self {
            config,
            server_name,
        })
    }

    /// A connector for `http://` and `https://` URLs, each connection attempt cut at
    /// `connect_timeout`.
    pub fn connector(&self, connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        // The TLS layer takes https:// URLs; the TCP one must let them through.
        http.enforce_http(false);
        let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.config.clone())
            .https_or_http();
        if let Some(name) = &self.server_name {
            builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone()));
        }
        builder.enable_http1().wrap_connector(http)
    }
}

/// A config builder with the process's one crypto provider (aws-lc-rs), named rather than taken
/// from the process default, which may not be installed yet.
fn builder() -> Result<ConfigBuilder<ClientConfig, WantsVerifier>, BackendTlsError> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(BackendTlsError::Config)
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, BackendTlsError> {
    std::fs::read(path).map_err(|source| BackendTlsError::Read {
        flag,
        path: path.display().to_string(),
        source,
    })
}

fn read_certificates(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, BackendTlsError> {
    let pem = read(flag, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| BackendTlsError::Pem {
            flag,
            path: path.display().to_string(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(BackendTlsError::NoCertificate {
            flag,
            path: path.display().to_string(),
        });
    }
    Ok(certificates)
}

/// Every certificate of the CA bundle, each one a root (a bad one fails: trusting fewer CAs
/// than the file names would fail later, and less clearly).
fn read_roots(path: &Path) -> Result<RootCertStore, BackendTlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates("--backend-ca-file", path)? {
        roots
            .add(certificate)
            .map_err(|source| BackendTlsError::Root {
                path: path.display().to_string(),
                source,
            })?;
    }
    Ok(roots)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, BackendTlsError> {
    let flag = "--backend-key-file";
    let pem = read(flag, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| BackendTlsError::Pem {
        flag,
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use futures::StreamExt;
    use zone_rules::RuleDiscovery;

    use super::*;
    use crate::backend::{Backend, TestCa, rules_data, temp_dir};
    use crate::body::BodyCaps;
    use crate::fetch::{FetchError, Fetched, Fetcher};
    use crate::metrics::FederatorMetrics;
    use crate::token::BearerToken;

    /// What `tls` (and `token`) get from the backend at `backend`.
    async fn fetch(
        tls: &BackendTls,
        token: Option<BearerToken>,
        backend: &Backend,
    ) -> Result<RuleDiscovery, FetchError> {
        let metrics = FederatorMetrics::register(&prometheus::Registry::new()).unwrap();
        let caps = BodyCaps {
            compressed: 1 << 20,
            uncompressed: 1 << 20,
        };
        let fetcher =
            Fetcher::new(Duration::from_secs(30), 1, caps, metrics, tls).with_token(token);
        let answers: Vec<_> = fetcher
            .rules(vec![backend.endpoint("0", "a")], "/api/v1/rules")
            .collect()
            .await;
        let [(_, answer)] = <[_; 1]>::try_from(answers).unwrap();
        answer.and_then(Fetched::decode)
    }

    fn files(ca: Option<&Path>, server_name: Option<&str>) -> TlsFiles {
        TlsFiles {
            ca: ca.map(Path::to_path_buf),
            client: None,
            server_name: server_name.map(str::to_string),
        }
    }

    /// The failure of a handshake, as its warning names it.
    fn refused(answer: Result<RuleDiscovery, FetchError>, why: &str) {
        match answer {
            Err(FetchError::Connect(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("expected a connect error with {why:?}, got {other:?}"),
        }
    }

    /// A pod dialled by IP whose certificate names its Service: verified against the CA file,
    /// for the name given.
    #[tokio::test]
    async fn an_https_backend_is_verified_against_the_ca_file_for_the_server_name() {
        let dir = temp_dir("verify");
        let ca = TestCa::new("backend CA");
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        let backend = Backend::https(&ca.serving(&["prometheus.monitoring.svc"]), None).await;
        let name = Some("prometheus.monitoring.svc");

        let verified = BackendTls::load(&files(Some(&ca_file), name)).unwrap();
        assert_eq!(fetch(&verified, None, &backend).await, Ok(rules_data()));

        let system = BackendTls::load(&files(None, name)).unwrap();
        refused(fetch(&system, None, &backend).await, "UnknownIssuer");
        let by_ip = BackendTls::load(&files(Some(&ca_file), None)).unwrap();
        refused(
            fetch(&by_ip, None, &backend).await,
            "certificate not valid for name \"127.0.0.1\"",
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_backend_asking_for_a_client_certificate_gets_the_configured_one() {
        let dir = temp_dir("client-cert");
        let ca = TestCa::new("backend CA");
        let clients = TestCa::new("clients CA");
        let client = clients.client("rules-federator");
        let ca_file = dir.join("ca.crt");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&ca_file, &ca.pem).unwrap();
        std::fs::write(&cert, &client.cert).unwrap();
        std::fs::write(&key, &client.key).unwrap();
        let backend = Backend::https(&ca.serving(&["127.0.0.1"]), Some(&clients)).await;

        let presenting = BackendTls::load(&TlsFiles {
            client: Some((cert, key)),
            ..files(Some(&ca_file), None)
        })
        .unwrap();
        assert_eq!(fetch(&presenting, None, &backend).await, Ok(rules_data()));
        let anonymous = BackendTls::load(&files(Some(&ca_file), None)).unwrap();
        refused(
            fetch(&anonymous, None, &backend).await,
            "CertificateRequired",
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn the_bearer_token_goes_to_http_and_https_backends() {
        let dir = temp_dir("bearer");
        let ca = TestCa::new("backend CA");
        let ca_file = dir.join("ca.crt");
        let token_file = dir.join("token");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        std::fs::write(&token_file, "s3cret\n").unwrap();
        let tls = BackendTls::load(&files(Some(&ca_file), None)).unwrap();
        let https = Backend::https(&ca.serving(&["127.0.0.1"]), None).await;
        let http = Backend::prometheus(true).await;
        for backend in [&https, &http] {
            let token = BearerToken::read(&token_file, crate::token::RELOAD).unwrap();
            assert_eq!(fetch(&tls, Some(token), backend).await, Ok(rules_data()));
            assert_eq!(
                backend.authorizations(),
                [Some("Bearer s3cret".to_string())]
            );
        }
        assert_eq!(fetch(&tls, None, &http).await, Ok(rules_data()));
        assert_eq!(http.authorizations()[1], None, "none without the flag");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn written(dir: &Path, name: &str, content: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn bad_files_and_names_fail_with_the_flag_named() {
        let dir = temp_dir("connector");
        let ca = TestCa::new("backend CA");
        let client = ca.client("federator");
        let other = TestCa::new("other CA").client("federator");
        let ca_file = written(&dir, "ca.crt", &ca.pem);
        let garbage = written(&dir, "garbage", "not PEM at all");
        let cert = written(&dir, "tls.crt", &client.cert);
        let key = written(&dir, "tls.key", &client.key);
        let other_key = written(&dir, "other.key", &other.key);

        let load = |ca: Option<&Path>, client: Option<(&Path, &Path)>, name: Option<&str>| {
            BackendTls::load(&TlsFiles {
                ca: ca.map(Path::to_path_buf),
                client: client.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
                server_name: name.map(str::to_string),
            })
            .err()
            .map(|error| error.to_string())
        };
        assert_eq!(
            load(
                Some(&ca_file),
                Some((&cert, &key)),
                Some("prometheus.monitoring.svc")
            ),
            None
        );
        assert_eq!(load(None, None, None), None, "the system's roots");
        let missing = dir.join("missing.crt");
        assert_eq!(
            load(Some(&missing), None, None).unwrap(),
            format!("--backend-ca-file {}: cannot read", missing.display())
        );
        assert_eq!(
            load(Some(&garbage), None, None).unwrap(),
            format!(
                "--backend-ca-file {}: no PEM certificate in it",
                garbage.display()
            )
        );
        assert_eq!(
            load(None, Some((&garbage, &key)), None).unwrap(),
            format!(
                "--backend-cert-file {}: no PEM certificate in it",
                garbage.display()
            )
        );
        assert_eq!(
            load(None, Some((&cert, &garbage)), None).unwrap(),
            format!("--backend-key-file {}: unreadable PEM", garbage.display())
        );
        assert_eq!(
            load(None, Some((&cert, &other_key)), None).unwrap(),
            "--backend-cert-file and --backend-key-file: the key does not fit the certificate"
        );
        assert_eq!(
            load(None, None, Some("not a name!")).unwrap(),
            r#"--backend-server-name "not a name!": not a DNS name or IP address"#
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
