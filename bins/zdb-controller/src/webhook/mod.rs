//! The validating eviction webhook: HTTPS (rustls) on every replica, leader or not, answering
//! AdmissionReviews for `pods/eviction` at `/validate-eviction`.

pub mod admission;
pub mod guess;
pub mod judge;
pub mod recent;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::core::admission::AdmissionResponse;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use zone_api::ZoneDisruptionBudget;
use zone_operator::RuntimeParts;

use crate::cli::Args;
use crate::controller::node_cache;
use crate::metrics::{ZdbMetrics, reason};
use crate::tls::{self, CertStore, SelfSigned, TlsError};
use judge::Judge;

/// After failing to obtain a certificate, try again after this long.
const CERT_RETRY: Duration = Duration::from_secs(5);

/// How often a mounted certificate directory is re-read.
const CERT_DIR_POLL: Duration = Duration::from_secs(5);

/// How often, in self-signed mode, the Secret is re-read (someone may have deleted or replaced
/// it) and the caBundle checked (the configuration may have been re-applied without it).
const SELF_SIGNED_POLL: Duration = Duration::from_secs(10);

pub const PATH: &str = "/validate-eviction";

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot set up the serving certificate")]
    Tls(#[source] TlsError),
    #[error("cannot listen on {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Starts the webhook server; it serves until the returned task is aborted.
pub async fn start(
    parts: &RuntimeParts,
    args: &Args,
    metrics: ZdbMetrics,
) -> Result<(JoinHandle<()>, SocketAddr), WebhookError> {
    let client = parts.client.clone();
    let source = CertSource::from_args(&client, args);
    let listener = TcpListener::bind(args.webhook_address)
        .await
        .map_err(|source| WebhookError::Bind {
            address: args.webhook_address,
            source,
        })?;
    let address = listener.local_addr().map_err(|source| WebhookError::Bind {
        address: args.webhook_address,
        source,
    })?;

    let zdb_api: Api<ZoneDisruptionBudget> = match args.watch_namespace.as_deref() {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let (zdbs, writer) = reflector::store();
    let zdb_events = watcher(zdb_api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    let (nodes, node_events) = node_cache(&client, &args.zone_label, args.runtime.initial_list);
    let zdbs_synced = Arc::new(AtomicBool::new(false));
    {
        let zdbs = zdbs.clone();
        let synced = zdbs_synced.clone();
        tokio::spawn(async move {
            if zdbs.wait_until_ready().await.is_ok() {
                synced.store(true, Ordering::Release);
            }
        });
    }
    let client_for_certs = client.clone();
    let nodes_ready = nodes.clone();
    let judge = Arc::new(Judge {
        client,
        zdbs,
        zdbs_synced,
        nodes,
        zone_label: args.zone_label.clone(),
        deadline: args.decision_deadline,
        metrics,
        events: parts.events.clone(),
        guesses: guess::BudgetGuesses::default(),
        recent: recent::RecentBudgets::default(),
        denial_ttl: args.denial_cache_ttl,
    });
    let router = Router::new().route(PATH, post(validate)).with_state(judge);

    let cert_client = client_for_certs;
    let task = tokio::spawn(async move {
        // Without a certificate nothing can be served, but the caches (and, on the leader, the
        // status controller) need not wait: a mounted certificate may appear later, the API
        // server may be briefly unreachable.
        let serving = async move {
            let certs = loop {
                match certificates(&cert_client, &source).await {
                    Ok(certs) => break certs,
                    Err(error) => {
                        tracing::error!(error = %error, source = ?std::error::Error::source(&error), retry = ?CERT_RETRY, "no serving certificate; the webhook is not serving yet");
                        tokio::time::sleep(CERT_RETRY).await;
                    }
                }
            };
            // A pod's zone comes from the node cache: judging before it is filled would place
            // every pod in the unknown zone.
            if nodes_ready.wait_until_ready().await.is_err() {
                tracing::error!(
                    "the node cache stopped before its first list; the webhook is not serving"
                );
                return;
            }
            let mut config = rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_cert_resolver(certs);
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let acceptor = TlsAcceptor::from(Arc::new(config));
            tracing::info!(address = %address, path = PATH, "eviction webhook serving");
            serve(listener, acceptor, router).await;
        };
        let caches = async move {
            let mut zdb_events = std::pin::pin!(zdb_events);
            let mut node_events = std::pin::pin!(node_events);
            loop {
                tokio::select! {
                    event = zdb_events.next() => match event {
                        Some(Err(error)) => tracing::warn!(cache = "zonedisruptionbudgets", error = %error, "watch error"),
                        Some(Ok(_)) => {}
                        None => return,
                    },
                    node = node_events.next() => if node.is_none() { return; },
                }
            }
        };
        tokio::join!(caches, serving);
    });
    Ok((task, address))
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, router: Router) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(error = %error, "webhook accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(error) => {
                    tracing::debug!(error = %error, "TLS handshake failed");
                    return;
                }
            };
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(error = %error, "webhook connection ended with an error");
            }
        });
    }
}

async fn validate(State(judge): State<Arc<Judge>>, body: Bytes) -> Json<serde_json::Value> {
    let _timer = judge.metrics.latency().start_timer();
    let response = match admission::parse(&body) {
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
    Json(admission::review_json(response))
}

/// Where the serving certificate comes from.
enum CertSource {
    Dir(std::path::PathBuf),
    SelfSigned(SelfSigned),
}

impl CertSource {
    fn from_args(client: &Client, args: &Args) -> CertSource {
        if !args.self_signed {
            return CertSource::Dir(args.cert_dir.clone());
        }
        let secret_namespace = args
            .tls_secret_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        CertSource::SelfSigned(SelfSigned {
            secret_name: args.tls_secret_name.clone(),
            service_namespace: args
                .service_namespace
                .clone()
                .unwrap_or_else(|| secret_namespace.clone()),
            secret_namespace,
            service_name: args.service_name.clone(),
            webhook_config_name: args.webhook_config_name.clone(),
        })
    }
}

/// The certificate store, and the task keeping it (and the caBundle) current.
async fn certificates(
    client: &Client,
    source: &CertSource,
) -> Result<Arc<CertStore>, WebhookError> {
    let settings = match source {
        CertSource::Dir(dir) => {
            let dir = dir.clone();
            let mut last = tls::read_dir(&dir).map_err(WebhookError::Tls)?;
            let store = Arc::new(CertStore::new(
                last.certified_key().map_err(WebhookError::Tls)?,
            ));
            let reloading = store.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(CERT_DIR_POLL).await;
                    tls::reload_dir(&dir, &reloading, &mut last);
                }
            });
            return Ok(store);
        }
        CertSource::SelfSigned(settings) => settings.clone(),
    };
    let generated = tls::ensure_secret(client, &settings)
        .await
        .map_err(WebhookError::Tls)?;
    let store = Arc::new(CertStore::new(
        generated.pair.certified_key().map_err(WebhookError::Tls)?,
    ));
    let client = client.clone();
    let keeping = store.clone();
    tokio::spawn(async move {
        let mut current = generated;
        loop {
            match tls::sync_ca_bundle(&client, &settings.webhook_config_name, &current.ca).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(config = %settings.webhook_config_name, "ValidatingWebhookConfiguration not found; its caBundle will be set once it exists")
                }
                Err(error) => {
                    tracing::warn!(error = %error, source = ?std::error::Error::source(&error), "cannot update the caBundle")
                }
            }
            tokio::time::sleep(SELF_SIGNED_POLL).await;
            match tls::ensure_secret(&client, &settings).await {
                Ok(latest) if latest.pair != current.pair => match latest.pair.certified_key() {
                    Ok(key) => {
                        keeping.swap(key);
                        tracing::info!(secret = %settings.secret_name, "serving the certificate of the changed Secret");
                        current = latest;
                    }
                    Err(error) => {
                        tracing::warn!(error = %error, "the Secret's certificate is unusable; keeping the current one")
                    }
                },
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error, source = ?std::error::Error::source(&error), "cannot re-read the webhook Secret")
                }
            }
        }
    });
    Ok(store)
}
