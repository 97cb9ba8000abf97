//! A round-robin TCP proxy: one address in front of several webhook replicas, as a Service is in
//! a real cluster. The API server calls a webhook at one URL; to exercise two replicas deciding
//! concurrently, each new connection goes to the next backend. TLS passes through untouched (the
//! replicas serve the same certificate). With one backend it is a plain passthrough whose
//! connections a test can cut: stopping or dropping the proxy closes every connection it carries.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct RoundRobinProxy {
    pub addr: SocketAddr,
    /// Connections handed to each backend, in the order of `backends`.
    counts: Arc<Vec<AtomicUsize>>,
    task: JoinHandle<()>,
}

impl RoundRobinProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `backends` in turn.
    pub async fn start(backends: Vec<SocketAddr>) -> RoundRobinProxy {
        Self::start_on(0, backends).await
    }

    /// As [`RoundRobinProxy::start`], on a given port (0: any free one).
    pub async fn start_on(port: u16, backends: Vec<SocketAddr>) -> RoundRobinProxy {
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], port)), backends).await
    }

    /// As [`RoundRobinProxy::start`], listening on `address` (port 0: any free one): the host's
    /// own address lets the pods of the real nodes reach a service that listens on 127.0.0.1.
    pub async fn start_at(address: SocketAddr, backends: Vec<SocketAddr>) -> RoundRobinProxy {
        assert!(!backends.is_empty(), "a proxy needs at least one backend");
        let listener = TcpListener::bind(address)
            .await
            .expect("bind the proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let counts: Arc<Vec<AtomicUsize>> =
            Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
        let task_counts = counts.clone();
        let task = tokio::spawn(async move {
            // Aborting the accept loop drops the set, which aborts every connection's task.
            let mut connections = tokio::task::JoinSet::new();
            let mut next = 0usize;
            while let Ok((inbound, _)) = listener.accept().await {
                let first = next % backends.len();
                next += 1;
                let backends = backends.clone();
                let counts = task_counts.clone();
                connections.spawn(async move {
                    // A backend that refuses connections (a stopped replica) is skipped, as a
                    // Service drops an endpoint that is not ready.
                    for offset in 0..backends.len() {
                        let index = (first + offset) % backends.len();
                        if let Ok(mut outbound) = TcpStream::connect(backends[index]).await {
                            counts[index].fetch_add(1, Ordering::Relaxed);
                            let mut inbound = inbound;
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        RoundRobinProxy { addr, counts, task }
    }

    /// Closes the port and every connection (a client must connect again, to another proxy).
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Connections forwarded to each backend so far.
    pub fn connections(&self) -> Vec<usize> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for RoundRobinProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend that answers every connection with its own name.
    async fn backend(name: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(name).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn connections_alternate_between_backends() {
        let proxy =
            RoundRobinProxy::start(vec![backend(b"one").await, backend(b"two").await]).await;
        let mut answers = Vec::new();
        for _ in 0..4 {
            let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
            let mut answer = vec![0u8; 3];
            stream.read_exact(&mut answer).await.unwrap();
            answers.push(String::from_utf8(answer).unwrap());
        }
        assert_eq!(answers, ["one", "two", "one", "two"]);
        assert_eq!(proxy.connections(), [2, 2]);
    }
}
