//! An in-memory `coordination.k8s.io/v1` Lease API with the API server's optimistic
//! concurrency: create fails with 409 when the object exists, replace fails with 409 when the
//! `resourceVersion` is stale. Served as a tower service behind a real `kube::Client`.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Path, State},
    http::{StatusCode, header},
    response::Response,
    routing::{get, post},
};
use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};

#[derive(Default)]
struct Store {
    lease: Option<Lease>,
    next_version: u64,
    outage: bool,
    writes: usize,
}

#[derive(Clone, Default)]
pub struct FakeLeaseApi {
    store: Arc<Mutex<Store>>,
}

impl FakeLeaseApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client whose requests this fake answers; `namespace` is its default namespace.
    pub fn client(&self, namespace: &str) -> kube::Client {
        let router = Router::new()
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                post(create),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
                get(read).put(replace),
            )
            .with_state(self.clone());
        kube::Client::new(router, namespace)
    }

    pub fn lease(&self) -> Option<Lease> {
        self.store.lock().unwrap().lease.clone()
    }

    pub fn holder(&self) -> Option<String> {
        self.lease()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }

    pub fn transitions(&self) -> Option<i32> {
        self.lease()
            .and_then(|l| l.spec)
            .and_then(|s| s.lease_transitions)
    }

    pub fn writes(&self) -> usize {
        self.store.lock().unwrap().writes
    }

    /// Stores `lease` as if another client wrote it (bumping the resourceVersion).
    pub fn put(&self, mut lease: Lease) {
        let mut store = self.store.lock().unwrap();
        store.next_version += 1;
        lease.metadata.resource_version = Some(store.next_version.to_string());
        store.lease = Some(lease);
    }

    /// Another replica takes the lease now, for `seconds`.
    pub fn steal(&self, holder: &str, seconds: i32) {
        let mut lease = self.lease().expect("a lease to steal");
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(holder.to_owned());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            Timestamp::now(),
        ));
        spec.lease_duration_seconds = Some(seconds);
        self.put(lease);
    }

    /// While on, every request answers 500, as an unreachable API server would.
    pub fn set_outage(&self, outage: bool) {
        self.store.lock().unwrap().outage = outage;
    }
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = zone_operator::testing::status_json(code.as_u16(), reason, message);
    json_response(code, body.to_string().into_bytes())
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

fn lease_response(code: StatusCode, lease: &Lease) -> Response {
    json_response(code, serde_json::to_vec(lease).unwrap())
}

async fn read(
    State(api): State<FakeLeaseApi>,
    Path((_ns, _name)): Path<(String, String)>,
) -> Response {
    let store = api.store.lock().unwrap();
    if store.outage {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "outage");
    }
    match &store.lease {
        Some(lease) => lease_response(StatusCode::OK, lease),
        None => status(StatusCode::NOT_FOUND, "NotFound", "leases not found"),
    }
}

async fn create(
    State(api): State<FakeLeaseApi>,
    Path(namespace): Path<String>,
    body: Bytes,
) -> Response {
    let mut store = api.store.lock().unwrap();
    if store.outage {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "outage");
    }
    if store.lease.is_some() {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            "lease already exists",
        );
    }
    let mut lease: Lease = serde_json::from_slice(&body).unwrap();
    store.next_version += 1;
    store.writes += 1;
    lease.metadata.namespace = Some(namespace);
    lease.metadata.resource_version = Some(store.next_version.to_string());
    store.lease = Some(lease.clone());
    lease_response(StatusCode::CREATED, &lease)
}

async fn replace(
    State(api): State<FakeLeaseApi>,
    Path((_ns, _name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let mut store = api.store.lock().unwrap();
    if store.outage {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "outage");
    }
    let mut lease: Lease = serde_json::from_slice(&body).unwrap();
    let Some(current) = &store.lease else {
        return status(StatusCode::NOT_FOUND, "NotFound", "leases not found");
    };
    if lease.metadata.resource_version != current.metadata.resource_version {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version",
        );
    }
    store.next_version += 1;
    store.writes += 1;
    lease.metadata.resource_version = Some(store.next_version.to_string());
    store.lease = Some(lease.clone());
    lease_response(StatusCode::OK, &lease)
}

/// `GET path` over a real socket; returns the status code and body.
pub async fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}
