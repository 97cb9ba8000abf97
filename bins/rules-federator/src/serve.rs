//! The federator on the shared runtime: unelected (every replica serves), connected to
//! Kubernetes only when discovery needs it, its API on the runtime's port next to `/healthz`,
//! `/readyz` and `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;

use zone_operator::metrics::MetricsError;
use zone_operator::{Readiness, Runtime, RuntimeError, Shutdown};
use zone_rules::MergeOptions;

use crate::api::{self, Api};
use crate::cli::Args;
use crate::endpoints::{Endpoint, EndpointError, Endpoints, parse_static};
use crate::fetch::Fetcher;
use crate::metrics::FederatorMetrics;

/// The name in the user agent and the runtime's logs.
const NAME: &str = "rules-federator";

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
    // Without discovery there is nothing to ask Kubernetes: static endpoints work where no
    // kubeconfig exists (local runs, the e2e tests, a federator outside any cluster).
    let started = match selector {
        Some(_) => Runtime::start_unelected(NAME, &args.base).await,
        None => Runtime::start_unelected_without_client(NAME, &args.base).await,
    };
    let mut runtime = started.map_err(|error| StartError::Runtime(Box::new(error)))?;
    let fixed = static_endpoints(args)?;
    let parts = runtime.clone_parts();
    let metrics = FederatorMetrics::register(&parts.registry).map_err(StartError::Metrics)?;
    let endpoints = match selector {
        None => Endpoints::fixed(fixed),
        Some(selector) => {
            let namespace = args
                .discover_namespace
                .clone()
                .unwrap_or_else(|| parts.client.default_namespace().to_string());
            tracing::info!(namespace = %namespace, selector = %selector, port = args.discover_port, "discovering Prometheus pods");
            let (endpoints, watch) = Endpoints::discovering(
                fixed,
                parts.client.clone(),
                &namespace,
                &selector,
                args.discover_port,
            );
            runtime.spawn_every_replica(watch);
            endpoints
        }
    };
    let options = MergeOptions {
        replica_labels: args.replica_labels.clone(),
        shard_label: Some(args.shard_label.clone()).filter(|l| !l.is_empty()),
    };
    let api = Api {
        endpoints: endpoints.clone(),
        fetcher: Fetcher::new(
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
    };
    runtime.merge_routes(api::router(Arc::new(api)));
    tracing::info!(address = %runtime.local_addr(), "serving /api/v1/rules, /api/v1/alerts");
    let work = ready_until_shutdown(endpoints, parts.readiness, parts.shutdown);
    Ok((runtime, work))
}

/// The `--endpoint`s; an error when there is no backend at all.
fn static_endpoints(args: &Args) -> Result<Vec<Endpoint>, StartError> {
    let fixed = args
        .endpoints
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| parse_static(e.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if fixed.is_empty() && args.discovery_selector().is_none() {
        return Err(StartError::NoBackend);
    }
    Ok(fixed)
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
