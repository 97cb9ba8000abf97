//! `/api/v1/rules` and `/api/v1/alerts`, answered as Prometheus answers them. Requests that
//! ask the same thing at once share one fetch, merge and written answer ([`crate::served::flight`]);
//! the merge runs on every core ([`crate::merge`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use futures::{FutureExt, StreamExt};
use tokio::sync::OwnedSemaphorePermit;
use zone_rules::{MergeOptions, RuleDiscovery, RulesQuery, parse_rules_query};

use crate::backends::endpoints::Endpoints;
use crate::backends::fetch::Fetcher;
use crate::cli::PartialResponse;
use crate::merge::{Cores, Merged, PoolError, merge};
use crate::metrics::FederatorMetrics;
use crate::served::answer::{self, Answer};
use crate::served::envelope::error;
use crate::served::flight::{Flights, Joined};
use crate::served::guard::Caller;

pub struct Api {
    pub endpoints: Endpoints,
    pub fetcher: Fetcher,
    pub options: MergeOptions,
    pub partial: PartialResponse,
    pub metrics: FederatorMetrics,
    /// Turns to merge (`--max-concurrent-merges`): a merge and the answer it builds are most of
    /// a request's memory. Requests that share a merge take one turn.
    pub merges: Arc<tokio::sync::Semaphore>,
    /// Where decoding and writing run, one job per core at a time.
    pub cores: Cores,
    pub flights: Flights<FlightKey, Arc<Answer>>,
}

/// What requests must have in common to share an answer: the handler, every parameter (the
/// page too) and the caller. The answer does not depend on who asks today (the backends are
/// asked with the federator's own credentials, and every caller let in may read all of it),
/// but a caller never receives an answer computed for another: a future per-caller view cannot
/// leak through the sharing. Grafana's data source asks as one ServiceAccount for all its
/// viewers, so a dashboard's panels still share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlightKey {
    handler: &'static str,
    params: Vec<(String, String)>,
    /// The user the API server vouched for (`--auth=kubernetes`); `None` without it.
    caller: Option<String>,
}

/// Why a request gets no rules: Prometheus's error type and message, and the HTTP status that
/// carries them (gRPC maps the same refusal to its own codes).
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub error_type: &'static str,
    pub message: String,
}

impl Refusal {
    fn unavailable(message: String) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error_type: "unavailable",
            message,
        }
    }

    fn bad_data(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error_type: "bad_data",
            message,
        }
    }
}

impl From<Refusal> for Answer {
    fn from(refusal: Refusal) -> Self {
        Answer::error(refusal.status, refusal.error_type, &refusal.message)
    }
}

impl From<PoolError> for Refusal {
    fn from(error: PoolError) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error_type: "internal",
            message: error.to_string(),
        }
    }
}

/// `/api/v1/rules` and `/api/v1/alerts` over `api`, to serve next to the runtime's routes.
pub fn router(api: Arc<Api>) -> Router {
    Router::new()
        .route("/api/v1/rules", get(rules))
        .route("/api/v1/alerts", get(alerts))
        .with_state(api)
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
    /// Every backend's rules for `backend_query`, merged, with the warnings of the failed
    /// backends; or the answer that ends the request (`abort`, or no backend at all answered
    /// while some failed). The merge turn comes with the groups: the caller keeps it until
    /// the answer is sent.
    ///
    /// Every backend is asked at once. Answers that come before the turn wait compressed; from
    /// the turn on they are decoded on every core and folded in, in endpoint order.
    async fn merged(
        &self,
        backend_query: &str,
        partial: PartialResponse,
    ) -> Result<(Merged, OwnedSemaphorePermit), Refusal> {
        let path = if backend_query.is_empty() {
            "/api/v1/rules".to_string()
        } else {
            format!("/api/v1/rules?{backend_query}")
        };
        let endpoints = self.endpoints.current();
        let mut fetched = std::pin::pin!(self.fetcher.rules(endpoints, &path));
        let mut early = Vec::new();
        let mut all_in = false;
        let turn = {
            let acquire = self.merges.clone().acquire_owned();
            let mut acquire = std::pin::pin!(acquire);
            loop {
                tokio::select! {
                    turn = &mut acquire => break turn,
                    next = fetched.next(), if !all_in => match next {
                        Some(answer) => early.push(answer),
                        None => all_in = true,
                    },
                }
            }
        };
        let Ok(turn) = turn else {
            return Err(Refusal::unavailable("shutting down".to_string()));
        };
        let started = Instant::now();
        let answers = futures::stream::iter(early).chain(fetched);
        let mut merged = merge(answers, &self.cores, &self.options, &self.metrics).await?;
        // A discovered shard with no ready pod (its zone down) is a backend that failed too.
        merged.warnings.extend(self.endpoints.unready_shards());
        let failed = merged.warnings.len();
        if failed > 0 && (partial == PartialResponse::Abort || merged.answered == 0) {
            return Err(Refusal::unavailable(format!(
                "{failed} of {} backends failed: {}",
                failed + merged.answered,
                merged.warnings.join("; ")
            )));
        }
        self.metrics.merged(started.elapsed());
        Ok((merged, turn))
    }

    /// The rules of `query` (`given`, as read) over every backend, with the warnings of the
    /// failed ones when `partial` lets them fail; and the merge turn, kept until they are sent.
    pub async fn rules_data(
        &self,
        query: RulesQuery,
        given: &[(String, String)],
        partial: PartialResponse,
    ) -> Result<(RuleDiscovery, Vec<String>, OwnedSemaphorePermit), Refusal> {
        let (merged, turn) = self
            .merged(&backend_query(&query, given, &self.options), partial)
            .await?;
        let warnings = merged.all_warnings();
        let groups = merged.groups;
        let data = match self.cores.run(move || query.apply(groups)).await? {
            Ok(data) => data,
            Err(bad) => return Err(Refusal::bad_data(bad.0)),
        };
        self.metrics.served("groups", data.groups.len());
        self.metrics
            .served("rules", data.groups.iter().map(|g| g.rules.len()).sum());
        Ok((data, warnings, turn))
    }

    /// Every rule of every backend as `/api/v1/rules` merges them, with the failed backends
    /// named in the warnings: what the tests compare other ways of reading the backends with.
    #[cfg(test)]
    pub async fn all_rules(&self) -> (RuleDiscovery, Vec<String>) {
        let (data, warnings, _turn) = self
            .rules_data(RulesQuery::default(), &[], PartialResponse::Warn)
            .await
            .unwrap();
        (data, warnings)
    }

    /// The answer to `/api/v1/rules` with `query` (`given`, as read).
    async fn rules_answer(&self, query: RulesQuery, given: &[(String, String)]) -> Answer {
        match self.rules_data(query, given, self.partial).await {
            Ok((data, warnings, turn)) => Answer::rules(data, &warnings, &self.cores, turn).await,
            Err(refusal) => refusal.into(),
        }
    }

    /// The answer to `/api/v1/alerts`.
    async fn alerts_answer(&self) -> Answer {
        let (merged, turn) = match self.merged("type=alert", self.partial).await {
            Ok(merged) => merged,
            Err(refusal) => return refusal.into(),
        };
        let warnings = merged.all_warnings();
        let groups = merged.groups;
        let data = match self
            .cores
            .run(move || zone_rules::into_alerts(groups))
            .await
        {
            Ok(data) => data,
            Err(pool) => return pool.into(),
        };
        self.metrics.served("alerts", data.alerts.len());
        Answer::alerts(data.alerts, &warnings, &self.cores, turn).await
    }

    #[cfg(test)]
    fn flights_under_way(&self) -> usize {
        self.flights.under_way()
    }

    /// The answer of the flight of `key`, joined or started with `work`.
    async fn shared<F>(self: &Arc<Self>, key: FlightKey, work: F) -> Response
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        let handler = key.handler;
        let (joined, answer) = self.flights.join(key, move || work.map(Arc::new).boxed());
        if joined == Joined::Shared {
            self.metrics.shared(handler);
        }
        let answer = answer.await;
        // Counted per request, as requests_total is: the share of answers seen incomplete.
        if answer.partial {
            self.metrics.partial_response(handler);
        }
        answer::response(answer)
    }
}

pub async fn rules(
    State(api): State<Arc<Api>>,
    caller: Option<Extension<Caller>>,
    RawQuery(query): RawQuery,
) -> Response {
    let started = Instant::now();
    let given = pairs(query.as_deref());
    let response = match parse_rules_query(&given) {
        Err(bad) => error(StatusCode::BAD_REQUEST, "bad_data", &bad.0),
        Ok(query) => {
            let key = FlightKey {
                handler: "rules",
                params: given.clone(),
                caller: caller.map(|Extension(Caller(user))| user),
            };
            let flown = api.clone();
            let work = async move { flown.rules_answer(query, &given).await };
            api.shared(key, work).await
        }
    };
    api.metrics.request("rules", response.status().as_u16());
    api.metrics.request_duration("rules", started.elapsed());
    response
}

/// `/api/v1/alerts` takes no parameter: every request of one caller shares.
pub async fn alerts(State(api): State<Arc<Api>>, caller: Option<Extension<Caller>>) -> Response {
    let started = Instant::now();
    let key = FlightKey {
        handler: "alerts",
        params: Vec::new(),
        caller: caller.map(|Extension(Caller(user))| user),
    };
    let flown = api.clone();
    let work = async move { flown.alerts_answer().await };
    let response = api.shared(key, work).await;
    api.metrics.request("alerts", response.status().as_u16());
    api.metrics.request_duration("alerts", started.elapsed());
    response
}

#[cfg(test)]
mod tests;
