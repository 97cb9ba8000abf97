//! A scripted fake Kubernetes API server for tests (cargo feature `testing`).
//!
//! [`FakeApi::new`] returns a handle and a real [`kube::Client`] whose requests never leave the
//! process: kube-rs builds and serialises them exactly as it would for a cluster (method, path,
//! query, body, content type), and an in-process service answers them from a script. The service
//! is an [`axum::Router`] with a single fallback handler, the same way the crate's own tests serve
//! fake APIs, so the feature adds no dependency.
//!
//! - **Scripted answers.** [`FakeApi::on`] (exact path) and [`FakeApi::on_prefix`] start a rule
//!   for one HTTP method, [`Rule::query`] narrows it to queries containing a substring, and the
//!   rule is registered by its answer: [`Rule::once`] / [`Rule::always`] with a status code and a
//!   JSON body, or [`Rule::once_with`] / [`Rule::always_with`] with a closure of the request
//!   (echo-style answers). Rules are tried in the order they were registered and the first match
//!   answers; a `once` rule is removed when it answers. So `once(409)` followed by `always(200)`
//!   answers 409 then 200 forever, while an `always` registered first shadows every later rule for
//!   the same requests.
//! - **Unmatched requests** answer `404 NotFound` with a Kubernetes `Status` body (kube-rs returns
//!   it as [`kube::Error::Api`] with code 404) and are recorded with `matched == false`, so a test
//!   can assert there were no unexpected calls with [`FakeApi::unmatched`].
//! - **Watches** (`watch=true` in the query) follow the same rules, and an unmatched watch gets
//!   the same 404: a kube-runtime watcher treats it as an error and backs off, rather than
//!   re-watching in a tight loop as it would after an empty stream. To script a watch, match it
//!   with `.query("watch=true")` and answer 200 with a JSON array of watch events
//!   (`{"type": "ADDED", "object": {...}}`): for a watch request an array body is sent as one
//!   event per line, then the stream ends. Any other body is sent as a single JSON document.
//! - **Recorded requests.** Every request, matched or not, is kept in arrival order:
//!   [`FakeApi::requests`], [`FakeApi::count`], [`FakeApi::unmatched`].
//!
//! Also here for the binaries' tests: [`served_metric_families`], the metric families a registry
//! serves through the runtime's real `/metrics`; and [`FakePrometheus`], a fake Prometheus HTTP
//! API (plain or HTTPS, with the [`TestCa`] that signs its certificate) for the tests of the
//! clients built on [`crate::prom_api`].
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use zone_operator::testing::{FakeApi, Method, status_json};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (fake, client) = FakeApi::new();
//! fake.on(Method::GET, "/api/v1/namespaces/apps/pods/web-1").always(
//!     200,
//!     serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}),
//! );
//! fake.on(Method::POST, "/api/v1/namespaces/apps/pods/web-1/eviction").once(
//!     429,
//!     status_json(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."),
//! );
//!
//! let pods: kube::Api<Pod> = kube::Api::namespaced(client, "apps");
//! let pod = pods.get("web-1").await.unwrap();
//! assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
//! let refused = pods.evict("web-1", &Default::default()).await;
//! assert!(matches!(refused, Err(kube::Error::Api(status)) if status.code == 429));
//! assert_eq!(fake.count(&Method::POST, "/eviction"), 1);
//! assert!(fake.unmatched().is_empty());
//! # }
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::{
    Router,
    body::Body,
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    response::Response,
};
use serde_json::{Value, json};

/// The HTTP method type rules match on, re-exported so tests need no `http` dependency.
pub use axum::http::Method;

mod fake_prometheus;
mod served;
mod test_ca;
pub use fake_prometheus::{Canned, FakePrometheus, Reply, Seen, server_tls};
pub use served::{
    CONTROLLER_FAMILIES, assert_controller_serves, assert_serves, controller_registry,
    served_metric_families,
};
pub use test_ca::{Issued, TestCa};

/// A cache (reflector store) holding `objects`, filled the way a reflector fills it: the caches
/// a reconcile reads, for a scenario.
pub fn store_of<K>(objects: impl IntoIterator<Item = K>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = kube::runtime::reflector::store();
    for object in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(object));
    }
    store
}

/// Registers the node cache's families (`zone_aware_zone_nodes`) in `registry` over one Ready
/// node of zone-a, as a controller with a node cache serves them.
#[allow(clippy::expect_used)]
pub fn register_zone_nodes(registry: &prometheus::Registry) {
    crate::NodeZones::from_store(
        store_of([zoned_node("node-a", "zone-a")]),
        zone_topology::ZONE_LABEL,
    )
    .register_metrics(registry)
    .expect("the zone metrics register");
}

/// A Ready node as the node cache holds it, in `zone` by the default zone label.
pub fn zoned_node(name: &str, zone: &str) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(zone_topology::ZONE_LABEL.to_owned(), zone.to_owned())].into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An answer computed from the request it answers: a status code and a JSON body.
type Responder = Arc<dyn Fn(&RecordedRequest) -> (u16, Value) + Send + Sync>;

/// A request the fake API server received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: Method,
    /// The URI path, as sent (not percent-decoded), e.g. `/api/v1/namespaces/apps/pods/web-1`.
    pub path: String,
    /// The query string without the `?`; empty when there is none.
    pub query: String,
    /// The `Content-Type` header, e.g. `application/merge-patch+json` for a merge patch.
    pub content_type: Option<String>,
    /// The raw request body; empty for a GET or DELETE without options.
    pub body: Vec<u8>,
    /// Whether a scripted rule answered it (false: it got the default 404).
    pub matched: bool,
}

impl RecordedRequest {
    /// The body parsed as JSON; `None` when it is empty or not JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether this is a watch (`watch=true` in the query).
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|param| param == "watch=true")
    }
}

/// A Kubernetes `Status` failure body, as the API server sends with every error code: kube-rs
/// turns it into [`kube::Error::Api`] carrying `code`, `reason` and `message`.
pub fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A handle on one fake API server; clones share its script and its recorded requests.
#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    rules: Vec<Registered>,
    requests: Vec<RecordedRequest>,
}

struct Registered {
    method: Method,
    path: PathMatch,
    query: Option<String>,
    answer: Responder,
    once: bool,
}

#[derive(Clone)]
enum PathMatch {
    Exact(String),
    Prefix(String),
}

impl Registered {
    fn matches(&self, request: &RecordedRequest) -> bool {
        let path = match &self.path {
            PathMatch::Exact(path) => request.path == *path,
            PathMatch::Prefix(prefix) => request.path.starts_with(prefix.as_str()),
        };
        let query = self
            .query
            .as_deref()
            .is_none_or(|part| request.query.contains(part));
        request.method == self.method && path && query
    }
}

/// A rule being scripted: registered on the fake by one of its answers ([`once`](Rule::once),
/// [`always`](Rule::always), [`once_with`](Rule::once_with), [`always_with`](Rule::always_with)).
#[must_use = "a rule is only registered by one of its answers: once, always, once_with, always_with"]
pub struct Rule {
    fake: FakeApi,
    method: Method,
    path: PathMatch,
    query: Option<String>,
}

impl Rule {
    /// Matches only requests whose query string contains `part`, e.g. `"watch=true"` or
    /// `"labelSelector=app%3Dweb"` (the query is matched as sent, percent-encoded).
    pub fn query(mut self, part: &str) -> Self {
        self.query = Some(part.to_owned());
        self
    }

    /// Answers the first matching request with `code` and `body`, then is removed.
    pub fn once(self, code: u16, body: Value) {
        self.register(
            Arc::new(move |_: &RecordedRequest| (code, body.clone())),
            true,
        );
    }

    /// Answers every matching request with `code` and `body`.
    pub fn always(self, code: u16, body: Value) {
        self.register(
            Arc::new(move |_: &RecordedRequest| (code, body.clone())),
            false,
        );
    }

    /// Answers the first matching request with what `answer` returns for it, then is removed.
    pub fn once_with<F>(self, answer: F)
    where
        F: Fn(&RecordedRequest) -> (u16, Value) + Send + Sync + 'static,
    {
        self.register(Arc::new(answer), true);
    }

    /// Answers every matching request with what `answer` returns for it, e.g. a status PUT that
    /// returns the object it was sent with a bumped `resourceVersion`.
    pub fn always_with<F>(self, answer: F)
    where
        F: Fn(&RecordedRequest) -> (u16, Value) + Send + Sync + 'static,
    {
        self.register(Arc::new(answer), false);
    }

    fn register(self, answer: Responder, once: bool) {
        self.fake.lock().rules.push(Registered {
            method: self.method,
            path: self.path,
            query: self.query,
            answer,
            once,
        });
    }
}

impl FakeApi {
    /// A fake with no rules, and a client over it whose default namespace is `default`.
    pub fn new() -> (FakeApi, kube::Client) {
        let fake = FakeApi {
            state: Arc::default(),
        };
        let client = fake.client("default");
        (fake, client)
    }

    /// Another client over this fake, with `default_namespace` as its default namespace.
    pub fn client(&self, default_namespace: &str) -> kube::Client {
        let fake = self.clone();
        let router = Router::new().fallback(move |request: Request| {
            let fake = fake.clone();
            async move { fake.serve(request).await }
        });
        kube::Client::new(router, default_namespace)
    }

    /// Starts a rule for `method` requests to exactly `path` (no query, e.g.
    /// `/api/v1/namespaces/apps/pods/web-1/status`).
    pub fn on(&self, method: Method, path: &str) -> Rule {
        self.rule(method, PathMatch::Exact(path.to_owned()))
    }

    /// Starts a rule for `method` requests to any path starting with `prefix`.
    pub fn on_prefix(&self, method: Method, prefix: &str) -> Rule {
        self.rule(method, PathMatch::Prefix(prefix.to_owned()))
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// How many `method` requests were received with `path_contains` in their path.
    pub fn count(&self, method: &Method, path_contains: &str) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.method == *method && r.path.contains(path_contains))
            .count()
    }

    /// The `method` requests to exactly `path`, in arrival order.
    pub fn requests_to(&self, method: &Method, path: &str) -> Vec<RecordedRequest> {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.method == *method && r.path == path)
            .cloned()
            .collect()
    }

    /// Method and path of every request whose path starts with `prefix`, in arrival order: the
    /// sequence of calls about one object.
    pub fn calls_under(&self, prefix: &str) -> Vec<(Method, String)> {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.path.starts_with(prefix))
            .map(|r| (r.method.clone(), r.path.clone()))
            .collect()
    }

    /// The requests no rule matched (each was answered 404), in arrival order.
    pub fn unmatched(&self) -> Vec<RecordedRequest> {
        self.lock()
            .requests
            .iter()
            .filter(|r| !r.matched)
            .cloned()
            .collect()
    }

    fn rule(&self, method: Method, path: PathMatch) -> Rule {
        Rule {
            fake: self.clone(),
            method,
            path,
            query: None,
        }
    }

    /// The state, even after a test thread panicked while holding it: the script and the
    /// recorded requests stay readable for the assertions that follow.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn serve(&self, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(body) => body.to_vec(),
            Err(error) => {
                let message = format!("fake API server: reading the request body: {error}");
                return json_response(500, &status_json(500, "InternalError", &message));
            }
        };
        let mut recorded = RecordedRequest {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body,
            matched: false,
        };
        // Pick (and consume) the rule under the lock, answer outside it: an answer closure may
        // itself look at the fake.
        let answer = {
            let mut state = self.lock();
            let position = state.rules.iter().position(|rule| rule.matches(&recorded));
            let answer = position.map(|index| {
                if state.rules[index].once {
                    state.rules.remove(index).answer
                } else {
                    Arc::clone(&state.rules[index].answer)
                }
            });
            recorded.matched = answer.is_some();
            state.requests.push(recorded.clone());
            answer
        };
        let Some(answer) = answer else {
            let message = format!(
                "fake API server: no rule for {} {}{}{}",
                recorded.method,
                recorded.path,
                if recorded.query.is_empty() { "" } else { "?" },
                recorded.query,
            );
            return json_response(404, &status_json(404, "NotFound", &message));
        };
        let (code, body) = answer(&recorded);
        match body {
            Value::Array(events) if recorded.is_watch() && code == 200 => {
                let mut lines = Vec::new();
                for event in &events {
                    lines.extend(event.to_string().into_bytes());
                    lines.push(b'\n');
                }
                bytes_response(code, lines)
            }
            body => json_response(code, &body),
        }
    }
}

fn json_response(code: u16, body: &Value) -> Response {
    let mut bytes = body.to_string().into_bytes();
    bytes.push(b'\n');
    bytes_response(code, bytes)
}

fn bytes_response(code: u16, body: Vec<u8>) -> Response {
    let Ok(status) = StatusCode::from_u16(code) else {
        let message = format!("fake API server: {code} is not an HTTP status code");
        return json_response(500, &status_json(500, "InternalError", &message));
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
