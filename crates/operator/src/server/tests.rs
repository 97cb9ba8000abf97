#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::tls::CertStore;
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

/// `GET path` over HTTPS as a client trusting only `ca` (PEM) for 127.0.0.1: the whole answer.
async fn https_get(address: SocketAddr, ca: &[u8], path: &str) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    // The server may close without close_notify after a complete answer.
    let _ = tls.read_to_end(&mut answer).await;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn with_tls_it_serves_https_only_and_stops_on_shutdown() {
    crate::client::install_crypto_provider();
    let now = crate::tls::unix_now();
    let validity = crate::tls::CertValidity::default();
    let served = crate::tls::generate("CA", "svc", "ns", validity, now, None).unwrap();
    let other = crate::tls::generate("CA", "svc", "ns", validity, now, None).unwrap();
    let certs = Arc::new(CertStore::new(served.pair.certified_key().unwrap()));
    let server = BoundServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
        .with_tls(certs.clone());
    // The store another port of the process serves the same certificate from.
    assert!(
        server
            .cert_store()
            .is_some_and(|store| Arc::ptr_eq(&store, &certs))
    );
    let address = server.local_addr();
    let readiness = Readiness::new();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(server.serve(readiness.clone(), Registry::new(), shutdown.clone()));

    let answer = https_get(address, &served.ca, "/healthz").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    readiness.set_ready();
    let answer = https_get(address, &served.ca, "/readyz").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut plain = tokio::net::TcpStream::connect(address).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw).await;
    assert!(
        !raw.starts_with(b"HTTP/1.1"),
        "plain HTTP is not answered: {:?}",
        String::from_utf8_lossy(&raw)
    );

    // The store is asked at every handshake: a swapped certificate is served at once.
    assert!(https_get(address, &other.ca, "/healthz").await.is_err());
    certs.swap(other.pair.certified_key().unwrap());
    let answer = https_get(address, &other.ca, "/healthz").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    shutdown.trigger();
    task.await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
}
