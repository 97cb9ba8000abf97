//! The fan-out: one GET per backend, concurrently (bounded), each cut at its timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use futures::StreamExt;
use http_body_util::Empty;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use zone_rules::RuleDiscovery;

use crate::body::{BodyCaps, gunzip_capped, read_capped};
use crate::connector::BackendTls;
use crate::endpoints::Endpoint;
use crate::metrics::FederatorMetrics;
use crate::token::BearerToken;

pub use crate::fetch_error::FetchError;

/// Prometheus's response envelope.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<RuleDiscovery>,
    #[serde(default)]
    error: String,
}

#[derive(Clone)]
pub struct Fetcher {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    timeout: Duration,
    concurrency: usize,
    caps: BodyCaps,
    metrics: FederatorMetrics,
    /// Sent to every backend (`--backend-bearer-token-file`).
    token: Option<Arc<BearerToken>>,
}

impl Fetcher {
    /// Backends reached through `tls` (`https://` ones; `http://` in plain).
    pub fn new(
        timeout: Duration,
        concurrency: usize,
        caps: BodyCaps,
        metrics: FederatorMetrics,
        tls: &BackendTls,
    ) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(tls.connector(timeout));
        Self {
            client,
            timeout,
            concurrency: concurrency.max(1),
            caps,
            metrics,
            token: None,
        }
    }

    /// Sends `token` to every backend.
    pub fn with_token(mut self, token: Option<BearerToken>) -> Self {
        self.token = token.map(Arc::new);
        self
    }

    /// `path_and_query` from every endpoint, in the endpoints' order, each answer as soon as it
    /// and those before it are in (so the caller can fold and drop them one by one).
    pub fn rules<'a>(
        &'a self,
        endpoints: Vec<Endpoint>,
        path_and_query: &'a str,
    ) -> impl futures::Stream<Item = (Endpoint, Result<Fetched, FetchError>)> + 'a {
        futures::stream::iter(endpoints)
            .map(move |endpoint| async move {
                let started = Instant::now();
                let result =
                    match tokio::time::timeout(self.timeout, self.get(&endpoint, path_and_query))
                        .await
                    {
                        Ok(result) => result,
                        Err(_) => Err(FetchError::Timeout(self.timeout)),
                    };
                self.metrics.endpoint_request(
                    endpoint.name(),
                    started.elapsed(),
                    result.as_ref().err().map(FetchError::kind),
                );
                (endpoint, result)
            })
            .buffered(self.concurrency)
    }

    async fn get(&self, endpoint: &Endpoint, path_and_query: &str) -> Result<Fetched, FetchError> {
        let url = format!("{}{path_and_query}", endpoint.url);
        let uri: hyper::Uri = url.parse().map_err(|_| FetchError::Url(url.clone()))?;
        let mut request = hyper::Request::get(uri)
            .header(hyper::header::ACCEPT, "application/json")
            // Prometheus compresses what it sends when asked: a tenth of the bytes to move.
            .header(hyper::header::ACCEPT_ENCODING, "gzip");
        if let Some(token) = &self.token {
            request = request.header(hyper::header::AUTHORIZATION, token.header());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| FetchError::Url(url.clone()))?;
        let response =
            self.client.request(request).await.map_err(|error| {
                FetchError::Connect(zone_operator::ErrorChain(&error).to_string())
            })?;
        let status = response.status();
        let gzipped = response
            .headers()
            .get(hyper::header::CONTENT_ENCODING)
            .is_some_and(|encoding| encoding.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let body = read_capped(response, self.caps.read_limit(gzipped)).await?;
        Ok(Fetched {
            status,
            gzipped,
            body,
            uncompressed_cap: self.caps.uncompressed,
        })
    }
}

/// One backend's answer as it came, still compressed: many can wait for their turn to be merged
/// at a fraction of what they take parsed.
#[derive(Debug)]
pub struct Fetched {
    status: hyper::StatusCode,
    gzipped: bool,
    body: Bytes,
    /// Gunzipped bytes past this are not produced (a gzip bomb stops here).
    uncompressed_cap: u64,
}

impl Fetched {
    /// The rules in the answer, or why there are none.
    pub fn decode(self) -> Result<RuleDiscovery, FetchError> {
        let Fetched {
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
        let envelope: Result<Envelope, _> = match std::str::from_utf8(&body) {
            Ok(text) => serde_json::from_str(text),
            Err(error) => Err(serde::de::Error::custom(format!("not UTF-8: {error}"))),
        };
        match envelope {
            Ok(Envelope {
                status: ok,
                data: Some(data),
                ..
            }) if ok == "success" && status.is_success() => Ok(data),
            Ok(envelope) if envelope.status == "error" => Err(FetchError::Backend(envelope.error)),
            _ if !status.is_success() => Err(FetchError::Status(
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            )),
            Ok(_) => Err(FetchError::BadJson("no data".to_string())),
            Err(error) => Err(FetchError::BadJson(error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backend::{Backend, endpoint, rules_data};
    use axum::http::StatusCode;

    const GENEROUS: BodyCaps = BodyCaps {
        compressed: 64 << 20,
        uncompressed: 256 << 20,
    };

    async fn fetch_one(fetcher: &Fetcher, endpoint: Endpoint) -> Result<RuleDiscovery, FetchError> {
        let answers: Vec<_> = fetcher
            .rules(vec![endpoint], "/api/v1/rules")
            .collect()
            .await;
        let [(_, answer)] = <[_; 1]>::try_from(answers).unwrap();
        answer.and_then(Fetched::decode)
    }

    fn fetcher(timeout: Duration) -> (Fetcher, prometheus::Registry) {
        let registry = prometheus::Registry::new();
        let metrics = FederatorMetrics::register(&registry).unwrap();
        let tls = BackendTls::load(&Default::default()).unwrap();
        (Fetcher::new(timeout, 4, GENEROUS, metrics, &tls), registry)
    }

    #[tokio::test]
    async fn decode_reads_prometheus_s_answer_gzipped_or_not() {
        let (fetcher, _) = fetcher(Duration::from_secs(30));
        for gzip in [true, false] {
            let backend = Backend::prometheus(gzip).await;
            let answer = fetch_one(&fetcher, backend.endpoint("0", "a")).await;
            assert_eq!(answer, Ok(rules_data()), "gzip: {gzip}");
            assert_eq!(backend.requests(), ["/api/v1/rules"]);
        }
    }

    /// Each way a backend can fail, with the reason its warning and metric carry.
    #[tokio::test]
    async fn decode_names_every_way_an_answer_fails() {
        let (fetcher, registry) = fetcher(Duration::from_secs(30));
        let cases: [(StatusCode, &str, Option<&str>, FetchError); 5] = [
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"match[]\""}"#,
                None,
                FetchError::Backend("invalid parameter \"match[]\"".into()),
            ),
            (
                StatusCode::BAD_GATEWAY,
                "<html>upstream gone</html>",
                None,
                FetchError::Status(502, "<html>upstream gone</html>".into()),
            ),
            (
                StatusCode::OK,
                r#"{"status":"success"}"#,
                None,
                FetchError::BadJson("no data".into()),
            ),
            (
                StatusCode::OK,
                "not json",
                None,
                FetchError::BadJson("expected ident at line 1 column 2".into()),
            ),
            (
                StatusCode::OK,
                r#"{"status":"success","data":{"groups":[]}}"#,
                Some("gzip"),
                FetchError::BadJson("bad gzip: invalid gzip header".into()),
            ),
        ];
        for (status, body, encoding, expected) in cases {
            let backend = Backend::answering(status, body, encoding).await;
            let answer = fetch_one(&fetcher, backend.endpoint("0", "a")).await;
            assert_eq!(answer, Err(expected), "{status} {body}");
        }

        let gone = Backend::gone().await;
        let answer = fetch_one(&fetcher, endpoint(&gone, "0", "a")).await;
        assert!(matches!(answer, Err(FetchError::Connect(_))), "{answer:?}");
        let text = zone_operator::metrics::exposition(&registry);
        let errors: Vec<_> = text
            .lines()
            .filter(|line| line.starts_with("zone_aware_federator_endpoint_errors_total{"))
            .collect();
        assert_eq!(
            errors,
            [format!(
                r#"zone_aware_federator_endpoint_errors_total{{endpoint="{gone}",reason="connect"}} 1"#
            )],
            "the fetch counts what never came; what came is counted where it is decoded"
        );
    }

    #[tokio::test]
    async fn a_backend_that_never_answers_is_cut_at_the_timeout() {
        let (fetcher, _) = fetcher(Duration::from_millis(200));
        let hanging = Backend::hanging().await;
        let answer = fetch_one(&fetcher, hanging.endpoint("0", "a")).await;
        assert_eq!(answer, Err(FetchError::Timeout(Duration::from_millis(200))));
    }
}
