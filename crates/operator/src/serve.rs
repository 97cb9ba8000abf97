//! Every server's connections, plain HTTP or HTTPS: dual-stack listeners, and the limits each
//! connection gets. A client that connects and sends nothing, or stops half-way through its
//! request head, is disconnected after [`Limits::header_read`] (so is a kept-alive connection
//! idle that long between requests); a TLS handshake gets [`Limits::tls_handshake`]; past
//! [`Limits::max_connections`] open at once, new connections are closed at once and counted.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use futures::FutureExt as _;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus::IntCounter;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::tls::CertStore;

/// What every connection of a listener gets.
#[derive(Clone, Debug)]
pub struct Limits {
    /// A connection has this long to send a whole request head: a new one, and a kept-alive
    /// one between requests (the idle timeout). Then it is closed.
    pub header_read: Duration,
    /// A TLS handshake has this long to complete.
    pub tls_handshake: Duration,
    /// Connections served at once; past it new ones are closed at once.
    pub max_connections: usize,
    /// Counts the connections closed at the cap.
    pub refused: IntCounter,
    /// Over TLS, the CAs whose client certificates the server asks for. A client may connect
    /// without one; every request of the connection carries [`ClientCertificate`] saying
    /// whether it presented one these CAs verified, for the handler to decide.
    pub client_roots: Option<Arc<rustls::RootCertStore>>,
}

/// In every request of a TLS connection of a server with [`Limits::client_roots`]: whether its
/// client presented a certificate those CAs verified (a certificate that does not verify fails
/// the handshake).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    pub verified: bool,
}

impl Default for Limits {
    /// The flags' defaults, refusals counted by a counter registered nowhere (tests).
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            tls_handshake: Duration::from_secs(10),
            max_connections: 1024,
            refused: IntCounter::new("refused", "refused").unwrap_or_else(|_| unreachable!()),
            client_roots: None,
        }
    }
}

/// Listens on `address`. The unspecified IPv6 address (`[::]`, the default) takes IPv4 too
/// (dual-stack), and falls back to `0.0.0.0` where the host or pod has no IPv6.
pub fn listen(address: SocketAddr) -> std::io::Result<TcpListener> {
    match socket(address) {
        Err(error) if address.is_ipv6() && address.ip().is_unspecified() => {
            let fallback = SocketAddr::from((Ipv4Addr::UNSPECIFIED, address.port()));
            tracing::warn!(%error, %address, %fallback, "no IPv6 here: listening on IPv4 only");
            socket(fallback)
        }
        result => result,
    }
}

fn socket(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if address.is_ipv6() {
        socket.set_only_v6(!address.ip().is_unspecified())?;
    }
    // As tokio's own bind: a restarted server takes its port back at once.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Serves `router` on `listener` (HTTP/1.1; over TLS with the certificate `tls` holds at each
/// handshake, when given) until `stop` resolves, then gracefully: the listener is closed
/// (nothing is accepted any more), every connection finishes the request it is answering and
/// closes (an idle keep-alive connection at once), and this returns once all have, or after
/// `in_flight` with those still open dropped. Resolve `stop` only once clients no longer pick
/// this server ([`crate::Shutdown::stop_accepting`]): a client that connects after it is
/// refused.
pub async fn serve_until(
    listener: TcpListener,
    tls: Option<Arc<CertStore>>,
    router: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
    in_flight: Duration,
) {
    let acceptor = match tls {
        None => None,
        Some(certs) => match acceptor(certs, limits.client_roots.clone()) {
            Ok(acceptor) => Some(acceptor),
            Err(error) => {
                tracing::error!(%error, "the client CAs cannot verify certificates; not serving");
                return;
            }
        },
    };
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    let connection = |stream| {
        serve_connection(
            acceptor.clone(),
            TowerToHyperService::new(router.clone()),
            stream,
            limits.clone(),
            closing.clone(),
        )
    };
    loop {
        let stream = tokio::select! {
            () = &mut stop => break,
            // Finished connections are reaped as they end, so the set holds the open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(error = %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= limits.max_connections {
            limits.refused.inc();
            tracing::debug!(
                max = limits.max_connections,
                "connection refused: at the cap"
            );
            drop(stream);
            continue;
        }
        connections.spawn(connection(stream));
    }
    // Connections the kernel has completed but not handed over yet would be reset with the
    // listener: they are served like the others.
    while let Some(Ok((stream, _))) = listener.accept().now_or_never() {
        connections.spawn(connection(stream));
    }
    drop(listener);
    closing.cancel();
    let open = connections.len();
    tracing::info!(connections = open, deadline = ?in_flight, "listener closed; finishing in-flight requests");
    let finished = tokio::time::timeout(in_flight, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(connections = connections.len(), deadline = ?in_flight, "requests still in flight at the deadline; dropping them");
        connections.shutdown().await;
    }
}

/// TLS with the certificate `certs` holds at each handshake, asking for a client certificate
/// of `client_roots` (optional: see [`Limits::client_roots`]).
fn acceptor(
    certs: Arc<CertStore>,
    client_roots: Option<Arc<rustls::RootCertStore>>,
) -> Result<TlsAcceptor, rustls::server::VerifierBuilderError> {
    let builder = rustls::ServerConfig::builder();
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(roots) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder(roots)
                .allow_unauthenticated()
                .build()?,
        ),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// One connection of [`serve_until`]: its TLS handshake (bounded), then served.
async fn serve_connection(
    acceptor: Option<TlsAcceptor>,
    service: TowerToHyperService<Router>,
    stream: tokio::net::TcpStream,
    limits: Limits,
    closing: CancellationToken,
) {
    let Some(acceptor) = acceptor else {
        return serve_http(stream, service, limits.header_read, closing, None).await;
    };
    match tokio::time::timeout(limits.tls_handshake, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let client = limits.client_roots.is_some().then(|| ClientCertificate {
                verified: tls.get_ref().1.peer_certificates().is_some(),
            });
            serve_http(tls, service, limits.header_read, closing, client).await;
        }
        Ok(Err(error)) => tracing::debug!(error = %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(timeout = ?limits.tls_handshake, "TLS handshake timed out"),
    }
}

/// HTTP/1.1 over `io` until it ends or `closing`. At `closing`, a connection that has answered
/// requests closes once the one under way (if any) is answered; one that has answered none yet
/// was opened for a request: that request is awaited (within `header_read`) and answered first,
/// else its client would see the connection close unanswered.
async fn serve_http<I>(
    io: I,
    service: TowerToHyperService<Router>,
    header_read: Duration,
    closing: CancellationToken,
    client: Option<ClientCertificate>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let first_request = Arc::new(tokio::sync::Notify::new());
    let asked = first_request.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        // Stores a permit when nobody waits yet: a request before `closing` is remembered.
        asked.notify_one();
        if let Some(client) = client {
            request.extensions_mut().insert(client);
        }
        service.call(request)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read)
        .serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = closing.cancelled() => {
            tokio::select! {
                ended = connection.as_mut() => ended,
                () = first_request.notified() => {
                    // Answers the request under way, then closes.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            }
        }
    };
    if let Err(error) = ended {
        tracing::debug!(error = %error, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::net::Ipv6Addr;
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::tls::{CertValidity, generate, unix_now};

    fn router() -> Router {
        Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" }))
    }

    /// Serves [`router`] on `[::]:0` (HTTPS with `tls`) within `limits`; the port.
    fn start(tls: Option<Arc<CertStore>>, limits: Limits) -> u16 {
        let listener = listen(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve_until(
            listener,
            tls,
            router(),
            limits,
            std::future::pending(),
            Duration::ZERO,
        ));
        port
    }

    /// How long `stream` stays open while sending nothing (reads until the server closes it,
    /// at most `at_most`).
    async fn open_for(stream: &mut TcpStream, at_most: Duration) -> Duration {
        let started = Instant::now();
        let mut buffer = [0u8; 64];
        let _ = tokio::time::timeout(at_most, async {
            while !matches!(stream.read(&mut buffer).await, Ok(0) | Err(_)) {}
        })
        .await;
        started.elapsed()
    }

    async fn get_healthz(address: SocketAddr) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn silent_clients_are_disconnected_at_the_header_and_handshake_timeouts() {
        let limits = Limits {
            header_read: Duration::from_millis(300),
            tls_handshake: Duration::from_millis(300),
            ..Limits::default()
        };
        let now = unix_now();
        let served = generate("CA", "svc", "ns", CertValidity::default(), now, None).unwrap();
        let certs = Arc::new(CertStore::new(served.pair.certified_key().unwrap()));
        for tls in [None, Some(certs)] {
            let https = tls.is_some();
            let port = start(tls, limits.clone());
            let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let open = open_for(&mut silent, Duration::from_secs(10)).await;
            assert!(
                open >= Duration::from_millis(250) && open < Duration::from_secs(3),
                "https {https}: open {open:?}"
            );
            // Half a request head, then nothing.
            if !https {
                let mut partial = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                partial
                    .write_all(b"GET /healthz HTTP/1.1\r\n")
                    .await
                    .unwrap();
                let open = open_for(&mut partial, Duration::from_secs(10)).await;
                assert!(open < Duration::from_secs(3), "partial head: open {open:?}");
            }
        }
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_at_once_and_counted() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let refused = limits.refused.clone();
        let port = start(None, limits);
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        let mut third = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let open = open_for(&mut third, Duration::from_secs(5)).await;
        assert!(
            open < Duration::from_secs(2),
            "the third stayed open {open:?}"
        );
        assert_eq!(refused.get(), 1);
        // A slot frees when a held connection ends.
        drop(held.pop());
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let answer = get_healthz(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await;
                if answer.ends_with("ok\n") {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(answered.is_ok(), "no answer once a slot was free");
    }

    #[tokio::test]
    async fn the_default_listener_answers_over_ipv4_and_ipv6() {
        let port = start(None, Limits::default());
        for address in [
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ] {
            let answer = get_healthz(address).await;
            assert!(
                answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok\n"),
                "{address}: {answer}"
            );
        }
    }
}
