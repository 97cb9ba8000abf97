//! Events reach the API with the reporting controller, instance, and API-size limits applied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{Method, StatusCode, header},
    response::Response,
    routing::{patch, post},
};
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use zone_operator::{
    EventPublisher, EventType,
    events::{MAX_NOTE_BYTES, MAX_REMEMBERED},
};

type Posted = Arc<Mutex<Vec<Value>>>;

async fn record(State(posted): State<Posted>, method: Method, body: Bytes) -> Response {
    let mut event: Value = serde_json::from_slice(&body).unwrap();
    event["method (test)"] = method.as_str().into();
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
        .route(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}",
            patch(record),
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

/// A repeat about the same object is one Event with a series, also when the object's
/// resourceVersion changed in between (a status write): not a second Event object.
#[tokio::test]
async fn a_repeat_after_a_status_write_is_a_series_not_a_new_event() {
    let (events, posted) = publisher();
    let mut object = zau();
    for version in ["100", "101"] {
        object.resource_version = Some(version.into());
        events
            .warning(
                &object,
                "InvalidSpec",
                "Validate",
                "spec.retention.time: 300y",
            )
            .await;
    }
    let posted = posted.lock().unwrap();
    let methods: Vec<&str> = posted
        .iter()
        .map(|e| e["method (test)"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["POST", "PATCH"], "{posted:#?}");
    assert_eq!(posted[1]["series"]["count"], 2);
    assert_eq!(posted[1]["metadata"]["name"], posted[0]["metadata"]["name"]);
}

/// Events about one object with different notes (a rollout's batches, say) stay separate Events
/// when a status write separates them: each keeps its note.
#[tokio::test]
async fn different_notes_after_a_status_write_are_separate_events() {
    let (events, posted) = publisher();
    let mut object = zau();
    for (version, note) in [
        ("100", "zone-a: deleted web-28"),
        ("101", "zone-a: deleted web-27"),
    ] {
        object.resource_version = Some(version.into());
        events
            .publish(
                &object,
                EventType::Normal,
                "BatchDeleted",
                "Rollout",
                Some(note),
            )
            .await
            .unwrap();
    }
    let posted = posted.lock().unwrap();
    let notes: Vec<(&str, &str)> = posted
        .iter()
        .map(|e| {
            (
                e["method (test)"].as_str().unwrap(),
                e["note"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        notes,
        [
            ("POST", "zone-a: deleted web-28"),
            ("POST", "zone-a: deleted web-27")
        ]
    );
}

/// The publisher remembers at most MAX_REMEMBERED first publications: past it, a new event is
/// published as is (a repeat of it after a status write is then a new Event), and the ones it
/// remembers still repeat as series.
#[tokio::test]
async fn remembered_first_publications_are_bounded() {
    let (events, posted) = publisher();
    for version in ["100", "101"] {
        for i in 0..=MAX_REMEMBERED {
            let object = ObjectReference {
                name: Some(format!("web-{i}")),
                resource_version: Some(version.into()),
                ..zau()
            };
            events
                .warning(&object, "WouldDenyEviction", "Evict", "would have denied")
                .await;
        }
    }
    let posted = posted.lock().unwrap();
    let method = |i: usize| posted[i]["method (test)"].as_str().unwrap();
    let second_pass = MAX_REMEMBERED + 1;
    assert_eq!(method(MAX_REMEMBERED), "POST");
    assert_eq!(
        method(second_pass),
        "PATCH",
        "a remembered event repeats as a series"
    );
    assert_eq!(
        method(second_pass + MAX_REMEMBERED),
        "POST",
        "the one past the bound is a new Event again"
    );
}
