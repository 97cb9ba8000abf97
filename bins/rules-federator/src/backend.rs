//! In-process Prometheus backends for the tests: real HTTP servers on 127.0.0.1:0, so the
//! fetch, its timeout, gzip and the merge run as they do against Prometheus, in `cargo test`.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
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
    requests: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Backend {
    /// Answers every request as `answer` does, recording the path and query asked.
    async fn serve<F>(answer: F) -> Self
    where
        F: Fn() -> Response + Clone + Send + Sync + 'static,
    {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let asked = requests.clone();
        let router = Router::new().fallback(move |request: Request| {
            let answer = answer.clone();
            let asked = asked.clone();
            async move {
                let uri = request.uri();
                asked
                    .lock()
                    .unwrap()
                    .push(uri.path_and_query().unwrap().to_string());
                answer()
            }
        });
        Self::listen(router, requests).await
    }

    /// Serves `router` on a port of its own.
    async fn listen(router: Router, requests: Arc<Mutex<Vec<String>>>) -> Self {
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
        self.requests.lock().unwrap().clone()
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
