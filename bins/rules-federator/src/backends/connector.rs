//! How `https://` backends are dialled: the roots their certificates are verified against
//! (`--backend-ca-file`, else the system's), the name verified (`--backend-server-name`: pods are
//! dialled by IP), and the client certificate presented (`--backend-cert-file` and
//! `--backend-key-file`). `http://` backends go through the same connector, in plain.

use std::path::{Path, PathBuf};

use zone_operator::prom_api::tls::{ClientTls, Pem, Roots, TlsError, TlsOptions};

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
    client: ClientTls,
}

impl BackendTls {
    pub fn load(files: &TlsFiles) -> Result<Self, BackendTlsError> {
        let ca = "--backend-ca-file";
        let roots = match &files.ca {
            Some(path) => Roots::Pem(read(ca, path)?),
            None => Roots::System,
        };
        let client = match &files.client {
            Some((cert, key)) => Some((
                read("--backend-cert-file", cert)?,
                read("--backend-key-file", key)?,
            )),
            None => None,
        };
        let options = TlsOptions {
            roots,
            server_name: files.server_name.clone(),
            insecure_skip_verify: false,
            client,
        };
        let client = ClientTls::new(&options).map_err(|error| BackendTlsError::of(error, files))?;
        Ok(Self { client })
    }

    /// What the backends' client dials through.
    pub fn client(&self) -> &ClientTls {
        &self.client
    }
}

impl BackendTlsError {
    /// `error`, naming the flag and file it comes from.
    fn of(error: TlsError, files: &TlsFiles) -> Self {
        let display =
            |path: Option<&PathBuf>| path.map(|p| p.display().to_string()).unwrap_or_default();
        let named = |which: Pem| match which {
            Pem::Roots => ("--backend-ca-file", display(files.ca.as_ref())),
            Pem::ClientCertificate => (
                "--backend-cert-file",
                display(files.client.as_ref().map(|c| &c.0)),
            ),
            Pem::ClientKey => (
                "--backend-key-file",
                display(files.client.as_ref().map(|c| &c.1)),
            ),
        };
        match error {
            TlsError::NoCertificate(which) => {
                let (flag, path) = named(which);
                BackendTlsError::NoCertificate { flag, path }
            }
            TlsError::Pem(which, source) => {
                let (flag, path) = named(which);
                BackendTlsError::Pem { flag, path, source }
            }
            TlsError::Root(source) => BackendTlsError::Root {
                path: display(files.ca.as_ref()),
                source,
            },
            TlsError::ClientCertificate(source) => BackendTlsError::ClientCertificate(source),
            TlsError::ServerName(name) => BackendTlsError::ServerName(name),
            TlsError::Config(source) => BackendTlsError::Config(source),
        }
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, BackendTlsError> {
    std::fs::read(path).map_err(|source| BackendTlsError::Read {
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
    use crate::backends::testing::{
        FakePrometheus, TestCa, endpoint, rules_data, serving_rules, serving_rules_https, sidecar,
        temp_dir,
    };
    use std::time::Duration;

    use zone_operator::prom_api::{ApiError, BodyCaps};

    use crate::backends::fetch::Fetcher;
    use crate::backends::token::BearerToken;
    use crate::metrics::FederatorMetrics;

    /// What `tls` (and `token`) get from the backend at `backend`.
    async fn fetch(
        tls: &BackendTls,
        token: Option<BearerToken>,
        backend: &FakePrometheus,
    ) -> Result<RuleDiscovery, ApiError> {
        fetch_url(tls, token, &backend.url).await
    }

    /// What `tls` (and `token`) get from the backend at `url`.
    async fn fetch_url(
        tls: &BackendTls,
        token: Option<BearerToken>,
        url: &str,
    ) -> Result<RuleDiscovery, ApiError> {
        let metrics = FederatorMetrics::register(&prometheus::Registry::new()).unwrap();
        let caps = BodyCaps {
            compressed: 1 << 20,
            uncompressed: 1 << 20,
        };
        let fetcher =
            Fetcher::new(Duration::from_secs(30), 1, caps, metrics, tls).with_token(token);
        let answers: Vec<_> = fetcher
            .rules(vec![endpoint(url, "0", "a")], "/api/v1/rules")
            .collect()
            .await;
        let [(_, answer)] = <[_; 1]>::try_from(answers).unwrap();
        answer
            .and_then(crate::backends::fetch::Fetched::decode)
            .map(|(data, _)| data)
    }

    fn files(ca: Option<&Path>, server_name: Option<&str>) -> TlsFiles {
        TlsFiles {
            ca: ca.map(Path::to_path_buf),
            client: None,
            server_name: server_name.map(str::to_string),
        }
    }

    /// The backends' TLS trusting `ca` and presenting a client certificate `clients` signed,
    /// its files written into `dir`; and the CA file.
    fn presenting(dir: &Path, ca: &TestCa, clients: &TestCa) -> (BackendTls, PathBuf) {
        let client = clients.client("rules-federator");
        let ca_file = dir.join("ca.crt");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&ca_file, &ca.pem).unwrap();
        std::fs::write(&cert, &client.cert).unwrap();
        std::fs::write(&key, &client.key).unwrap();
        let tls = BackendTls::load(&TlsFiles {
            client: Some((cert, key)),
            ..files(Some(&ca_file), None)
        })
        .unwrap();
        (tls, ca_file)
    }

    /// The failure of a handshake, as its warning names it.
    fn refused(answer: Result<RuleDiscovery, ApiError>, why: &str) {
        match answer {
            Err(ApiError::Connect(message)) => assert!(message.contains(why), "{message}"),
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
        let backend = serving_rules_https(&ca.serving(&["prometheus.monitoring.svc"]), None).await;
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
        let (ca, clients) = (TestCa::new("backend CA"), TestCa::new("clients CA"));
        let (presenting, ca_file) = presenting(&dir, &ca, &clients);
        let backend = serving_rules_https(&ca.serving(&["127.0.0.1"]), Some(&clients)).await;

        assert_eq!(fetch(&presenting, None, &backend).await, Ok(rules_data()));
        let anonymous = BackendTls::load(&files(Some(&ca_file), None)).unwrap();
        refused(
            fetch(&anonymous, None, &backend).await,
            "CertificateRequired",
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A gRPC backend over mutual TLS (a Thanos Ruler or sidecar with --grpc-server-tls-*):
    /// verified against the CA file, given the client certificate; without one it refuses the
    /// handshake, and the warning says so.
    #[tokio::test]
    async fn a_grpc_backend_over_mutual_tls_gets_the_client_certificate() {
        let dir = temp_dir("grpc-mtls");
        let (ca, clients) = (TestCa::new("backend CA"), TestCa::new("clients CA"));
        let (presenting, ca_file) = presenting(&dir, &ca, &clients);
        let serving =
            zone_operator::testing::server_tls(&ca.serving(&["127.0.0.1"]), Some(&clients));
        let url = sidecar(&[], Some(serving)).await;
        assert!(url.starts_with("grpcs://"), "{url}");

        assert_eq!(fetch_url(&presenting, None, &url).await, Ok(rules_data()));
        let anonymous = BackendTls::load(&files(Some(&ca_file), None)).unwrap();
        refused(
            fetch_url(&anonymous, None, &url).await,
            "CertificateRequired",
        );
        let unverified = BackendTls::load(&files(None, None)).unwrap();
        refused(fetch_url(&unverified, None, &url).await, "UnknownIssuer");
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
        let https = serving_rules_https(&ca.serving(&["127.0.0.1"]), None).await;
        let http = serving_rules(true).await;
        for backend in [&https, &http] {
            let token = BearerToken::read(&token_file, crate::backends::token::RELOAD).unwrap();
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
