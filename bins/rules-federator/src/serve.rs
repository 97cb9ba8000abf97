//! The federator on the shared runtime: unelected (every replica serves), connected to
//! Kubernetes only when discovery or reviews need it, its API on the runtime's port next to
//! `/healthz`, `/readyz` and `/metrics` (over HTTPS with `--tls-cert-dir` or
//! `--tls-self-signed-secret`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use zone_operator::auth::{Attributes, AttributesError, KubeAuth};
use zone_operator::https::CertSource;
use zone_operator::metrics::MetricsError;
use zone_operator::tls::renewal::ValidityError;
use zone_operator::tls::{CertValidity, SelfSigned};
use zone_operator::{Readiness, Runtime, RuntimeError, Serving, Shutdown};
use zone_rules::MergeOptions;

use crate::NAME;
use crate::backends::connector::{BackendTls, BackendTlsError};
use crate::backends::dns::{self, DnsEndpoint, DnsSettings};
use crate::backends::endpoints::{Endpoint, EndpointError, Endpoints, PodPort, parse_static};
use crate::backends::fetch::Fetcher;
use crate::backends::token::{self, BearerToken, TokenError};
use crate::cli::{Args, Auth, Scheme};
use crate::merge::Cores;
use crate::metrics::FederatorMetrics;
use crate::served::api::{self, Api};
use crate::served::flight::Flights;
use crate::served::grpc;
use crate::served::guard::{self, Guard};
use zone_operator::prom_api::BodyCaps;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    // Boxed: the runtime's error is large and would make every `Result` here as large.
    #[error(transparent)]
    Runtime(Box<RuntimeError>),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("no backend: give --endpoint, --discover-sprom or --discover-selector")]
    NoBackend,
    #[error("cannot register metrics")]
    Metrics(#[source] MetricsError),
    #[error("--authz-resource")]
    Authz(#[source] AttributesError),
    #[error(transparent)]
    BackendTls(#[from] BackendTlsError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("--tls-cert-validity, --tls-cert-renew-before")]
    CertValidity(#[from] ValidityError),
    #[error("--grpc-listen-address {0}")]
    GrpcListen(std::net::SocketAddr, #[source] std::io::Error),
    #[error("DNS endpoints: {0}")]
    Dns(String),
    #[error("--grpc-client-ca-file {0}: {1}")]
    GrpcClientCa(String, String),
}

/// Starts the runtime and mounts the API on it; returns the work for [`Runtime::run`]: ready
/// once the endpoints are known, then nothing until shutdown (the requests are the server's).
pub async fn start(
    args: &Args,
) -> Result<
    (
        Runtime,
        impl Future<Output = Result<(), Infallible>> + use<>,
    ),
    StartError,
> {
    let selector = args.discovery_selector();
    let attributes = authz_attributes(args)?;
    // Without discovery or reviews there is nothing to ask Kubernetes: static endpoints work
    // where no kubeconfig exists (local runs, the e2e tests, a federator outside any cluster).
    let serving = serving(args)?;
    let kubernetes = selector.is_some()
        || attributes.is_some()
        || matches!(serving, Serving::Https(CertSource::SelfSigned(_)));
    let https = matches!(serving, Serving::Https(_));
    let mut runtime = Runtime::server(NAME, &args.base)
        .kubernetes(kubernetes)
        .serving(serving)
        .start()
        .await
        .map_err(|error| StartError::Runtime(Box::new(error)))?;
    // Every replica serves behind the Service: at SIGTERM it leaves the endpoints first.
    runtime.drain_on_shutdown(args.shutdown_delay, Duration::ZERO);
    let (fixed, named) = static_endpoints(args)?;
    let tls = BackendTls::load(&args.backend_tls_files())?;
    let token = args
        .backend_bearer_token_file
        .as_deref()
        .map(|path| BearerToken::read(path, token::RELOAD))
        .transpose()?;
    if token.is_some() {
        warn_of_plain_http(
            &fixed,
            &named,
            selector.is_some().then_some(args.discover_scheme),
        );
    }
    let parts = runtime.clone_parts();
    let metrics = FederatorMetrics::register(&parts.registry).map_err(StartError::Metrics)?;
    let mut endpoints = match selector {
        None => Endpoints::fixed(fixed),
        Some(selector) => discover(&mut runtime, args, fixed, &parts.client, &selector),
    };
    if !named.is_empty() {
        endpoints = look_up(&mut runtime, args, named, endpoints)?;
    }
    let fetcher = Fetcher::new(
        args.endpoint_timeout,
        usize::from(args.max_concurrency),
        BodyCaps {
            compressed: args.max_backend_body_bytes,
            uncompressed: args.max_backend_uncompressed_bytes,
        },
        metrics.clone(),
        &tls,
    )
    .with_token(token);
    let api = Arc::new(backend_api(args, endpoints.clone(), fetcher, metrics));
    let guard = Arc::new(request_guard(args, &parts.client, attributes));
    let authenticated = guard.auth.is_some();
    runtime.merge_routes(guard::guarded(api::router(api.clone()), guard.clone()));
    if let Some(address) = args.grpc_listen_address {
        let tls = grpc_tls(&runtime, args)?;
        let limits = parts.server_limits("grpc");
        let work = start_grpc(address, tls, api, guard, parts.shutdown.clone(), limits).await?;
        runtime.spawn_every_replica(work);
    }
    let scheme = if https { "https" } else { "http" };
    tracing::info!(address = %runtime.local_addr(), scheme, authenticated, "serving /api/v1/rules, /api/v1/alerts");
    let work = ready_until_shutdown(endpoints, parts.readiness, parts.shutdown);
    Ok((runtime, work))
}

/// `endpoints` and the backends of the DNS names `named`, looked up by a task on every replica.
fn look_up(
    runtime: &mut Runtime,
    args: &Args,
    named: Vec<DnsEndpoint>,
    endpoints: Endpoints,
) -> Result<Endpoints, StartError> {
    let (found, receiver) = watch::channel(None);
    let settings = DnsSettings {
        server: args.dns_server,
        interval: args.dns_sd_interval,
    };
    tracing::info!(names = named.len(), interval = ?settings.interval, server = ?settings.server, "looking up the DNS endpoints");
    let work = dns::keep_resolved(named, &settings, found).map_err(StartError::Dns)?;
    runtime.spawn_every_replica(work);
    Ok(endpoints.with_found(receiver))
}

/// The gRPC port's TLS: the HTTPS port's certificate, however it is kept (a directory, the
/// self-signed Secret), and the client certificates it asks for; none without HTTPS.
fn grpc_tls(runtime: &Runtime, args: &Args) -> Result<Option<grpc::PortTls>, StartError> {
    match runtime.cert_store() {
        Some(certs) => Ok(Some((certs, grpc_client_certs(args)?))),
        None => match &args.grpc_client_ca_file {
            Some(path) => Err(StartError::GrpcClientCa(
                path.display().to_string(),
                "client certificates need TLS (--tls-cert-dir or --tls-self-signed-secret)"
                    .to_string(),
            )),
            None => Ok(None),
        },
    }
}

/// The client certificates of `--grpc-client-ca-file`: required unless `--auth=kubernetes` lets
/// callers in by their bearer tokens too.
fn grpc_client_certs(args: &Args) -> Result<Option<grpc::ClientCerts>, StartError> {
    let Some(path) = &args.grpc_client_ca_file else {
        return Ok(None);
    };
    let failed = |why: String| StartError::GrpcClientCa(path.display().to_string(), why);
    let pem = std::fs::read(path).map_err(|e| failed(format!("cannot read: {e}")))?;
    let required = args.auth == Auth::None;
    grpc::ClientCerts::new(&pem, required)
        .map(Some)
        .map_err(failed)
}

/// Binds the gRPC port at `address` (over TLS from `tls`, asking for client certificates when
/// it says) behind `guard`: the work serving it.
async fn start_grpc(
    address: std::net::SocketAddr,
    tls: Option<grpc::PortTls>,
    api: Arc<Api>,
    guard: Arc<Guard>,
    shutdown: Shutdown,
    limits: zone_operator::serve::Limits,
) -> Result<impl Future<Output = ()> + Send + use<>, StartError> {
    let client_certificates = tls.as_ref().is_some_and(|(_, clients)| clients.is_some());
    let tls_on = tls.is_some();
    let (bound, work) = grpc::serve(address, api, guard, shutdown, tls, limits)
        .await
        .map_err(|error| StartError::GrpcListen(address, error))?;
    tracing::info!(address = %bound, tls = tls_on, client_certificates, "serving thanos.Rules and thanos.info.Info over gRPC");
    Ok(work)
}

/// The endpoints of the Prometheus pods `selector` finds (and the `fixed` ones), kept by a
/// watch on every replica.
fn discover(
    runtime: &mut Runtime,
    args: &Args,
    fixed: Vec<Endpoint>,
    client: &kube::Client,
    selector: &str,
) -> Endpoints {
    let namespace = args
        .discover_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let port = PodPort {
        scheme: args.discover_scheme,
        port: args.discover_port,
    };
    tracing::info!(namespace = %namespace, selector = %selector, scheme = port.scheme.as_str(), port = port.port, "discovering Prometheus pods");
    let (endpoints, watch) =
        Endpoints::discovering(fixed, client.clone(), &namespace, selector, port);
    runtime.spawn_every_replica(watch);
    endpoints
}

/// The API over the backends: what it merges and how, within which limits.
fn backend_api(
    args: &Args,
    endpoints: Endpoints,
    fetcher: Fetcher,
    metrics: FederatorMetrics,
) -> Api {
    Api {
        endpoints,
        fetcher,
        options: MergeOptions {
            replica_labels: args.replica_labels.clone(),
            shard_label: Some(args.shard_label.clone()).filter(|l| !l.is_empty()),
        },
        partial: args.partial_response,
        metrics,
        merges: Arc::new(tokio::sync::Semaphore::new(usize::from(
            args.max_concurrent_merges,
        ))),
        cores: Cores::of_machine(),
        flights: Flights::default(),
    }
}

/// What every API request passes first: the limit of concurrent requests, and the review of
/// its token when `attributes` say what it must be allowed.
fn request_guard(args: &Args, client: &kube::Client, attributes: Option<Attributes>) -> Guard {
    Guard {
        requests: Arc::new(tokio::sync::Semaphore::new(
            usize::try_from(args.max_concurrent_requests).unwrap_or(usize::MAX),
        )),
        auth: attributes.map(|attributes| {
            Arc::new(
                KubeAuth::new(
                    client.clone(),
                    attributes,
                    args.auth_cache_ttl,
                    args.auth_denied_cache_ttl,
                )
                .with_audiences(args.auth_audience.iter().cloned().collect()),
            )
        }),
    }
}

/// How the port is served: HTTPS from `--tls-cert-dir` or `--tls-self-signed-secret`, else
/// plain HTTP.
fn serving(args: &Args) -> Result<Serving, StartError> {
    if let Some(dir) = &args.tls_cert_dir {
        return Ok(Serving::Https(CertSource::Dir(dir.clone())));
    }
    let Some(secret) = &args.tls_self_signed_secret else {
        return Ok(Serving::Http);
    };
    let validity = CertValidity::new(args.tls_cert_validity, args.tls_cert_renew_before)?;
    Ok(Serving::Https(CertSource::SelfSigned(SelfSigned {
        app: NAME.to_string(),
        ca_name: format!("{NAME} CA"),
        secret_name: secret.clone(),
        // Unset: the pod's namespace, once the client knows it.
        secret_namespace: args.tls_secret_namespace.clone().unwrap_or_default(),
        service_name: args.tls_service_name.clone(),
        service_namespace: String::new(),
        webhook_config_name: None,
        validity,
    })))
}

/// What callers are authorized for, when `--auth=kubernetes`.
fn authz_attributes(args: &Args) -> Result<Option<Attributes>, StartError> {
    if args.auth == Auth::None {
        return Ok(None);
    }
    Attributes::parse_resource(&args.authz_resource, &args.authz_verb)
        .map(Some)
        .map_err(StartError::Authz)
}

/// The `--endpoint`s: the URLs and the DNS names; an error when there is no backend at all.
fn static_endpoints(args: &Args) -> Result<(Vec<Endpoint>, Vec<DnsEndpoint>), StartError> {
    let mut fixed = Vec::new();
    let mut named = Vec::new();
    for text in args
        .endpoints
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
    {
        match dns::parse(text) {
            Some(name) => named.push(name?),
            None => fixed.push(parse_static(text)?),
        }
    }
    if fixed.is_empty() && named.is_empty() && args.discovery_selector().is_none() {
        return Err(StartError::NoBackend);
    }
    Ok((fixed, named))
}

/// The bearer token goes to every backend: say so when some are asked in plain HTTP, where
/// anyone on the path reads it.
fn warn_of_plain_http(fixed: &[Endpoint], named: &[DnsEndpoint], discovered: Option<Scheme>) {
    let plain: Vec<&str> = fixed
        .iter()
        .filter(|e| e.url.starts_with("http://"))
        .map(Endpoint::name)
        .chain(
            named
                .iter()
                .filter(|n| n.scheme() == "http://")
                .map(|n| n.text.as_str()),
        )
        .collect();
    if !plain.is_empty() || discovered == Some(Scheme::Http) {
        tracing::warn!(endpoints = ?plain, discovered_pods = discovered == Some(Scheme::Http), "the backends' bearer token is sent over plain HTTP");
    }
}

/// `/readyz` turns ready once discovery has listed (at once with static endpoints only).
async fn ready_until_shutdown(
    endpoints: Endpoints,
    readiness: Readiness,
    shutdown: Shutdown,
) -> Result<(), Infallible> {
    tokio::select! {
        known = endpoints.wait_ready() => {
            if known {
                tracing::info!(endpoints = endpoints.current().len(), "endpoints known; ready");
                readiness.set_ready();
            }
        }
        () = shutdown.cancelled() => {}
    }
    shutdown.cancelled().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::SocketAddr;
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::backends::testing::serving_rules;

    const PATIENCE: Duration = Duration::from_secs(30);
    const POLL: Duration = Duration::from_millis(10);

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec![
            "rules-federator",
            "--listen-address=127.0.0.1:0",
            "--log-level=info",
            "--log-format=plain",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn it_needs_a_backend_and_takes_http_and_https_ones() {
        let none = args(&[]);
        if none.endpoints.is_empty() && none.discovery_selector().is_none() {
            assert!(matches!(
                static_endpoints(&none),
                Err(StartError::NoBackend)
            ));
        }
        let discovering = args(&["--discover-sprom=prometheus"]);
        assert!(static_endpoints(&discovering).is_ok());
        assert!(static_endpoints(&args(&["--endpoint=https://prom:9090"])).is_ok());
        assert!(matches!(
            static_endpoints(&args(&["--endpoint=prom:9090"])),
            Err(StartError::Endpoint(EndpointError::Scheme(_)))
        ));
        let fixed = static_endpoints(&args(&["--endpoint= http://prom:9090/ ", "--endpoint="]));
        assert_eq!(fixed.unwrap().0.len(), 1, "blank entries are skipped");
        let (fixed, named) = static_endpoints(&args(&[
            "--endpoint=dnssrv+_grpc._tcp.rulers.monitoring.svc",
            "--endpoint=grpc://ruler:10901",
        ]))
        .unwrap();
        assert_eq!((fixed.len(), named.len()), (1, 1), "a DNS name is no URL");
        assert!(matches!(
            static_endpoints(&args(&["--endpoint=dns+http://prom"])),
            Err(StartError::Endpoint(EndpointError::Dns(..)))
        ));
    }

    /// The status and body of `GET path` (through a real client: the rules come chunked).
    async fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
        use http_body_util::BodyExt;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Empty<axum::body::Bytes>>();
        let uri = format!("http://{address}{path}").parse().unwrap();
        let response = client.get(uri).await.unwrap();
        let code = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A free port of 127.0.0.1 for the binary to bind, below Linux's ephemeral range (from
    /// 32768): the other tests' servers, binding port 0, are never given it between this check
    /// and the binary's bind, as they could be a port taken from that range and released.
    fn port_below_the_ephemeral_range() -> u16 {
        let start = 20_000 + u16::try_from(std::process::id() % 5_000).unwrap();
        (start..32_768)
            .chain(20_000..start)
            .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
            .unwrap()
    }

    /// The whole binary but its `main`, with static endpoints and a kubeconfig that cannot be
    /// read: the API, `/healthz`, `/readyz` and `/metrics` on one port, no Kubernetes, and a
    /// graceful stop. The only test that starts the runtime (logging is set up once per process).
    #[tokio::test]
    async fn serves_its_api_health_and_metrics_on_one_port_without_kubernetes() {
        let backend = serving_rules(true).await;
        let endpoint = format!("{}#shard=0&replica=a", backend.url);
        let grpc_port = port_below_the_ephemeral_range();
        let grpc = format!("--grpc-listen-address=127.0.0.1:{grpc_port}");
        let args = args(&[
            "--endpoint",
            &endpoint,
            "--kubeconfig=/nonexistent/kubeconfig",
            "--identity=federator-0",
            "--shutdown-delay=1s",
            &grpc,
        ]);
        let (runtime, work) = start(&args).await.unwrap();
        let address = runtime.local_addr();
        let shutdown = runtime.parts().shutdown.clone();
        let run = tokio::spawn(runtime.run(work));

        tokio::time::timeout(PATIENCE, async {
            while http_get(address, "/readyz").await.0 != 200 {
                tokio::time::sleep(POLL).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(http_get(address, "/healthz").await.0, 200);
        let (code, body) = http_get(address, "/api/v1/rules").await;
        assert_eq!(code, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["data"]["groups"][0]["name"], "common", "{answer}");
        assert_eq!(http_get(address, "/api/v1/alerts").await.0, 200);
        // Thanos's Rules API on its own port: the same group.
        let mut rules = zone_thanos::thanos::rules_client::RulesClient::connect(format!(
            "http://127.0.0.1:{grpc_port}"
        ))
        .await
        .unwrap();
        let mut stream = rules
            .rules(zone_thanos::thanos::RulesRequest::default())
            .await
            .unwrap()
            .into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert!(
            matches!(&first.result, Some(zone_thanos::thanos::rules_response::Result::Group(g)) if g.name == "common"),
            "{first:?}"
        );
        let (code, metrics) = http_get(address, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            metrics
                .contains(r#"zone_aware_federator_requests_total{code="200",handler="rules"} 1"#),
            "{metrics}"
        );

        shutdown.trigger();
        // Through the drain delay: not ready, and the API still answered (clients whose view
        // of the Service still holds this replica).
        assert_eq!(http_get(address, "/readyz").await.0, 503);
        let (code, body) = http_get(address, "/api/v1/rules").await;
        assert_eq!(code, 200, "{body}");
        let answer = rules
            .rules(zone_thanos::thanos::RulesRequest::default())
            .await;
        assert!(
            answer.is_ok(),
            "gRPC too through the drain delay: {answer:?}"
        );
        let stopped = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
        assert!(stopped.is_ok(), "{stopped:?}");
        assert!(tokio::net::TcpStream::connect(address).await.is_err());
        let grpc_address: SocketAddr = format!("127.0.0.1:{grpc_port}").parse().unwrap();
        assert!(tokio::net::TcpStream::connect(grpc_address).await.is_err());
    }
}
