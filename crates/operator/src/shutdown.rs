//! One shutdown signal for the whole process: SIGTERM (the kubelet stopping the pod) or SIGINT
//! (Ctrl-C) cancels a token that the server, the leader elector and the controllers all watch.
//!
//! Servers stop accepting a **drain delay** later ([`Shutdown::stop_accepting`]): a pod's
//! endpoints are removed only once the deletion has reached the endpoints controller and every
//! client's view of the Service (the API server's, for a webhook). A listener closed before that
//! refuses connections the client still sends it, and the API server does not retry a refused
//! webhook call. Readiness turns 503 at the trigger ([`crate::Readiness::follow_shutdown`]).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Why the signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("cannot install the SIGTERM handler")]
    Sigterm(#[source] std::io::Error),
    #[error("cannot install the SIGINT handler")]
    Sigint(#[source] std::io::Error),
}

/// Which signal asked the process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Term,
    Interrupt,
}

/// Cheap to clone; cancelling any clone cancels all of them.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
    /// The drain delay in milliseconds; shared, so a delay set after cloning holds for every
    /// clone.
    drain_delay_ms: Arc<AtomicU64>,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the shutdown (also used by the runtime when leadership is lost or a task fails).
    pub fn trigger(&self) {
        self.token.cancel();
    }

    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once shutdown has started; usable as axum's or kube's graceful-shutdown future.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.token.clone().cancelled_owned()
    }

    /// How long servers keep accepting after the trigger: [`Shutdown::stop_accepting`]. 0 (the
    /// default) stops them at the trigger.
    pub fn set_drain_delay(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.drain_delay_ms.store(millis, Ordering::Release);
    }

    pub fn drain_delay(&self) -> Duration {
        Duration::from_millis(self.drain_delay_ms.load(Ordering::Acquire))
    }

    /// Resolves the drain delay after shutdown has started: when a server stops accepting new
    /// connections and finishes those it has (axum's graceful-shutdown future). Every waiter
    /// wakes at the trigger and sleeps the same delay, so they all close together.
    pub async fn stop_accepting(self) {
        self.token.cancelled().await;
        let delay = self.drain_delay();
        if !delay.is_zero() {
            tracing::info!(delay = ?delay, "not ready; serving on until endpoints drop this replica");
            tokio::time::sleep(delay).await;
        }
    }

    /// `router`, with every response sent once shutdown has started carrying `Connection:
    /// close`. A client that keeps connections alive (the API server calling a webhook, kube-proxy
    /// or not) picks a connection from its pool, not an endpoint: without this it would go on
    /// sending requests over its open connections to a replica that has left the Service, until
    /// the listener closes them, and a request written as an idle connection closes fails
    /// (a POST is not retried). Told to close after an answer, the client retires each connection
    /// at its next request during the drain delay and dials again, which reaches a replica still
    /// in the Service.
    pub fn close_connections_while_draining(&self, router: axum::Router) -> axum::Router {
        let shutdown = self.clone();
        router.layer(axum::middleware::map_response(
            move |mut response: axum::response::Response| {
                let draining = shutdown.is_triggered();
                async move {
                    if draining {
                        response.headers_mut().insert(
                            axum::http::header::CONNECTION,
                            axum::http::HeaderValue::from_static("close"),
                        );
                    }
                    response
                }
            },
        ))
    }

    /// The underlying token, for APIs that take one.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Installs the SIGTERM/SIGINT handlers now (so a failure is reported at start-up) and
    /// spawns a task that triggers the shutdown on the first signal. A second signal exits at
    /// once: the operator asked twice, a stuck graceful shutdown must not hold the process.
    pub fn listen_for_signals(&self) -> Result<tokio::task::JoinHandle<()>, ShutdownError> {
        let mut signals = Signals::install()?;
        let token = self.token.clone();
        Ok(tokio::spawn(async move {
            let first = signals.next().await;
            tracing::info!(signal = ?first, "shutting down");
            token.cancel();
            let second = signals.next().await;
            tracing::warn!(signal = ?second, "second signal, exiting without waiting");
            std::process::exit(130);
        }))
    }
}

struct Signals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, ShutdownError> {
        Ok(Self {
            term: signal(SignalKind::terminate()).map_err(ShutdownError::Sigterm)?,
            interrupt: signal(SignalKind::interrupt()).map_err(ShutdownError::Sigint)?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Term,
            _ = self.interrupt.recv() => Signal::Interrupt,
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal_received() -> Result<Signal, ShutdownError> {
    Ok(Signals::install()?.next().await)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Sends `GET /` on `stream` and reads one answer (headers and the 3-byte body `ok\n`);
    /// the answer's header block, lower-cased.
    async fn ask(stream: &mut tokio::net::TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\nok\n") {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "closed mid-answer"
            );
            answer.push(byte[0]);
        }
        String::from_utf8(answer).unwrap().to_ascii_lowercase()
    }

    #[tokio::test]
    async fn answers_while_draining_close_their_connection() {
        let shutdown = Shutdown::new();
        shutdown.set_drain_delay(Duration::from_secs(60));
        let router = shutdown.close_connections_while_draining(
            axum::Router::new().route("/", axum::routing::get(|| async { "ok\n" })),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            axum::serve(listener, router)
                .with_graceful_shutdown(shutdown.clone().stop_accepting())
                .into_future(),
        );

        let mut kept = tokio::net::TcpStream::connect(address).await.unwrap();
        assert!(!ask(&mut kept).await.contains("connection: close"));
        assert!(
            !ask(&mut kept).await.contains("connection: close"),
            "kept alive before the shutdown"
        );
        shutdown.trigger();
        // The connection opened before the trigger is answered and then closed by the server.
        assert!(ask(&mut kept).await.contains("connection: close"));
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), kept.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(matches!(read, Ok(0)), "closed after the answer: {read:?}");
        // New connections are still answered during the drain delay, once each.
        let mut late = tokio::net::TcpStream::connect(address).await.unwrap();
        assert!(ask(&mut late).await.contains("connection: close"));
    }

    #[tokio::test]
    async fn trigger_wakes_every_clone() {
        let shutdown = Shutdown::new();
        let waiter = shutdown.clone();
        let waiting = tokio::spawn(async move { waiter.cancelled().await });
        assert!(!shutdown.is_triggered());
        shutdown.trigger();
        assert!(waiting.await.is_ok());
        assert!(shutdown.token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn listeners_close_the_drain_delay_after_the_trigger() {
        let shutdown = Shutdown::new();
        let closing = tokio::spawn(shutdown.clone().stop_accepting());
        // Set after cloning: every clone shares it.
        shutdown.set_drain_delay(Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        shutdown.trigger();
        assert!(closing.await.is_ok());
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        let immediate = Shutdown::new();
        immediate.trigger();
        let started = tokio::time::Instant::now();
        immediate.stop_accepting().await;
        assert_eq!(started.elapsed(), Duration::ZERO, "no delay by default");
    }
}
