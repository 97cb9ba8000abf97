//! `--initial-list auto` picks streaming lists only when the API server ends a streaming watch's
//! initial events, and falls back to paginated lists when it refuses or ignores them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::{
    Router,
    body::Body,
    http::{StatusCode, Uri, header},
    response::Response,
    routing::get,
};
use zone_operator::InitialList;

/// How the fake API server answers a watch of pods.
#[derive(Clone, Copy)]
enum Server {
    /// WatchList on: the bookmark that ends the (empty) initial events.
    WatchList,
    /// WatchList off (Kubernetes 1.33): 422 for `sendInitialEvents`.
    Refuses,
    /// An old server ignoring the parameter: an ordinary bookmark, then the watch times out.
    Ignores,
}

fn client(server: Server) -> kube::Client {
    let handler = move |uri: Uri| async move {
        let query = uri.query().unwrap_or_default().to_string();
        let params: Vec<&str> = query.split('&').collect();
        let streaming = params.contains(&"sendInitialEvents=true");
        assert!(params.contains(&"watch=true"), "{query}");
        assert!(query.contains("watch-list-probe"), "{query}");
        let (status, body) = match server {
            Server::WatchList if streaming => (
                StatusCode::OK,
                r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}}}}
"#,
            ),
            Server::Refuses => (
                StatusCode::UNPROCESSABLE_ENTITY,
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#,
            ),
            _ => (
                StatusCode::OK,
                r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42"}}}
"#,
            ),
        };
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    let router = Router::new()
        .route("/api/v1/namespaces/{namespace}/pods", get(handler))
        .route("/api/v1/pods", get(handler));
    kube::Client::new(router, "default")
}

#[tokio::test]
async fn auto_streams_when_the_server_ends_the_initial_events() {
    let mode = InitialList::Auto
        .resolve(&client(Server::WatchList), Some("shop"))
        .await;
    assert_eq!(mode, InitialList::Stream);
}

#[tokio::test]
async fn auto_falls_back_when_the_server_refuses() {
    let mode = InitialList::Auto
        .resolve(&client(Server::Refuses), None)
        .await;
    assert_eq!(mode, InitialList::Paginated);
}

#[tokio::test]
async fn auto_falls_back_when_the_server_ignores_the_parameter() {
    let mode = InitialList::Auto
        .resolve(&client(Server::Ignores), Some("shop"))
        .await;
    assert_eq!(mode, InitialList::Paginated);
}

#[tokio::test]
async fn explicit_choices_are_kept_without_asking() {
    // A client whose every request would fail the test's assertions: not called.
    let never = kube::Client::new(Router::new(), "default");
    assert_eq!(
        InitialList::Paginated.resolve(&never, None).await,
        InitialList::Paginated
    );
    assert_eq!(
        InitialList::Stream.resolve(&never, None).await,
        InitialList::Stream
    );
}
