//! How `https://` endpoints are dialled: the roots their certificates are verified against (PEM
//! given, or the system's), the name verified (pods are dialled by IP), a client certificate,
//! or — asked for by name — no verification. `http://` endpoints go through the same connector,
//! in plain.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::{ConfigBuilderExt as _, FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The roots an endpoint's certificate is verified against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Roots {
    /// The system's (none when it has none: an `https://` endpoint then fails its handshake).
    #[default]
    System,
    /// These PEM certificates.
    Pem(Vec<u8>),
    /// None: for a client of `http://` endpoints only.
    Empty,
}

/// What a client's TLS is made of.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    pub roots: Roots,
    /// The name verified (and sent as SNI); None: the URL's host.
    pub server_name: Option<String>,
    /// Any certificate is accepted (the handshake's signatures are still checked).
    pub insecure_skip_verify: bool,
    /// A client certificate chain and its key, both PEM.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Which PEM of [`TlsOptions`] an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pem {
    Roots,
    ClientCertificate,
    ClientKey,
}

/// Why TLS options are unusable; the caller names where they came from.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no PEM certificate in it")]
    NoCertificate(Pem),
    #[error("unreadable PEM")]
    Pem(Pem, #[source] rustls::pki_types::pem::Error),
    #[error("a certificate is unusable as a root")]
    Root(#[source] rustls::Error),
    #[error("the key does not fit the certificate")]
    ClientCertificate(#[source] rustls::Error),
    #[error("{0:?}: not a DNS name or IP address")]
    ServerName(String),
    #[error("cannot configure TLS")]
    Config(#[source] rustls::Error),
}

/// The TLS side of a client: made once (a bad CA fails here, not per request).
#[derive(Clone)]
pub struct ClientTls {
    config: ClientConfig,
    server_name: Option<ServerName<'static>>,
}

impl ClientTls {
    pub fn new(options: &TlsOptions) -> Result<Self, TlsError> {
        let server_name = options
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_string())
                    .map_err(|_| TlsError::ServerName(name.to_string()))
            })
            .transpose()?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?;
        let verifying = if options.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            match &options.roots {
                Roots::Pem(pem) => builder.with_root_certificates(roots(pem)?),
                Roots::Empty => builder.with_root_certificates(RootCertStore::empty()),
                Roots::System => builder.clone().with_native_roots().or_else(|error| {
                    tracing::warn!(%error, "no system CA certificates");
                    Ok::<_, TlsError>(builder.with_root_certificates(RootCertStore::empty()))
                })?,
            }
        };
        let config = match &options.client {
            None => verifying.with_no_client_auth(),
            Some((chain, key)) => {
                let chain = certificates(chain, Pem::ClientCertificate)?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|source| TlsError::Pem(Pem::ClientKey, source))?;
                verifying
                    .with_client_auth_cert(chain, key)
                    .map_err(TlsError::ClientCertificate)?
            }
        };
        Ok(Self {
            config,
            server_name,
        })
    }

    /// The connector of a client: `https://` through this TLS, `http://` in plain; a connection
    /// not made within `connect_timeout` fails.
    pub fn connector(&self, connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
        self.connector_for(connect_timeout, false)
    }

    /// The connector of a gRPC client: as [`ClientTls::connector`], but HTTP/2 only (ALPN
    /// `h2`, which gRPC servers require; `http://` is HTTP/2 in plain).
    pub fn grpc_connector(&self, connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
        self.connector_for(connect_timeout, true)
    }

    fn connector_for(
        &self,
        connect_timeout: Duration,
        http2: bool,
    ) -> HttpsConnector<HttpConnector> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.enforce_http(false);
        let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.config.clone())
            .https_or_http();
        if let Some(name) = &self.server_name {
            builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone()));
        }
        if http2 {
            builder.enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        }
    }
}

fn certificates(pem: &[u8], which: Pem) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem(which, source))?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate(which));
    }
    Ok(certificates)
}

fn roots(pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(pem, Pem::Roots)? {
        roots.add(certificate).map_err(TlsError::Root)?;
    }
    Ok(roots)
}

/// `insecureSkipVerify`: any certificate is accepted; the handshake's signatures are still
/// checked, so the connection is at least to the holder of the presented key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
