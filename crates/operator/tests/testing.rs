//! The scripted fake API server (`zone_operator::testing`), driven through real `kube::Api`
//! calls: what kube-rs sends is what the script matches and what the fake records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use serde_json::{Value, json};
use zone_operator::testing::{FakeApi, Method, status_json};

const POD: &str = "/api/v1/namespaces/apps/pods/web-1";

fn pod(resource_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "apps", "resourceVersion": resource_version},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    })
}

fn pods(client: kube::Client) -> Api<Pod> {
    Api::namespaced(client, "apps")
}

/// The `code` of a `kube::Error::Api`, or a panic naming what came instead.
fn api_code<T: std::fmt::Debug>(result: kube::Result<T>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn get_returns_the_scripted_pod() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, POD).always(200, pod("7"));

    let got = pods(client).get("web-1").await.unwrap();

    assert_eq!(got.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, Method::GET);
    assert_eq!(requests[0].path, POD);
    assert!(requests[0].matched);
    assert!(fake.unmatched().is_empty());
}

#[tokio::test]
async fn the_client_default_namespace_is_default() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, "/api/v1/namespaces/default/pods/web-1")
        .always(200, pod("1"));

    Api::<Pod>::default_namespaced(client)
        .get("web-1")
        .await
        .unwrap();

    assert_eq!(fake.count(&Method::GET, "/namespaces/default/"), 1);
}

#[tokio::test]
async fn rules_answer_in_registration_order_and_once_rules_are_consumed() {
    let (fake, client) = FakeApi::new();
    let api = pods(client);
    fake.on(Method::GET, POD).once(200, pod("1"));
    fake.on(Method::GET, POD).once(200, pod("2"));
    fake.on(Method::GET, POD).always(200, pod("3"));
    // Registered after an `always` for the same requests: never answers.
    fake.on(Method::GET, POD).once(200, pod("shadowed"));

    let mut versions = Vec::new();
    for _ in 0..4 {
        let pod = api.get("web-1").await.unwrap();
        versions.push(pod.metadata.resource_version.unwrap());
    }

    assert_eq!(versions, ["1", "2", "3", "3"]);
    assert_eq!(fake.count(&Method::GET, "/pods/web-1"), 4);
}

#[tokio::test]
async fn prefix_and_query_rules_narrow_the_match() {
    let (fake, client) = FakeApi::new();
    let api = pods(client);
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod("4")]});
    fake.on_prefix(Method::GET, "/api/v1/namespaces/apps/pods")
        .query("labelSelector=app%3Dweb")
        .always(200, list);

    let web = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(web.items.len(), 1);
    // Same path, another selector: no rule.
    let db = api.list(&ListParams::default().labels("app=db")).await;
    assert_eq!(api_code(db), 404);
    assert_eq!(fake.unmatched().len(), 1);
}

#[tokio::test]
async fn replace_status_sees_a_conflict_then_the_echoed_object() {
    let (fake, client) = FakeApi::new();
    let status = format!("{POD}/status");
    fake.on(Method::PUT, &status).once(
        409,
        status_json(
            409,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version",
        ),
    );
    // Echo: the object sent, with the resourceVersion bumped as the API server would.
    fake.on(Method::PUT, &status).always_with(|request| {
        let mut object = request.json().unwrap();
        let version: u64 = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        object["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        (200, object)
    });
    let api = pods(client);
    let sent: Pod = serde_json::from_value(pod("7")).unwrap();

    let first = api
        .replace_status("web-1", &PostParams::default(), &sent)
        .await;
    assert_eq!(api_code(first), 409);
    let second = api
        .replace_status("web-1", &PostParams::default(), &sent)
        .await
        .unwrap();

    assert_eq!(second.metadata.resource_version.as_deref(), Some("8"));
    assert_eq!(fake.count(&Method::PUT, "/pods/web-1/status"), 2);
}

#[tokio::test]
async fn a_refused_eviction_is_an_api_error_429() {
    let (fake, client) = FakeApi::new();
    let message = "Cannot evict pod as it would violate the pod's disruption budget.";
    fake.on(Method::POST, &format!("{POD}/eviction"))
        .once(429, status_json(429, "TooManyRequests", message));

    let result = pods(client).evict("web-1", &EvictParams::default()).await;

    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 429);
            assert_eq!(status.reason, "TooManyRequests");
            assert_eq!(status.message, message);
        }
        other => panic!("expected a 429, got {other:?}"),
    }
    let eviction = &fake.requests()[0];
    assert_eq!(eviction.json().unwrap()["metadata"]["name"], "web-1");
}

#[tokio::test]
async fn a_patch_is_recorded_with_its_body_and_content_type() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::PATCH, POD).always(200, pod("9"));
    let patch = json!({"metadata": {"labels": {"zone": "eu-west-1a"}}});

    pods(client)
        .patch("web-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, Method::PATCH);
    assert_eq!(
        requests[0].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(requests[0].json(), Some(patch));
}

#[tokio::test]
async fn an_unmatched_request_is_a_recorded_404() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, POD).always(200, pod("1"));

    // Another pod, and a DELETE of the scripted one: neither has a rule.
    let other = pods(client.clone()).get("web-2").await;
    let delete = pods(client).delete("web-1", &Default::default()).await;

    assert_eq!(api_code(other), 404);
    assert_eq!(api_code(delete), 404);
    let unmatched = fake.unmatched();
    assert_eq!(unmatched.len(), 2);
    assert_eq!(unmatched[0].path, "/api/v1/namespaces/apps/pods/web-2");
    assert_eq!(unmatched[1].method, Method::DELETE);
    assert!(unmatched.iter().all(|r| !r.matched));
}

#[tokio::test]
async fn a_scripted_watch_streams_its_events_then_ends() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, "/api/v1/namespaces/apps/pods")
        .query("watch=true")
        .once(
            200,
            json!([
                {"type": "ADDED", "object": pod("10")},
                {"type": "MODIFIED", "object": pod("11")},
            ]),
        );
    let api = pods(client);

    let events: Vec<_> = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();

    let versions: Vec<_> = events
        .iter()
        .map(|event| match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                pod.metadata.resource_version.clone().unwrap()
            }
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert_eq!(versions, ["10", "11"]);
    assert!(fake.requests()[0].is_watch());

    // The once rule is spent: the next watch is an unmatched 404.
    match api.watch(&WatchParams::default(), "11").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        Err(other) => panic!("expected a 404, got {other}"),
        Ok(_) => panic!("expected a 404, got an event stream"),
    }
    assert_eq!(fake.unmatched().len(), 1);
}
