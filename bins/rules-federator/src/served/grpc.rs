//! Thanos's gRPC APIs on `--grpc-listen-address`: `thanos.Rules/Rules`, the same merged and
//! deduplicated groups as `/api/v1/rules`, filtered as the request says; and
//! `thanos.info.Info/Info`, which tells a Thanos Querier that the federator serves rules, so it
//! can be one of its `--endpoint`s.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tonic::{Request, Response, Status};
use zone_operator::Shutdown;
use zone_operator::auth::Decision;
use zone_operator::serve::Limits;
use zone_operator::tls::CertStore;
use zone_rules::parse_rules_query;
use zone_thanos::thanos::info::info_server::{Info, InfoServer};
use zone_thanos::thanos::info::{InfoRequest, InfoResponse, RulesInfo};
use zone_thanos::thanos::rules_request::Type;
use zone_thanos::thanos::rules_server::{Rules, RulesServer};
use zone_thanos::thanos::{
    PartialResponseStrategy, RuleGroup, RulesRequest, RulesResponse, rules_response,
};

use crate::cli::PartialResponse;
use crate::served::api::{Api, Refusal};
use crate::served::guard::Guard;

/// What the federator tells an Info caller it is: a component that federates others' APIs, as
/// a Thanos Querier does.
const COMPONENT_TYPE: &str = "query";

/// The Rules and Info services over the API the HTTP routes serve, behind the HTTP routes'
/// guard (the same turns, the same caller checks).
#[derive(Clone)]
pub struct Services {
    api: Arc<Api>,
    guard: Arc<Guard>,
}

/// The gRPC path of the Rules call: what `--auth=kubernetes` reviews for a non-resource
/// permission, as the HTTP path for `/api/v1/rules`.
const RULES_PATH: &str = "/thanos.Rules/Rules";

/// Binds `address` (so a taken port fails the start) and serves both services there until
/// `shutdown` and its drain delay, as the HTTP port (callers whose view of the Service still
/// holds this replica are answered); then the connections are told to go away (HTTP/2 GOAWAY)
/// and the calls under way finish. With `tls`, over TLS only, with the certificate the store
/// holds at each handshake (the HTTPS port's, reloaded as it is). Every connection within
/// `limits`, as the HTTP servers' (see [`conn`]).
pub async fn serve(
    address: SocketAddr,
    api: Arc<Api>,
    guard: Arc<Guard>,
    shutdown: Shutdown,
    tls: Option<PortTls>,
    limits: Limits,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()> + Send + use<>)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let services = Services { api, guard };
    let server = tonic::transport::Server::builder()
        .add_service(RulesServer::new(services.clone()))
        .add_service(InfoServer::new(services));
    let acceptor = match tls {
        None => None,
        Some((certs, clients)) => Some(acceptor(certs, clients.as_ref())?),
    };
    let drained = {
        let shutdown = shutdown.clone();
        async move {
            shutdown.cancelled().await;
            tokio::time::sleep(shutdown.drain_delay()).await;
        }
    };
    let drained = futures::FutureExt::shared(Box::pin(drained));
    let incoming = Incoming(incoming(listener, acceptor, limits, drained.clone()));
    let work = async move {
        let stopped = server.serve_with_incoming_shutdown(incoming, drained).await;
        if let Err(error) = stopped {
            tracing::error!(%error, "the gRPC server stopped");
            shutdown.trigger();
        }
    };
    Ok((bound, work))
}

/// Connections as the server takes them: plain TCP, or TLS once its handshake is done.
struct Incoming(tokio::sync::mpsc::Receiver<Connection>);

impl Stream for Incoming {
    type Item = std::io::Result<Connection>;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.get_mut().0.poll_recv(cx).map(|next| next.map(Ok))
    }
}

/// The gRPC port's TLS: the serving certificate's store, and the client certificates it asks
/// for, if any.
pub type PortTls = (Arc<CertStore>, Option<ClientCerts>);

/// The client certificates the gRPC port asks for: those a CA of `--grpc-client-ca-file`
/// signed.
pub struct ClientCerts {
    roots: Arc<rustls::RootCertStore>,
    /// A caller without one is refused at the handshake (without `--auth=kubernetes`, the
    /// certificate is what lets a caller in).
    required: bool,
}

impl ClientCerts {
    /// The CA certificates of `pem`.
    pub fn new(pem: &[u8], required: bool) -> Result<Self, String> {
        Ok(Self {
            roots: zone_operator::tls::client_roots(pem)?,
            required,
        })
    }
}

/// Who a caller is by the client certificate it presented (verified against the client CAs):
/// its subject's common name is the user, its organizations the groups, as the API server
/// reads a client certificate. Empty user: the certificate names none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertCaller {
    pub user: String,
    pub groups: Vec<String>,
}

/// What a connection tells each of its calls: the certificate's caller, if it presented one,
/// and where the calls under way on it are counted.
#[derive(Clone, Debug, Default)]
pub struct ConnectedCaller(pub Option<CertCaller>, pub Arc<conn::Activity>);

/// The caller a verified client certificate names.
fn cert_caller(certificate: &rustls::pki_types::CertificateDer<'_>) -> Option<CertCaller> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let subject = parsed.subject();
    let user = subject
        .iter_common_name()
        .next()
        .and_then(|name| name.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|org| org.as_str().ok().map(str::to_string))
        .collect();
    Some(CertCaller { user, groups })
}

/// TLS with the certificate `certs` holds at each handshake, HTTP/2 negotiated by ALPN (gRPC
/// clients, Go's among them, insist on it); asking for a client certificate with `clients`.
fn acceptor(
    certs: Arc<CertStore>,
    clients: Option<&ClientCerts>,
) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?;
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(clients) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                clients.roots.clone(),
                provider,
            );
            let verifier = if clients.required {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(verifier.build().map_err(std::io::Error::other)?)
        }
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Accepts on `listener` until `stop`, each handshake (with `acceptor`) in a task of its own (a
/// slow client holds up no other); the connections, in the order they are ready. Past
/// `limits.max_connections` open at once, a new connection is closed at once and counted.
fn incoming(
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::sync::mpsc::Receiver<Connection> {
    let (ready, receiver) = tokio::sync::mpsc::channel(64);
    let slots = conn::Slots::new(limits.max_connections);
    tokio::spawn(async move {
        let mut stop = std::pin::pin!(stop);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut stop => return,
            };
            let Ok((stream, peer)) = accepted else {
                continue;
            };
            let Some(slot) = slots.take() else {
                limits.refused.inc();
                tracing::debug!(%peer, max = limits.max_connections, "gRPC connection refused: at the cap");
                continue;
            };
            let stream = conn::Watched::new(stream, limits.header_read, slot);
            let Some(acceptor) = acceptor.clone() else {
                let _ = ready.send(Connection::Plain(stream)).await;
                continue;
            };
            let (ready, handshake) = (ready.clone(), limits.tls_handshake);
            tokio::spawn(async move {
                match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let caller = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(<[_]>::first)
                            .and_then(cert_caller);
                        let _ = ready.send(Connection::Tls(Box::new(tls), caller)).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "gRPC TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "gRPC TLS handshake timed out"),
                }
            });
        }
    });
    receiver
}

type Tcp = conn::Watched<tokio::net::TcpStream>;

/// A connection of the gRPC port: its stream, and over TLS the caller its client certificate
/// names.
pub enum Connection {
    Plain(Tcp),
    Tls(
        Box<tokio_rustls::server::TlsStream<Tcp>>,
        Option<CertCaller>,
    ),
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ConnectedCaller;
    fn connect_info(&self) -> ConnectedCaller {
        match self {
            Connection::Plain(tcp) => ConnectedCaller(None, tcp.activity()),
            Connection::Tls(tls, caller) => {
                ConnectedCaller(caller.clone(), tls.get_ref().0.activity())
            }
        }
    }
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Connection::Tls(tls, _) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Connection::Tls(tls, _) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Connection::Tls(tls, _) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Connection::Tls(tls, _) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The request's filters as the HTTP API's parameters, so both are read by one parser.
fn params(request: &RulesRequest) -> Vec<(String, String)> {
    let mut given = Vec::new();
    match request.r#type() {
        Type::All => {}
        Type::Alert => given.push(("type".to_string(), "alert".to_string())),
        Type::Record => given.push(("type".to_string(), "record".to_string())),
    }
    let repeated = [
        ("match[]", &request.matcher_string),
        ("rule_name[]", &request.rule_name),
        ("rule_group[]", &request.rule_group),
        ("file[]", &request.file),
    ];
    for (name, values) in repeated {
        given.extend(values.iter().map(|value| (name.to_string(), value.clone())));
    }
    given
}

/// A refusal as gRPC says it: bad input is the caller's, the rest is unavailable or internal.
fn status(refusal: Refusal) -> Status {
    match refusal.error_type {
        "bad_data" => Status::invalid_argument(refusal.message),
        "unavailable" => Status::unavailable(refusal.message),
        _ => Status::internal(refusal.message),
    }
}

type RulesStream = Pin<Box<dyn Stream<Item = Result<RulesResponse, Status>> + Send>>;

impl Services {
    /// A turn among the requests served at once (refused past `--max-concurrent-requests`, as
    /// HTTP is), and with `--auth=kubernetes` the caller's bearer token (`authorization`
    /// metadata) reviewed as an HTTP caller's is.
    /// A caller that presented a client certificate is the user it names, and only whether
    /// that user may is reviewed.
    async fn admit(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        caller: Option<&CertCaller>,
    ) -> Result<OwnedSemaphorePermit, Status> {
        let Ok(turn) = self.guard.requests.clone().try_acquire_owned() else {
            return Err(Status::unavailable(
                "too many concurrent requests; retry later",
            ));
        };
        let Some(auth) = &self.guard.auth else {
            return Ok(turn);
        };
        let decision = match caller {
            Some(caller) => {
                auth.check_user(&caller.user, &caller.groups, RULES_PATH)
                    .await
            }
            None => {
                let authorization = metadata
                    .get("authorization")
                    .and_then(|value| value.to_str().ok());
                auth.check(authorization, RULES_PATH).await
            }
        };
        match decision {
            Decision::Allowed { user } => {
                tracing::debug!(user = %user, path = RULES_PATH, "caller allowed");
                Ok(turn)
            }
            Decision::Unauthenticated(why) => Err(Status::unauthenticated(why)),
            Decision::Forbidden { user, reason } => {
                tracing::info!(user = %user, path = RULES_PATH, reason = %reason, "caller forbidden");
                Err(Status::permission_denied(format!(
                    "user {user:?} may not read {RULES_PATH}"
                )))
            }
            Decision::Unavailable(why) => Err(Status::unavailable(why)),
        }
    }

    /// The answer to `request`: its warnings, then its groups, one a message.
    async fn answer(&self, request: &RulesRequest) -> Result<Vec<RulesResponse>, Status> {
        let given = params(request);
        let query = parse_rules_query(&given).map_err(|bad| Status::invalid_argument(bad.0))?;
        let partial = match request.partial_response_strategy() {
            PartialResponseStrategy::Abort => PartialResponse::Abort,
            PartialResponseStrategy::Warn => PartialResponse::Warn,
        };
        let (data, warnings, turn) = self
            .api
            .rules_data(query, &given, partial)
            .await
            .map_err(status)?;
        if !warnings.is_empty() {
            self.api.metrics.partial_response("grpc_rules");
        }
        let messages = self
            .api
            .cores
            .run(move || {
                let warnings = warnings.into_iter().map(rules_response::Result::Warning);
                let groups = data
                    .groups
                    .iter()
                    .map(|group| rules_response::Result::Group(RuleGroup::from(group)));
                warnings
                    .chain(groups)
                    .map(|result| RulesResponse {
                        result: Some(result),
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|pool| status(pool.into()))?;
        drop(turn);
        Ok(messages)
    }
}

#[tonic::async_trait]
impl Rules for Services {
    type RulesStream = RulesStream;

    async fn rules(
        &self,
        request: Request<RulesRequest>,
    ) -> Result<Response<Self::RulesStream>, Status> {
        let started = Instant::now();
        let connected = request.extensions().get::<ConnectedCaller>();
        // The connection is not idle while the call is under way, until its last message.
        let under_way = connected.map(|connected| connected.1.call());
        let caller = connected.and_then(|connected| connected.0.as_ref());
        let turn = self.admit(request.metadata(), caller).await?;
        let answer = self.answer(request.get_ref()).await;
        let metrics = &self.api.metrics;
        let code = match &answer {
            Ok(_) => 200,
            Err(status) if status.code() == tonic::Code::InvalidArgument => 400,
            Err(status) if status.code() == tonic::Code::Unavailable => 503,
            Err(_) => 500,
        };
        metrics.request("grpc_rules", code);
        metrics.request_duration("grpc_rules", started.elapsed());
        let messages = answer?;
        // The turn is held until the client has taken the last message.
        let stream: RulesStream = Box::pin(futures::stream::iter(messages).map(move |message| {
            let _held = (&turn, &under_way);
            Ok(message)
        }));
        Ok(Response::new(stream))
    }
}

#[tonic::async_trait]
impl Info for Services {
    async fn info(&self, _: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        Ok(Response::new(InfoResponse {
            component_type: COMPONENT_TYPE.to_string(),
            rules: Some(RulesInfo {}),
            ..InfoResponse::default()
        }))
    }
}

mod conn;
#[cfg(test)]
mod tests;
