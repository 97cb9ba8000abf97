//! Events reach the API with the reporting controller, instance, and API-size limits applied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{StatusCode, header},
    response::Response,
    routing::post,
};
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use zone_operator::{EventPublisher, EventType, events::MAX_NOTE_BYTES};

type Posted = Arc<Mutex<Vec<Value>>>;

async fn record(State(posted): State<Posted>, body: Bytes) -> Response {
    let event: Value = serde_json::from_slice(&body).unwrap();
    posted.lock().unwrap().push(event);
    Response::builder()
        .status(StatusCode::CREATED)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

fn publisher() -> (EventPublisher, Posted) {
    let posted = Posted::default();
    let router = Router::new()
        .route(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            post(record),
        )
        .with_state(posted.clone());
    let client = kube::Client::new(router, "default");
    (
        EventPublisher::new(client, "zau-controller", "zau-7f9c"),
        posted,
    )
}

fn zau() -> ObjectReference {
    ObjectReference {
        api_version: Some("zonecontrol.k8s.aws/v1".into()),
        kind: Some("ZoneAwareUpdate".into()),
        name: Some("web".into()),
        namespace: Some("shop".into()),
        uid: Some("1234".into()),
        ..ObjectReference::default()
    }
}

#[tokio::test]
async fn publishes_with_reporter_reason_action_and_note() {
    let (events, posted) = publisher();
    events
        .publish(
            &zau(),
            EventType::Normal,
            "BatchDeleted",
            "Rollout",
            Some("zone-a: deleted web-28"),
        )
        .await
        .unwrap();
    let posted = posted.lock().unwrap();
    assert_eq!(posted.len(), 1);
    let event = &posted[0];
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["reason"], "BatchDeleted");
    assert_eq!(event["action"], "Rollout");
    assert_eq!(event["note"], "zone-a: deleted web-28");
    assert_eq!(event["reportingController"], "zau-controller");
    assert_eq!(event["reportingInstance"], "zau-7f9c");
    assert_eq!(event["regarding"]["name"], "web");
    assert_eq!(event["metadata"]["namespace"], "shop");
}

#[tokio::test]
async fn warnings_with_huge_notes_are_cut_to_fit() {
    let (events, posted) = publisher();
    let note = "web-1 blocks zone-b; ".repeat(200);
    events
        .warning(&zau(), "EvictionDenied", "Evict", &note)
        .await;
    let posted = posted.lock().unwrap();
    let event = &posted[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["note"].as_str().unwrap().len(), MAX_NOTE_BYTES);
}
