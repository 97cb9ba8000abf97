//! The webhook's client: the AdmissionReview of an eviction, POSTed over kept-alive HTTPS
//! connections as the API server sends it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

pub const PATH: &str = "/validate-eviction";

pub use e2e::webhook::admission_review;

/// Idle connections a [`Pool`] keeps, at most: client-go's transports (the API server's webhook
/// client among them) keep 25 per host and close the others once their answer is read.
pub const MAX_IDLE: usize = 25;

/// Keep-alive HTTPS connections to the webhook, as the API server keeps them: a request takes
/// an idle connection or opens a new one, and at most [`MAX_IDLE`] stay open idle.
pub struct Pool {
    pub address: SocketAddr,
    pub connector: TlsConnector,
    pub idle: Mutex<Vec<SendRequest<Body>>>,
    pub opened: AtomicUsize,
}

impl Pool {
    pub fn new(address: SocketAddr, ca_pem: &[u8]) -> Pool {
        let mut config = e2e::tls::client_config(ca_pem).expect("the webhook CA");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Pool {
            address,
            connector: TlsConnector::from(Arc::new(config)),
            idle: Mutex::new(Vec::new()),
            opened: AtomicUsize::new(0),
        }
    }

    pub async fn connect(&self) -> Result<SendRequest<Body>, String> {
        let tcp = TcpStream::connect(self.address)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let name = ServerName::IpAddress(self.address.ip().into());
        let tls = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(connection);
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    pub async fn checkout(&self) -> Result<SendRequest<Body>, String> {
        loop {
            let candidate = self.idle.lock().await.pop();
            match candidate {
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                None => return self.connect().await,
            }
        }
    }

    /// POSTs `body` to the webhook path and returns the parsed AdmissionReview.
    pub async fn post(&self, body: Vec<u8>) -> Result<Value, String> {
        let mut sender = self.checkout().await?;
        let request = hyper::Request::post(PATH)
            .header("host", self.address.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Body::from(body))
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), 1 << 20)
            .await
            .map_err(|e| format!("body: {e}"))?;
        if !sender.is_closed() {
            let mut idle = self.idle.lock().await;
            if idle.len() < MAX_IDLE {
                idle.push(sender);
            }
        }
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("response JSON: {e}"))
    }
}
