//! A fake Prometheus for the tests of the binaries that read one through [`crate::prom_api`]: a
//! real HTTP/1.1 server on `127.0.0.1:0`, plain or HTTPS (a serving certificate of a
//! [`TestCa`], a client certificate required when asked), so TLS, gzip, the body caps and the
//! timeouts run as they do against Prometheus.
//!
//! - **Answers.** Every request gets the [`Reply`] of its path ([`FakePrometheus::answer`]), or
//!   the default one ([`FakePrometheus::start`], [`FakePrometheus::set`]). A reply is a status
//!   and a body ([`Reply::json`], [`Reply::success`]), gzipped ([`Reply::gzipped`]) or sent with
//!   any `Content-Encoding` ([`Reply::encoding`]), streamed without a `Content-Length`
//!   ([`Reply::streamed`]); or no answer at all ([`Reply::Hang`]), a connection closed unanswered
//!   ([`Reply::Close`]), an answer held until the test gives a permit ([`Reply::gated`]).
//! - **Recorded requests.** Each request's path (and query), `Authorization` header and time,
//!   in arrival order ([`FakePrometheus::seen`], [`FakePrometheus::paths`],
//!   [`FakePrometheus::authorizations`], [`FakePrometheus::count`]).
//! - **Gone.** [`FakePrometheus::gone`]: an address bound then released, where nothing listens.
//!
//! The server stops, with every connection it holds, when its handle is dropped.
// A test fixture: a setup that fails (a port, a certificate) fails the test that asked for it.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::{Issued, TestCa};

/// What the fake answers a request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// This status, headers and body.
    Answer(Canned),
    /// Reads the request and never answers (a Prometheus stuck in a long evaluation).
    Hang,
    /// Reads the request and closes the connection without a word.
    Close,
    /// Takes the request at once (it is recorded), and replies once the semaphore gives a
    /// permit (which is kept): a slow Prometheus whose answer the test lets go.
    Gated(Arc<Semaphore>, Box<Reply>),
}

/// An answer as the fake sends it: a status, its headers and its body.
#[derive(Clone, Debug)]
pub struct Canned {
    status: StatusCode,
    encoding: Option<&'static str>,
    body: Bytes,
    streamed: bool,
}

impl Reply {
    /// `status` with `body`, as `application/json`.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Reply {
        Reply::Answer(Canned {
            status: StatusCode::from_u16(status).expect("an HTTP status code"),
            encoding: None,
            body: body.into(),
            streamed: false,
        })
    }

    /// `200` with Prometheus's envelope around `data`: `{"status":"success","data":...}`.
    pub fn success(data: serde_json::Value) -> Reply {
        let envelope = serde_json::json!({"status": "success", "data": data});
        Reply::json(200, envelope.to_string())
    }

    /// The body gzipped, with `Content-Encoding: gzip` (as Prometheus answers a client that
    /// accepts it).
    #[must_use]
    pub fn gzipped(self) -> Reply {
        self.map(|answer| Canned {
            body: Bytes::from(gzip(&answer.body)),
            encoding: Some("gzip"),
            ..answer
        })
    }

    /// The body as it is, sent with `Content-Encoding: encoding`.
    #[must_use]
    pub fn encoding(self, encoding: &'static str) -> Reply {
        self.map(|answer| Canned {
            encoding: Some(encoding),
            ..answer
        })
    }

    /// The body streamed in 64 KiB chunks without a `Content-Length`, so only counting the
    /// bytes read can stop a reader.
    #[must_use]
    pub fn streamed(self) -> Reply {
        self.map(|answer| Canned {
            streamed: true,
            ..answer
        })
    }

    /// `reply`, once `release` gives a permit.
    pub fn gated(release: Arc<Semaphore>, reply: Reply) -> Reply {
        Reply::Gated(release, Box::new(reply))
    }

    fn map(self, change: impl FnOnce(Canned) -> Canned) -> Reply {
        match self {
            Reply::Answer(answer) => Reply::Answer(change(answer)),
            Reply::Gated(release, reply) => Reply::Gated(release, Box::new(reply.map(change))),
            other => other,
        }
    }

    /// The response, once it is due; `Err` closes the connection unanswered.
    async fn respond(mut self) -> Result<hyper::Response<Body>, std::io::Error> {
        loop {
            match self {
                Reply::Answer(answer) => return Ok(answer.response()),
                Reply::Hang => std::future::pending::<()>().await,
                Reply::Close => return Err(std::io::Error::other("closed unanswered")),
                Reply::Gated(release, then) => {
                    if let Ok(permit) = release.acquire().await {
                        permit.forget();
                    }
                    self = *then;
                }
            }
        }
    }
}

impl Canned {
    fn response(self) -> hyper::Response<Body> {
        let body = match self.streamed {
            false => Body::from(self.body),
            true => {
                let chunks: Vec<_> = self
                    .body
                    .chunks(64 << 10)
                    .map(|chunk| Ok::<_, std::io::Error>(self.body.slice_ref(chunk)))
                    .collect();
                Body::from_stream(futures::stream::iter(chunks))
            }
        };
        let mut response = hyper::Response::new(body);
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        let json = HeaderValue::from_static("application/json");
        headers.insert(header::CONTENT_TYPE, json);
        if let Some(encoding) = self.encoding {
            let encoding = HeaderValue::from_static(encoding);
            headers.insert(header::CONTENT_ENCODING, encoding);
        }
        response
    }
}

/// `plain`, gzipped.
fn gzip(plain: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, plain).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The path and query, as asked: `/api/v1/rules?type=alert`.
    pub path: String,
    /// The `Authorization` header, when sent.
    pub authorization: Option<String>,
    /// When it arrived.
    pub at: Instant,
}

struct State {
    default: Reply,
    paths: HashMap<String, Reply>,
    seen: Vec<Seen>,
}

impl State {
    /// Records `request` and returns its reply.
    fn take(&mut self, request: &hyper::Request<Incoming>) -> Reply {
        let authorization = request.headers().get(header::AUTHORIZATION);
        let path = request.uri().path_and_query().map(ToString::to_string);
        self.seen.push(Seen {
            path: path.unwrap_or_default(),
            authorization: authorization.and_then(|v| v.to_str().ok().map(str::to_string)),
            at: Instant::now(),
        });
        let reply = self.paths.get(request.uri().path());
        reply.unwrap_or(&self.default).clone()
    }
}

/// A running fake Prometheus; stops when dropped.
pub struct FakePrometheus {
    /// `http://127.0.0.1:<port>`, or `https://` when served over TLS.
    pub url: String,
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for FakePrometheus {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakePrometheus {
    /// Plain HTTP, every path answered `reply` until told otherwise.
    pub async fn start(reply: Reply) -> Self {
        Self::serve(reply, None).await
    }

    /// HTTPS with `serving`, asking for a client certificate signed by `client_ca` when given.
    pub async fn https(reply: Reply, serving: &Issued, client_ca: Option<&TestCa>) -> Self {
        let config = server_tls(serving, client_ca);
        Self::serve(reply, Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    /// An `http://` URL where nothing listens (a Prometheus that went away): every connection
    /// is refused, for as long as the test process runs.
    pub fn gone() -> String {
        format!("http://{}", Self::gone_address())
    }

    /// The address of [`FakePrometheus::gone`]: a port held by a socket that is bound but never
    /// listens, so connections to it are refused and no other listener of the process (another
    /// test's server binding port 0) can be given it. The socket is kept open until the process
    /// ends.
    pub fn gone_address() -> SocketAddr {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("a local port");
        let addr = socket.local_addr().expect("a bound address");
        std::mem::forget(socket);
        addr
    }

    async fn serve(reply: Reply, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let addr = listener.local_addr().expect("a bound address");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let state = Arc::new(Mutex::new(State {
            default: reply,
            paths: HashMap::new(),
            seen: Vec::new(),
        }));
        let task = tokio::spawn(accept(listener, tls, state.clone()));
        Self {
            url: format!("{scheme}://{addr}"),
            addr,
            state,
            task,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers every path without an answer of its own `reply` from now on.
    pub fn set(&self, reply: Reply) {
        self.state().default = reply;
    }

    /// Answers `path` (the path alone, without the query) `reply` from now on.
    pub fn answer(&self, path: &str, reply: Reply) {
        self.state().paths.insert(path.to_string(), reply);
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// The path and query of every request so far.
    pub fn paths(&self) -> Vec<String> {
        self.state().seen.iter().map(|s| s.path.clone()).collect()
    }

    /// The `Authorization` header of every request so far.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        let state = self.state();
        state.seen.iter().map(|s| s.authorization.clone()).collect()
    }

    /// How many requests asked for `path` (whatever their query).
    pub fn count(&self, path: &str) -> usize {
        let state = self.state();
        let asked = |s: &&Seen| s.path.split('?').next() == Some(path);
        state.seen.iter().filter(asked).count()
    }
}

/// Accepts connections until the fake is dropped, which drops (and so closes) them all.
async fn accept(listener: TcpListener, tls: Option<TlsAcceptor>, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        connections.spawn(connection(stream, tls.clone(), state.clone()));
    }
}

async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, state: Arc<Mutex<State>>) {
    match tls {
        None => http(stream, state).await,
        Some(acceptor) => {
            if let Ok(stream) = acceptor.accept(stream).await {
                http(stream, state).await;
            }
        }
    }
}

async fn http<I>(io: I, state: Arc<Mutex<State>>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.take(&request).respond()
    });
    // A client gone, or a reply that closes unanswered: the connection ends either way.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// A test server's TLS: `serving`'s certificate, asking for a client certificate signed by
/// `client_ca` when given (any other is refused, as is none).
pub fn server_tls(serving: &Issued, client_ca: Option<&TestCa>) -> rustls::ServerConfig {
    let chain = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("a PEM certificate chain");
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).expect("a PEM key");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            let cert = CertificateDer::from_pem_slice(ca.pem.as_bytes()).expect("a PEM CA");
            roots.add(cert).expect("a CA certificate");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(chain, key)
        .expect("a serving certificate")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::prom_api::tls::{ClientTls, Roots, TlsOptions};
    use crate::prom_api::{ApiClient, ApiError, BodyCaps};

    fn client(roots: Roots) -> ApiClient {
        let tls = ClientTls::new(&TlsOptions {
            roots,
            ..TlsOptions::default()
        })
        .unwrap();
        let caps = BodyCaps {
            compressed: 1 << 20,
            uncompressed: 1 << 20,
        };
        let second = Duration::from_secs(1);
        ApiClient::new(&tls, second, second, caps).gzip()
    }

    async fn get(client: &ApiClient, url: &str) -> Result<Value, ApiError> {
        let token = Some(HeaderValue::from_static("Bearer t"));
        client.get(url, token).await?.decode()
    }

    /// Each path its answer, the others the default (gzipped or not); every request recorded.
    #[tokio::test]
    async fn paths_get_their_answers_and_every_request_is_recorded() {
        let fake = FakePrometheus::start(Reply::json(404, "")).await;
        fake.answer("/a", Reply::success(json!("a")).gzipped());
        let client = client(Roots::Empty);
        let a = get(&client, &format!("{}/a?x=1", fake.url)).await;
        assert_eq!(a, Ok(json!("a")));
        let b = get(&client, &format!("{}/b", fake.url)).await;
        assert_eq!(b, Err(ApiError::Status(404, String::new())));
        fake.set(Reply::Close);
        let closed = get(&client, &format!("{}/b", fake.url)).await;
        assert!(matches!(closed, Err(ApiError::Connect(_))), "{closed:?}");
        assert_eq!(fake.paths(), ["/a?x=1", "/b", "/b"]);
        assert_eq!((fake.count("/a"), fake.count("/b")), (1, 2));
        assert_eq!(fake.authorizations()[0].as_deref(), Some("Bearer t"));
        let gone = get(&client, &format!("{}/a", FakePrometheus::gone())).await;
        assert!(matches!(gone, Err(ApiError::Connect(_))), "{gone:?}");
    }

    /// HTTPS verified against the test CA; a gated answer waits for its permit.
    #[tokio::test]
    async fn https_and_gated_answers() {
        let ca = TestCa::new("test CA");
        let release = Arc::new(Semaphore::new(0));
        let reply = Reply::gated(release.clone(), Reply::success(json!(1)));
        let fake = FakePrometheus::https(reply, &ca.serving(&["127.0.0.1"]), None).await;
        assert!(fake.url.starts_with("https://"));
        let client = client(Roots::Pem(ca.pem.clone().into_bytes()));
        let url = format!("{}/api/v1/x", fake.url);
        let answer = tokio::spawn(async move { get(&client, &url).await });
        while fake.seen().is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(!answer.is_finished());
        release.add_permits(1);
        assert_eq!(answer.await.unwrap(), Ok(json!(1)));
    }
}
