//! The certificates of HTTPS servers ([`crate::serve`] serves them), reloaded without a
//! restart: re-read from a mounted directory (cert-manager, a kubelet-rotated Secret), or kept
//! in a self-signed Secret shared by every replica (see [`crate::tls`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::net::TcpListener;

use crate::controller::ErrorChain;
use crate::tls::{self, CertStore, SelfSigned, TlsError};

/// After failing to obtain a certificate, try again after this long.
const CERT_RETRY: Duration = Duration::from_secs(5);

/// How often a mounted certificate directory is re-read.
const CERT_DIR_POLL: Duration = Duration::from_secs(5);

/// How often, in self-signed mode, the Secret is re-read (someone may have deleted or replaced
/// it) and the caBundle checked (the configuration may have been re-applied without it).
const SELF_SIGNED_POLL: Duration = Duration::from_secs(10);

/// Why the server cannot listen.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {address}")]
pub struct BindError {
    pub address: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// `tls.crt` and `tls.key` of a directory, re-read every few seconds.
    Dir(PathBuf),
    /// A CA and a certificate in a Secret, created by the first replica.
    SelfSigned(SelfSigned),
}

/// Binds `address` now, so a bad address fails start-up rather than a background task
/// (dual-stack for `[::]`, see [`crate::serve::listen`]).
pub async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    let error = |source| BindError { address, source };
    let listener = crate::serve::listen(address).map_err(error)?;
    let local = listener.local_addr().map_err(error)?;
    Ok((listener, local))
}

/// The certificate store of `source`, retried until it can be had (a mounted certificate may
/// appear later, the API server may be briefly unreachable), with the task that keeps it (and a
/// webhook's caBundle) current.
pub async fn certificates_retrying(client: &Client, source: &CertSource) -> Arc<CertStore> {
    loop {
        match certificates(client, source).await {
            Ok(certs) => return certs,
            Err(error) => {
                tracing::error!(error = %ErrorChain(&error), retry = ?CERT_RETRY, "no serving certificate; not serving yet");
                tokio::time::sleep(CERT_RETRY).await;
            }
        }
    }
}

/// The certificate store, and the task keeping it (and the caBundle) current.
pub async fn certificates(
    client: &Client,
    source: &CertSource,
) -> Result<Arc<CertStore>, TlsError> {
    match source {
        CertSource::Dir(dir) => {
            let dir = dir.clone();
            let mut last = tls::read_dir(&dir)?;
            let store = Arc::new(CertStore::new(last.certified_key()?));
            let reloading = store.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(CERT_DIR_POLL).await;
                    tls::reload_dir(&dir, &reloading, &mut last);
                }
            });
            Ok(store)
        }
        CertSource::SelfSigned(settings) => {
            let settings = &settings.clone().in_namespace(client.default_namespace());
            let generated = tls::ensure_secret(client, settings).await?;
            let store = Arc::new(CertStore::new(generated.pair.certified_key()?));
            tokio::spawn(keep_self_signed(
                client.clone(),
                settings.clone(),
                generated,
                store.clone(),
            ));
            Ok(store)
        }
    }
}

/// The API server learns a new caBundle from its watch of the configuration, a moment after the
/// patch: a certificate under a CA new to the bundle is served only this long after it is there.
const CA_PROPAGATION: Duration = Duration::from_secs(3);

/// Keeps the caBundle equal to the Secret's CA bundle and serves the Secret's certificate as it
/// is renewed (by this replica or another) or replaced. A certificate under a new CA is served
/// only once the bundle trusts it, so the API server never meets a certificate it cannot verify.
async fn keep_self_signed(
    client: Client,
    settings: SelfSigned,
    mut current: tls::Generated,
    store: Arc<CertStore>,
) {
    loop {
        sync_ca_bundle(&client, &settings, &current.ca).await;
        tokio::time::sleep(SELF_SIGNED_POLL).await;
        let latest = match tls::ensure_secret(&client, &settings).await {
            Ok(latest) if latest.pair != current.pair => latest,
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "cannot re-read the Secret of the serving certificate");
                continue;
            }
        };
        let key = match latest.pair.certified_key() {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(error = %error, "the Secret's certificate is unusable; keeping the current one");
                continue;
            }
        };
        if latest.ca != current.ca {
            if !sync_ca_bundle(&client, &settings, &latest.ca).await {
                // Served next time round, once the bundle could be written.
                continue;
            }
            tokio::time::sleep(CA_PROPAGATION).await;
        }
        store.swap(key);
        tracing::info!(secret = %settings.secret_name, "serving the certificate of the changed Secret");
        current = latest;
    }
}

/// Sets the caBundle of the webhook configuration (if any) to `ca`; false when it could not be
/// written (a configuration that does not exist trusts nothing, and is no reason to wait).
async fn sync_ca_bundle(client: &Client, settings: &SelfSigned, ca: &[u8]) -> bool {
    let Some(config) = &settings.webhook_config_name else {
        return true;
    };
    match tls::sync_ca_bundle(client, config, ca).await {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(config = %config, "ValidatingWebhookConfiguration not found; its caBundle will be set once it exists");
            true
        }
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "cannot update the caBundle");
            false
        }
    }
}

/// Why a call of one's own HTTPS server failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfCallError {
    #[error("the caBundle holds no usable certificate")]
    NoTrust,
    #[error("{0:?} is not a DNS name or IP address")]
    Name(String),
    #[error("cannot connect to {address}")]
    Connect {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "TLS handshake or exchange failed (the caBundle does not trust the certificate served?)"
    )]
    Tls(#[source] std::io::Error),
    #[error("cannot configure the TLS client")]
    Config(#[source] rustls::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("answered {0:?}")]
    Answer(String),
}

/// How long a call of one's own server may take: it answers on loopback in milliseconds.
const SELF_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// POSTs `body` to `path` of the server at `address` as a client that trusts only `ca_bundle`
/// (PEM) and dials `server_name` would — the API server calling a webhook — and returns the
/// response body of a 200. Proves, end to end, that the listener accepts, the certificate served
/// is trusted for that name, and the handler answers.
pub async fn call_self(
    address: SocketAddr,
    server_name: &str,
    ca_bundle: &[u8],
    path: &str,
    body: &[u8],
) -> Result<String, SelfCallError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_slice_iter(ca_bundle).filter_map(Result::ok);
    if roots.add_parsable_certificates(certs).0 == 0 {
        return Err(SelfCallError::NoTrust);
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(SelfCallError::Config)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|_| SelfCallError::Name(server_name.to_string()))?;
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|source| SelfCallError::Connect { address, source })?;
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(SelfCallError::Tls)?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {server_name}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes())
            .await
            .map_err(SelfCallError::Tls)?;
        tls.write_all(body).await.map_err(SelfCallError::Tls)?;
        let mut answer = Vec::new();
        // The server closes after answering (Connection: close); a reset after a complete
        // answer (no close_notify) still leaves it readable.
        let _ = tls.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        match answer.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
            _ => Err(SelfCallError::Answer(answer.chars().take(200).collect())),
        }
    };
    tokio::time::timeout(SELF_CALL_TIMEOUT, exchange)
        .await
        .map_err(|_| SelfCallError::Timeout(SELF_CALL_TIMEOUT))?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::serve::{Limits, serve_until};
    use crate::tls::{CertValidity, generate, unix_now};
    use axum::Router;

    /// The call succeeds only as the API server's would: trusting the CA that signed the
    /// certificate served, for a name the certificate has.
    #[tokio::test]
    async fn a_self_call_trusts_only_the_ca_bundle_for_the_name_dialled() {
        let now = unix_now();
        let served = generate("CA", "svc", "ns", CertValidity::default(), now, None).unwrap();
        let other = generate("CA", "svc", "ns", CertValidity::default(), now, None).unwrap();
        let (listener, address) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let store = Arc::new(CertStore::new(served.pair.certified_key().unwrap()));
        let router = Router::new().route(
            "/check",
            axum::routing::post(|| async { r#"{"allowed":true}"# }),
        );
        let server = tokio::spawn(serve_until(
            listener,
            Some(store),
            router,
            Limits::default(),
            std::future::pending(),
            Duration::ZERO,
        ));

        let body = call_self(address, "svc.ns.svc", &served.ca, "/check", b"{}")
            .await
            .unwrap();
        assert_eq!(body, r#"{"allowed":true}"#);
        let untrusted = call_self(address, "svc.ns.svc", &other.ca, "/check", b"{}").await;
        assert!(
            matches!(untrusted, Err(SelfCallError::Tls(_))),
            "{untrusted:?}"
        );
        let wrong_name = call_self(address, "other.ns.svc", &served.ca, "/check", b"{}").await;
        assert!(
            matches!(wrong_name, Err(SelfCallError::Tls(_))),
            "{wrong_name:?}"
        );
        let missing = call_self(address, "svc.ns.svc", &served.ca, "/nothing", b"{}").await;
        assert!(
            matches!(missing, Err(SelfCallError::Answer(_))),
            "{missing:?}"
        );
        server.abort();
    }

    /// A client CA, and a certificate for client authentication it signed (PEM: the CA, the
    /// certificate, its key).
    fn client_ca_and_leaf() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "webhook client CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        (
            ca_cert.pem().into_bytes(),
            cert.pem().into_bytes(),
            key.serialize_pem().into_bytes(),
        )
    }

    /// `GET /who` over TLS trusting `ca` for svc.ns.svc, presenting `client` (certificate and
    /// key PEM) if given: the answer's body, or why there is none.
    async fn who(
        address: SocketAddr,
        ca: &[u8],
        client: Option<(&[u8], &[u8])>,
    ) -> Result<String, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(CertificateDer::pem_slice_iter(ca).filter_map(Result::ok));
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert)
                        .filter_map(Result::ok)
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key).unwrap(),
                )
                .unwrap(),
        };
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("svc.ns.svc").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"GET /who HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let read = tls.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        match answer.split_once("\r\n\r\n") {
            Some((_, body)) => Ok(body.to_string()),
            None => Err(format!("no answer: {read:?}")),
        }
    }

    /// With client CAs, a client may still connect without a certificate (the webhook's own
    /// self-call does), and each request says whether its connection presented one they
    /// verified; a certificate of another CA fails the handshake.
    #[tokio::test]
    async fn requests_say_whether_their_client_presented_a_verified_certificate() {
        use crate::serve::ClientCertificate;
        let now = unix_now();
        let served = generate("CA", "svc", "ns", CertValidity::default(), now, None).unwrap();
        let (client_ca, cert, key) = client_ca_and_leaf();
        let (_, other_cert, other_key) = client_ca_and_leaf();
        let (listener, address) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let store = Arc::new(CertStore::new(served.pair.certified_key().unwrap()));
        let router = Router::new().route(
            "/who",
            axum::routing::get(
                |client: Option<axum::Extension<ClientCertificate>>| async move {
                    match client {
                        Some(axum::Extension(ClientCertificate { verified: true })) => "verified",
                        Some(_) => "anonymous",
                        None => "not asked",
                    }
                },
            ),
        );
        let limits = Limits {
            client_roots: Some(crate::tls::client_roots(&client_ca).unwrap()),
            ..Limits::default()
        };
        let server = tokio::spawn(serve_until(
            listener,
            Some(store),
            router,
            limits,
            std::future::pending(),
            Duration::ZERO,
        ));

        assert_eq!(who(address, &served.ca, None).await.unwrap(), "anonymous");
        assert_eq!(
            who(address, &served.ca, Some((&cert, &key))).await.unwrap(),
            "verified"
        );
        let foreign = who(address, &served.ca, Some((&other_cert, &other_key))).await;
        assert!(foreign.is_err(), "{foreign:?}");
        server.abort();
    }
}
