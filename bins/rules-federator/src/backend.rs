//! In-process Prometheus backends for the tests: real HTTP(S) servers on 127.0.0.1:0, so the
//! fetch, its timeout, gzip, TLS and the merge run as they do against Prometheus, in `cargo
//! test`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;
use zone_rules::RuleDiscovery;

use crate::endpoints::Endpoint;

/// `/api/v1/rules` of a Prometheus 3 loaded with the e2e tests' `a.yaml` (a recording rule, an
/// alert firing, one pending, one inactive), field for field as Prometheus writes it.
pub const RULES: &str = include_str!("../testdata/prometheus-rules.json");

/// `data` of [`RULES`].
pub fn rules_data() -> RuleDiscovery {
    let envelope: serde_json::Value = serde_json::from_str(RULES).unwrap();
    serde_json::from_value(envelope["data"].clone()).unwrap()
}

/// A server; stops accepting when dropped.
pub struct Backend {
    pub url: String,
    requests: Arc<Mutex<Vec<Asked>>>,
    task: JoinHandle<()>,
}

/// What a backend was asked: the path and query, and the Authorization header.
#[derive(Debug, Clone)]
struct Asked {
    path_and_query: String,
    authorization: Option<String>,
}

/// Answers every request as `answer` does, recording it in `asked`.
fn recording<F>(answer: F, asked: Arc<Mutex<Vec<Asked>>>) -> Router
where
    F: Fn() -> Response + Clone + Send + Sync + 'static,
{
    Router::new().fallback(move |request: Request| {
        let answer = answer.clone();
        let asked = asked.clone();
        async move {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .map(|value| value.to_str().unwrap().to_string());
            asked.lock().unwrap().push(Asked {
                path_and_query: request.uri().path_and_query().unwrap().to_string(),
                authorization,
            });
            answer()
        }
    })
}

impl Backend {
    /// Answers every request as `answer` does, recording the path and query asked.
    async fn serve<F>(answer: F) -> Self
    where
        F: Fn() -> Response + Clone + Send + Sync + 'static,
    {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let router = recording(answer, requests.clone());
        Self::listen(router, requests).await
    }

    /// Prometheus with [`RULES`] (plain) over HTTPS with `serving`, asking for a client
    /// certificate signed by `client_ca` when given.
    pub async fn https(serving: &Issued, client_ca: Option<&TestCa>) -> Self {
        let body = RULES.as_bytes().to_vec();
        let answer =
            move || ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let router = recording(answer, requests.clone());
        let chain = vec![CertificateDer::from_pem_slice(serving.cert.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
                    .unwrap();
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
        Self {
            url,
            requests,
            task,
        }
    }

    /// Serves `router` on a port of its own.
    async fn listen(router: Router, requests: Arc<Mutex<Vec<Asked>>>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self {
            url,
            requests,
            task,
        }
    }

    /// Prometheus with [`RULES`], gzipped when `gzip` (as Prometheus answers a client that
    /// accepts it).
    pub async fn prometheus(gzip: bool) -> Self {
        let body = match gzip {
            true => gzipped(RULES.as_bytes(), flate2::Compression::default()),
            false => RULES.as_bytes().to_vec(),
        };
        Self::serve(move || {
            let response =
                ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response();
            encoded(response, gzip.then_some("gzip"))
        })
        .await
    }

    /// Answers `body` (JSON), gzipped when `gzip`.
    pub async fn json(body: &str, gzip: bool) -> Self {
        let body = match gzip {
            true => gzipped(body.as_bytes(), flate2::Compression::fast()),
            false => body.as_bytes().to_vec(),
        };
        Self::serve(move || {
            let response =
                ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response();
            encoded(response, gzip.then_some("gzip"))
        })
        .await
    }

    /// Prometheus with [`RULES`] that takes each request at once (it is counted in
    /// [`Backend::requests`]) and answers it once `release` gives a permit: a slow backend
    /// whose answer the test lets go.
    pub async fn gated(release: Arc<tokio::sync::Semaphore>) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let asked = requests.clone();
        let router = Router::new().fallback(move |request: Request| {
            let release = release.clone();
            let asked = asked.clone();
            async move {
                asked.lock().unwrap().push(Asked {
                    path_and_query: request.uri().path_and_query().unwrap().to_string(),
                    authorization: None,
                });
                release.acquire().await.unwrap().forget();
                ([(header::CONTENT_TYPE, "application/json")], RULES).into_response()
            }
        });
        Self::listen(router, requests).await
    }

    /// Answers `status` with `body`, sent as `content_encoding` says when given.
    pub async fn answering(
        status: StatusCode,
        body: &'static str,
        content_encoding: Option<&'static str>,
    ) -> Self {
        Self::serve(move || encoded((status, body).into_response(), content_encoding)).await
    }

    /// A `200` of `size` bytes of valid-looking JSON that never ends, streamed without a
    /// Content-Length (so only counting the bytes read can stop it); gzipped when `gzip`, where
    /// the spaces compress a thousandfold (a gzip bomb).
    pub async fn oversized(size: usize, gzip: bool) -> Self {
        let head = br#"{"status":"success","data":{"groups":["#;
        let mut plain = head.to_vec();
        plain.resize(size, b' ');
        let body = match gzip {
            true => gzipped(&plain, flate2::Compression::fast()),
            false => plain,
        };
        let body = axum::body::Bytes::from(body);
        Self::serve(move || {
            let chunks: Vec<_> = body
                .chunks(64 << 10)
                .map(|chunk| Ok::<_, std::io::Error>(body.slice_ref(chunk)))
                .collect();
            let response =
                axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response();
            encoded(response, gzip.then_some("gzip"))
        })
        .await
    }

    /// Takes the request and never answers (a Prometheus stuck in a long evaluation).
    pub async fn hanging() -> Self {
        let router = Router::new().fallback(std::future::pending::<()>);
        Self::listen(router, Arc::default()).await
    }

    /// An address where nothing listens (a backend that went away).
    pub async fn gone() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    }

    pub fn endpoint(&self, shard: &str, replica: &str) -> Endpoint {
        endpoint(&self.url, shard, replica)
    }

    /// The path and query of every request so far.
    pub fn requests(&self) -> Vec<String> {
        let asked = self.requests.lock().unwrap();
        asked.iter().map(|a| a.path_and_query.clone()).collect()
    }

    /// The Authorization header of every request so far.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        let asked = self.requests.lock().unwrap();
        asked.iter().map(|a| a.authorization.clone()).collect()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn endpoint(url: &str, shard: &str, replica: &str) -> Endpoint {
    Endpoint {
        shard: shard.to_string(),
        replica: replica.to_string(),
        url: url.to_string(),
    }
}

/// `plain`, gzipped at `level`.
fn gzipped(plain: &[u8], level: flate2::Compression) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
    std::io::Write::write_all(&mut encoder, plain).unwrap();
    encoder.finish().unwrap()
}

/// `response` sent with the `Content-Encoding` `encoding`, when given.
fn encoded(mut response: Response, encoding: Option<&'static str>) -> Response {
    if let Some(encoding) = encoding {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    response
}

/// A test CA and the certificates it signs.
pub struct TestCa {
    /// The CA certificate, PEM (a `--backend-ca-file`).
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `names`.
    pub fn serving(&self, names: &[&str]) -> Issued {
        let names = names.iter().map(|n| (*n).to_string()).collect::<Vec<_>>();
        self.sign(CertificateParams::new(names).unwrap())
    }

    /// A client certificate for `name`.
    pub fn client(&self, name: &str) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A new empty directory for one test's files (remove it at the end).
pub fn temp_dir(what: &str) -> PathBuf {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rules-federator-{what}-{}-{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
