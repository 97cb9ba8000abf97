//! `/api/v1/rules` and `/api/v1/alerts`, answered as Prometheus answers them.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use zone_rules::{
    MergeOptions, Merger, RuleDiscovery, RuleGroup, RulesQuery, Source, parse_rules_query,
};

use crate::cli::PartialResponse;
use crate::endpoints::Endpoints;
use crate::fetch::Fetcher;
use crate::metrics::FederatorMetrics;

pub struct Api {
    pub endpoints: Endpoints,
    pub fetcher: Fetcher,
    pub options: MergeOptions,
    pub partial: PartialResponse,
    pub metrics: FederatorMetrics,
    /// Turns to merge (`--max-concurrent-merges`): a merge and the answer it builds are most of
    /// a request's memory.
    pub merges: Arc<tokio::sync::Semaphore>,
}

/// `/api/v1/rules` and `/api/v1/alerts` over `api`, to serve next to the runtime's routes.
pub fn router(api: Arc<Api>) -> Router {
    Router::new()
        .route("/api/v1/rules", get(rules))
        .route("/api/v1/alerts", get(alerts))
        .with_state(api)
}

/// Prometheus's error envelope with its status code.
fn error(code: StatusCode, error_type: &str, message: &str) -> Response {
    (
        code,
        Json(json!({"status": "error", "errorType": error_type, "error": message})),
    )
        .into_response()
}

/// Prometheus's success envelope.
#[derive(serde::Serialize)]
struct Success<'a, T> {
    status: &'static str,
    data: &'a T,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The success envelope around `data`, written straight to bytes (the merged answer of 100
/// backends is tens of megabytes: no intermediate JSON tree).
fn success<T: serde::Serialize>(data: &T, warnings: &[String]) -> Response {
    let body = Success {
        status: "success",
        data,
        warnings,
    };
    match serde_json::to_vec(&body) {
        Ok(bytes) => (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        ),
    }
}

/// The success envelope of `/api/v1/rules`, streamed: each group is written and dropped as the
/// client takes the answer, so the merged groups and their JSON are never both held whole, and
/// the merge turn (`turn`) is given back once the last group is written.
fn success_rules(data: RuleDiscovery, warnings: &[String], turn: OwnedSemaphorePermit) -> Response {
    let RuleDiscovery {
        groups,
        group_next_token,
    } = data;
    let mut tail = b"]".to_vec();
    let written = (|| -> Result<(), serde_json::Error> {
        if !group_next_token.is_empty() {
            tail.extend_from_slice(br#","groupNextToken":"#);
            serde_json::to_writer(&mut tail, &group_next_token)?;
        }
        tail.push(b'}');
        if !warnings.is_empty() {
            tail.extend_from_slice(br#","warnings":"#);
            serde_json::to_writer(&mut tail, warnings)?;
        }
        tail.push(b'}');
        Ok(())
    })();
    if let Err(e) = written {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        );
    }
    let head = futures::stream::once(std::future::ready(Ok::<_, serde_json::Error>(
        axum::body::Bytes::from_static(br#"{"status":"success","data":{"groups":["#),
    )));
    let body = futures::stream::iter(groups.into_iter().enumerate()).map(|(i, group)| {
        let mut out = Vec::new();
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &group).map(|()| axum::body::Bytes::from(out))
    });
    let end = futures::stream::once(async move {
        drop(turn);
        Ok(axum::body::Bytes::from(tail))
    });
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(head.chain(body).chain(end)),
    )
        .into_response()
}

fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The parameters sent on to the backends: every filter they understand (newer Prometheus
/// applies them, older ignores them; they are applied again here), never the page. `match[]`
/// goes only when no matcher names a label the federator adds or removes.
fn backend_query(query: &RulesQuery, given: &[(String, String)], options: &MergeOptions) -> String {
    let ours = |name: &str| {
        options.shard_label.as_deref() == Some(name)
            || options.replica_labels.iter().any(|l| l == name)
    };
    let push_matchers = query
        .matcher_sets
        .iter()
        .flatten()
        .all(|matcher| !ours(&matcher.name));
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    for (key, value) in given {
        let forwarded = match key.as_str() {
            "type" | "rule_name[]" | "rule_group[]" | "file[]" | "exclude_alerts" => true,
            "match[]" => push_matchers,
            _ => false,
        };
        if forwarded {
            serializer.append_pair(key, value);
        }
    }
    serializer.finish()
}

impl Api {
    /// Every backend's rules for `backend_query`, merged; with the warnings of the failed
    /// backends, or the error that ends the request (`abort`, or no backend at all answered
    /// while some failed).
    ///
    /// Every backend is asked at once and its answer kept as it came (compressed, small); then,
    /// in its turn (`merges`), each answer is decoded and folded into the merge, in endpoint
    /// order, and dropped. The turn is returned with the groups: the caller keeps it until the
    /// answer is written.
    async fn merged(
        &self,
        backend_query: &str,
    ) -> Result<(Vec<RuleGroup>, Vec<String>, OwnedSemaphorePermit), Response> {
        let path = if backend_query.is_empty() {
            "/api/v1/rules".to_string()
        } else {
            format!("/api/v1/rules?{backend_query}")
        };
        let endpoints = self.endpoints.current();
        let fetched: Vec<_> = self.fetcher.rules(endpoints, &path).collect().await;
        let Ok(turn) = self.merges.clone().acquire_owned().await else {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "shutting down",
            ));
        };
        let started = Instant::now();
        let mut merger = Merger::new(self.options.clone());
        let mut answered = 0usize;
        let mut warnings = Vec::new();
        for (endpoint, fetched) in fetched {
            let answer = fetched.and_then(|fetched| {
                fetched.decode().inspect_err(|why| {
                    self.metrics.endpoint_error(endpoint.name(), why.kind());
                })
            });
            match answer {
                Ok(data) => {
                    answered += 1;
                    merger.add(Source {
                        shard: endpoint.shard.clone(),
                        name: endpoint.url.clone(),
                        groups: data.groups,
                    });
                }
                Err(why) => {
                    tracing::warn!(endpoint = %endpoint.url, error = %why, "backend failed");
                    warnings.push(format!("endpoint {}: {why}", endpoint.url));
                }
            }
        }
        if !warnings.is_empty() && (self.partial == PartialResponse::Abort || answered == 0) {
            let message = format!(
                "{} of {} backends failed: {}",
                warnings.len(),
                warnings.len() + answered,
                warnings.join("; ")
            );
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                &message,
            ));
        }
        let groups = merger.finish();
        self.metrics.merged(started.elapsed());
        Ok((groups, warnings, turn))
    }
}

pub async fn rules(State(api): State<Arc<Api>>, RawQuery(query): RawQuery) -> Response {
    let given = pairs(query.as_deref());
    let response = match parse_rules_query(&given) {
        Err(bad) => error(StatusCode::BAD_REQUEST, "bad_data", &bad.0),
        Ok(query) => match api
            .merged(&backend_query(&query, &given, &api.options))
            .await
        {
            Err(response) => response,
            Ok((groups, warnings, turn)) => match query.apply(groups) {
                Err(bad) => error(StatusCode::BAD_REQUEST, "bad_data", &bad.0),
                Ok(data) => {
                    api.metrics.served("groups", data.groups.len());
                    api.metrics
                        .served("rules", data.groups.iter().map(|g| g.rules.len()).sum());
                    success_rules(data, &warnings, turn)
                }
            },
        },
    };
    api.metrics.request("rules", response.status().as_u16());
    response
}

pub async fn alerts(State(api): State<Arc<Api>>) -> Response {
    let response = match api.merged("type=alert").await {
        Err(response) => response,
        Ok((groups, warnings, _turn)) => {
            let data = zone_rules::into_alerts(groups);
            api.metrics.served("alerts", data.alerts.len());
            success(&data, &warnings)
        }
    };
    api.metrics.request("alerts", response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backend::{Backend, endpoint, rules_data};
    use crate::endpoints::Endpoint;
    use serde_json::Value;
    use std::time::Duration;
    use tower::ServiceExt;

    /// Long enough for a backend on this machine to answer under a loaded test run, short
    /// enough that waiting for a hanging one costs little.
    const TIMEOUT: Duration = Duration::from_secs(2);

    fn api(endpoints: Vec<Endpoint>, partial: PartialResponse) -> (Arc<Api>, prometheus::Registry) {
        let registry = prometheus::Registry::new();
        let metrics = FederatorMetrics::register(&registry).unwrap();
        let api = Api {
            endpoints: Endpoints::fixed(endpoints),
            fetcher: Fetcher::new(TIMEOUT, 8, metrics.clone()),
            options: options(),
            partial,
            metrics,
            merges: Arc::new(tokio::sync::Semaphore::new(1)),
        };
        (Arc::new(api), registry)
    }

    fn options() -> MergeOptions {
        MergeOptions {
            replica_labels: vec!["prometheus_replica".into(), "replica".into()],
            shard_label: Some("shard".into()),
        }
    }

    /// What the merge makes of the recorded answer from `shards`, one backend each.
    fn merged_from(shards: &[(&str, &str)]) -> Vec<RuleGroup> {
        let sources: Vec<_> = shards
            .iter()
            .map(|(shard, url)| Source {
                shard: shard.to_string(),
                name: url.to_string(),
                groups: rules_data().groups,
            })
            .collect();
        zone_rules::merge(&sources, &options())
    }

    async fn get(api: &Arc<Api>, path: &str) -> (StatusCode, Value) {
        let response = router(api.clone())
            .oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn replicas_merge_and_a_hanging_backend_is_cut_and_named_in_a_warning() {
        let a = Backend::prometheus(true).await;
        let b = Backend::prometheus(false).await;
        let other_shard = Backend::prometheus(true).await;
        let hanging = Backend::hanging().await;
        let (api, registry) = api(
            vec![
                a.endpoint("0", "a"),
                b.endpoint("0", "b"),
                other_shard.endpoint("1", "a"),
                hanging.endpoint("1", "b"),
            ],
            PartialResponse::Warn,
        );
        let (groups, warnings, turn) = api.merged("").await.unwrap();
        // The merge turn (one here) is held until the answer is written.
        drop(turn);
        assert_eq!(
            groups,
            merged_from(&[("0", a.url.as_str()), ("1", other_shard.url.as_str())])
        );
        assert_eq!(
            warnings,
            [format!("endpoint {}: no answer within 2s", hanging.url)]
        );
        let text = zone_operator::metrics::exposition(&registry);
        assert!(
            text.contains(&format!(
                r#"zone_aware_federator_endpoint_errors_total{{endpoint="{}",reason="timeout"}} 1"#,
                hanging.url
            )),
            "{text}"
        );

        // The same through the handler: Prometheus's envelope, the warning in it.
        let (status, answer) = get(&api, "/api/v1/rules").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["status"], "success");
        assert_eq!(answer["warnings"].as_array().unwrap().len(), 1, "{answer}");
        assert_eq!(
            answer["data"]["groups"][0]["rules"]
                .as_array()
                .unwrap()
                .len(),
            8,
            "four rules on each of two shards: {answer}"
        );
    }

    #[tokio::test]
    async fn abort_fails_the_request_naming_the_failed_backend() {
        let good = Backend::prometheus(true).await;
        let failing = Backend::answering(StatusCode::INTERNAL_SERVER_ERROR, "oops", None).await;
        let endpoints = vec![good.endpoint("0", "a"), failing.endpoint("0", "b")];
        let (abort, _) = api(endpoints.clone(), PartialResponse::Abort);
        let (status, answer) = get(&abort, "/api/v1/rules").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["status"], "error");
        assert_eq!(answer["errorType"], "unavailable");
        assert_eq!(
            answer["error"],
            format!(
                "1 of 2 backends failed: endpoint {}: HTTP 500: oops",
                failing.url
            )
        );

        // The same backends in warn mode: the good one's rules and a warning.
        let (warn, _) = api(endpoints, PartialResponse::Warn);
        let (status, answer) = get(&warn, "/api/v1/rules").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(
            answer["warnings"],
            serde_json::json!([format!("endpoint {}: HTTP 500: oops", failing.url)])
        );
        assert_eq!(
            answer["data"]["groups"],
            serde_json::to_value(merged_from(&[("0", good.url.as_str())])).unwrap()
        );
    }

    #[tokio::test]
    async fn when_every_backend_fails_the_request_fails_in_warn_mode_too() {
        let failing = Backend::answering(
            StatusCode::OK,
            r#"{"status":"error","error":"loading"}"#,
            None,
        )
        .await;
        let hanging = Backend::hanging().await;
        let gone = Backend::gone().await;
        let (api, _) = api(
            vec![
                failing.endpoint("0", "a"),
                hanging.endpoint("0", "b"),
                endpoint(&gone, "1", "a"),
            ],
            PartialResponse::Warn,
        );
        for path in ["/api/v1/rules", "/api/v1/alerts"] {
            let (status, answer) = get(&api, path).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {answer}");
            assert_eq!(answer["errorType"], "unavailable", "{path}");
            let error = answer["error"].as_str().unwrap();
            assert!(error.starts_with("3 of 3 backends failed: "), "{error}");
            for url in [&failing.url, &hanging.url, &gone] {
                assert!(error.contains(url.as_str()), "{url} named: {error}");
            }
        }
        assert_eq!(
            failing.requests(),
            ["/api/v1/rules", "/api/v1/rules?type=alert"],
            "/api/v1/alerts asks the backends for alerting rules only"
        );
    }

    #[tokio::test]
    async fn the_rules_envelope_written_group_by_group_is_prometheus_s() {
        let data: RuleDiscovery = serde_json::from_value(serde_json::json!({
            "groups": [{"name": "a", "file": "f", "rules": []}, {"name": "b", "file": "f", "rules": []}],
            "groupNextToken": "t",
        }))
        .unwrap();
        let expected = serde_json::json!({
            "status": "success",
            "data": serde_json::to_value(&data).unwrap(),
            "warnings": ["endpoint x: down"],
        });
        let turns = Arc::new(tokio::sync::Semaphore::new(1));
        let turn = turns.clone().acquire_owned().await.unwrap();
        let response = success_rules(data, &["endpoint x: down".to_string()], turn);
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let written: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(written, expected);
        assert_eq!(
            turns.available_permits(),
            1,
            "the turn is given back once written"
        );
        let turn = turns.clone().acquire_owned().await.unwrap();
        let empty = success_rules(RuleDiscovery::default(), &[], turn);
        let body = axum::body::to_bytes(empty.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(&body[..], br#"{"status":"success","data":{"groups":[]}}"#);
    }

    #[test]
    fn filters_go_to_the_backends_but_not_the_page_nor_our_labels() {
        let given = pairs(Some(
            "type=alert&match[]=%7Bteam%3D%22a%22%7D&rule_name[]=X&group_limit=1&exclude_alerts=true",
        ));
        let query = parse_rules_query(&given).unwrap();
        let sent = backend_query(&query, &given, &MergeOptions::default());
        assert_eq!(
            sent,
            "type=alert&match%5B%5D=%7Bteam%3D%22a%22%7D&rule_name%5B%5D=X&exclude_alerts=true"
        );
        let given = pairs(Some(
            "match[]=%7Bshard%3D%221%22%7D&match[]=%7Bteam%3D%22a%22%7D",
        ));
        let query = parse_rules_query(&given).unwrap();
        assert_eq!(backend_query(&query, &given, &MergeOptions::default()), "");
    }
}
