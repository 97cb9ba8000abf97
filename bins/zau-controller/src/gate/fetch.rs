//! One read of a Prometheus-compatible `GET /api/v1/alerts`: the endpoint (URL, token, TLS), the
//! HTTP client that dials it, and the answer decoded — or why there is no clear answer.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hyper::header::HeaderValue;
use serde::Deserialize;
use zone_operator::prom_api::tls::{ClientTls, Roots, TlsError, TlsOptions};
use zone_operator::prom_api::{Answer, ApiClient, ApiError, BodyCaps};

/// The most of an answer that is read: far above any real alert list, far below the memory a
/// broken endpoint could otherwise take.
const MAX_BODY_BYTES: u64 = 16 << 20;

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
    /// The endpoint gave no clear answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("TLS settings unusable: {0}")]
    Tls(String),
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
            GateError::Api(error) => error.kind(),
            GateError::Tls(_) => "tls",
            GateError::Resolve(_) => "resolve",
            GateError::Stale(_) => "stale",
        }
    }

    /// No answer within `timeout`.
    pub fn timeout(timeout: Duration) -> Self {
        GateError::Api(ApiError::Timeout(timeout))
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

#[derive(Deserialize)]
struct AlertsData {
    /// Prometheus answers `[]` when nothing fires; some servers `null`.
    #[serde(default)]
    alerts: Option<Vec<Alert>>,
}

/// The alerts of an answer, or why it is not a clear one (pure).
pub fn decode(answer: Answer) -> Result<Vec<Alert>, GateError> {
    let data: AlertsData = answer.decode()?;
    Ok(data.alerts.unwrap_or_default())
}

/// The HTTP client of one endpoint: connections are kept between polls.
#[derive(Clone)]
pub struct GateClient {
    client: ApiClient,
}

impl GateClient {
    /// A client for `endpoint` (its TLS settings read now: a bad CA fails here, not per request).
    pub fn new(endpoint: &Endpoint, connect_timeout: Duration) -> Result<Self, GateError> {
        let https = endpoint.url.starts_with("https://");
        let tls = endpoint.tls.clone().unwrap_or_default();
        let options = TlsOptions {
            roots: match tls.ca_pem {
                Some(pem) => Roots::Pem(pem.into_bytes()),
                // A plain `http://` endpoint needs no roots (none are loaded).
                None if !https => Roots::Empty,
                None => Roots::System,
            },
            server_name: tls.server_name,
            insecure_skip_verify: tls.insecure_skip_verify,
            client: None,
        };
        let tls = ClientTls::new(&options).map_err(tls_error)?;
        let caps = BodyCaps {
            compressed: MAX_BODY_BYTES,
            uncompressed: MAX_BODY_BYTES,
        };
        let client = ApiClient::new(&tls, connect_timeout, Duration::from_secs(90), caps);
        Ok(Self { client })
    }

    /// The alerts at `endpoint` (no timeout here: the caller cuts the whole exchange).
    pub async fn alerts(&self, endpoint: &Endpoint) -> Result<Vec<Alert>, GateError> {
        let authorization = match &endpoint.token {
            Some(token) => Some(
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| ApiError::Url(endpoint.url.clone()))?,
            ),
            None => None,
        };
        decode(self.client.get(&endpoint.url, authorization).await?)
    }
}

/// Why the TLS settings are unusable, naming the field of the alert gate they come from.
fn tls_error(error: TlsError) -> GateError {
    GateError::Tls(match error {
        TlsError::NoCertificate(_) => "caSecret: no PEM certificate in it".to_string(),
        TlsError::Pem(_, error) => format!("caSecret: unreadable PEM: {error}"),
        TlsError::Root(error) => format!("caSecret: a certificate is unusable as a root: {error}"),
        TlsError::ServerName(name) => format!("serverName {name:?} is not a DNS name or IP"),
        TlsError::ClientCertificate(error) | TlsError::Config(error) => error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use hyper::StatusCode;

    fn decoded(status: u16, body: &[u8]) -> Result<Vec<Alert>, GateError> {
        decode(Answer::of(
            StatusCode::from_u16(status).unwrap(),
            body.to_vec(),
        ))
    }

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
            decoded(200, body),
            Ok(vec![alert("A", "firing"), alert("B", "pending")])
        );
        assert_eq!(
            decoded(200, br#"{"status":"success","data":{"alerts":null}}"#),
            Ok(vec![])
        );
        // The federator answers with warnings beside the data: still a clear answer.
        assert_eq!(
            decoded(
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
                GateError::Api(ApiError::ErrorAnswer(
                    "unavailable: every backend failed".into(),
                )),
            ),
            (
                200,
                br#"{"status":"error","error":"boom"}"#,
                GateError::Api(ApiError::ErrorAnswer("boom".into())),
            ),
            (
                500,
                b"<html>\n internal error\n</html>",
                GateError::Api(ApiError::Status(
                    500,
                    "<html> internal error </html>".into(),
                )),
            ),
            (
                200,
                b"not json",
                GateError::Api(ApiError::BadJson(
                    "expected ident at line 1 column 2".into(),
                )),
            ),
            (
                200,
                br#"{"status":"success"}"#,
                GateError::Api(ApiError::BadJson("no data".into())),
            ),
            (
                200,
                br#"{"status":"partial","data":{"alerts":[]}}"#,
                GateError::Api(ApiError::BadJson(
                    r#"status "partial", expected "success""#.into(),
                )),
            ),
            (
                204,
                b"",
                GateError::Api(ApiError::BadJson(
                    "EOF while parsing a value at line 1 column 0".into(),
                )),
            ),
        ];
        for (status, body, expected) in cases {
            assert_eq!(
                decoded(status, body),
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
