//! Reconcile scenarios against the scripted fake API server (`zone_operator::testing`): the real
//! [`reconcile`] reads caches filled the way the reflectors fill them, and every request it makes
//! (status writes, evictions, the Lease read, the StatefulSet completion) goes through a real
//! `kube::Client` to a script, so each test pins down what goes over the wire.
//!
//! Each test says which behaviour it guards and how it fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use zone_api::ZoneAwareUpdate;
use zone_operator::testing::{FakeApi, Method, status_json, store_of, zoned_node};
use zone_operator::{ControllerMetrics, EventPublisher, LeaderHandle, NodeZones};

use crate::alarm::{AlarmSource, AlarmState};
use crate::cli::PodRemoval;
use crate::gate::GatePolls;
use crate::metrics::ZauMetrics;
use crate::pods::{self, POD_INDEX_LABEL, REVISION_LABEL};
use crate::reconcile::{Context, Settings, reconcile};
use crate::watches::Caches;

const NAMESPACE: &str = "apps";
const ZAU: &str = "web-rollout";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const OLD: &str = "web-1";
const NEW: &str = "web-2";
const POLL: Duration = Duration::from_secs(30);

const ZAU_STATUS: &str =
    "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zoneawareupdates/web-rollout/status";
const STATEFULSET: &str = "/apis/apps/v1/namespaces/apps/statefulsets/web";
const STATEFULSET_STATUS: &str = "/apis/apps/v1/namespaces/apps/statefulsets/web/status";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/zone-system/leases/zau-controller";

/// An alarm source that answers a scripted state and records the alarms asked for.
struct ScriptedAlarm {
    state: Mutex<AlarmState>,
    asked: Mutex<Vec<String>>,
}

impl ScriptedAlarm {
    fn new(state: AlarmState) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(state),
            asked: Mutex::new(Vec::new()),
        })
    }

    /// What the alarm answers from now on.
    fn set(&self, state: AlarmState) {
        *self.state.lock().unwrap() = state;
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl AlarmSource for ScriptedAlarm {
    fn alarm_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, AlarmState> {
        self.asked.lock().unwrap().push(name.to_owned());
        let state = self.state.lock().unwrap().clone();
        Box::pin(async move { state })
    }
}

/// The ZoneAwareUpdate: factor 2, maxUnavailable 4, rolling `web`. Its status says revision
/// `web-2` is being rolled out in zone-a at step 1, so the next batch is 2^1 = 2 pods.
fn zau(alarm: Option<&str>) -> ZoneAwareUpdate {
    zau_with(match alarm {
        Some(alarm) => json!({"pauseRolloutAlarm": alarm}),
        None => json!({}),
    })
}

/// [`zau`] with these spec fields added.
fn zau_with(extra: Value) -> ZoneAwareUpdate {
    let mut spec = json!({
        "statefulset": "web",
        "maxUnavailable": 4,
        "exponentialFactor": "2",
    });
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneAwareUpdate",
        "metadata": {
            "name": ZAU, "namespace": NAMESPACE, "uid": "zau-uid",
            "generation": 1, "resourceVersion": "100",
        },
        "spec": spec,
        "status": {
            "currentRevision": OLD,
            "updateRevision": NEW,
            "updateStep": 1,
            "currentZone": "zone-a",
            "oldReplicas": {"zone-a": 4},
            "totalOldReplicas": 4,
            "observedGeneration": 1,
        },
    }))
    .unwrap()
}

/// StatefulSet `web`: OnDelete, 4 replicas, the StatefulSet controller has observed the spec
/// (updateRevision `web-2`); its status.currentRevision is still `web-1`.
fn statefulset_json(resource_version: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "web", "namespace": NAMESPACE, "uid": "sts-uid",
            "generation": 3, "resourceVersion": resource_version,
        },
        "spec": {
            "replicas": 4,
            "serviceName": "web",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:2"}]},
            },
        },
        "status": {
            "replicas": 4, "readyReplicas": 4, "observedGeneration": 3,
            "currentRevision": OLD, "updateRevision": NEW,
        },
    })
}

/// Pod `web-<ordinal>` at `revision`, Ready, on node-a (zone-a).
fn pod(ordinal: u32, revision: &str) -> Pod {
    pod_on(ordinal, revision, "node-a", true)
}

/// Pod `web-<ordinal>` at `revision` on `node` (node-a is in zone-a, node-b in zone-b).
fn pod_on(ordinal: u32, revision: &str, node: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{ordinal}"), "namespace": NAMESPACE,
            "uid": format!("pod-uid-{ordinal}"),
            "labels": {"app": "web", REVISION_LABEL: revision, POD_INDEX_LABEL: ordinal.to_string()},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": "sts-uid", "controller": true,
            }],
        },
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "web"}]},
        "status": {
            "phase": "Running",
            "conditions": [{
                "type": "Ready", "status": if ready { "True" } else { "False" },
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        },
    }))
    .unwrap()
}

fn caches(pod_revision: &str) -> Caches {
    caches_of((0..4).map(|ordinal| pod(ordinal, pod_revision)))
}

/// The caches with these pods (and nodes node-a in zone-a, node-b in zone-b).
fn caches_of(pods: impl IntoIterator<Item = Pod>) -> Caches {
    let mut set: StatefulSet = serde_json::from_value(statefulset_json("10")).unwrap();
    pods::strip_statefulset(&mut set);
    let pods = pods.into_iter().map(|mut pod| {
        pods::strip_pod(&mut pod);
        pod
    });
    Caches {
        statefulsets: store_of([set]),
        pods: store_of(pods),
        zones: NodeZones::from_store(
            store_of([
                zoned_node("node-a", "zone-a"),
                zoned_node("node-b", "zone-b"),
            ]),
            ZONE_LABEL,
        ),
    }
}

/// The fake API server with the requests every scenario answers the same way: the
/// ZoneAwareUpdate status apply (echoing the applied status with a bumped resourceVersion) and
/// event creation (echoed).
fn fake_api(zau: &ZoneAwareUpdate) -> (FakeApi, kube::Client) {
    let (fake, client) = FakeApi::new();
    let stored = serde_json::to_value(zau).unwrap();
    let status = format!(
        "/apis/zonecontrol.k8s.aws/v1/namespaces/{NAMESPACE}/zoneawareupdates/{}/status",
        zau.metadata.name.as_deref().unwrap_or_default()
    );
    fake.on(Method::PATCH, &status).always_with(move |request| {
        let mut object = stored.clone();
        object["status"] = request.json().unwrap()["status"].clone();
        object["metadata"]["resourceVersion"] = json!("101");
        (200, object)
    });
    fake.on_prefix(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/apps/events",
    )
    .always_with(|request| (201, request.json().unwrap()));
    (fake, client)
}

/// One reconcile of `zau` over these caches, with this alarm and leadership; it must succeed.
async fn reconcile_once(
    client: kube::Client,
    zau: ZoneAwareUpdate,
    caches: Caches,
    alarms: Arc<dyn AlarmSource>,
    leader: LeaderHandle,
) -> Action {
    let ctx = context(client, &zau, caches, alarms, leader);
    reconcile(Arc::new(zau), ctx).await.unwrap()
}

/// [`reconcile_once`] without leader election (a single replica: every batch may go ahead).
async fn reconcile_unelected(
    client: kube::Client,
    zau: ZoneAwareUpdate,
    caches: Caches,
    alarms: Arc<dyn AlarmSource>,
) -> Action {
    reconcile_once(client, zau, caches, alarms, LeaderHandle::unelected()).await
}

fn context(
    client: kube::Client,
    zau: &ZoneAwareUpdate,
    caches: Caches,
    alarms: Arc<dyn AlarmSource>,
    leader: LeaderHandle,
) -> Arc<Context> {
    context_with(
        client,
        zau,
        caches,
        alarms,
        leader,
        GatePolls::new(None, None),
    )
}

/// [`context`] with these alert gate polls (kept across reconciles by the caller).
fn context_with(
    client: kube::Client,
    zau: &ZoneAwareUpdate,
    caches: Caches,
    alarms: Arc<dyn AlarmSource>,
    leader: LeaderHandle,
    gates: GatePolls,
) -> Arc<Context> {
    let registry = prometheus::Registry::new();
    Arc::new(Context {
        client: client.clone(),
        zaus: store_of([zau.clone()]),
        caches,
        alarms,
        gates,
        events: EventPublisher::new(client, "zau-controller", "test"),
        leader,
        metrics: ControllerMetrics::new(&registry, "zau-controller").unwrap(),
        zau_metrics: ZauMetrics::register(&registry).unwrap(),
        settings: Settings {
            alarm_poll_interval: POLL,
            pod_removal: PodRemoval::Evict,
            field_manager: "zau-controller".to_owned(),
        },
        memory: Mutex::default(),
        series: Default::default(),
    })
}

fn evicted() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// The status of the last server-side apply of the ZoneAwareUpdate status.
fn written_status(fake: &FakeApi) -> Value {
    let applies = fake.requests_to(&Method::PATCH, ZAU_STATUS);
    let last = applies.last().expect("the status was written");
    assert_eq!(
        last.content_type.as_deref(),
        Some("application/apply-patch+yaml"),
        "the status is written by server-side apply"
    );
    last.json().unwrap()["status"].clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

/// The status written while `by` holds the rollout: nothing evicted, `pausedRollout` and
/// `pausedBy` say so.
fn held_status(fake: &FakeApi, by: &str) -> Value {
    assert!(evictions(fake).is_empty(), "evicted {:?}", evictions(fake));
    let status = written_status(fake);
    assert_eq!(status["pausedRollout"], true);
    assert_eq!(status["pausedBy"], by);
    status
}

/// The Eviction requests, as pod names in order.
fn evictions(fake: &FakeApi) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.method == Method::POST && r.path.ends_with("/eviction"))
        .map(|r| r.path.split('/').nth_back(1).unwrap().to_owned())
        .collect()
}

/// A 429 from the Eviction API (a disruption budget allows no more) ends the batch: the
/// remaining pods of the batch are not tried, the Progressing condition says why, and the
/// reconcile comes back after the budget retry (budgets are not watched).
///
/// Without the early return on a refusal, `remove_pods` goes on to web-2 (a second eviction
/// request) and the test fails on the eviction count.
#[tokio::test]
async fn a_refused_eviction_ends_the_batch() {
    let zau = zau(None);
    let (fake, client) = fake_api(&zau);
    fake.on(Method::POST, "/api/v1/namespaces/apps/pods/web-3/eviction")
        .once(
            429,
            status_json(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        );
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    let action = reconcile_unelected(client, zau, caches(OLD), alarms.clone()).await;

    // The batch is web-3, web-2 (step 1, factor 2): only the first was asked for, conditional on
    // the UID the cache saw (a pod recreated under that name is never evicted by mistake).
    assert_eq!(evictions(&fake), ["web-3"]);
    let eviction = fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/eviction"))
        .and_then(|r| r.json())
        .unwrap();
    assert_eq!(
        eviction["deleteOptions"]["preconditions"]["uid"],
        "pod-uid-3"
    );
    let status = written_status(&fake);
    let progressing = condition(&status, "Progressing");
    assert_eq!(progressing["reason"], "DisruptionBudgetExhausted");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("after 0 of 2 pods"),
        "{progressing}"
    );
    // Nothing was removed: the step does not advance.
    assert_eq!(status["updateStep"], 1);
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
    assert!(alarms.asked().is_empty(), "no alarm is configured");
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// A firing pause alarm holds a due batch: nothing is evicted, the status says paused with the
/// AlarmFiring reason, and the reconcile polls the alarm again.
///
/// If the pause `alarm_decision` returns were not acted on, the batch web-3, web-2 would be
/// evicted and the test fails on the eviction list; if the alarm were never asked, it fails on
/// the alarms asked.
#[tokio::test]
async fn a_firing_alarm_pauses_without_evicting() {
    let zau = zau(Some("my-alarm"));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let alarms = ScriptedAlarm::new(AlarmState::Firing {
        reason: "5xx errors above threshold".to_owned(),
    });
    let action = reconcile_unelected(client, zau, caches(OLD), alarms.clone()).await;

    assert_eq!(alarms.asked(), ["my-alarm"]);
    let status = held_status(&fake, "Alarm");
    let paused = condition(&status, "Paused");
    assert_eq!(paused["status"], "True");
    assert_eq!(paused["reason"], "AlarmFiring");
    assert!(
        paused["message"]
            .as_str()
            .unwrap()
            .contains("5xx errors above threshold")
    );
    assert_eq!(condition(&status, "Progressing")["reason"], "Paused");
    assert_eq!(action, Action::requeue(POLL));
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// A completed rollout records the update revision as the StatefulSet's status.currentRevision
/// (OnDelete never moves it) with a PUT carrying the resourceVersion read; the StatefulSet
/// controller writes that status too, so a 409 means "re-read and try again", not failure.
///
/// Without the retry (one attempt), the 409 fails the reconcile and the test fails on `unwrap`;
/// if the retry re-read the StatefulSet but wrote the copy it started with, it fails on the
/// second PUT's resourceVersion.
#[tokio::test]
async fn a_conflicting_statefulset_status_write_is_reread_and_retried() {
    let zau = zau(None);
    let (fake, client) = fake_api(&zau);
    fake.on(Method::GET, STATEFULSET)
        .once(200, statefulset_json("10"));
    // The StatefulSet controller wrote its status in between: a newer resourceVersion.
    fake.on(Method::GET, STATEFULSET)
        .once(200, statefulset_json("11"));
    fake.on(Method::PUT, STATEFULSET_STATUS).once(
        409,
        status_json(
            409,
            "Conflict",
            "Operation cannot be fulfilled on statefulsets.apps \"web\": the object has been modified; please apply your changes to the latest version and try again",
        ),
    );
    fake.on(Method::PUT, STATEFULSET_STATUS)
        .once_with(|request| {
            let mut object = request.json().unwrap();
            object["metadata"]["resourceVersion"] = json!("12");
            (200, object)
        });
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    // Every pod runs web-2 and is Ready: the rollout is complete.
    let action = reconcile_unelected(client, zau, caches(NEW), alarms.clone()).await;

    assert_eq!(action, Action::await_change());
    assert_eq!(fake.requests_to(&Method::GET, STATEFULSET).len(), 2);
    let puts = fake.requests_to(&Method::PUT, STATEFULSET_STATUS);
    assert_eq!(puts.len(), 2);
    let first = puts[0].json().unwrap();
    assert_eq!(first["metadata"]["resourceVersion"], "10");
    let second = puts[1].json().unwrap();
    assert_eq!(
        second["metadata"]["resourceVersion"], "11",
        "the retry carries the re-read resourceVersion"
    );
    assert_eq!(second["status"]["currentRevision"], NEW);
    assert_eq!(second["status"]["updateRevision"], NEW);
    // The StatefulSet is read again between the two writes.
    assert_eq!(
        fake.calls_under(STATEFULSET),
        [
            (Method::GET, STATEFULSET.to_owned()),
            (Method::PUT, STATEFULSET_STATUS.to_owned()),
            (Method::GET, STATEFULSET.to_owned()),
            (Method::PUT, STATEFULSET_STATUS.to_owned()),
        ]
    );
    let status = written_status(&fake);
    assert_eq!(status["currentRevision"], NEW);
    assert_eq!(condition(&status, "Complete")["reason"], "RolloutComplete");
    assert!(evictions(&fake).is_empty());
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// The Lease as another replica holds it (or as we do, for the control case).
fn lease_held_by(holder: &str) -> Value {
    let now = MicroTime(Timestamp::now());
    serde_json::to_value(Lease {
        metadata: ObjectMeta {
            name: Some("zau-controller".to_owned()),
            namespace: Some("zone-system".to_owned()),
            resource_version: Some("7".to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..Default::default()
        }),
    })
    .unwrap()
}

/// Runs the due batch (web-3, web-2) with a leader handle for identity `me`, the Lease held by
/// `holder`; returns the fake and the action.
async fn batch_with_lease_held_by(holder: &str) -> (FakeApi, Action) {
    let zau = zau(None);
    let (fake, client) = fake_api(&zau);
    fake.on(Method::GET, LEASE)
        .always(200, lease_held_by(holder));
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let leader =
        LeaderHandle::leading_for_tests(client.clone(), "zone-system", "zau-controller", "me");
    let action = reconcile_once(
        client,
        zau,
        caches(OLD),
        ScriptedAlarm::new(AlarmState::Clear),
        leader,
    )
    .await;
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
    (fake, action)
}

/// The local leader state can be stale; the Lease read right before a batch cannot. When it names
/// another holder, nothing is evicted and the reconcile ends normally (the process exits on the
/// lost leadership; the new leader takes over).
///
/// Without the confirm before the batch, the test fails on the Lease read count; if the Lease
/// were read but its answer ignored, web-3 and web-2 would be evicted and it fails on the
/// eviction list.
#[tokio::test]
async fn a_lease_held_by_another_replica_stops_the_batch() {
    let (fake, action) = batch_with_lease_held_by("someone-else").await;

    assert_eq!(fake.count(&Method::GET, "/leases/zau-controller"), 1);
    assert!(
        evictions(&fake).is_empty(),
        "evicted {:?}",
        evictions(&fake)
    );
    assert_eq!(action, Action::requeue(POLL));
}

/// The control case of the one above: with the Lease ours, the same batch is evicted, so the
/// test above stops on the Lease and not on something else in its setup.
#[tokio::test]
async fn a_lease_still_held_lets_the_batch_go() {
    let (fake, action) = batch_with_lease_held_by("me").await;

    assert_eq!(fake.count(&Method::GET, "/leases/zau-controller"), 1);
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    let status = written_status(&fake);
    assert_eq!(condition(&status, "Progressing")["reason"], "BatchRemoved");
    assert_eq!(status["updateStep"], 2);
    assert_eq!(status["deletedReplicas"], 2);
    assert_eq!(action, Action::requeue(POLL));
}

mod groups;
mod pauses;

/// A batch in a zone the stored status does not name yet: the status naming it, and the
/// update revision, is written before the zone's first eviction, so a ZoneDisruptionBudget's
/// webhook knows the rollout's evictions from the first (docs/zdb.md). With the zone named
/// already, nothing is written before the batch.
#[tokio::test]
async fn a_new_zone_is_in_the_status_before_its_first_eviction() {
    for named in [false, true] {
        let mut zau = zau(None);
        if !named && let Some(status) = zau.status.as_mut() {
            status.current_zone = None;
        }
        let (fake, client) = fake_api(&zau);
        fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
            .always(201, evicted());
        let alarms = ScriptedAlarm::new(AlarmState::Clear);
        reconcile_unelected(client, zau, caches(OLD), alarms).await;

        let requests = fake.requests();
        let first_eviction = requests
            .iter()
            .position(|r| r.path.ends_with("/eviction"))
            .expect("an eviction");
        let before: Vec<Value> = requests[..first_eviction]
            .iter()
            .filter(|r| r.method == Method::PATCH && r.path == ZAU_STATUS)
            .map(|r| r.json().unwrap()["status"].clone())
            .collect();
        if named {
            assert!(before.is_empty(), "{before:?}");
        } else {
            assert_eq!(before.len(), 1, "{before:?}");
            assert_eq!(before[0]["currentZone"], "zone-a");
            assert_eq!(before[0]["updateRevision"], NEW);
        }
        assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
    }
}
