//! An HTTPS server for webhook tests: a throw-away CA, a serving certificate signed by it, and an
//! axum router behind rustls. It serves on 127.0.0.1, where the local zonal cluster's API server
//! runs; against a cluster whose API server runs elsewhere (kind), `E2E_WEBHOOK_HOST` names the
//! address at which the API server reaches this machine.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub struct TlsServer {
    pub addr: SocketAddr,
    /// PEM of the CA that signed the serving certificate: the webhook's `caBundle`.
    pub ca_pem: String,
    task: JoinHandle<()>,
    host: String,
}

/// The address at which the cluster's API server reaches webhook servers run by the tests.
pub fn webhook_host() -> String {
    std::env::var("E2E_WEBHOOK_HOST").unwrap_or_else(|_| "127.0.0.1".to_string())
}

impl TlsServer {
    pub async fn start(router: axum::Router) -> TlsServer {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "zone-aware e2e webhook CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("serving key");
        let host = webhook_host();
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        if !names.contains(&host) {
            names.push(host.clone());
        }
        let params = CertificateParams::new(names).expect("serving params");
        let cert = params
            .signed_by(&key, &issuer)
            .expect("serving certificate");

        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("rustls server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let bind = if host == "127.0.0.1" {
            "127.0.0.1:0"
        } else {
            "0.0.0.0:0"
        };
        let listener = TcpListener::bind(bind)
            .await
            .expect("bind the webhook port");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let service = TowerToHyperService::new(router.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsServer {
            host,
            addr,
            ca_pem: ca_cert.pem(),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.host, self.addr.port())
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
