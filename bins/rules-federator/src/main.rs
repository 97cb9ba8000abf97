//! rules-federator: one Prometheus-compatible `/api/v1/rules` and `/api/v1/alerts` over every
//! shard and replica of a sharded Prometheus (static endpoints and/or discovered pods), merged
//! and deduplicated by `zone-rules`. Stateless: every replica serves.
#![forbid(unsafe_code)]

mod api;
mod cli;
mod endpoints;
mod fetch;
mod metrics;

use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use clap::Parser;
use prometheus::Registry;
use zone_operator::{Readiness, Shutdown};
use zone_rules::MergeOptions;

use crate::endpoints::{Endpoints, parse_static};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot set up logging")]
    Telemetry(#[source] zone_operator::telemetry::TelemetryError),
    #[error(transparent)]
    Endpoint(#[from] endpoints::EndpointError),
    #[error("no backend: give --endpoint, --discover-sprom or --discover-selector")]
    NoBackend,
    #[error("cannot connect to Kubernetes for discovery")]
    Client(#[source] zone_operator::client::ClientError),
    #[error("cannot register metrics")]
    Metrics(#[source] zone_operator::metrics::MetricsError),
    #[error("cannot install signal handlers")]
    Signals(#[source] zone_operator::shutdown::ShutdownError),
    #[error("cannot listen on {0}")]
    Bind(std::net::SocketAddr, #[source] std::io::Error),
    #[error("the server failed")]
    Serve(#[source] std::io::Error),
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => zone_operator::report_exit(&error),
    }
}

async fn run(args: cli::Args) -> Result<(), StartError> {
    zone_operator::telemetry::init(args.log_format, &args.log_level)
        .map_err(StartError::Telemetry)?;
    let fixed = args
        .endpoints
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| parse_static(e.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let selector = args.discovery_selector();
    if fixed.is_empty() && selector.is_none() {
        return Err(StartError::NoBackend);
    }
    let shutdown = Shutdown::new();
    let _signals = shutdown.listen_for_signals().map_err(StartError::Signals)?;
    let registry = Registry::new();
    let metrics = metrics::FederatorMetrics::register(&registry).map_err(StartError::Metrics)?;
    let readiness = Readiness::new();

    let endpoints = match selector {
        None => Endpoints::fixed(fixed),
        Some(selector) => {
            let agent = format!("rules-federator/{}", env!("CARGO_PKG_VERSION"));
            let client = zone_operator::client::connect(
                args.kubeconfig.as_deref(),
                args.kube_context.as_deref(),
                Some(&agent),
            )
            .await
            .map_err(StartError::Client)?;
            let namespace = args
                .discover_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            tracing::info!(namespace = %namespace, selector = %selector, port = args.discover_port, "discovering Prometheus pods");
            let (endpoints, watch) =
                Endpoints::discovering(fixed, client, &namespace, &selector, args.discover_port);
            tokio::spawn(watch);
            endpoints
        }
    };
    {
        let endpoints = endpoints.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            if endpoints.wait_ready().await {
                tracing::info!(
                    endpoints = endpoints.current().len(),
                    "endpoints known; ready"
                );
                readiness.set_ready();
            }
        });
    }

    let options = MergeOptions {
        replica_labels: args.replica_labels.clone(),
        shard_label: Some(args.shard_label.clone()).filter(|l| !l.is_empty()),
    };
    let api = Arc::new(api::Api {
        endpoints,
        fetcher: fetch::Fetcher::new(
            args.endpoint_timeout,
            usize::from(args.max_concurrency),
            metrics.clone(),
        ),
        options,
        partial: args.partial_response,
        metrics,
        merges: Arc::new(tokio::sync::Semaphore::new(usize::from(
            args.max_concurrent_merges,
        ))),
    });
    let router = Router::new()
        .route("/api/v1/rules", get(api::rules))
        .route("/api/v1/alerts", get(api::alerts))
        .with_state(api)
        .merge(zone_operator::server::router(readiness, registry));
    let listener = tokio::net::TcpListener::bind(args.listen_address)
        .await
        .map_err(|e| StartError::Bind(args.listen_address, e))?;
    let address = listener
        .local_addr()
        .map_err(|e| StartError::Bind(args.listen_address, e))?;
    tracing::info!(address = %address, "serving /api/v1/rules, /api/v1/alerts, /healthz, /readyz, /metrics");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled())
        .await
        .map_err(StartError::Serve)
}
