//! The fan-out: one GET per backend, concurrently (bounded), each cut at its timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use zone_operator::prom_api::{Answer, ApiClient, ApiError, BodyCaps};
use zone_rules::RuleDiscovery;

use crate::backends::connector::BackendTls;
use crate::backends::endpoints::Endpoint;
use crate::backends::grpc::{self, Channels, GrpcAnswer, RawAnswer};
use crate::backends::token::BearerToken;
use crate::metrics::FederatorMetrics;

/// One backend's answer as it came: an HTTP body still compressed, or a gRPC backend's messages
/// still encoded.
#[derive(Debug)]
pub enum Fetched {
    Http(Answer),
    Grpc(RawAnswer),
}

impl Fetched {
    /// The bytes of the answer as received (an HTTP body compressed when it came so, the
    /// gRPC messages).
    pub fn received_len(&self) -> usize {
        match self {
            Fetched::Http(answer) => answer.received_len(),
            Fetched::Grpc(raw) => raw.messages.iter().map(|message| message.len()).sum(),
        }
    }

    /// The groups, and what the backend itself warned of (a federating backend's failed
    /// endpoints).
    pub fn decode(self) -> Result<(RuleDiscovery, Vec<String>), ApiError> {
        match self {
            Fetched::Http(answer) => answer.decode().map(|data| (data, Vec::new())),
            Fetched::Grpc(raw) => raw
                .decode()
                .map(|GrpcAnswer { data, warnings }| (data, warnings)),
        }
    }
}

/// How long a backend's connection may take (the HTTP client's too).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct Fetcher {
    client: ApiClient,
    timeout: Duration,
    concurrency: usize,
    metrics: FederatorMetrics,
    /// Sent to every backend (`--backend-bearer-token-file`).
    token: Option<Arc<BearerToken>>,
    /// The gRPC backends' connections.
    channels: Channels,
    /// What one gRPC backend's messages may add up to (the HTTP answers' uncompressed cap).
    grpc_cap: u64,
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
        Self {
            client: ApiClient::new(tls.client(), timeout, CONNECT_TIMEOUT, caps).gzip(),
            timeout,
            concurrency: concurrency.max(1),
            metrics,
            token: None,
            channels: Channels::new(tls.client().clone(), CONNECT_TIMEOUT),
            grpc_cap: caps.uncompressed,
        }
    }

    /// Sends `token` to every backend.
    pub fn with_token(mut self, token: Option<BearerToken>) -> Self {
        self.token = token.map(Arc::new);
        self
    }

    /// `path_and_query` from every endpoint, in the endpoints' order, each answer as soon as it
    /// and those before it are in (so the caller can fold and drop them one by one); each still
    /// compressed, decoded by the merge.
    pub fn rules<'a>(
        &'a self,
        endpoints: Vec<Endpoint>,
        path_and_query: &'a str,
    ) -> impl futures::Stream<Item = (Endpoint, Result<Fetched, ApiError>)> + 'a {
        self.channels
            .keep_only(endpoints.iter().map(|endpoint| endpoint.url.as_str()));
        futures::stream::iter(endpoints)
            .map(move |endpoint| async move {
                let started = Instant::now();
                let result =
                    match tokio::time::timeout(self.timeout, self.fetch(&endpoint, path_and_query))
                        .await
                    {
                        Ok(result) => result,
                        Err(_) => Err(ApiError::Timeout(self.timeout)),
                    };
                self.metrics.endpoint_request(
                    endpoint.name(),
                    started.elapsed(),
                    result.as_ref().err().map(ApiError::kind),
                );
                if let Ok(fetched) = &result {
                    self.metrics
                        .received(&endpoint.zone, fetched.received_len());
                }
                (endpoint, result)
            })
            .buffered(self.concurrency)
    }

    /// One backend's answer: a GET of `path_and_query`, or over gRPC the Rules call its query
    /// string asks for.
    async fn fetch(&self, endpoint: &Endpoint, path_and_query: &str) -> Result<Fetched, ApiError> {
        if grpc::address(&endpoint.url).is_some() {
            let query = path_and_query
                .split_once('?')
                .map_or("", |(_, query)| query);
            let request = grpc::request(query);
            let answer = self
                .channels
                .rules_raw(&endpoint.url, request, self.grpc_cap)
                .await?;
            return Ok(Fetched::Grpc(answer));
        }
        let url = format!("{}{path_and_query}", endpoint.url);
        let authorization = self.token.as_ref().map(|token| token.header());
        self.client
            .get(&url, authorization)
            .await
            .map(Fetched::Http)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backends::testing::{FakePrometheus, Reply, endpoint, rules_data, serving_rules};
    use axum::http::StatusCode;
    use zone_rules::RuleDiscovery;

    const GENEROUS: BodyCaps = BodyCaps {
        compressed: 64 << 20,
        uncompressed: 256 << 20,
    };

    async fn fetch_one(fetcher: &Fetcher, endpoint: Endpoint) -> Result<RuleDiscovery, ApiError> {
        let answers: Vec<_> = fetcher
            .rules(vec![endpoint], "/api/v1/rules")
            .collect()
            .await;
        let [(_, answer)] = <[_; 1]>::try_from(answers).unwrap();
        answer.and_then(Fetched::decode).map(|(data, _)| data)
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
            let backend = serving_rules(gzip).await;
            let answer = fetch_one(&fetcher, endpoint(&backend.url, "0", "a")).await;
            assert_eq!(answer, Ok(rules_data()), "gzip: {gzip}");
            assert_eq!(backend.paths(), ["/api/v1/rules"]);
        }
    }

    /// Each way a backend can fail, with the reason its warning and metric carry.
    #[tokio::test]
    async fn decode_names_every_way_an_answer_fails() {
        let (fetcher, registry) = fetcher(Duration::from_secs(30));
        let cases: [(StatusCode, &str, Option<&str>, ApiError); 5] = [
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"match[]\""}"#,
                None,
                ApiError::ErrorAnswer("bad_data: invalid parameter \"match[]\"".into()),
            ),
            (
                StatusCode::BAD_GATEWAY,
                "<html>upstream gone</html>",
                None,
                ApiError::Status(502, "<html>upstream gone</html>".into()),
            ),
            (
                StatusCode::OK,
                r#"{"status":"success"}"#,
                None,
                ApiError::BadJson("no data".into()),
            ),
            (
                StatusCode::OK,
                "not json",
                None,
                ApiError::BadJson("expected ident at line 1 column 2".into()),
            ),
            (
                StatusCode::OK,
                r#"{"status":"success","data":{"groups":[]}}"#,
                Some("gzip"),
                ApiError::BadJson("bad gzip: invalid gzip header".into()),
            ),
        ];
        for (status, body, encoding, expected) in cases {
            let reply = Reply::json(status.as_u16(), body);
            let reply = match encoding {
                Some(encoding) => reply.encoding(encoding),
                None => reply,
            };
            let backend = FakePrometheus::start(reply).await;
            let answer = fetch_one(&fetcher, endpoint(&backend.url, "0", "a")).await;
            assert_eq!(answer, Err(expected), "{status} {body}");
        }

        let gone = FakePrometheus::gone();
        let answer = fetch_one(&fetcher, endpoint(&gone, "0", "a")).await;
        assert!(matches!(answer, Err(ApiError::Connect(_))), "{answer:?}");
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

    /// The fan-out's bytes are counted by the backend's zone as they came: a gzipped answer
    /// counts its compressed bytes, a backend of no known zone counts as unknown.
    #[tokio::test]
    async fn received_bytes_are_counted_by_the_backends_zone() {
        use crate::backends::testing::RULES;
        let (fetcher, registry) = fetcher(Duration::from_secs(30));
        let plain = serving_rules(false).await;
        let gzipped = serving_rules(true).await;
        let mut in_b = endpoint(&plain.url, "0", "a");
        in_b.zone = "zone-b".into();
        fetch_one(&fetcher, in_b).await.unwrap();
        fetch_one(&fetcher, endpoint(&gzipped.url, "1", "a"))
            .await
            .unwrap();
        let text = zone_operator::metrics::exposition(&registry);
        let received = |zone: &str| {
            let series =
                format!("zone_aware_federator_backend_received_bytes_total{{zone=\"{zone}\"}} ");
            text.lines()
                .find_map(|line| line.strip_prefix(&series)?.parse::<f64>().ok())
        };
        assert_eq!(received("zone-b"), Some(RULES.len() as f64), "{text}");
        let compressed = received("unknown").unwrap();
        assert!(
            compressed > 0.0 && compressed < RULES.len() as f64,
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_backend_that_never_answers_is_cut_at_the_timeout() {
        let (fetcher, _) = fetcher(Duration::from_millis(200));
        let hanging = FakePrometheus::start(Reply::Hang).await;
        let answer = fetch_one(&fetcher, endpoint(&hanging.url, "0", "a")).await;
        assert_eq!(answer, Err(ApiError::Timeout(Duration::from_millis(200))));
    }
}
