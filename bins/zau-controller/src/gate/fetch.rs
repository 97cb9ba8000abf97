//! One read of a Prometheus-compatible `GET /api/v1/alerts`: the endpoint (URL, token, TLS), the
//! HTTP client that dials it, and the answer decoded — or why there is no clear answer.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_rustls::{ConfigBuilderExt as _, FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;

/// The most of an answer that is read: far above any real alert list, far below the memory a
/// broken endpoint could otherwise take.
const MAX_BODY_BYTES: usize = 16 << 20;

/// How much of a non-2xx body the error quotes.
const QUOTED_BODY: usize = 200;

/// Where the alerts are read, and how. Two rollouts with equal endpoints share one cached answer
/// (the token and TLS settings are part of the identity: a different token may see other alerts).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The full URL of the alerts API: `<base><pathPrefix>api/v1/alerts`.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`; never logged.
    pub token: Option<String>,
    /// For `https://` URLs.
    pub tls: Option<TlsSettings>,
}

/// How an `https://` endpoint's certificate is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// PEM roots; None: the system's.
    pub ca_pem: Option<String>,
    /// The name verified (and sent as SNI); None: the URL's host.
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// Why the gate has no clear answer; each one pauses the rollout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("HTTP {0}: {1}")]
    Status(u16, String),
    #[error("unreadable answer: {0}")]
    BadJson(String),
    #[error("it answered with an error: {0}")]
    ErrorAnswer(String),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    #[error("TLS settings unusable: {0}")]
    Tls(String),
    #[error("bad URL {0:?}")]
    Url(String),
    /// The Service, its EndpointSlices or a Secret could not be read or used.
    #[error("{0}")]
    Resolve(String),
    #[error("the last answer is {0:?} old: the poller is behind")]
    Stale(Duration),
}

impl GateError {
    /// The metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            GateError::Timeout(_) => "timeout",
            GateError::Connect(_) => "connect",
            GateError::Status(..) => "status",
            GateError::BadJson(_) => "bad_json",
            GateError::ErrorAnswer(_) => "error_answer",
            GateError::TooLarge(_) => "too_large",
            GateError::Tls(_) => "tls",
            GateError::Url(_) => "url",
            GateError::Resolve(_) => "resolve",
            GateError::Stale(_) => "stale",
        }
    }
}

/// One alert of the answer: what the gate looks at.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `firing`, `pending` (or `inactive`, which never pauses).
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub active_at: Option<String>,
}

/// Prometheus's response envelope.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<AlertsData>,
    #[serde(default)]
    error_type: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct AlertsData {
    /// Prometheus answers `[]` when nothing fires; some servers `null`.
    #[serde(default)]
    alerts: Option<Vec<Alert>>,
}

/// The alerts of an answer, or why it is not a clear one (pure).
pub fn decode(status: u16, body: &[u8]) -> Result<Vec<Alert>, GateError> {
    let envelope: Result<Envelope, _> = serde_json::from_slice(body);
    let success = (200..300).contains(&status);
    match envelope {
        Ok(Envelope {
            status: answer,
            data: Some(data),
            ..
        }) if answer == "success" && success => Ok(data.alerts.unwrap_or_default()),
        Ok(envelope) if envelope.status == "error" => {
            let kind = if envelope.error_type.is_empty() {
                String::new()
            } else {
                format!("{}: ", envelope.error_type)
            };
            Err(GateError::ErrorAnswer(format!("{kind}{}", envelope.error)))
        }
        _ if !success => Err(GateError::Status(status, quote(body))),
        Ok(envelope) if envelope.status != "success" => Err(GateError::BadJson(format!(
            "status {:?}, expected \"success\"",
            envelope.status
        ))),
        Ok(_) => Err(GateError::BadJson("no data".to_string())),
        Err(error) => Err(GateError::BadJson(error.to_string())),
    }
}

/// The start of a body, on one line.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The HTTP client of one endpoint: connections are kept between polls.
#[derive(Clone)]
pub struct GateClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl GateClient {
    /// A client for `endpoint` (its TLS settings read now: a bad CA fails here, not per request).
    pub fn new(endpoint: &Endpoint, connect_timeout: Duration) -> Result<Self, GateError> {
        let https = endpoint.url.starts_with("https://");
        let config = client_config(https, endpoint.tls.as_ref())?;
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.enforce_http(false);
        let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http();
        if let Some(name) = endpoint.tls.as_ref().and_then(|t| t.server_name.as_deref()) {
            let name = ServerName::try_from(name.to_string()).map_err(|_| {
                GateError::Tls(format!("serverName {name:?} is not a DNS name or IP"))
            })?;
            builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name));
        }
        let connector = builder.enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Self { client })
    }

    /// The alerts at `endpoint` (no timeout here: the caller cuts the whole exchange).
    pub async fn alerts(&self, endpoint: &Endpoint) -> Result<Vec<Alert>, GateError> {
        let uri: hyper::Uri = endpoint
            .url
            .parse()
            .map_err(|_| GateError::Url(endpoint.url.clone()))?;
        let mut request =
            hyper::Request::get(uri).header(hyper::header::ACCEPT, "application/json");
        if let Some(token) = &endpoint.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| GateError::Url(endpoint.url.clone()))?;
        let response =
            self.client.request(request).await.map_err(|error| {
                GateError::Connect(zone_operator::ErrorChain(&error).to_string())
            })?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|error| {
                if error.is::<http_body_util::LengthLimitError>() {
                    GateError::TooLarge(MAX_BODY_BYTES)
                } else {
                    GateError::Connect(error.to_string())
                }
            })?
            .to_bytes();
        decode(status, &body)
    }
}

/// The TLS side of the client; a plain `http://` endpoint needs no roots (none are loaded).
fn client_config(https: bool, tls: Option<&TlsSettings>) -> Result<ClientConfig, GateError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| GateError::Tls(error.to_string()))?;
    let tls = tls.cloned().unwrap_or_default();
    let config = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth()
    } else if let Some(pem) = &tls.ca_pem {
        let mut roots = RootCertStore::empty();
        let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| GateError::Tls(format!("caSecret: unreadable PEM: {error}")))?;
        if certificates.is_empty() {
            return Err(GateError::Tls(
                "caSecret: no PEM certificate in it".to_string(),
            ));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|error| {
                GateError::Tls(format!(
                    "caSecret: a certificate is unusable as a root: {error}"
                ))
            })?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else if !https {
        builder
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth()
    } else {
        match builder.clone().with_native_roots() {
            Ok(builder) => builder.with_no_client_auth(),
            // No system roots: an https endpoint fails its handshake, named in the condition.
            Err(_) => builder
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        }
    };
    Ok(config)
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn alert(name: &str, state: &str) -> Alert {
        Alert {
            labels: [("alertname".to_string(), name.to_string())].into(),
            state: state.to_string(),
            active_at: Some("2026-01-01T00:00:00Z".to_string()),
        }
    }

    #[test]
    fn decode_reads_prometheus_s_answer() {
        let body = br#"{"status":"success","data":{"alerts":[
            {"labels":{"alertname":"A"},"annotations":{},"state":"firing",
             "activeAt":"2026-01-01T00:00:00Z","value":"1e+00"},
            {"labels":{"alertname":"B"},"state":"pending","activeAt":"2026-01-01T00:00:00Z"}]}}"#;
        assert_eq!(
            decode(200, body),
            Ok(vec![alert("A", "firing"), alert("B", "pending")])
        );
        assert_eq!(
            decode(200, br#"{"status":"success","data":{"alerts":null}}"#),
            Ok(vec![])
        );
        // The federator answers with warnings beside the data: still a clear answer.
        assert_eq!(
            decode(
                200,
                br#"{"status":"success","warnings":["endpoint x: timeout"],"data":{"alerts":[]}}"#
            ),
            Ok(vec![])
        );
    }

    /// Every answer that is not a clear one is an error (and pauses).
    #[test]
    fn decode_refuses_every_unclear_answer() {
        let cases: [(u16, &[u8], GateError); 7] = [
            (
                503,
                br#"{"status":"error","errorType":"unavailable","error":"every backend failed"}"#,
                GateError::ErrorAnswer("unavailable: every backend failed".into()),
            ),
            (
                200,
                br#"{"status":"error","error":"boom"}"#,
                GateError::ErrorAnswer("boom".into()),
            ),
            (
                500,
                b"<html>\n internal error\n</html>",
                GateError::Status(500, "<html> internal error </html>".into()),
            ),
            (
                200,
                b"not json",
                GateError::BadJson("expected ident at line 1 column 2".into()),
            ),
            (
                200,
                br#"{"status":"success"}"#,
                GateError::BadJson("no data".into()),
            ),
            (
                200,
                br#"{"status":"partial","data":{"alerts":[]}}"#,
                GateError::BadJson(r#"status "partial", expected "success""#.into()),
            ),
            (
                204,
                b"",
                GateError::BadJson("EOF while parsing a value at line 1 column 0".into()),
            ),
        ];
        for (status, body, expected) in cases {
            assert_eq!(
                decode(status, body),
                Err(expected),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let endpoint = Endpoint {
            url: "http://a/api/v1/alerts".into(),
            token: Some("s3cret".into()),
            tls: None,
        };
        let text = format!("{endpoint:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn bad_tls_settings_are_refused_when_the_client_is_made() {
        let endpoint = |tls: TlsSettings| Endpoint {
            url: "https://a/api/v1/alerts".into(),
            token: None,
            tls: Some(tls),
        };
        let error = |tls| GateClient::new(&endpoint(tls), Duration::from_secs(1)).err();
        assert_eq!(
            error(TlsSettings {
                ca_pem: Some("garbage".into()),
                ..TlsSettings::default()
            }),
            Some(GateError::Tls("caSecret: no PEM certificate in it".into()))
        );
        assert!(matches!(
            error(TlsSettings {
                server_name: Some("not a name!".into()),
                ..TlsSettings::default()
            }),
            Some(GateError::Tls(message)) if message.contains("serverName")
        ));
        assert!(error(TlsSettings::default()).is_none());
    }
}
