//! One HTTP port for the kubelet and Prometheus: `/healthz`, `/readyz`, `/metrics`, and the
//! routes a binary adds ([`ExtraRoutes`]).

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use hyper::service::Service as _;
use hyper_util::service::TowerToHyperService;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;

use crate::{
    readiness::{Readiness, ReadyState},
    serve::{self, Limits},
    shutdown::Shutdown,
    tls::CertStore,
};

/// How long requests in flight get to finish once the listener is closed (idle connections close
/// at once; one that has not sent its first request yet is waited for, within the header
/// timeout: [`serve::serve_until`]). Below the kubelet's default 30 s grace period.
const IN_FLIGHT: Duration = Duration::from_secs(20);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the bound address")]
    LocalAddr(#[source] std::io::Error),
}

#[derive(Clone)]
struct AppState {
    readiness: Readiness,
    registry: Registry,
}

/// The routes, without a listener (tests drive them with `tower::ServiceExt::oneshot`).
pub fn router(readiness: Readiness, registry: Registry) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AppState {
            readiness,
            registry,
        })
}

/// Routes a binary serves on the runtime's port next to `/healthz`, `/readyz` and `/metrics` (a
/// stateless server's API), added after the server has started: the runtime binds the port
/// before the binary has built the state its routes need (its metrics go into the runtime's
/// registry). Until added, their paths answer 404 as any unknown path does; the runtime's own
/// paths win over routes of the same name. Cheap to clone; every clone shares the routes.
#[derive(Clone, Default)]
pub struct ExtraRoutes {
    routes: Arc<RwLock<Router>>,
}

impl ExtraRoutes {
    /// Adds `routes` to those served; panics, as [`Router::merge`] does, when a path is routed
    /// twice.
    pub fn merge(&self, routes: Router) {
        let mut current = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        // Merged into a clone (cheap: the routes are behind an Arc) so a panicking merge leaves
        // the served routes as they were.
        *current = current.clone().merge(routes);
    }

    /// The routes now; a request is answered by the routes of the moment it arrived.
    fn current(&self) -> Router {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// [`router`], with what it does not route handed to `extra`.
pub fn router_with(readiness: Readiness, registry: Registry, extra: ExtraRoutes) -> Router {
    router(readiness, registry).fallback(move |request: Request| {
        // hyper-util's adapter calls the router as tower asks (ready, then call), as serve.rs
        // serves its router.
        let routes = TowerToHyperService::new(extra.current());
        async move {
            match routes.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    })
}

/// A bound listener; binding separately from serving lets a caller (and tests with port 0)
/// learn the address and fail at start-up when the port is taken.
pub struct BoundServer {
    listener: TcpListener,
    address: SocketAddr,
    /// HTTPS only, with the certificate of the store at each handshake ([`BoundServer::with_tls`]).
    tls: Option<Arc<CertStore>>,
    limits: Limits,
}

impl BoundServer {
    /// Binds `address` (dual-stack for `[::]`, see [`serve::listen`]), each connection
    /// served within the default [`Limits`] until [`BoundServer::with_limits`].
    pub async fn bind(address: SocketAddr) -> Result<Self, ServerError> {
        let listener =
            serve::listen(address).map_err(|source| ServerError::Bind { address, source })?;
        let address = listener.local_addr().map_err(ServerError::LocalAddr)?;
        Ok(Self {
            listener,
            address,
            tls: None,
            limits: Limits::default(),
        })
    }

    /// Serves each connection within `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves HTTPS only (HTTP/1.1), with the certificate `certs` holds at each handshake, so a
    /// reloaded one is served without a restart ([`crate::https::certificates`]). A plain HTTP
    /// request fails its handshake: probes and scrapes of this port must use HTTPS too.
    pub fn with_tls(mut self, certs: Arc<CertStore>) -> Self {
        self.tls = Some(certs);
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// The certificate store of [`BoundServer::with_tls`], if any.
    pub fn cert_store(&self) -> Option<Arc<CertStore>> {
        self.tls.clone()
    }

    /// Serves until `shutdown` triggers and its drain delay has passed
    /// ([`Shutdown::stop_accepting`]: `/readyz` answers 503 meanwhile), then finishes in-flight
    /// requests and returns.
    pub async fn serve(
        self,
        readiness: Readiness,
        registry: Registry,
        shutdown: Shutdown,
    ) -> Result<(), ServerError> {
        self.serve_with(readiness, registry, shutdown, ExtraRoutes::default())
            .await
    }

    /// [`BoundServer::serve`], with `extra` served too.
    pub async fn serve_with(
        self,
        readiness: Readiness,
        registry: Registry,
        shutdown: Shutdown,
        extra: ExtraRoutes,
    ) -> Result<(), ServerError> {
        // Behind a Service, kept-alive clients move to another replica during the drain delay.
        let router =
            shutdown.close_connections_while_draining(router_with(readiness, registry, extra));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        tracing::info!(address = %self.address, scheme, "serving /healthz, /readyz, /metrics");
        serve::serve_until(
            self.listener,
            self.tls,
            router,
            self.limits,
            shutdown.stop_accepting(),
            IN_FLIGHT,
        )
        .await;
        Ok(())
    }
}

/// Liveness: the process answers, nothing more. Checking the API server here would make the
/// kubelet restart every replica during an API outage, which fixes nothing.
async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 or 503, and why in one line: the closed gates by name, so `kubectl get --raw` or a probe
/// failure event says what a replica waits for.
async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    match state.readiness.state() {
        ReadyState::Ready => (StatusCode::OK, "ready\n".to_owned()),
        ReadyState::Standby => (StatusCode::OK, "standby\n".to_owned()),
        ReadyState::NotReady => (unavailable, "not ready\n".to_owned()),
        ReadyState::Gated => {
            let gates = state.readiness.failing_gates().join(", ");
            (unavailable, format!("not ready: waiting for {gates}\n"))
        }
        ReadyState::ShuttingDown => (unavailable, "shutting down\n".to_owned()),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&state.registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, encoder.format_type())], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests;
