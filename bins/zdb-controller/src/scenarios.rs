//! Reconcile scenarios against the scripted fake API server (`zone_operator::testing`): the real
//! [`reconcile`] reads caches filled the way the reflectors fill them, and every request it makes
//! (the owners' replica counts, the budget's status PUT, its re-read) goes through a real
//! `kube::Client` to a script, so each test pins down what goes over the wire.
//!
//! Each test says which behaviour it guards and how it fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use zone_api::ZoneDisruptionBudget;
use zone_operator::testing::{FakeApi, Method, status_json, store_of, zoned_node};
use zone_operator::{ControllerMetrics, EventPublisher, NodeZones};

use crate::metrics::ZdbMetrics;
use crate::reconcile::{Context, reconcile};

const NAMESPACE: &str = "apps";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

const BUDGET: &str = "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zonedisruptionbudgets/web-zdb";
const BUDGET_STATUS: &str =
    "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zonedisruptionbudgets/web-zdb/status";
const STATEFULSET: &str = "/apis/apps/v1/namespaces/apps/statefulsets/web";

/// `at` as the API server stores a time (to the second, RFC 3339).
fn stored_time(at: Timestamp) -> Value {
    serde_json::to_value(Time(Timestamp::from_second(at.as_second()).unwrap())).unwrap()
}

/// Budget `web-zdb` (pods `app=web`, maxUnavailable 1 per zone) at `resource_version`.
fn budget_json(resource_version: &str, status: Value) -> Value {
    json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneDisruptionBudget",
        "metadata": {
            "name": "web-zdb", "namespace": NAMESPACE, "uid": "zdb-uid",
            "generation": 1, "resourceVersion": resource_version,
        },
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
        "status": status,
    })
}

/// Pod `web-<ordinal>` of StatefulSet `web`, Ready on `node` since `created`, as the cache holds
/// it (stripped to its labels, owners, times, node name, phase and Ready condition).
fn pod(ordinal: u32, node: &str, created: &Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{ordinal}"), "namespace": NAMESPACE,
            "uid": format!("pod-uid-{ordinal}"),
            "creationTimestamp": created,
            "labels": {"app": "web"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": "sts-uid", "controller": true,
            }],
        },
        "spec": {"nodeName": node, "containers": []},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": created}],
        },
    }))
    .unwrap()
}

/// The owner of the budget's pods: a StatefulSet of 3 replicas.
fn statefulset_json() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NAMESPACE, "uid": "sts-uid"},
        "spec": {
            "replicas": 3, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}},
        },
    })
}

/// The reconcile's context over `client`: `zdb` and pods web-0..2 created at `created`, one in
/// each zone.
fn context(client: kube::Client, zdb: &ZoneDisruptionBudget, created: &Value) -> Arc<Context> {
    let registry = prometheus::Registry::new();
    Arc::new(Context {
        client: client.clone(),
        zdbs: store_of([zdb.clone()]),
        pods: store_of([
            pod(0, "node-a", created),
            pod(1, "node-b", created),
            pod(2, "node-c", created),
        ]),
        zones: NodeZones::from_store(
            store_of([
                zoned_node("node-a", "zone-a"),
                zoned_node("node-b", "zone-b"),
                zoned_node("node-c", "zone-c"),
            ]),
            ZONE_LABEL,
        ),
        events: EventPublisher::new(client, "zdb-controller", "test"),
        metrics: ControllerMetrics::new(&registry, "zdb-controller").unwrap(),
        zdb_metrics: ZdbMetrics::register(&registry).unwrap(),
        field_manager: "zdb-controller".to_string(),
        series: Default::default(),
    })
}

/// The second status write, after the re-read: conditional on the re-read version, and with
/// the webhook's record (`recorded_at`) kept and counted.
fn assert_keeps_the_record(second: &Value, recorded_at: &Value) {
    assert_eq!(
        second["metadata"]["resourceVersion"], "6",
        "the retry is conditional on the re-read budget"
    );
    let status = &second["status"];
    assert_eq!(status["disruptedPods"], json!({"web-1": recorded_at}));
    assert_eq!(status["disruptedPodZones"], json!({"web-1": "zone-b"}));
    // The record counts: web-1 is Ready in the cache but its eviction is under way.
    assert_eq!(status["currentHealthy"]["zone-b"], 0);
    assert_eq!(status["currentUnhealthy"]["zone-b"], 1);
    assert_eq!(status["disruptedZones"], json!(["zone-b"]));
    assert_eq!(status["disruptionsAllowed"]["zone-a"], 0);
    let disrupted = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Disrupted")
        .unwrap();
    assert_eq!(disrupted["status"], "True");
    assert!(
        disrupted["message"].as_str().unwrap().contains("web-1"),
        "{disrupted}"
    );
}

/// The webhook records an eviction in the budget's status between the controller's read and its
/// write: the controller's PUT (carrying the resourceVersion it read) is answered 409, and the
/// controller must re-read the budget and compute again from the fresh copy. The write that
/// lands carries the webhook's record (and counts it: zone-b is disrupted), not the first
/// computation, which knew nothing of it.
///
/// Without the retry (one write attempt) the reconcile fails on the 409 and the test fails on
/// `unwrap`. If the retry re-read the budget but wrote the copy it started with, it fails on the
/// second PUT's resourceVersion; if it recomputed the status from the budget as first read
/// (under the fresh resourceVersion), it fails on the record missing from the second PUT.
#[tokio::test]
async fn a_status_conflict_rereads_and_keeps_the_webhooks_record() {
    let now = Timestamp::now();
    let an_hour_ago = stored_time(now - k8s_openapi::jiff::SignedDuration::from_secs(3600));
    // Within the confirmation window: web-1 still stands (Ready in the cache) while the API
    // server is deleting it.
    let recorded_at = stored_time(now - k8s_openapi::jiff::SignedDuration::from_secs(2));
    let cached_budget = budget_json("5", json!({}));
    // What the webhook wrote meanwhile: web-1 (zone-b) evicted, and moved from healthy to
    // unhealthy in its zone.
    let reread_budget = budget_json(
        "6",
        json!({
            "observedGeneration": 1,
            "disruptedPods": {"web-1": recorded_at},
            "disruptedPodZones": {"web-1": "zone-b"},
            "expectedPods": {"zone-a": 1, "zone-b": 1, "zone-c": 1},
            "currentHealthy": {"zone-a": 1, "zone-b": 0, "zone-c": 1},
            "currentUnhealthy": {"zone-a": 0, "zone-b": 1, "zone-c": 0},
            "desiredHealthy": {"zone-a": 0, "zone-b": 0, "zone-c": 0},
            "disruptionsAllowed": {"zone-a": 0, "zone-b": 0, "zone-c": 0},
            "disruptedZones": ["zone-b"],
        }),
    );

    let (fake, client) = FakeApi::new();
    // The owner's replica count, read by every computation.
    fake.on(Method::GET, STATEFULSET)
        .always(200, statefulset_json());
    fake.on(Method::PUT, BUDGET_STATUS).once(
        409,
        status_json(
            409,
            "Conflict",
            "Operation cannot be fulfilled on zonedisruptionbudgets.zonecontrol.k8s.aws \"web-zdb\": the object has been modified; please apply your changes to the latest version and try again",
        ),
    );
    fake.on(Method::PUT, BUDGET_STATUS).once_with(|request| {
        let mut object = request.json().unwrap();
        object["metadata"]["resourceVersion"] = json!("7");
        (200, object)
    });
    fake.on(Method::GET, BUDGET).once(200, reread_budget);
    fake.on_prefix(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/apps/events",
    )
    .always_with(|request| (201, request.json().unwrap()));

    let zdb: ZoneDisruptionBudget = serde_json::from_value(cached_budget).unwrap();
    let ctx = context(client, &zdb, &an_hour_ago);

    let action = reconcile(Arc::new(zdb), ctx).await.unwrap();

    // PUT (409), then the re-read, then the second PUT.
    assert_eq!(
        fake.calls_under(BUDGET),
        [
            (Method::PUT, BUDGET_STATUS.to_owned()),
            (Method::GET, BUDGET.to_owned()),
            (Method::PUT, BUDGET_STATUS.to_owned()),
        ]
    );
    // Everything is recomputed: the owner is read again for the second computation.
    assert_eq!(fake.requests_to(&Method::GET, STATEFULSET).len(), 2);

    let puts = fake.requests_to(&Method::PUT, BUDGET_STATUS);
    assert!(
        puts.iter()
            .all(|put| put.query.contains("fieldManager=zdb-controller")),
        "status writes are made as --field-manager"
    );
    let first = puts[0].json().unwrap();
    assert_eq!(first["metadata"]["resourceVersion"], "5");
    assert_eq!(first["status"].get("disruptedPods"), None);
    assert_eq!(first["status"]["currentHealthy"]["zone-b"], 1);

    assert_keeps_the_record(&puts[1].json().unwrap(), &recorded_at);
    // The record's pod still stands: the budget is looked at again when its confirmation
    // window ends.
    assert_ne!(action, Action::await_change());
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// A record past its confirmation window whose pod the cache shows still standing is dropped
/// only on a fresh read of the pod: still there, the same pod, not terminating, the record goes
/// (and zone-b is free again); terminating on the fresh read (the cache lagged the deletion),
/// it stays. Without the fresh read the second case would drop a real eviction's record; without
/// the window the first would hold every other zone for two minutes.
#[tokio::test]
async fn an_unconfirmed_record_is_dropped_on_a_fresh_read_of_its_standing_pod() {
    let now = Timestamp::now();
    let an_hour_ago = stored_time(now - k8s_openapi::jiff::SignedDuration::from_secs(3600));
    let recorded_at = stored_time(now - k8s_openapi::jiff::SignedDuration::from_secs(30));
    let recorded = budget_json(
        "5",
        json!({
            "observedGeneration": 1,
            "disruptedPods": {"web-1": recorded_at},
            "disruptedPodZones": {"web-1": "zone-b"},
        }),
    );
    const POD: &str = "/api/v1/namespaces/apps/pods/web-1";
    for terminating in [false, true] {
        let (fake, client) = FakeApi::new();
        fake.on(Method::GET, STATEFULSET)
            .always(200, statefulset_json());
        let mut fresh = serde_json::to_value(pod(1, "node-b", &an_hour_ago)).unwrap();
        if terminating {
            fresh["metadata"]["deletionTimestamp"] = stored_time(now);
        }
        fake.on(Method::GET, POD).always(200, fresh);
        fake.on(Method::PUT, BUDGET_STATUS)
            .always_with(|request| (200, request.json().unwrap()));
        fake.on_prefix(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/apps/events",
        )
        .always_with(|request| (201, request.json().unwrap()));
        let zdb: ZoneDisruptionBudget = serde_json::from_value(recorded.clone()).unwrap();
        let ctx = context(client, &zdb, &an_hour_ago);

        reconcile(Arc::new(zdb), ctx).await.unwrap();

        assert_eq!(
            fake.requests_to(&Method::GET, POD).len(),
            1,
            "one fresh read"
        );
        let puts = fake.requests_to(&Method::PUT, BUDGET_STATUS);
        let status = &puts.last().unwrap().json().unwrap()["status"];
        if terminating {
            assert_eq!(status["disruptedPods"], json!({"web-1": recorded_at}));
        } else {
            assert_eq!(status.get("disruptedPods"), None, "{status}");
            assert_eq!(status["disruptionsAllowed"]["zone-a"], 1, "{status}");
            let events = fake.requests_to(
                &Method::POST,
                "/apis/events.k8s.io/v1/namespaces/apps/events",
            );
            assert!(
                events
                    .iter()
                    .any(|e| e.json().unwrap()["reason"] == "EvictionUnconfirmed"),
                "no EvictionUnconfirmed event"
            );
        }
        assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
    }
}

/// A burst of evictions of one budget in one replica: the decisions that would record one are
/// queued for the budget's next write and decided together (group commit), a later batch on
/// what the earlier one wrote. With maxUnavailable 1, the first is recorded and the others are
/// refused, without a single status write losing with 409.
///
/// Without the per-budget queue every decision reads the same version, decides to record, and
/// PUTs it: one wins and the others get 409 and start again (the conflict storm of a drain), and
/// the test fails on the count of status writes.
#[tokio::test]
async fn a_burst_on_one_budget_is_decided_together_without_conflicts() {
    use std::sync::Mutex;

    use crate::reconcile::{BudgetView, Draft, compute};
    use zone_topology::IntOrPercent;
    use zone_topology::budget::{BudgetPod, Policy};

    const PODS: u32 = 5;
    let an_hour_ago = stored_time(Timestamp::now() - std::time::Duration::from_secs(3600));
    let pods: Vec<BudgetPod> = (0..PODS)
        .map(|ordinal| {
            zone_views::budget::pods::budget_pod(
                &pod(ordinal, "node-a", &an_hour_ago),
                zone_topology::Zone::known("zone-a"),
            )
        })
        .collect();
    let mut draft = Draft::default();
    compute(
        &BudgetView {
            standing: &[],
            unconfirmed: &[],
            pods: &pods,
            expected_total: PODS,
            policy: Policy::max_unavailable(IntOrPercent::Int(1)),
            now_ms: Timestamp::now().as_millisecond(),
        },
        &mut draft,
    );
    draft.status.observed_generation = 1;
    let stored = Arc::new(Mutex::new(budget_json(
        "1",
        serde_json::to_value(&draft.status).unwrap(),
    )));

    let (fake, client) = FakeApi::new();
    for ordinal in 0..PODS {
        let body = serde_json::to_value(pod(ordinal, "node-a", &an_hour_ago)).unwrap();
        fake.on(
            Method::GET,
            &format!("/api/v1/namespaces/apps/pods/web-{ordinal}"),
        )
        .always(200, body);
    }
    let read = stored.clone();
    fake.on(Method::GET, BUDGET)
        .always_with(move |_| (200, read.lock().unwrap().clone()));
    optimistic_status_writes(&fake, BUDGET_STATUS, stored.clone());

    let budget: ZoneDisruptionBudget =
        serde_json::from_value(stored.lock().unwrap().clone()).unwrap();
    let judge = burst_judge(client, budget);

    let verdicts = judge_at_once(&judge, PODS).await;

    let allowed: Vec<_> = verdicts.iter().filter(|v| v.allowed).collect();
    assert_eq!(allowed.len(), 1, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .filter(|v| !v.allowed)
            .all(|v| v.reason == "ZoneBudgetExhausted"),
        "{verdicts:?}"
    );
    let puts = fake.requests_to(&Method::PUT, BUDGET_STATUS);
    assert_eq!(puts.len(), 1, "one status write, none lost to a conflict");
}

/// The API server's optimistic concurrency over `stored`, the object whose status is at
/// `status_path`: a PUT of another version loses with 409, a winning one bumps the version.
pub(crate) fn optimistic_status_writes(
    fake: &FakeApi,
    status_path: &str,
    stored: Arc<std::sync::Mutex<Value>>,
) {
    fake.on(Method::PUT, status_path)
        .always_with(move |request| {
            let mut current = stored.lock().unwrap();
            let mut body = request.json().unwrap();
            let version = current["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
            if body["metadata"]["resourceVersion"] != version.as_str() {
                return (
                    409,
                    status_json(409, "Conflict", "the object has been modified"),
                );
            }
            let next: u64 = version.parse::<u64>().unwrap() + 1;
            body["metadata"]["resourceVersion"] = json!(next.to_string());
            *current = body.clone();
            (200, body)
        });
}

/// The webhook's judge of the burst scenario: `budget` cached, its pods all in zone-a.
fn burst_judge(
    client: kube::Client,
    budget: ZoneDisruptionBudget,
) -> Arc<crate::webhook::judge::Judge> {
    use std::time::Duration;

    use crate::webhook::judge::{Judge, MAX_API_REQUESTS, MAX_IN_FLIGHT};
    Arc::new(Judge {
        client: client.clone(),
        zdbs: store_of([budget]),
        zdbs_synced: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        zones: NodeZones::from_store(store_of([zoned_node("node-a", "zone-a")]), ZONE_LABEL),
        field_manager: "zdb-controller".into(),
        deadline: Duration::from_secs(3),
        metrics: ZdbMetrics::register(&prometheus::Registry::new()).unwrap(),
        events: EventPublisher::new(client, "zdb-controller", "test"),
        guesses: Default::default(),
        recent: Default::default(),
        denial_ttl: Duration::from_millis(250),
        rollout_users: Vec::new(),
        queues: Arc::default(),
        in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        api_requests: Arc::new(tokio::sync::Semaphore::new(MAX_API_REQUESTS)),
    })
}

/// The evictions of web-0 to web-`pods - 1`, judged all at once; their verdicts in order.
async fn judge_at_once(
    judge: &Arc<crate::webhook::judge::Judge>,
    pods: u32,
) -> Vec<crate::webhook::verdict::Verdict> {
    use crate::webhook::admission::Eviction;

    let decisions: Vec<_> = (0..pods)
        .map(|ordinal| {
            let judge = judge.clone();
            tokio::spawn(async move {
                let eviction = Eviction {
                    namespace: NAMESPACE.into(),
                    pod: format!("web-{ordinal}"),
                    dry_run: false,
                    user: String::new(),
                };
                judge.judge(&eviction).await
            })
        })
        .collect();
    let mut verdicts = Vec::new();
    for decision in decisions {
        verdicts.push(decision.await.unwrap());
    }
    verdicts
}
