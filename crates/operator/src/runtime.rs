//! Ties the modules together so a binary's `main` stays short:
//!
//! ```no_run
//! # use clap::Parser;
//! # #[derive(Parser)] struct Args { #[command(flatten)] runtime: zone_operator::RuntimeArgs }
//! # async fn controller(_: zone_operator::RuntimeParts) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn main_() -> std::process::ExitCode {
//! let args = Args::parse();
//! let started = zone_operator::Runtime::controller("zau-controller", &args.runtime).start();
//! let runtime = match started.await {
//!     Ok(runtime) => runtime,
//!     Err(error) => return zone_operator::report_exit(&error),
//! };
//! let controllers = controller(runtime.clone_parts());
//! match runtime.run(controllers).await {
//!     Ok(()) => std::process::ExitCode::SUCCESS,
//!     Err(error) => zone_operator::report_exit(&error),
//! }
//! # }
//! ```

use std::{future::Future, net::SocketAddr, process::ExitCode, sync::Arc, time::Duration};

use kube::Client;
use prometheus::Registry;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::{BaseArgs, CliError, LeaderArgs, RuntimeArgs},
    client::{self, ClientError},
    events::EventPublisher,
    https::{self, CertSource},
    leader::{LeaderElector, LeaderError, LeaderHandle, LeaseConfig},
    metrics::{self, ControllerMetrics, MetricsError, Profile, ReconcileMetrics},
    readiness::Readiness,
    serve::Limits,
    server::{BoundServer, ExtraRoutes, ServerError},
    shutdown::{Shutdown, ShutdownError},
    telemetry::{self, TelemetryError},
    tls::CertStore,
    tls::TlsError,
    watch::InitialList,
};

/// After SIGTERM, how long the controllers get to finish their current reconcile before the
/// runtime stops waiting. Below the kubelet's default 30 s grace period, leaving time to release
/// the lease.
pub const CONTROLLER_GRACE: Duration = Duration::from_secs(20);

/// Why the runtime could not start, or why it ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot set up logging")]
    Telemetry(#[source] TelemetryError),
    #[error("cannot determine this replica's identity")]
    Identity(#[source] CliError),
    #[error("cannot connect to Kubernetes")]
    Client(#[source] ClientError),
    #[error("cannot install signal handlers")]
    Signals(#[source] ShutdownError),
    #[error("cannot register metrics")]
    Metrics(#[source] MetricsError),
    #[error("cannot start the health/metrics server")]
    Bind(#[source] ServerError),
    #[error("cannot load the certificate to serve HTTPS with")]
    Certificate(#[source] TlsError),
    #[error("invalid leader-election settings")]
    LeaderConfig(#[source] LeaderError),
    #[error("leadership lost; exiting so the Deployment restarts this replica as a standby")]
    LeadershipLost,
    #[error("leader election failed")]
    Elector(#[source] LeaderError),
    #[error("the leader-election task panicked")]
    ElectorTask(#[source] tokio::task::JoinError),
    #[error("the health/metrics server failed")]
    Server(#[source] ServerError),
    #[error("the health/metrics server task panicked")]
    ServerTask(#[source] tokio::task::JoinError),
    #[error("controller failed")]
    Controller(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The pieces a controller needs, cheap to clone.
#[derive(Clone)]
pub struct RuntimeParts {
    pub client: Client,
    pub registry: Registry,
    pub readiness: Readiness,
    pub shutdown: Shutdown,
    pub leader: LeaderHandle,
    pub metrics: ReconcileMetrics,
    pub events: EventPublisher,
    /// The controller name given to [`Runtime::controller`] or [`Runtime::server`].
    pub controller: String,
    /// This replica's identity (Lease holder, event reporting instance).
    pub identity: String,
    /// `--initial-list` as given, and as resolved against the API server (once per process).
    initial_list: InitialList,
    resolved_initial_list: Arc<OnceCell<InitialList>>,
    connections: Connections,
}

/// The connection flags, and the refusal counter every server of the process shares.
#[derive(Clone, Debug)]
struct Connections {
    args: BaseArgs,
    refused: prometheus::IntCounterVec,
}

impl Connections {
    fn limits(&self, server: &str) -> Limits {
        Limits {
            header_read: self.args.http_header_timeout,
            tls_handshake: self.args.tls_handshake_timeout,
            max_connections: usize::try_from(self.args.max_connections).unwrap_or(usize::MAX),
            refused: self.refused.with_label_values(&[server]),
            client_roots: None,
        }
    }
}

impl RuntimeParts {
    /// The limits of `--http-header-timeout`, `--tls-handshake-timeout` and
    /// `--max-connections` for another server of the process (a webhook), its refusals counted
    /// as `server`.
    pub fn server_limits(&self, server: &str) -> Limits {
        self.connections.limits(server)
    }

    /// Metrics handle for the runtime's own controller name.
    pub fn controller_metrics(&self) -> ControllerMetrics {
        self.metrics.controller(&self.controller)
    }

    /// How the caches load their initial state: `--initial-list`, with `auto` resolved by asking
    /// the API server once (pods of `namespace`, or of all namespaces); every later call, from
    /// any clone, gets the same answer.
    pub async fn initial_list(&self, namespace: Option<&str>) -> InitialList {
        *self
            .resolved_initial_list
            .get_or_init(|| self.initial_list.resolve(&self.client, namespace))
            .await
    }
}

/// How the runtime's one port (`/healthz`, `/readyz`, `/metrics` and the binary's routes) is
/// served.
#[derive(Clone, Debug, Default)]
pub enum Serving {
    /// Plain HTTP.
    #[default]
    Http,
    /// HTTPS only, with the certificate of the source, reloaded without a restart
    /// ([`https::certificates`]; a directory is re-read every few seconds). The kubelet's probes
    /// and Prometheus's scrapes of the port must use HTTPS too.
    Https(CertSource),
}

/// A started runtime: server listening, signals handled, leader election running.
pub struct Runtime {
    parts: RuntimeParts,
    address: SocketAddr,
    server: JoinHandle<Result<(), ServerError>>,
    routes: ExtraRoutes,
    elector: Elector,
    every_replica: Vec<JoinHandle<()>>,
    /// How long the tasks of every replica get, once the server has stopped, to finish their
    /// in-flight work before they are aborted ([`Runtime::drain_on_shutdown`]).
    in_flight_grace: Duration,
    /// The HTTPS certificate store (with [`Serving::Https`]).
    certs: Option<Arc<CertStore>>,
}

/// The leader election's task and what stops it, when elected.
type Elector = Option<(CancellationToken, JoinHandle<Result<(), LeaderError>>)>;

/// How a runtime is to reach Kubernetes.
enum Connect {
    /// Read the kubeconfig (or the in-cluster config), with logging and signal handlers set up.
    Kubernetes,
    /// Nothing to ask Kubernetes: no kubeconfig is read, nothing connects, and `parts.client` is
    /// [`client::disconnected`], whose every request fails at once.
    Without,
    /// A client made by the caller (tests, binaries with special clients), with its identity and
    /// shutdown signal; logging and signal handlers are the caller's.
    Given(String, Client, Shutdown),
}

/// What a runtime will be, before it starts: [`Runtime::controller`] or [`Runtime::server`],
/// then [`RuntimeBuilder::start`].
pub struct RuntimeBuilder<'a> {
    controller: &'a str,
    args: &'a BaseArgs,
    leader: Option<&'a LeaderArgs>,
    profile: Profile,
    serving: Serving,
    connect: Connect,
}

impl Runtime {
    /// A controller, leader-elected unless `--leader-elect=false`; it reports its leadership.
    pub fn controller<'a>(controller: &'a str, args: &'a RuntimeArgs) -> RuntimeBuilder<'a> {
        RuntimeBuilder {
            controller,
            args: &args.base,
            leader: args.leader.leader_elect.then_some(&args.leader),
            profile: Profile::Controllers,
            serving: Serving::Http,
            connect: Connect::Kubernetes,
        }
    }

    /// A stateless server: no leader election, so every replica runs the work given to
    /// [`Runtime::run`] at once (its flags are [`BaseArgs`] alone).
    pub fn server<'a>(controller: &'a str, args: &'a BaseArgs) -> RuntimeBuilder<'a> {
        RuntimeBuilder {
            controller,
            args,
            leader: None,
            profile: Profile::Server,
            serving: Serving::Http,
            connect: Connect::Kubernetes,
        }
    }
}

impl RuntimeBuilder<'_> {
    /// The port served as `serving` says (plain HTTP by default).
    #[must_use]
    pub fn serving(mut self, serving: Serving) -> Self {
        self.serving = serving;
        self
    }

    /// Unless `kubernetes`, nothing connects to Kubernetes (the rules-federator given static
    /// endpoints only): no kubeconfig is read, and every request of `parts.client` fails at once.
    #[must_use]
    pub fn kubernetes(mut self, kubernetes: bool) -> Self {
        if !kubernetes {
            self.connect = Connect::Without;
        }
        self
    }

    /// The caller's client, identity and shutdown signal instead of connecting (tests, and
    /// binaries with special clients).
    #[must_use]
    pub fn client(mut self, identity: String, client: Client, shutdown: Shutdown) -> Self {
        self.connect = Connect::Given(identity, client, shutdown);
        self
    }

    /// Logging, the client and signal handlers (unless given), then metrics, the server and
    /// leader election. A certificate that cannot be loaded fails the start
    /// ([`RuntimeError::Certificate`]).
    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let (identity, client, shutdown) = match self.connect {
            Connect::Kubernetes => connect(self.controller, self.args).await?,
            Connect::Without => {
                let identity = prepare(self.args)?;
                let client = client::disconnected(&format!(
                    "{} was started without Kubernetes",
                    self.controller
                ));
                (identity, client, listen_for_signals()?)
            }
            Connect::Given(identity, client, shutdown) => (identity, client, shutdown),
        };
        Runtime::assemble(
            self.controller,
            self.args,
            self.leader,
            self.profile,
            &self.serving,
            identity,
            client,
            shutdown,
        )
        .await
    }
}

impl Runtime {
    /// `profile` decides the common metrics ([`metrics::register_common`]): a stateless server
    /// ([`Runtime::server`]) reports no leadership; controllers, elected or not, do.
    #[allow(clippy::too_many_arguments)]
    async fn assemble(
        controller: &str,
        args: &BaseArgs,
        leader_args: Option<&LeaderArgs>,
        profile: Profile,
        serving: &Serving,
        identity: String,
        client: Client,
        shutdown: Shutdown,
    ) -> Result<Self, RuntimeError> {
        let registry = Registry::new();
        let common = metrics::register_common(&registry, controller, profile)
            .map_err(RuntimeError::Metrics)?;
        let metrics = common.reconcile;
        let readiness = Readiness::new();
        readiness.follow_shutdown(&shutdown);
        let connections = Connections {
            args: args.clone(),
            refused: common.refused_connections,
        };
        let bound = bind(args, serving, &client, &connections).await?;
        let address = bound.local_addr();
        let certs = bound.cert_store();

        let (leader, elector) = elect(controller, leader_args, &client, &identity)?;
        if let Some(leader_metrics) = common.leader {
            // Ends once leadership does (or at once without election).
            let _follows = tokio::spawn(leader_metrics.follow(leader.clone()));
        }

        let routes = ExtraRoutes::default();
        let server = tokio::spawn(bound.serve_with(
            readiness.clone(),
            registry.clone(),
            shutdown.clone(),
            routes.clone(),
        ));
        let events = EventPublisher::new(client.clone(), controller, &identity);
        Ok(Self {
            parts: RuntimeParts {
                client,
                registry,
                readiness,
                shutdown,
                leader,
                metrics,
                events,
                controller: controller.to_owned(),
                identity,
                initial_list: args.initial_list,
                resolved_initial_list: Arc::new(OnceCell::new()),
                connections,
            },
            address,
            server,
            routes,
            elector,
            every_replica: Vec::new(),
            in_flight_grace: Duration::ZERO,
            certs,
        })
    }

    /// The pieces to build the controllers from (register extra metrics into `registry` before
    /// the first scrape).
    pub fn parts(&self) -> &RuntimeParts {
        &self.parts
    }

    pub fn clone_parts(&self) -> RuntimeParts {
        self.parts.clone()
    }

    /// Starts `task` now, on every replica, leader or standby (a webhook or an API server next to
    /// leader-elected controllers). It stops when the runtime stops: it should watch
    /// [`Shutdown`] to finish in-flight work (a server: [`Shutdown::stop_accepting`]); it is
    /// aborted once the server has stopped, or the in-flight grace of
    /// [`Runtime::drain_on_shutdown`] later.
    pub fn spawn_every_replica<F>(&mut self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.every_replica.push(tokio::spawn(task));
    }

    /// Serves `routes` on the runtime's port too, next to `/healthz`, `/readyz` and `/metrics`:
    /// one port for the kubelet, Prometheus and a stateless server's clients. Their paths answer
    /// 404 until this is called; the runtime's own paths win over routes of the same name.
    pub fn merge_routes(&self, routes: axum::Router) {
        self.routes.merge(routes);
    }

    /// Shut down as a server behind a Service must, so no client is refused: at the trigger
    /// `/readyz` answers 503 (always so); servers keep accepting for `delay`, long enough for
    /// the Service's endpoints, in every client's view, to drop this replica; then they stop
    /// accepting, and the tasks of every replica get `in_flight` to finish what they answer.
    /// The pod's termination grace period must exceed `delay` + `in_flight` (and the
    /// controllers' own [`CONTROLLER_GRACE`] when that is longer than `delay`). Without this
    /// call both are 0: servers stop at the trigger, as a replica nobody calls through a
    /// Service may.
    pub fn drain_on_shutdown(&mut self, delay: Duration, in_flight: Duration) {
        self.parts.shutdown.set_drain_delay(delay);
        self.in_flight_grace = in_flight;
    }

    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// The certificate store the HTTPS port serves from (reloaded or renewed in place), for
    /// another port of the process to serve the same certificate; `None` in plain HTTP.
    pub fn cert_store(&self) -> Option<Arc<CertStore>> {
        self.certs.clone()
    }

    /// Runs `controllers` while this replica leads, then shuts everything down in order.
    ///
    /// - Standby: `/readyz` says "standby" (200) until the lease is acquired or shutdown starts.
    /// - Leader: `/readyz` is 503 until the controllers call `Readiness::set_ready`.
    /// - Leadership lost: `controllers` is dropped at once and `Err(LeadershipLost)` returned.
    /// - SIGTERM: `/readyz` answers 503 at once; `controllers` (which should watch `Shutdown`)
    ///   gets [`CONTROLLER_GRACE`] to finish; then the lease is released, so the standby takes
    ///   over without waiting for it to expire, and the servers stop once the drain delay has
    ///   passed ([`Runtime::drain_on_shutdown`]).
    ///
    /// `controllers` is a future, so nothing in it runs before leadership is acquired.
    pub async fn run<F, E>(self, controllers: F) -> Result<(), RuntimeError>
    where
        F: Future<Output = Result<(), E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let parts = self.parts.clone();
        // Only a replica with an elector waits for a Lease; without one, `/readyz` must not
        // report standby (200), even for an instant, before the work says it is ready.
        parts.readiness.set_standby(self.elector.is_some());
        let leading = tokio::select! {
            acquired = parts.leader.acquired() => acquired,
            () = parts.shutdown.cancelled() => false,
        };
        let outcome = if leading {
            parts.readiness.set_standby(false);
            tracing::info!(controller = %parts.controller, "starting controllers");
            drive(controllers, &parts).await
        } else {
            Ok(())
        };
        let stopped = self.stop().await;
        outcome.and(stopped)
    }

    /// Releases the lease, stops the server (after the drain delay) and waits for both, then for
    /// the tasks of every replica (up to the in-flight grace). [`Runtime::run`] calls it; call
    /// it directly only when not using `run`, after the controllers have stopped.
    pub async fn stop(mut self) -> Result<(), RuntimeError> {
        let mut result = Ok(());
        if let Some((stop, task)) = self.elector {
            stop.cancel();
            match task.await {
                // A loss has already been reported by `run` through `LeaderHandle::lost`.
                Ok(Ok(())) | Ok(Err(LeaderError::Lost { .. })) => {}
                Ok(Err(error)) => result = Err(RuntimeError::Elector(error)),
                Err(error) => result = Err(RuntimeError::ElectorTask(error)),
            }
        }
        self.parts.shutdown.trigger();
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => result = result.and(Err(RuntimeError::Server(error))),
            Err(error) => result = result.and(Err(RuntimeError::ServerTask(error))),
        }
        // The server stopped accepting when the tasks' servers did (the same drain delay): from
        // here they only finish the requests they hold.
        let grace = self.in_flight_grace;
        if !grace.is_zero() {
            let finishing = futures::future::join_all(self.every_replica.iter_mut());
            if tokio::time::timeout(grace, finishing).await.is_err() {
                tracing::warn!(grace = ?grace, "tasks of every replica still running; aborting them");
            }
        }
        for task in self.every_replica {
            task.abort();
        }
        result
    }
}

/// Logging, identity, client and signal handlers: what every profile starts with.
async fn connect(
    controller: &str,
    args: &BaseArgs,
) -> Result<(String, Client, Shutdown), RuntimeError> {
    let identity = prepare(args)?;
    let agent = format!("{controller}/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let client = client::connect(
        args.kubeconfig.as_deref(),
        args.kube_context.as_deref(),
        Some(&agent),
    )
    .await
    .map_err(RuntimeError::Client)?;
    let shutdown = listen_for_signals()?;
    Ok((identity, client, shutdown))
}

/// The main server's listener (`/metrics`, probes, extra routes), with TLS when `serving` asks.
async fn bind(
    args: &BaseArgs,
    serving: &Serving,
    client: &Client,
    connections: &Connections,
) -> Result<BoundServer, RuntimeError> {
    let mut bound = BoundServer::bind(args.listen_address)
        .await
        .map_err(RuntimeError::Bind)?
        .with_limits(connections.limits("main"));
    if let Serving::Https(source) = serving {
        // The server's TLS config takes the process-wide provider.
        client::install_crypto_provider();
        let certs = https::certificates(client, source)
            .await
            .map_err(RuntimeError::Certificate)?;
        bound = bound.with_tls(certs);
    }
    Ok(bound)
}

/// The task that elects over the Lease which replica acts, and the handle telling whether this
/// one does; without `leader_args`, every replica acts.
fn elect(
    controller: &str,
    leader_args: Option<&LeaderArgs>,
    client: &Client,
    identity: &str,
) -> Result<(LeaderHandle, Elector), RuntimeError> {
    let Some(args) = leader_args else {
        tracing::info!("no leader election: every replica acts");
        return Ok((LeaderHandle::unelected(), None));
    };
    let config = LeaseConfig {
        name: args
            .lease_name
            .clone()
            .unwrap_or_else(|| controller.to_owned()),
        namespace: args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        identity: identity.to_owned(),
        lease_duration: args.lease_duration,
        renew_interval: args.renew_interval,
    };
    tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "leader election enabled");
    let (elector, handle) =
        LeaderElector::new(client.clone(), config).map_err(RuntimeError::LeaderConfig)?;
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    Ok((handle, Some((stop, task))))
}

/// Logging first (so every later failure is logged), then this replica's identity.
fn prepare(args: &BaseArgs) -> Result<String, RuntimeError> {
    telemetry::init(args.log_format, &args.log_level).map_err(RuntimeError::Telemetry)?;
    args.resolve_identity().map_err(RuntimeError::Identity)
}

fn listen_for_signals() -> Result<Shutdown, RuntimeError> {
    let shutdown = Shutdown::new();
    // The handler task lives for the whole process; its handle is not needed.
    let _signals = shutdown
        .listen_for_signals()
        .map_err(RuntimeError::Signals)?;
    Ok(shutdown)
}

async fn drive<F, E>(controllers: F, parts: &RuntimeParts) -> Result<(), RuntimeError>
where
    F: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let controller_error = |e: E| RuntimeError::Controller(e.into());
    let mut controllers = std::pin::pin!(controllers);
    tokio::select! {
        result = &mut controllers => result.map_err(controller_error),
        () = parts.leader.lost() => {
            // Triggered so every task watching the token stops too; the binary exits non-zero.
            parts.shutdown.trigger();
            Err(RuntimeError::LeadershipLost)
        }
        () = parts.shutdown.cancelled() => {
            tokio::select! {
                finished = tokio::time::timeout(CONTROLLER_GRACE, &mut controllers) => match finished {
                    Ok(result) => result.map_err(controller_error),
                    Err(_) => {
                        tracing::warn!(grace = ?CONTROLLER_GRACE, "controllers did not stop in time");
                        Ok(())
                    }
                },
                () = parts.leader.lost() => Err(RuntimeError::LeadershipLost),
            }
        }
    }
}

/// Logs `error` with its whole source chain and returns a failing exit code; for `main`.
pub fn report_exit(error: &(dyn std::error::Error + 'static)) -> ExitCode {
    let chain = crate::controller::causes(error);
    tracing::error!(error = %error, causes = ?chain, "exiting");
    // Logging may not be set up yet (e.g. a bad --log-level): say it on stderr as well.
    eprintln!("error: {error}");
    for cause in &chain {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::FAILURE
}

/// The whole `main` of a binary that runs one leader-elected controller: the runtime started
/// as `controller`, then `work` (given the runtime's parts) run until shutdown; a failure of
/// either is reported and becomes the exit code.
pub async fn run_controller<F, Fut, E>(controller: &str, args: &RuntimeArgs, work: F) -> ExitCode
where
    F: FnOnce(RuntimeParts) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let runtime = match Runtime::controller(controller, args).start().await {
        Ok(runtime) => runtime,
        Err(error) => return report_exit(&error),
    };
    let work = work(runtime.clone_parts());
    match runtime.run(work).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => report_exit(&error),
    }
}
