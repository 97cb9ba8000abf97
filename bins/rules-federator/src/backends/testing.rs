//! The federator's test backends: the shared fake Prometheus ([`FakePrometheus`]) loaded with
//! the e2e tests' rules ([`RULES`]), the endpoints naming one, and a directory per test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use zone_operator::prom_api::BodyCaps;
use zone_rules::{MergeOptions, RuleDiscovery};

use crate::backends::endpoints::{Endpoint, Endpoints};
use crate::backends::fetch::Fetcher;
use crate::cli::PartialResponse;
use crate::merge::Cores;
use crate::metrics::FederatorMetrics;
use crate::served::api::Api;
use crate::served::flight::Flights;
use crate::served::guard::Guard;
use serde_json::json;
use zone_operator::auth::{Attributes, KubeAuth};
use zone_operator::testing::{FakeApi, Method};
use zone_thanos::thanos::rules_server::{Rules, RulesServer};
use zone_thanos::thanos::{RulesRequest, RulesResponse, rules_response};

pub use zone_operator::testing::{FakePrometheus, Issued, Reply, TestCa};

/// `/api/v1/rules` of a Prometheus 3 loaded with the e2e tests' `a.yaml` (a recording rule, an
/// alert firing, one pending, one inactive), field for field as Prometheus writes it.
pub const RULES: &str = include_str!("../../testdata/prometheus-rules.json");

/// Long enough for a backend on this machine to answer under a loaded test run, short
/// enough that waiting for a hanging one costs little.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The shipped defaults: far above the recorded answer.
pub const DEFAULT_CAPS: BodyCaps = BodyCaps {
    compressed: 64 << 20,
    uncompressed: 256 << 20,
};

/// An API over `endpoints`, with the shipped caps, and the registry of its metrics.
pub fn api(endpoints: Vec<Endpoint>, partial: PartialResponse) -> (Arc<Api>, prometheus::Registry) {
    api_capped(endpoints, partial, DEFAULT_CAPS)
}

/// [`api`] with `caps`.
pub fn api_capped(
    endpoints: Vec<Endpoint>,
    partial: PartialResponse,
    caps: BodyCaps,
) -> (Arc<Api>, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let metrics = FederatorMetrics::register(&registry).unwrap();
    let api = Api {
        endpoints: Endpoints::fixed(endpoints),
        fetcher: Fetcher::new(
            TIMEOUT,
            8,
            caps,
            metrics.clone(),
            &crate::backends::connector::BackendTls::load(&Default::default()).unwrap(),
        ),
        options: options(),
        partial,
        metrics,
        merges: Arc::new(tokio::sync::Semaphore::new(1)),
        cores: Cores::new(2),
        flights: Flights::default(),
    };
    (Arc::new(api), registry)
}

/// The shipped replica and shard labels.
pub fn options() -> MergeOptions {
    MergeOptions {
        replica_labels: vec!["prometheus_replica".into(), "replica".into()],
        shard_label: Some("shard".into()),
    }
}

/// `data` of [`RULES`].
pub fn rules_data() -> RuleDiscovery {
    let envelope: serde_json::Value = serde_json::from_str(RULES).unwrap();
    serde_json::from_value(envelope["data"].clone()).unwrap()
}

/// `body` (JSON), gzipped when `gzip` (as Prometheus answers a client that accepts it).
pub fn json_answer(body: impl Into<String>, gzip: bool) -> Reply {
    let reply = Reply::json(200, body.into());
    if gzip { reply.gzipped() } else { reply }
}

/// Prometheus with [`RULES`], gzipped when `gzip`.
pub async fn serving_rules(gzip: bool) -> FakePrometheus {
    FakePrometheus::start(json_answer(RULES, gzip)).await
}

/// Prometheus with [`RULES`] (plain) over HTTPS with `serving`, asking for a client
/// certificate signed by `client_ca` when given.
pub async fn serving_rules_https(serving: &Issued, client_ca: Option<&TestCa>) -> FakePrometheus {
    FakePrometheus::https(json_answer(RULES, false), serving, client_ca).await
}

/// Prometheus with [`RULES`] that takes each request at once (it is recorded) and answers it
/// once `release` gives a permit: a slow backend whose answer the test lets go.
pub async fn gated(release: Arc<tokio::sync::Semaphore>) -> FakePrometheus {
    FakePrometheus::start(Reply::gated(release, json_answer(RULES, false))).await
}

/// A `200` of `size` bytes of valid-looking JSON that never ends, streamed without a
/// Content-Length (so only counting the bytes read can stop it); gzipped when `gzip`, where
/// the spaces compress a thousandfold (a gzip bomb).
pub async fn oversized(size: usize, gzip: bool) -> FakePrometheus {
    let head = br#"{"status":"success","data":{"groups":["#;
    let mut plain = head.to_vec();
    plain.resize(size, b' ');
    let reply = Reply::json(200, plain).streamed();
    FakePrometheus::start(if gzip { reply.gzipped() } else { reply }).await
}

pub fn endpoint(url: &str, shard: &str, replica: &str) -> Endpoint {
    Endpoint {
        shard: shard.to_string(),
        replica: replica.to_string(),
        url: url.to_string(),
        zone: String::new(),
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

/// A Thanos sidecar in front of the Prometheus [`RULES`] plays: the same groups over gRPC,
/// after `warnings`.
#[derive(Clone)]
struct FakeSidecar {
    warnings: Vec<String>,
}

type RulesStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<RulesResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Rules for FakeSidecar {
    type RulesStream = RulesStream;

    async fn rules(
        &self,
        _: tonic::Request<RulesRequest>,
    ) -> Result<tonic::Response<RulesStream>, tonic::Status> {
        let warnings = self
            .warnings
            .iter()
            .cloned()
            .map(rules_response::Result::Warning);
        let groups: Vec<_> = rules_data()
            .groups
            .iter()
            .map(|group| rules_response::Result::Group(group.into()))
            .collect();
        let messages: Vec<_> = warnings
            .chain(groups)
            .map(|result| {
                Ok(RulesResponse {
                    result: Some(result),
                })
            })
            .collect();
        Ok(tonic::Response::new(Box::pin(futures::stream::iter(
            messages,
        ))))
    }
}

/// A server's TLS connection, as tonic's server takes connections.
struct TlsConnection(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for TlsConnection {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A fake sidecar on a free port of 127.0.0.1 sending `warnings` before its groups, in plain
/// (`grpc://`) or with `tls` (`grpcs://`; a client its TLS refuses gets no connection): its URL.
pub async fn sidecar(warnings: &[&str], tls: Option<rustls::ServerConfig>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder().add_service(RulesServer::new(FakeSidecar {
        warnings: warnings.iter().map(ToString::to_string).collect(),
    }));
    let Some(mut tls) = tls else {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(server.serve_with_incoming(incoming));
        return format!("{}{address}", crate::backends::grpc::SCHEME);
    };
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    // Connections whose handshake fails are dropped; the next is awaited.
    let incoming = futures::stream::unfold((listener, acceptor), |(listener, acceptor)| async {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if let Ok(tls) = acceptor.accept(stream).await {
                let connection = Ok::<_, std::io::Error>(TlsConnection(tls));
                return Some((connection, (listener, acceptor)));
            }
        }
    });
    tokio::spawn(server.serve_with_incoming(incoming));
    format!("{}{address}", crate::backends::grpc::TLS_SCHEME)
}

pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// The fake API server of the caller checks: `grafana-token` is Grafana's ServiceAccount, allowed;
/// `pod-token` another pod's, denied; any other token is not accepted. Grafana may `get`
/// `/api/v1/alerts` and `/thanos.Rules/Rules`.
pub fn fake_api() -> (FakeApi, kube::Client) {
    let (fake, client) = FakeApi::new();
    fake.on(Method::POST, TOKEN_REVIEWS).always_with(|request| {
        let review = request.json().unwrap();
        let user = match review["spec"]["token"].as_str() {
            Some("grafana-token") => "system:serviceaccount:monitoring:grafana",
            Some("pod-token") => "system:serviceaccount:apps:web",
            _ => {
                let status = json!({"authenticated": false, "error": "invalid bearer token"});
                return (201, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}));
            }
        };
        let status = json!({
            "authenticated": true,
            "user": {"username": user, "groups": ["system:serviceaccounts"], "uid": "u-1"},
        });
        (201, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}))
    });
    fake.on(Method::POST, ACCESS_REVIEWS).always_with(|request| {
        let review = request.json().unwrap();
        let path = &review["spec"]["nonResourceAttributes"]["path"];
        let allowed = review["spec"]["user"] == "system:serviceaccount:monitoring:grafana"
            && (path == "/api/v1/alerts" || path == "/thanos.Rules/Rules")
            && review["spec"]["nonResourceAttributes"]["verb"] == "get"
            && review["spec"]["groups"] == json!(["system:serviceaccounts"]);
        let status = if allowed {
            json!({"allowed": true})
        } else {
            json!({"allowed": false, "reason": "no RBAC rule"})
        };
        (201, json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": status}))
    });
    (fake, client)
}

pub fn authenticating(client: kube::Client) -> Guard {
    Guard {
        requests: Arc::new(tokio::sync::Semaphore::new(8)),
        auth: Some(Arc::new(KubeAuth::new(
            client,
            Attributes::NonResource { verb: "get".into() },
            Duration::from_secs(60),
            Duration::from_secs(10),
        ))),
    }
}
