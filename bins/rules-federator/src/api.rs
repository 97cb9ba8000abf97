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
pub(crate) fn error(code: StatusCode, error_type: &str, message: &str) -> Response {
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
    let started = Instant::now();
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
                    if !warnings.is_empty() {
                        api.metrics.partial_response("rules");
                    }
                    api.metrics.served("groups", data.groups.len());
                    api.metrics
                        .served("rules", data.groups.iter().map(|g| g.rules.len()).sum());
                    success_rules(data, &warnings, turn)
                }
            },
        },
    };
    api.metrics.request("rules", response.status().as_u16());
    api.metrics.request_duration("rules", started.elapsed());
    response
}

pub async fn alerts(State(api): State<Arc<Api>>) -> Response {
    let started = Instant::now();
    let response = match api.merged("type=alert").await {
        Err(response) => response,
        Ok((groups, warnings, _turn)) => {
            let data = zone_rules::into_alerts(groups);
            if !warnings.is_empty() {
                api.metrics.partial_response("alerts");
            }
            api.metrics.served("alerts", data.alerts.len());
            success(&data, &warnings)
        }
    };
    api.metrics.request("alerts", response.status().as_u16());
    api.metrics.request_duration("alerts", started.elapsed());
    response
}

#[cfg(test)]
mod tests;
