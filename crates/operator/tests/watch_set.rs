//! `WatchSet`: a watched kind fills its cache (stripped) before the reconciles it triggers are
//! sent, a kept cache fills without triggering anything, `synced` waits for every cache of the
//! set; against the scripted fake API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use zone_operator::testing::{FakeApi, Method};
use zone_operator::{InitialList, WatchSet};
use zone_topology::ZONE_LABEL;

const PODS: &str = "/api/v1/namespaces/apps/pods";

/// A pod that names its ConfigMap in the label `config`, with managed fields to strip.
fn pod(name: &str, config: &str, resource_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "apps", "resourceVersion": resource_version,
            "labels": {"config": config},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
    })
}

/// The paginated list answers `web-1` and `web-2`; the one watch that follows sends `events`
/// (later watches get the fake's 404, which the watcher backs off from).
fn script(fake: &FakeApi, events: Value) {
    fake.on(Method::GET, PODS)
        .query("watch=true")
        .once(200, events);
    fake.on(Method::GET, PODS).query("limit=").always(
        200,
        json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "10"},
            "items": [pod("web-1", "a", "10"), pod("web-2", "b", "11")],
        }),
    );
}

fn strip(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
}

/// The pods of `apps`, kept in `set` (stripped, triggering nothing).
fn keep_pods(set: &mut WatchSet<ConfigMap>, client: kube::Client) -> Store<Pod> {
    set.keep(
        "pods",
        Api::<Pod>::namespaced(client, "apps"),
        watcher::Config::default(),
        strip,
    )
}

/// The ConfigMap a pod names in its `config` label.
fn config_of(pod: &Pod) -> Vec<ObjectRef<ConfigMap>> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    pod.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(key, _)| key.as_str() == "config")
        .map(|(_, name)| ObjectRef::new(name).within(&namespace))
        .collect()
}

#[tokio::test]
async fn a_trigger_follows_the_cache_update() {
    let (fake, client) = FakeApi::new();
    script(
        &fake,
        json!([{"type": "DELETED", "object": pod("web-1", "a", "12")}]),
    );
    let mut set = WatchSet::<ConfigMap>::new();
    let pods = set.watch(
        "pods",
        Api::<Pod>::namespaced(client, "apps"),
        watcher::Config::default(),
        strip,
        config_of,
    );
    let (drive, mut triggers) = set.start();
    let drive = tokio::spawn(drive);

    let mut names = Vec::new();
    for _ in 0..2 {
        names.push(triggers.next().await.unwrap().name);
    }
    assert_eq!(
        names,
        ["a", "b"],
        "the initial list triggers each pod's owner"
    );
    let cached = pods.get(&ObjectRef::new("web-2").within("apps")).unwrap();
    assert_eq!(
        cached.metadata.managed_fields, None,
        "stripped before stored"
    );

    let deleted = triggers.next().await.unwrap();
    assert_eq!(deleted.name, "a");
    // The trigger is sent after the store applied the deletion.
    assert_eq!(pods.state().len(), 1);
    assert!(
        pods.get(&ObjectRef::new("web-1").within("apps")).is_none(),
        "web-1 is gone from the cache"
    );
    drive.abort();
}

#[tokio::test]
async fn a_kept_cache_triggers_nothing() {
    let (fake, client) = FakeApi::new();
    script(&fake, json!([]));
    let mut set = WatchSet::<ConfigMap>::new();
    let pods = keep_pods(&mut set, client);
    let (drive, mut triggers) = set.start();
    let drive = tokio::spawn(drive);
    pods.wait_until_ready().await.unwrap();
    assert_eq!(pods.state().len(), 2);
    drive.abort();
    // The driving task (and the sender it held) is gone: the stream ends without a trigger.
    assert!(drive.await.unwrap_err().is_cancelled());
    assert_eq!(triggers.next().await, None);
}

#[tokio::test]
async fn run_keeps_the_caches_of_a_process_without_a_controller() {
    let (fake, client) = FakeApi::new();
    script(&fake, json!([]));
    let mut set = WatchSet::<ConfigMap>::new();
    let pods = keep_pods(&mut set, client);
    let (nodes, node_changes) = futures::channel::mpsc::unbounded::<()>();
    set.drive(node_changes);
    let run = tokio::spawn(set.run());
    pods.wait_until_ready().await.unwrap();
    assert_eq!(pods.state().len(), 2);
    drop(nodes);
    run.abort();
}

#[tokio::test]
async fn synced_waits_for_every_cache_and_dropping_the_driver_stops_them() {
    let (fake, client) = FakeApi::new();
    script(&fake, json!([]));
    fake.on(Method::GET, "/api/v1/nodes")
        .query("limit=")
        .always(
            200,
            json!({
                "apiVersion": "v1", "kind": "NodeList",
                "metadata": {"resourceVersion": "20"},
                "items": [{
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "node-a", "labels": {ZONE_LABEL: "zone-a"}},
                }],
            }),
        );
    let mut set = WatchSet::<ConfigMap>::new();
    let pods = keep_pods(&mut set, client.clone());
    let zones = set.zones(&client, ZONE_LABEL, InitialList::Paginated);
    let synced = set.synced();
    let (driving, mut triggers) = set.spawn();

    synced.await.unwrap();
    assert_eq!(pods.state().len(), 2);
    assert_eq!(zones.zones_present(), ["zone-a".to_owned()].into());
    // The task stops with its handle, and with it the sender of the triggers.
    drop(driving);
    assert_eq!(triggers.next().await, None);
}
