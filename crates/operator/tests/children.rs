//! Owned children against the scripted fake API server: apply carries the controller
//! ownerReference as the controller's field manager; prune deletes only this owner's unwanted
//! children, conditionally on their UID.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use zone_operator::children::{self, ChildError};
use zone_operator::testing::{FakeApi, Method, status_json};

const CONFIGMAPS: &str = "/api/v1/namespaces/monitoring/configmaps";

fn owner() -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "prom", "namespace": "monitoring", "uid": "owner-uid"}
    }))
    .unwrap()
}

fn configmap(name: &str, uid: &str, controller_uid: Option<&str>) -> Value {
    let owners: Vec<Value> = controller_uid
        .map(|uid| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "prom",
                "uid": uid, "controller": true})
        })
        .into_iter()
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "monitoring", "uid": uid,
            "labels": {"app": "prom"}, "ownerReferences": owners}})
}

#[tokio::test]
async fn a_child_is_applied_with_its_controller_reference() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::PATCH, &format!("{CONFIGMAPS}/prom-shard-0"))
        .always_with(|request| (200, request.json().unwrap_or_default()));
    let api: Api<ConfigMap> = Api::namespaced(client, "monitoring");
    let reference = children::controller_reference(&owner()).unwrap();
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "prom-shard-0", "namespace": "monitoring", "resourceVersion": "9"},
        "data": {"prometheus.yml": "scrape_configs: []"}
    }))
    .unwrap();

    children::apply_child(&api, &reference, child, "shard-controller")
        .await
        .unwrap();

    let patches = fake.requests_to(&Method::PATCH, &format!("{CONFIGMAPS}/prom-shard-0"));
    assert_eq!(patches.len(), 1);
    let patch = &patches[0];
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert!(
        patch.query.contains("fieldManager=shard-controller"),
        "{}",
        patch.query
    );
    assert!(patch.query.contains("force=true"), "{}", patch.query);
    let body = patch.json().unwrap();
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["kind"], "ConfigMap");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "owner-uid");
    assert_eq!(body["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        body["metadata"].get("resourceVersion"),
        None,
        "apply is unconditional"
    );
    assert_eq!(body["data"]["prometheus.yml"], "scrape_configs: []");
}

#[tokio::test]
async fn prune_deletes_only_this_owners_unwanted_children() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, CONFIGMAPS)
        .query("labelSelector=app")
        .always(
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [
                configmap("prom-shard-0", "u0", Some("owner-uid")),
                configmap("prom-shard-1", "u1", Some("owner-uid")),
                configmap("other-shard-1", "u2", Some("another-owner")),
                configmap("hand-made", "u3", None),
            ]}),
        );
    fake.on_prefix(Method::DELETE, CONFIGMAPS).always(
        200,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    );
    let api: Api<ConfigMap> = Api::namespaced(client, "monitoring");
    let wanted = BTreeSet::from(["prom-shard-0".to_string()]);

    let pruned = children::prune_children(&api, "app=prom", "owner-uid", &wanted)
        .await
        .unwrap();

    assert_eq!(pruned, ["prom-shard-1"]);
    let deletes = fake.requests_to(&Method::DELETE, &format!("{CONFIGMAPS}/prom-shard-1"));
    assert_eq!(deletes.len(), 1);
    assert_eq!(
        deletes[0].json().unwrap()["preconditions"]["uid"],
        "u1",
        "a child recreated meanwhile under the same name survives"
    );
    assert_eq!(fake.count(&Method::DELETE, CONFIGMAPS), 1);
}

#[tokio::test]
async fn a_child_gone_meanwhile_is_not_an_error_and_list_failures_are() {
    let (fake, client) = FakeApi::new();
    fake.on(Method::GET, CONFIGMAPS).once(
        200,
        json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [
            configmap("prom-shard-1", "u1", Some("owner-uid")),
        ]}),
    );
    fake.on(Method::DELETE, &format!("{CONFIGMAPS}/prom-shard-1"))
        .once(
            404,
            status_json(404, "NotFound", "configmaps \"prom-shard-1\" not found"),
        );
    fake.on(Method::GET, CONFIGMAPS)
        .once(403, status_json(403, "Forbidden", "cannot list configmaps"));
    let api: Api<ConfigMap> = Api::namespaced(client, "monitoring");
    let wanted = BTreeSet::new();

    let pruned = children::prune_children(&api, "app=prom", "owner-uid", &wanted)
        .await
        .unwrap();
    assert!(pruned.is_empty());
    let refused = children::prune_children(&api, "app=prom", "owner-uid", &wanted).await;
    assert!(
        matches!(refused, Err(ChildError::List { .. })),
        "{refused:?}"
    );
}
