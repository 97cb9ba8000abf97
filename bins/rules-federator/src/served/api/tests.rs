//! The handlers and the merge against in-process backends.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::backends::testing::{
    FakePrometheus, RULES, Reply, api, api_capped, endpoint, gated, options, oversized, rules_data,
    serving_rules,
};
use serde_json::Value;
use std::time::Duration;
use tower::ServiceExt;
use zone_operator::prom_api::BodyCaps;
use zone_rules::{RuleGroup, Source};

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
    let a = serving_rules(true).await;
    let b = serving_rules(false).await;
    let other_shard = serving_rules(true).await;
    let hanging = FakePrometheus::start(Reply::Hang).await;
    let (api, registry) = api(
        vec![
            endpoint(&a.url, "0", "a"),
            endpoint(&b.url, "0", "b"),
            endpoint(&other_shard.url, "1", "a"),
            endpoint(&hanging.url, "1", "b"),
        ],
        PartialResponse::Warn,
    );
    let Ok((
        Merged {
            groups, warnings, ..
        },
        turn,
    )) = api.merged("", PartialResponse::Warn).await
    else {
        panic!("no merge")
    };
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
    let text = zone_operator::metrics::exposition(&registry);
    assert!(
        text.contains(r#"zone_aware_federator_partial_responses_total{handler="rules"} 1"#),
        "an answer without the hanging backend's rules is partial: {text}"
    );
    assert!(
        text.contains(r#"zone_aware_federator_request_duration_seconds_count{handler="rules"} 1"#)
    );
}

/// A backend answering more than the caps (plain, or a gzip bomb) is cut and named; the others
/// still merge.
#[tokio::test]
async fn an_oversized_answer_or_a_gzip_bomb_is_cut_and_named_in_a_warning() {
    let caps = BodyCaps {
        compressed: 1 << 20,
        uncompressed: 2 << 20,
    };
    assert!(
        (RULES.len() as u64) < caps.compressed,
        "the recorded answer fits"
    );
    let a = serving_rules(true).await;
    let other_shard = serving_rules(false).await;
    let huge = oversized(8 << 20, false).await;
    let bomb = oversized(32 << 20, true).await;
    let (api, registry) = api_capped(
        vec![
            endpoint(&a.url, "0", "a"),
            endpoint(&huge.url, "0", "b"),
            endpoint(&other_shard.url, "1", "a"),
            endpoint(&bomb.url, "1", "b"),
        ],
        PartialResponse::Warn,
        caps,
    );
    let Ok((
        Merged {
            groups, warnings, ..
        },
        _turn,
    )) = api.merged("", PartialResponse::Warn).await
    else {
        panic!("no merge")
    };
    assert_eq!(
        groups,
        merged_from(&[("0", &a.url), ("1", &other_shard.url)])
    );
    assert_eq!(
        warnings,
        [
            format!(
                "endpoint {}: answer over the compressed cap of 1048576 bytes; cut",
                huge.url
            ),
            format!(
                "endpoint {}: answer over the uncompressed cap of 2097152 bytes; cut",
                bomb.url
            ),
        ]
    );
    let metrics = zone_operator::metrics::exposition(&registry);
    for url in [&huge.url, &bomb.url] {
        assert!(
            metrics.contains(&format!(
                r#"zone_aware_federator_endpoint_errors_total{{endpoint="{url}",reason="too_large"}} 1"#
            )),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn abort_fails_the_request_naming_the_failed_backend() {
    let good = serving_rules(true).await;
    let failing = FakePrometheus::start(Reply::json(500, "oops")).await;
    let endpoints = vec![
        endpoint(&good.url, "0", "a"),
        endpoint(&failing.url, "0", "b"),
    ];
    let (abort, abort_registry) = api(endpoints.clone(), PartialResponse::Abort);
    let (status, answer) = get(&abort, "/api/v1/rules").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["status"], "error");
    assert_eq!(answer["errorType"], "unavailable");
    let text = zone_operator::metrics::exposition(&abort_registry);
    assert!(
        text.contains(r#"zone_aware_federator_partial_responses_total{handler="rules"} 0"#),
        "a failed request is no partial answer: {text}"
    );
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
    let failing =
        FakePrometheus::start(Reply::json(200, r#"{"status":"error","error":"loading"}"#)).await;
    let hanging = FakePrometheus::start(Reply::Hang).await;
    let gone = FakePrometheus::gone();
    let (api, _) = api(
        vec![
            endpoint(&failing.url, "0", "a"),
            endpoint(&hanging.url, "0", "b"),
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
        failing.paths(),
        ["/api/v1/rules", "/api/v1/rules?type=alert"],
        "/api/v1/alerts asks the backends for alerting rules only"
    );
}

#[test]
fn filters_go_to_the_backends_but_not_the_page_nor_our_labels() {
    let given = pairs(Some(
        "type=alert&match[]=%7Bteam%3D%22a%22%7D&rule_name[]=X&group_limit=1&exclude_alerts=true",
    ));
    let query = parse_rules_query(&given).unwrap();
    let sent = backend_query(&query, &given, &options());
    assert_eq!(
        sent,
        "type=alert&match%5B%5D=%7Bteam%3D%22a%22%7D&rule_name%5B%5D=X&exclude_alerts=true"
    );
    let given = pairs(Some(
        "match[]=%7Bshard%3D%221%22%7D&match[]=%7Bteam%3D%22a%22%7D",
    ));
    let query = parse_rules_query(&given).unwrap();
    assert_eq!(backend_query(&query, &given, &options()), "");
}

/// `GET path` as `caller` (the user the guard let in, when any): status and body.
async fn get_as(api: &Arc<Api>, path: &str, caller: Option<&str>) -> (StatusCode, Vec<u8>) {
    let mut request = axum::http::Request::get(path);
    if let Some(user) = caller {
        request = request.extension(Caller(user.to_string()));
    }
    let response = router(api.clone())
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body.to_vec())
}

/// Waits (yielding to the requests and backends under way) until `done`.
async fn until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

fn shared_count(registry: &prometheus::Registry, handler: &str) -> usize {
    let text = zone_operator::metrics::exposition(registry);
    let line = format!(r#"zone_aware_federator_shared_requests_total{{handler="{handler}"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map_or(0, |n| n.parse().unwrap())
}

/// Two backends that answer only when the test lets them, and the API over them.
struct Gated {
    release: Arc<tokio::sync::Semaphore>,
    backends: Vec<FakePrometheus>,
    api: Arc<Api>,
    registry: prometheus::Registry,
}

async fn gated_backends() -> Gated {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let backends = vec![gated(release.clone()).await, gated(release.clone()).await];
    let (api, registry) = api(
        vec![
            endpoint(&backends[0].url, "0", "a"),
            endpoint(&backends[1].url, "1", "a"),
        ],
        PartialResponse::Warn,
    );
    Gated {
        release,
        backends,
        api,
        registry,
    }
}

/// A request identical to one under way (same path, parameters and caller) joins it: every
/// backend is asked once and both get the same answer.
#[tokio::test]
async fn identical_requests_at_once_share_one_fetch_of_each_backend() {
    let Gated {
        release,
        backends,
        api,
        registry,
    } = gated_backends().await;
    for (path, caller) in [
        ("/api/v1/rules?type=alert", None),
        (
            "/api/v1/alerts",
            Some("system:serviceaccount:monitoring:grafana"),
        ),
    ] {
        let asked = |n: usize| backends.iter().all(|b| b.paths().len() == n);
        let before = backends[0].paths().len();
        let handler = if path.contains("rules") {
            "rules"
        } else {
            "alerts"
        };
        let first = tokio::spawn({
            let api = api.clone();
            async move { get_as(&api, path, caller).await }
        });
        until("the first request reaches every backend", || {
            asked(before + 1)
        })
        .await;
        let second = tokio::spawn({
            let api = api.clone();
            async move { get_as(&api, path, caller).await }
        });
        until("the second request joins the first", || {
            shared_count(&registry, handler) == 1
        })
        .await;
        release.add_permits(2);
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        assert_eq!(first.0, StatusCode::OK);
        assert_eq!(first, second, "{path}: one answer for both");
        assert!(asked(before + 1), "{path}: each backend asked once");
        let answer: Value = serde_json::from_slice(&first.1).unwrap();
        assert_eq!(answer["status"], "success", "{answer}");

        // Once answered, the next identical request fetches afresh.
        release.add_permits(2);
        assert_eq!(get_as(&api, path, caller).await.0, StatusCode::OK);
        assert!(asked(before + 2), "{path}: asked again after the answer");
    }
}

/// Requests that differ in a parameter, or come from different callers, never share: each is
/// fetched and merged for itself.
#[tokio::test]
async fn other_parameters_or_another_caller_fetch_for_themselves() {
    let Gated {
        release,
        backends,
        api,
        registry,
    } = gated_backends().await;
    let grafana = "system:serviceaccount:monitoring:grafana";
    let requests = [
        ("/api/v1/rules", Some(grafana)),
        ("/api/v1/rules?type=alert", Some(grafana)),
        ("/api/v1/rules?type=alert&group_limit=1", Some(grafana)),
        ("/api/v1/rules", Some("system:serviceaccount:apps:web")),
        ("/api/v1/rules", None),
    ];
    let under_way: Vec<_> = requests
        .iter()
        .map(|&(path, caller)| {
            let api = api.clone();
            tokio::spawn(async move { get_as(&api, path, caller).await })
        })
        .collect();
    until("every request reaches every backend", || {
        backends.iter().all(|b| b.paths().len() == requests.len())
    })
    .await;
    // And the one that repeats the first joins it.
    let repeated = tokio::spawn({
        let api = api.clone();
        async move { get_as(&api, "/api/v1/rules", Some(grafana)).await }
    });
    until("the repeated request joins", || {
        shared_count(&registry, "rules") == 1
    })
    .await;
    release.add_permits(2 * requests.len());
    for request in under_way {
        assert_eq!(request.await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(repeated.await.unwrap().0, StatusCode::OK);
    for backend in &backends {
        assert_eq!(backend.paths().len(), requests.len(), "one fetch each");
    }
    assert_eq!(api.flights_under_way(), 0);
}
