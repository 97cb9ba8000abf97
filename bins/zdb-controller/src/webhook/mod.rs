//! The validating eviction webhook: HTTPS (rustls) on every replica, leader or not, answering
//! AdmissionReviews for `pods/eviction` at `/validate-eviction`.
//!
//! The API server calls it through a Service with `failurePolicy: Fail` and does not retry a
//! refused connection, so a replica is a ready endpoint only while it can answer: three
//! readiness gates (caches synced, certificate loaded, listener serving), on the leader and on a
//! standby alike. At shutdown it serves on through the drain delay, while `/readyz` already
//! answers 503 and the endpoints drop it, then stops accepting and finishes the decisions it
//! holds ([`zone_operator::Runtime::drain_on_shutdown`]).

pub mod admission;
mod commit;
mod decide;
pub mod guess;
pub mod judge;
pub mod policy;
pub mod queue;
pub mod recent;
pub mod rollout;
pub mod verdict;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use futures::StreamExt;
use kube::Client;
use kube::core::admission::AdmissionResponse;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use zone_api::ZoneDisruptionBudget;
use zone_operator::https::{self, BindError, CertSource};
use zone_operator::readiness::Gate;
use zone_operator::serve;
use zone_operator::tls::renewal::ValidityError;
use zone_operator::tls::{CertStore, CertValidity, SelfSigned};
use zone_operator::{InitialList, RuntimeParts, WatchSet};

use crate::cli::Args;
use crate::metrics::{ZdbMetrics, reason};
use crate::shared::{SharedBudgets, SharedZones};
use judge::Judge;

pub const PATH: &str = "/validate-eviction";

/// Why the webhook cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("--webhook-cert-validity / --webhook-cert-renew-before")]
    CertFlags(#[source] ValidityError),
    #[error("--webhook-client-ca-file {0}: {1}")]
    ClientCa(String, String),
}

/// How long, after the listener closed, the decisions in flight get to be answered: the
/// decision deadline they are bound by, and a margin to write the answer.
pub fn in_flight_grace(args: &Args) -> Duration {
    args.decision_deadline + ANSWER_MARGIN
}

const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// The webhook, started: the future that keeps its caches and serves, and the caches (the
/// status controller reads them too).
pub struct Started<T> {
    pub task: T,
    pub budgets: SharedBudgets,
    pub zones: SharedZones,
}

/// Binds the webhook's address (a bad one fails start-up) and returns the future that keeps its
/// caches and serves until shutdown (see the module's notes); run it on every replica.
pub async fn start(
    parts: &RuntimeParts,
    args: &Args,
    initial_list: InitialList,
    metrics: ZdbMetrics,
) -> Result<Started<impl Future<Output = ()> + Send + 'static>, StartError> {
    let client = parts.client.clone();
    let source = cert_source(&client, args).map_err(StartError::CertFlags)?;
    let (listener, address) = https::bind(args.webhook_address).await?;
    let mut limits = parts.server_limits("webhook");
    if let Some(path) = &args.webhook_client_ca_file {
        // The CA certificates of the API server's client certificate for webhooks.
        let failed = |why: String| StartError::ClientCa(path.display().to_string(), why);
        let pem = std::fs::read(path).map_err(|e| failed(format!("cannot read: {e}")))?;
        limits.client_roots = Some(zone_operator::tls::client_roots(&pem).map_err(failed)?);
    }
    // Created before anything can be served, so /readyz names what is missing from the start.
    let gates = Gates {
        caches: parts.readiness.gate("webhook-caches"),
        certificate: parts.readiness.gate("webhook-certificate"),
        listener: parts.readiness.gate("webhook-listener"),
    };

    let mut watches = WatchSet::<ZoneDisruptionBudget>::new();
    let caches = Caches::watched(&mut watches, &client, args, initial_list);
    let keeper = keeper(parts, args, address, &caches, &metrics);
    let (shared_budgets, shared_zones) = (caches.budgets.clone(), caches.zones.clone());
    // The caches serve the decisions until the listener has closed: they end with `serving`.
    let keep_caches = caches.run(watches);
    let judge = judge(parts, args, &caches, metrics);
    // The API server keeps its connections to a replica alive: told to close them while this
    // replica drains, it moves to the others before the listener closes.
    let router = parts.shutdown.close_connections_while_draining(
        Router::new().route(PATH, post(validate)).with_state(judge),
    );

    let shutdown = parts.shutdown.clone();
    let in_flight = in_flight_grace(args);
    let serving = async move {
        let prepared = prepare(&client, &source, &gates, &caches);
        let certs = tokio::select! {
            certs = prepared => certs,
            () = shutdown.clone().stop_accepting() => None,
        };
        let Some(certs) = certs else { return };
        tracing::info!(address = %address, path = PATH, "eviction webhook serving");
        gates.listener.open();
        // The failurePolicy follows from here: this replica can now be called. The keeper runs
        // until the listener has closed; it has nothing to finish.
        tokio::select! {
            () = serve::serve_until(listener, Some(certs), router, limits, shutdown.stop_accepting(), in_flight) => {
                tracing::info!(address = %address, "eviction webhook stopped");
            }
            () = keeper.run() => {}
        }
        // The gates close as they drop: this replica no longer serves.
        drop(gates);
    };
    let task = async move {
        let caches = async {
            keep_caches.await;
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = caches => {}
            () = serving => {}
        }
    };
    Ok(Started {
        task,
        budgets: shared_budgets,
        zones: shared_zones,
    })
}

/// The webhook's readiness gates: a replica is a ready endpoint only with all three open.
struct Gates {
    caches: Gate,
    certificate: Gate,
    listener: Gate,
}

/// What the webhook judges from: the budgets and the nodes' zones, as watched.
struct Caches {
    budgets: SharedBudgets,
    zones: SharedZones,
    zdbs_synced: Arc<AtomicBool>,
}

impl Caches {
    /// The caches, added to `watches`.
    fn watched(
        watches: &mut WatchSet<ZoneDisruptionBudget>,
        client: &Client,
        args: &Args,
        initial_list: InitialList,
    ) -> Caches {
        Caches {
            budgets: SharedBudgets::new(watches.watch(
                "zonedisruptionbudgets",
                args.scope.api::<ZoneDisruptionBudget>(client),
                watcher::Config::default(),
                // The webhook's copies match and choose; what it decides from is read fresh.
                |zdb| zdb.metadata.managed_fields = None,
                // Each change is the status controller's trigger (see `Caches::run`).
                |zdb| vec![ObjectRef::from_obj(zdb)],
            )),
            zones: SharedZones::new(watches.zones(client, &args.scope.zone_label, initial_list)),
            // Set once the budget cache has its first list, by the serving path of `start`.
            zdbs_synced: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The future keeping the caches of `watches`, which publishes every budget change for the
    /// status controller. Ends when every watch has.
    fn run(&self, watches: WatchSet<ZoneDisruptionBudget>) -> impl Future<Output = ()> + use<> {
        let (drive, changes) = watches.start();
        let budgets = self.budgets.clone();
        let publish = changes.for_each(move |budget| {
            budgets.publish(budget);
            std::future::ready(())
        });
        async move {
            futures::join!(drive, publish);
        }
    }
}

/// The keeper of the webhook configuration's failurePolicy, once this replica can be called.
fn keeper(
    parts: &RuntimeParts,
    args: &Args,
    address: SocketAddr,
    caches: &Caches,
    metrics: &ZdbMetrics,
) -> policy::Keeper {
    policy::Keeper {
        client: parts.client.clone(),
        config_name: args.webhook_config_name.clone(),
        wanted: args.webhook_failure_policy,
        address,
        path: PATH,
        identity: parts.identity.clone(),
        caches_synced: caches.zdbs_synced.clone(),
        metrics: metrics.clone(),
        events: parts.events.clone(),
    }
}

/// The judge of every eviction this replica answers.
fn judge(parts: &RuntimeParts, args: &Args, caches: &Caches, metrics: ZdbMetrics) -> Arc<Judge> {
    let queues = Arc::new(queue::BudgetQueues::with_metrics(metrics.clone()));
    Arc::new(Judge {
        client: parts.client.clone(),
        zdbs: caches.budgets.store().clone(),
        zdbs_synced: caches.zdbs_synced.clone(),
        zones: caches.zones.zones().clone(),
        field_manager: args.scope.field_manager(&parts.controller),
        deadline: args.decision_deadline,
        metrics,
        events: parts.events.clone(),
        guesses: guess::BudgetGuesses::default(),
        recent: recent::RecentBudgets::default(),
        denial_ttl: args.denial_cache_ttl,
        rollout_users: args.rollout_users.clone(),
        queues,
        in_flight: Arc::new(tokio::sync::Semaphore::new(judge::MAX_IN_FLIGHT)),
        api_requests: Arc::new(tokio::sync::Semaphore::new(judge::MAX_API_REQUESTS)),
    })
}

/// The certificate, once the caches are filled too; `None` when a cache stopped first.
///
/// Without a certificate nothing can be served, but the caches (and, on the leader, the status
/// controller) need not wait: a mounted certificate may appear later, the API server may be
/// briefly unreachable.
async fn prepare(
    client: &Client,
    source: &CertSource,
    gates: &Gates,
    caches: &Caches,
) -> Option<Arc<CertStore>> {
    let certs = https::certificates_retrying(client, source).await;
    gates.certificate.open();
    // A pod's zone comes from the node cache: judging before it is filled would place every pod
    // in the unknown zone.
    if caches.zones.wait_until_ready().await.is_err() {
        tracing::error!("the node cache stopped before its first list; the webhook is not serving");
        return None;
    }
    // Judging without the budgets refuses every eviction of a selected pod (fail safe, but a
    // replica that can only refuse is no endpoint to route to).
    if caches.budgets.wait_until_ready().await.is_err() {
        tracing::error!(
            "the budget cache stopped before its first list; the webhook is not serving"
        );
        return None;
    }
    caches.zdbs_synced.store(true, Ordering::Release);
    gates.caches.open();
    Some(certs)
}

async fn validate(
    State(judge): State<Arc<Judge>>,
    client: Option<Extension<serve::ClientCertificate>>,
    body: Bytes,
) -> Response {
    let _timer = judge.metrics.latency().start_timer();
    let parsed = admission::parse(&body);
    // With --webhook-client-ca-file, an eviction is judged only for the API server.
    if let (Some(Extension(client)), Ok((_, Some(eviction)))) = (client, &parsed)
        && !client.verified
    {
        judge.metrics.decision(false, reason::UNAUTHENTICATED);
        tracing::warn!(namespace = %eviction.namespace, pod = %eviction.pod, "eviction review from a caller without the API server's client certificate; not judged");
        let message = "the caller presented no client certificate of --webhook-client-ca-file: only the API server's eviction reviews are judged";
        return (StatusCode::UNAUTHORIZED, message).into_response();
    }
    let response = match parsed {
        Err(error) => {
            tracing::warn!(error = %error, "unreadable AdmissionReview");
            AdmissionResponse::invalid(error.to_string())
        }
        Ok((request, None)) => {
            judge.metrics.decision(true, reason::NOT_AN_EVICTION);
            admission::allow(&request, Vec::new())
        }
        Ok((request, Some(eviction))) => {
            let verdict = judge.judge(&eviction).await;
            judge.metrics.decision(verdict.allowed, verdict.reason);
            tracing::debug!(namespace = %eviction.namespace, pod = %eviction.pod, dry_run = eviction.dry_run, allowed = verdict.allowed, reason = verdict.reason, "eviction judged");
            if verdict.allowed {
                admission::allow(&request, verdict.message.into_iter().collect())
            } else {
                if let Some(message) = &verdict.message {
                    tracing::info!(namespace = %eviction.namespace, pod = %eviction.pod, reason = verdict.reason, message = %message, "eviction denied");
                }
                admission::deny(&request, verdict.message.as_deref().unwrap_or("denied"))
            }
        }
    };
    Json(admission::review_json(response)).into_response()
}

/// Where the serving certificate comes from: `--self-signed` or `--cert-dir`; flags that leave
/// no room to renew fail start-up.
fn cert_source(client: &Client, args: &Args) -> Result<CertSource, ValidityError> {
    if !args.self_signed {
        return Ok(CertSource::Dir(args.cert_dir.clone()));
    }
    let validity = CertValidity::new(args.webhook_cert_validity, args.webhook_cert_renew_before)?;
    let secret_namespace = args
        .tls_secret_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    Ok(CertSource::SelfSigned(SelfSigned {
        app: "zdb-controller".to_string(),
        ca_name: "zdb-controller webhook CA".to_string(),
        secret_name: args.tls_secret_name.clone(),
        service_namespace: args
            .service_namespace
            .clone()
            .unwrap_or_else(|| secret_namespace.clone()),
        secret_namespace,
        service_name: args.service_name.clone(),
        webhook_config_name: Some(args.webhook_config_name.clone()),
        validity,
    }))
}
