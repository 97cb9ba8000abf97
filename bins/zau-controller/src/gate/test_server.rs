//! A tiny alerts endpoint for tests: answers every request with the reply it is set to (JSON
//! with a status, a hang, a closed connection), over HTTP or HTTPS, and records each request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What the server answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// This status and body.
    Answer(u16, String),
    /// Reads the request and never answers.
    Hang,
    /// Closes the connection without a word.
    Close,
}

/// A request the server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    reply: Option<Reply>,
    seen: Vec<Seen>,
}

pub struct AlertServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AlertServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `{"status":"success","data":{"alerts":[...]}}` with these alerts (labels, state).
pub fn alerts(alerts: &[(&[(&str, &str)], &str)]) -> Reply {
    let alerts: Vec<Value> = alerts
        .iter()
        .map(|(labels, state)| {
            let labels: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), json!(v)))
                .collect();
            json!({"labels": labels, "annotations": {}, "state": state,
                   "activeAt": "2026-01-01T00:00:00Z", "value": "1e+00"})
        })
        .collect();
    Reply::Answer(
        200,
        json!({"status": "success", "data": {"alerts": alerts}}).to_string(),
    )
}

/// Nothing fires.
pub fn quiet() -> Reply {
    alerts(&[])
}

impl AlertServer {
    /// Serves plain HTTP on 127.0.0.1.
    pub async fn start(reply: Reply) -> Self {
        Self::serve(reply, None).await
    }

    /// Serves HTTPS with this certificate chain and key (PEM).
    pub async fn start_tls(reply: Reply, cert: &str, key: &str) -> Self {
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        Self::serve(reply, Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve(reply: Reply, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            reply: Some(reply),
            seen: Vec::new(),
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = shared.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                answer(stream, state).await;
                            }
                        }
                        None => answer(stream, state).await,
                    }
                });
            }
        });
        Self { addr, state, task }
    }

    /// `http://127.0.0.1:<port>` (or https).
    pub fn base(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    pub fn set(&self, reply: Reply) {
        self.state.lock().unwrap().reply = Some(reply);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, state: Arc<Mutex<State>>) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or_default()
        .to_string();
    let authorization = text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("authorization")
            .then(|| value.trim().to_string())
    });
    let reply = {
        let mut state = state.lock().unwrap();
        state.seen.push(Seen {
            path,
            authorization,
            at: Instant::now(),
        });
        state.reply.clone()
    };
    match reply {
        Some(Reply::Answer(code, body)) => {
            let response = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Some(Reply::Hang) => tokio::time::sleep(Duration::from_secs(3600)).await,
        Some(Reply::Close) | None => {}
    }
}

/// A test CA, and a serving certificate (PEM chain and key) it signs for `names`.
pub fn ca_and_serving(names: &[&str]) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "gate CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(params, ca_key);
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}
