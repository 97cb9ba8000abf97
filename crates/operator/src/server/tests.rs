#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use axum::body::Body;
use axum::http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

async fn get_path(router: Router, path: &str) -> (StatusCode, String) {
    let response = router
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn healthz_is_always_ok() {
    let router = router(Readiness::new(), Registry::new());
    assert_eq!(get_path(router, "/healthz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn readyz_is_503_until_set_ready() {
    let readiness = Readiness::new();
    let router = router(readiness.clone(), Registry::new());
    let (status, body) = get_path(router.clone(), "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready\n");

    readiness.set_standby(true);
    assert_eq!(
        get_path(router.clone(), "/readyz").await,
        (StatusCode::OK, "standby\n".to_owned())
    );

    readiness.set_standby(false);
    assert_eq!(
        get_path(router.clone(), "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    readiness.set_ready();
    assert_eq!(
        get_path(router, "/readyz").await,
        (StatusCode::OK, "ready\n".to_owned())
    );
}

#[tokio::test]
async fn readyz_names_the_closed_gates_and_turns_503_at_shutdown() {
    let readiness = Readiness::new();
    let shutdown = Shutdown::new();
    readiness.follow_shutdown(&shutdown);
    readiness.set_standby(true);
    let router = router(readiness.clone(), Registry::new());
    let listener = readiness.gate("webhook-listener");
    let certificate = readiness.gate("webhook-certificate");
    assert_eq!(
        get_path(router.clone(), "/readyz").await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: waiting for webhook-listener, webhook-certificate\n".to_owned()
        ),
        "a standby whose webhook does not serve is not ready"
    );
    listener.open();
    certificate.open();
    assert_eq!(
        get_path(router.clone(), "/readyz").await,
        (StatusCode::OK, "standby\n".to_owned())
    );
    shutdown.trigger();
    assert_eq!(
        get_path(router, "/readyz").await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_owned()
        )
    );
}

#[tokio::test]
async fn metrics_expose_what_the_binary_registered() {
    let registry = Registry::new();
    let counter = prometheus::IntCounter::new("zone_test_events_total", "test counter").unwrap();
    registry.register(Box::new(counter.clone())).unwrap();
    counter.inc_by(3);

    let response = router(Readiness::new(), registry)
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.contains("zone_test_events_total 3"), "{text}");
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let router = router(Readiness::new(), Registry::new());
    assert_eq!(get_path(router, "/live").await.0, StatusCode::NOT_FOUND);
}

async fn raw_get(address: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn serves_on_a_real_socket_and_stops_on_shutdown() {
    let server = BoundServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = server.local_addr();
    assert_ne!(address.port(), 0);
    let readiness = Readiness::new();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(server.serve(readiness.clone(), Registry::new(), shutdown.clone()));

    assert!(
        raw_get(address, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        raw_get(address, "/readyz")
            .await
            .starts_with("HTTP/1.1 503")
    );
    readiness.set_ready();
    assert!(
        raw_get(address, "/readyz")
            .await
            .starts_with("HTTP/1.1 200")
    );

    shutdown.trigger();
    task.await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
}

#[tokio::test]
async fn a_taken_port_fails_at_bind() {
    let first = BoundServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert!(matches!(
        BoundServer::bind(first.local_addr()).await,
        Err(ServerError::Bind { .. })
    ));
}

#[tokio::test]
async fn extra_routes_are_served_once_merged_and_never_shadow_the_runtime_s() {
    let extra = ExtraRoutes::default();
    let served = router_with(Readiness::new(), Registry::new(), extra.clone());
    assert_eq!(
        get_path(served.clone(), "/api/v1/rules").await.0,
        StatusCode::NOT_FOUND,
        "nothing merged yet"
    );
    extra.merge(
        Router::new()
            .route("/api/v1/rules", get(|| async { "rules\n" }))
            .route("/healthz", get(|| async { "shadowed\n" })),
    );
    assert_eq!(
        get_path(served.clone(), "/api/v1/rules").await,
        (StatusCode::OK, "rules\n".to_owned())
    );
    assert_eq!(
        get_path(served.clone(), "/healthz").await,
        (StatusCode::OK, "ok\n".to_owned())
    );
    let post = served
        .clone()
        .oneshot(Request::post("/api/v1/rules").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get_path(served, "/live").await.0, StatusCode::NOT_FOUND);
}
