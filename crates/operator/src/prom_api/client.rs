//! One GET of a Prometheus API endpoint, and its answer decoded.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, HeaderValue};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::ApiError;
use super::body::{BodyCaps, gunzip_capped, read_capped};
use super::tls::ClientTls;

/// How much of a non-2xx body an error quotes.
const QUOTED_BODY: usize = 200;

/// The HTTP client of one or many endpoints: connections are kept between requests.
#[derive(Clone)]
pub struct ApiClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    caps: BodyCaps,
    gzip: bool,
}

impl ApiClient {
    /// A client dialling through `tls` (connections made within `connect_timeout`, kept idle
    /// for `keep_idle`), reading at most `caps` of an answer.
    pub fn new(
        tls: &ClientTls,
        connect_timeout: Duration,
        keep_idle: Duration,
        caps: BodyCaps,
    ) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(keep_idle)
            .build(tls.connector(connect_timeout));
        Self {
            client,
            caps,
            gzip: false,
        }
    }

    /// Asks for gzipped answers (Prometheus compresses when asked: a tenth of the bytes to move).
    pub fn gzip(mut self) -> Self {
        self.gzip = true;
        self
    }

    /// GET `url`, with `Authorization: <authorization>` when given. No timeout here: the caller
    /// cuts the whole exchange.
    pub async fn get(
        &self,
        url: &str,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, ApiError> {
        self.send(hyper::Method::GET, url, authorization).await
    }

    /// POST to `url` with an empty body (the admin API's actions). No timeout here: the caller
    /// cuts the whole exchange.
    pub async fn post(
        &self,
        url: &str,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, ApiError> {
        self.send(hyper::Method::POST, url, authorization).await
    }

    async fn send(
        &self,
        method: hyper::Method,
        url: &str,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, ApiError> {
        let uri: hyper::Uri = url.parse().map_err(|_| ApiError::Url(url.to_string()))?;
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header(ACCEPT, "application/json");
        if self.gzip {
            request = request.header(ACCEPT_ENCODING, "gzip");
        }
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| ApiError::Url(url.to_string()))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| ApiError::Connect(crate::ErrorChain(&error).to_string()))?;
        let status = response.status();
        let gzipped = response
            .headers()
            .get(CONTENT_ENCODING)
            .is_some_and(|encoding| encoding.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let body = read_capped(response, self.caps.read_limit(gzipped)).await?;
        Ok(Answer {
            status,
            gzipped,
            body,
            uncompressed_cap: self.caps.uncompressed,
        })
    }
}

/// An answer as it came, still compressed: many can wait for their turn to be decoded at a
/// fraction of what they take parsed.
#[derive(Debug)]
pub struct Answer {
    pub status: hyper::StatusCode,
    gzipped: bool,
    body: Bytes,
    /// Gunzipped bytes past this are not produced (a gzip bomb stops here).
    uncompressed_cap: u64,
}

/// Prometheus's response envelope.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<T> {
    status: String,
    #[serde(default = "Option::default")]
    data: Option<T>,
    #[serde(default)]
    error_type: String,
    #[serde(default)]
    error: String,
}

impl Answer {
    /// An answer of `status` with `body` (tests, and callers that read it otherwise).
    pub fn of(status: hyper::StatusCode, body: impl Into<Bytes>) -> Self {
        Answer {
            status,
            gzipped: false,
            body: body.into(),
            uncompressed_cap: u64::MAX,
        }
    }

    /// The bytes of the body as they came (compressed when the server compressed it): what
    /// the answer moved.
    pub fn received_len(&self) -> usize {
        self.body.len()
    }

    /// The `data` of the answer, or why it is not a clear one.
    pub fn decode<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        let Answer {
            status,
            gzipped,
            body,
            uncompressed_cap,
        } = self;
        let body = if gzipped {
            Bytes::from(gunzip_capped(&body, uncompressed_cap)?)
        } else {
            body
        };
        // The text checked as UTF-8 once, in one pass, rather than string by string.
        let envelope: Result<Envelope<T>, _> = match std::str::from_utf8(&body) {
            Ok(text) => serde_json::from_str(text),
            Err(error) => Err(serde::de::Error::custom(format!("not UTF-8: {error}"))),
        };
        let success = status.is_success();
        match envelope {
            Ok(Envelope {
                status: answer,
                data: Some(data),
                ..
            }) if answer == "success" && success => Ok(data),
            Ok(envelope) if envelope.status == "error" => {
                let kind = match envelope.error_type.is_empty() {
                    true => String::new(),
                    false => format!("{}: ", envelope.error_type),
                };
                Err(ApiError::ErrorAnswer(format!("{kind}{}", envelope.error)))
            }
            _ if !success => Err(ApiError::Status(status.as_u16(), quote(&body))),
            Ok(envelope) if envelope.status != "success" => Err(ApiError::BadJson(format!(
                "status {:?}, expected \"success\"",
                envelope.status
            ))),
            Ok(_) => Err(ApiError::BadJson("no data".to_string())),
            Err(error) => Err(ApiError::BadJson(error.to_string())),
        }
    }
}

/// The start of a body, on one line.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
