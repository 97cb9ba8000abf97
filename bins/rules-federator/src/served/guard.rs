//! What stands before the API: a cap on requests served at once (503 with `Retry-After` past
//! it) and, when on, Kubernetes authentication and authorization of the caller (401, 403), each
//! refusal in Prometheus's error shape so Grafana shows the reason.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use zone_operator::auth::{Decision, KubeAuth};

use crate::served::envelope::error;

/// What a client refused for load or an API-server hiccup is told to wait, in seconds: a merge
/// takes a fraction of that.
const RETRY_AFTER_SECONDS: &str = "1";

/// The user the API server vouched for, on a request let in by `--auth=kubernetes`.
#[derive(Debug, Clone)]
pub struct Caller(pub String);

pub struct Guard {
    /// Requests served at once, at most (`--max-concurrent-requests`).
    pub requests: Arc<Semaphore>,
    /// `--auth=kubernetes`.
    pub auth: Option<Arc<KubeAuth>>,
}

/// `router` behind `guard`.
pub fn guarded(router: Router, guard: Arc<Guard>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(guard, check))
}

/// The turn is taken before the caller is reviewed: reviews are API requests, and an anonymous
/// flood of made-up tokens must be bounded like any other load.
async fn check(State(guard): State<Arc<Guard>>, mut request: Request, next: Next) -> Response {
    let Ok(turn) = guard.requests.clone().try_acquire_owned() else {
        tracing::debug!(path = %request.uri().path(), "too many concurrent requests; refused");
        return retry_later(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "too many concurrent requests; retry later",
        ));
    };
    if let Some(auth) = &guard.auth {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        match auth.check(authorization, request.uri().path()).await {
            Decision::Allowed { user } => {
                tracing::debug!(user = %user, path = %request.uri().path(), "caller allowed");
                request.extensions_mut().insert(Caller(user));
            }
            Decision::Unauthenticated(why) => {
                let mut refused = error(StatusCode::UNAUTHORIZED, "unauthorized", &why);
                refused
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return refused;
            }
            Decision::Forbidden { user, reason } => {
                tracing::info!(user = %user, path = %request.uri().path(), reason = %reason, "caller forbidden");
                let message = format!("user {user:?} may not read {}", request.uri().path());
                return error(StatusCode::FORBIDDEN, "forbidden", &message);
            }
            Decision::Unavailable(why) => {
                return retry_later(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &why));
            }
        }
    }
    // The turn is held until the answer is written, not only computed: the streamed rules
    // answer holds its groups until the client has taken them.
    next.run(request).await.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _held = &turn;
            frame
        }))
    })
}

fn retry_later(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use axum::routing::get;
    use serde_json::{Value, json};
    use tower::ServiceExt;
    use zone_operator::auth::Attributes;
    use zone_operator::testing::{FakeApi, Method};

    use super::*;
    use crate::backends::testing::{ACCESS_REVIEWS, TOKEN_REVIEWS, authenticating, fake_api};

    /// `/api/v1/alerts` answering 200 at once, or once `release` has a permit (a slow merge).
    fn router(guard: Guard, release: Option<Arc<Semaphore>>) -> Router {
        let api = Router::new().route(
            "/api/v1/alerts",
            get(move || {
                let release = release.clone();
                async move {
                    if let Some(release) = release {
                        let _permit = release.acquire().await.unwrap();
                    }
                    r#"{"status":"success","data":{"alerts":[]}}"#
                }
            }),
        );
        guarded(api, Arc::new(guard))
    }

    async fn call(router: &Router, token: Option<&str>) -> (StatusCode, Option<String>, Value) {
        let mut request = axum::http::Request::get("/api/v1/alerts");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn anonymous_is_401_unpermitted_403_permitted_200_in_prometheus_s_shape() {
        let (fake, client) = fake_api();
        let router = router(authenticating(client), None);

        let (code, _, body) = call(&router, None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert_eq!(
            body,
            json!({"status": "error", "errorType": "unauthorized", "error": "no bearer token"})
        );
        assert_eq!(
            fake.count(&Method::POST, "tokenreviews"),
            0,
            "nothing to review"
        );

        let (code, _, body) = call(&router, Some("forged")).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"], "invalid bearer token");

        let (code, _, body) = call(&router, Some("pod-token")).await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(body["errorType"], "forbidden");
        assert_eq!(
            body["error"],
            r#"user "system:serviceaccount:apps:web" may not read /api/v1/alerts"#
        );

        let (code, _, body) = call(&router, Some("grafana-token")).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "success");
        assert!(fake.unmatched().is_empty());
    }

    /// With an audience, the review asks for it and a token not issued for it is a 401: one
    /// the API server refuses for that audience, and one an authenticator accepted without
    /// saying it is for that audience. Without the audience the API server's token (every
    /// pod's) would be let in.
    #[tokio::test]
    async fn a_token_for_another_audience_is_401() {
        let (fake, client) = FakeApi::new();
        fake.on(Method::POST, ACCESS_REVIEWS).always(
            201,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {}, "status": {"allowed": true}}),
        );
        fake.on(Method::POST, TOKEN_REVIEWS).always_with(|request| {
            let review = request.json().unwrap();
            let asked = review["spec"]["audiences"].clone();
            let status = match review["spec"]["token"].as_str() {
                Some("grafana-token") if asked == json!(["rules-federator"]) => json!({
                    "authenticated": true, "audiences": ["rules-federator"],
                    "user": {"username": "system:serviceaccount:monitoring:grafana"},
                }),
                Some("lax-token") => json!({
                    "authenticated": true,
                    "user": {"username": "system:serviceaccount:monitoring:grafana"},
                }),
                _ => json!({"authenticated": false,
                            "error": "token audiences [\"https://kubernetes.default.svc\"] is invalid for the target audiences [\"rules-federator\"]"}),
            };
            (201, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}))
        });
        let mut guard = authenticating(client.clone());
        guard.auth = Some(Arc::new(
            KubeAuth::new(
                client,
                Attributes::NonResource { verb: "get".into() },
                Duration::from_secs(60),
                Duration::from_secs(10),
            )
            .with_audiences(vec!["rules-federator".into()]),
        ));
        let router = router(guard, None);
        let (code, _, body) = call(&router, Some("apiserver-token")).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("invalid for the target audiences")
        );
        let (code, _, body) = call(&router, Some("lax-token")).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert_eq!(
            body["error"],
            "token not issued for the audience rules-federator"
        );
        let (code, _, body) = call(&router, Some("grafana-token")).await;
        assert_eq!(code, StatusCode::OK, "{body}");
    }

    /// The handler learns who was let in (the API shares answers only within one caller).
    #[tokio::test]
    async fn the_user_let_in_goes_to_the_handler() {
        let (_fake, client) = fake_api();
        let api = Router::new().route(
            "/api/v1/alerts",
            get(|caller: Option<axum::Extension<Caller>>| async move {
                let user = caller.map(|axum::Extension(Caller(user))| user);
                axum::Json(json!({"status": "success", "caller": user}))
            }),
        );
        let router = guarded(api, Arc::new(authenticating(client)));
        let (code, _, body) = call(&router, Some("grafana-token")).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["caller"], "system:serviceaccount:monitoring:grafana");
        let open = guarded(
            Router::new().route(
                "/api/v1/alerts",
                get(|caller: Option<axum::Extension<Caller>>| async move {
                    axum::Json(json!({"caller": caller.is_some()}))
                }),
            ),
            Arc::new(Guard {
                requests: Arc::new(Semaphore::new(1)),
                auth: None,
            }),
        );
        assert_eq!(call(&open, None).await.2["caller"], false);
    }

    #[tokio::test]
    async fn a_cached_decision_asks_the_api_server_once() {
        let (fake, client) = fake_api();
        let router = router(authenticating(client), None);
        for _ in 0..3 {
            assert_eq!(call(&router, Some("grafana-token")).await.0, StatusCode::OK);
            assert_eq!(
                call(&router, Some("pod-token")).await.0,
                StatusCode::FORBIDDEN
            );
        }
        assert_eq!(fake.count(&Method::POST, "tokenreviews"), 2);
        assert_eq!(fake.count(&Method::POST, "subjectaccessreviews"), 2);
    }

    #[tokio::test]
    async fn an_api_server_that_cannot_review_is_503_and_not_cached() {
        let (fake, client) = FakeApi::new();
        let router = router(authenticating(client), None);
        for _ in 0..2 {
            let (code, retry, body) = call(&router, Some("grafana-token")).await;
            assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(retry.as_deref(), Some("1"));
            assert_eq!(body["errorType"], "unavailable");
        }
        assert_eq!(fake.count(&Method::POST, "tokenreviews"), 2);
    }

    /// Past the cap a request is refused at once with Retry-After; a turn is given back when
    /// its answer has been written.
    #[tokio::test]
    async fn requests_past_the_cap_are_503_with_retry_after() {
        let release = Arc::new(Semaphore::new(0));
        let guard = Guard {
            requests: Arc::new(Semaphore::new(2)),
            auth: None,
        };
        let requests = guard.requests.clone();
        let router = router(guard, Some(release.clone()));
        let slow: Vec<_> = (0..2)
            .map(|_| {
                let router = router.clone();
                tokio::spawn(async move { call(&router, None).await.0 })
            })
            .collect();
        tokio::time::timeout(Duration::from_secs(10), async {
            while requests.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();

        let (code, retry, body) = call(&router, None).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(
            body,
            json!({"status": "error", "errorType": "unavailable", "error": "too many concurrent requests; retry later"})
        );

        release.add_permits(2);
        for request in slow {
            assert_eq!(request.await.unwrap(), StatusCode::OK);
        }
        assert_eq!(requests.available_permits(), 2, "every turn given back");
        assert_eq!(call(&router, None).await.0, StatusCode::OK);
    }

    /// A client that leaves mid-request drops the request's future (hyper does, when the
    /// connection closes): its turn is given back then, not when the backends would have
    /// answered.
    #[tokio::test]
    async fn an_abandoned_request_gives_its_turn_back() {
        let release = Arc::new(Semaphore::new(0));
        let guard = Guard {
            requests: Arc::new(Semaphore::new(1)),
            auth: None,
        };
        let requests = guard.requests.clone();
        let router = router(guard, Some(release));
        let abandoned = {
            let router = router.clone();
            tokio::spawn(async move { call(&router, None).await.0 })
        };
        tokio::time::timeout(Duration::from_secs(10), async {
            while requests.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert_eq!(call(&router, None).await.0, StatusCode::SERVICE_UNAVAILABLE);

        abandoned.abort();
        assert!(abandoned.await.unwrap_err().is_cancelled());
        assert_eq!(requests.available_permits(), 1, "the turn is back");
    }
}
