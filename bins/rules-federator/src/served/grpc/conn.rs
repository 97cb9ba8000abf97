//! The gRPC port's connections within the limits of the HTTP servers (`--max-connections`,
//! `--http-header-timeout`, `--tls-handshake-timeout`): past the cap a new connection is closed
//! at once and counted in `http_connections_refused_total{server="grpc"}`; a TLS handshake has
//! its timeout; a connection that sends and is sent nothing for the idle timeout while no call
//! of its is under way is closed. gRPC connections are long-lived by design (a Thanos Querier
//! keeps one per endpoint and calls Info every few seconds), so idle means silent, not merely
//! between calls: a client that connects and says nothing, or stops talking, is what is cut.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The calls under way on one connection: while any is, the connection is not idle, however
/// long its answer takes to make.
#[derive(Debug, Default)]
pub struct Activity {
    calls: AtomicUsize,
}

impl Activity {
    /// A call begins; it ends when the returned guard drops (with its answer's last message).
    pub fn call(self: &Arc<Self>) -> CallUnderWay {
        self.calls.fetch_add(1, Ordering::AcqRel);
        CallUnderWay(self.clone())
    }

    fn busy(&self) -> bool {
        self.calls.load(Ordering::Acquire) > 0
    }
}

/// One call under way (see [`Activity::call`]).
#[derive(Debug)]
pub struct CallUnderWay(Arc<Activity>);

impl Drop for CallUnderWay {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections open at once on the port, and its cap.
#[derive(Clone, Debug)]
pub struct Slots {
    open: Arc<AtomicUsize>,
    max: usize,
}

impl Slots {
    pub fn new(max: usize) -> Self {
        Slots {
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A slot for a new connection, or `None` at the cap.
    pub fn take(&self) -> Option<Slot> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max).then_some(open + 1)
            });
        taken.ok().map(|_| Slot(self.open.clone()))
    }
}

/// One connection's place under the cap, given back when the connection is dropped.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A TCP stream (or anything read and written) that holds a [`Slot`] and fails its next read
/// once it has been silent both ways for `idle` with no call under way: the server then drops
/// the connection.
pub struct Watched<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    activity: Arc<Activity>,
    _slot: Slot,
}

impl<S> Watched<S> {
    pub fn new(inner: S, idle: Duration, slot: Slot) -> Self {
        Watched {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            activity: Arc::default(),
            _slot: slot,
        }
    }

    /// The calls under way on this connection.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    fn active(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if this.activity.busy() {
                    this.active();
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the connection was idle too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => ready,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.active();
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn slots_stop_at_the_cap_and_come_back_when_dropped() {
        let slots = Slots::new(2);
        let first = slots.take().unwrap();
        let _second = slots.take().unwrap();
        assert!(slots.take().is_none());
        drop(first);
        assert!(slots.take().is_some());
    }

    /// Silent both ways for the idle time: the next read fails. A call under way keeps the
    /// connection, and so does traffic.
    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_cut_unless_a_call_is_under_way() {
        let idle = Duration::from_secs(10);
        let slots = Slots::new(1);
        let (server, mut client) = tokio::io::duplex(64);
        let mut watched = Watched::new(server, idle, slots.take().unwrap());
        let mut buf = [0u8; 8];

        client.write_all(b"ping").await.unwrap();
        assert_eq!(watched.read(&mut buf).await.unwrap(), 4);

        let call = watched.activity().call();
        let waited = tokio::time::timeout(idle * 3, watched.read(&mut buf)).await;
        assert!(waited.is_err(), "cut while a call was under way");
        drop(call);

        let started = Instant::now();
        let error = watched.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() <= idle + Duration::from_millis(10));
        // The slot is given back with the connection.
        assert!(slots.take().is_none());
        drop(watched);
        assert!(slots.take().is_some());
    }
}
