//! What holds a rollout, end to end through the real reconcile: the alarm, the alert gate (a
//! real local alerts endpoint; a Service resolved through EndpointSlices served by the fake API
//! server), `spec.paused` and the bake between zones; and each one's resume.

use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc;

use super::*;
use crate::gate::test_server::{FakePrometheus, Reply, alerts, quiet};

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/apps/events";

/// The reasons of the events the reconciles published, in order.
fn event_reasons(fake: &FakeApi) -> Vec<String> {
    fake.requests_to(&Method::POST, EVENTS)
        .iter()
        .filter_map(|r| r.json())
        .map(|event| event["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The reasons of the rollout's own events (`Rollout…`), in order.
fn rollout_events(fake: &FakeApi) -> Vec<String> {
    event_reasons(fake)
        .into_iter()
        .filter(|r| r.starts_with("Rollout"))
        .collect()
}

/// A gate at `base`, every 1 s, on critical alerts.
fn gate(base: &str) -> Value {
    json!({"url": base, "matchers": "{severity=\"critical\"}", "pollInterval": "1s", "timeout": "1s"})
}

fn critical(name: &str, zone: &str) -> Reply {
    alerts(&[(
        &[
            ("alertname", name),
            ("severity", "critical"),
            ("zone", zone),
        ],
        "firing",
    )])
}

/// Reconciles `zau` with `ctx` (kept between calls, as the controller keeps it).
async fn again(zau: &ZoneAwareUpdate, ctx: &Arc<Context>) -> Action {
    reconcile(Arc::new(zau.clone()), ctx.clone()).await.unwrap()
}

fn gated_context(fake_client: kube::Client, zau: &ZoneAwareUpdate, caches: Caches) -> Arc<Context> {
    context_with(
        fake_client,
        zau,
        caches,
        ScriptedAlarm::new(AlarmState::Clear),
        LeaderHandle::unelected(),
        GatePolls::new(None, None),
    )
}

/// A matching firing alert holds a due batch: nothing is evicted, `pausedBy: Alert`, the
/// Paused condition names the alert, and the reconcile comes back after the gate's poll
/// interval. Once the endpoint answers without it, the same batch goes and the rollout says it
/// resumed.
///
/// Without the gate consulted before the batch, web-3 and web-2 are evicted at once and the
/// test fails on the eviction list; without the resume, it fails on the second one.
#[tokio::test]
async fn a_firing_alert_pauses_and_its_end_resumes() {
    let server = FakePrometheus::start(critical("HighErrorRate", "zone-a")).await;
    let zau = zau_with(json!({"alertGate": gate(&server.url)}));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &zau, caches(OLD));

    let action = again(&zau, &ctx).await;
    let status = held_status(&fake, "Alert");
    let paused = condition(&status, "Paused");
    assert_eq!(paused["reason"], "AlertFiring");
    let message = paused["message"].as_str().unwrap();
    assert!(
        message.contains(r#"HighErrorRate{zone="zone-a"}"#) && message.contains("1 alert matching"),
        "{message}"
    );
    assert_eq!(condition(&status, "Progressing")["reason"], "Paused");
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/api/v1/alerts");

    server.set(quiet());
    let deadline = Instant::now() + Duration::from_secs(5);
    while evictions(&fake).is_empty() {
        assert!(Instant::now() < deadline, "not resumed within 5 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        again(&zau, &ctx).await;
    }
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    let status = written_status(&fake);
    assert_eq!(status["pausedRollout"], false);
    assert!(status.get("pausedBy").is_none(), "{status}");
    assert_eq!(condition(&status, "Paused")["status"], "False");
    assert_eq!(rollout_events(&fake), ["RolloutPaused", "RolloutResumed"]);
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// The pause is recorded within one poll interval (+ 1 s) of the alert appearing at the
/// endpoint, even between batches: the changed answer triggers the reconcile itself. Measured
/// here from the endpoint's switch to the status write (the endpoint's `activeAt` precedes the
/// switch by at most Prometheus's evaluation).
#[tokio::test]
async fn an_alert_is_recorded_within_one_poll_interval() {
    let server = FakePrometheus::start(quiet()).await;
    let zau = zau_with(json!({"alertGate": gate(&server.url)}));
    let (fake, client) = fake_api(&zau);
    // web-3 was replaced and is not Ready yet: no batch is due, pods are being replaced.
    let pods = [
        pod(0, OLD),
        pod(1, OLD),
        pod(2, OLD),
        pod_on(3, NEW, "node-a", false),
    ];
    let (triggers, mut triggered) = mpsc::unbounded();
    let ctx = context_with(
        client,
        &zau,
        caches_of(pods),
        ScriptedAlarm::new(AlarmState::Clear),
        LeaderHandle::unelected(),
        GatePolls::new(Some(triggers), None),
    );
    let action = again(&zau, &ctx).await;
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(1)),
        "polls at the gate's interval"
    );
    assert_eq!(written_status(&fake)["pausedRollout"], false);
    // The first answer's trigger.
    let _ = tokio::time::timeout(Duration::from_secs(2), triggered.next()).await;

    let fired = Instant::now();
    server.set(critical("HighErrorRate", "zone-a"));
    let due = tokio::time::timeout(Duration::from_secs(3), triggered.next())
        .await
        .expect("the changed answer triggers a reconcile")
        .unwrap();
    assert_eq!(due.name, ZAU);
    again(&zau, &ctx).await;
    let latency = fired.elapsed();
    let status = written_status(&fake);
    assert_eq!(status["pausedBy"], "Alert");
    assert_eq!(condition(&status, "Paused")["reason"], "AlertFiring");
    assert_eq!(
        condition(&status, "Progressing")["reason"],
        "Waiting",
        "between batches Progressing still says what it waits for"
    );
    eprintln!("alert at the endpoint to pause recorded: {latency:?} (pollInterval 1s)");
    assert!(
        latency <= Duration::from_secs(2),
        "pause recorded {latency:?} after the alert"
    );
    assert!(evictions(&fake).is_empty());
}

/// Fail safe: an endpoint that refuses connections, and a bearer token Secret that does not
/// exist, each pause with AlertGateUnavailable naming the endpoint (or the field) and why.
#[tokio::test]
async fn an_unclear_gate_pauses_with_alert_gate_unavailable() {
    let refused = FakePrometheus::gone();
    let missing_secret = {
        let mut gate = gate("http://127.0.0.1:9");
        gate["bearerTokenSecret"] = json!({"name": "gate-token", "key": "token"});
        gate
    };
    let cases = [
        (
            gate(&refused),
            format!("alert gate {refused}/api/v1/alerts"),
            "cannot connect",
        ),
        (
            missing_secret,
            "spec.alertGate.bearerTokenSecret: cannot read Secret apps/gate-token".to_owned(),
            "not found",
        ),
    ];
    for (gate, names, why) in cases {
        let zau = zau_with(json!({"alertGate": gate}));
        let (fake, client) = fake_api(&zau);
        fake.on(Method::GET, "/api/v1/namespaces/apps/secrets/gate-token")
            .always(
                404,
                status_json(404, "NotFound", "secrets \"gate-token\" not found"),
            );
        let ctx = gated_context(client, &zau, caches(OLD));
        let action = again(&zau, &ctx).await;
        assert!(evictions(&fake).is_empty());
        let status = written_status(&fake);
        assert_eq!(status["pausedBy"], "Alert");
        let paused = condition(&status, "Paused");
        assert_eq!(paused["reason"], "AlertGateUnavailable");
        let message = paused["message"].as_str().unwrap();
        assert!(
            message.contains(&names) && message.contains(why),
            "{message}"
        );
        assert!(!message.contains('\n'));
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
    }
}

/// A spec whose gate reads the rules-federator Service (its port by name, a token), scoped to
/// the rollout's zone.
fn service_gate() -> Value {
    json!({"alertGate": {
        "service": {"namespace": "zone-aware-system", "name": "rules-federator", "port": "http"},
        "bearerTokenSecret": {"name": "gate-token", "key": "token"},
        "matchers": "{severity=\"critical\"}",
        "zoneScope": "RolloutZone",
        "pollInterval": "1s",
    }})
}

/// `alertGate.service`: the Service's EndpointSlices give the address and the named port (no
/// cluster DNS needed), the token comes from the Secret, and with `zoneScope: RolloutZone` an
/// alert of another zone lets the batch of zone-a go.
///
/// If the slice's port were not looked up by name, the request would go to another port and
/// the gate would pause; if the zone scope were ignored, the zone-b alert would pause.
#[tokio::test]
async fn a_gate_service_is_resolved_and_scoped_to_the_rollout_zone() {
    let server = FakePrometheus::start(critical("HighErrorRate", "zone-b")).await;
    let zau = zau_with(service_gate());
    let (fake, client) = fake_api(&zau);
    let port = server.addr.port();
    fake.on(
        Method::GET,
        "/apis/discovery.k8s.io/v1/namespaces/zone-aware-system/endpointslices",
    )
    .query("labelSelector=kubernetes.io%2Fservice-name%3Drules-federator")
    .always(
        200,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {},
        "items": [{
            "metadata": {"name": "rules-federator-x", "namespace": "zone-aware-system"},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 1}, {"name": "http", "port": port}],
            "endpoints": [
                {"addresses": ["127.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
            ],
        }]}),
    );
    fake.on(Method::GET, "/api/v1/namespaces/apps/secrets/gate-token")
        .always(
            200,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "gate-token", "namespace": "apps"},
                   "data": {"token": "c2EtdG9rZW4K"}}),
        );
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &zau, caches(OLD));
    again(&zau, &ctx).await;

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/api/v1/alerts");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sa-token"));
    assert_eq!(
        evictions(&fake),
        ["web-3", "web-2"],
        "zone-b's alert is out of scope"
    );
    assert_eq!(written_status(&fake)["pausedRollout"], false);

    // The same alert in zone-a, the zone being rolled out, pauses.
    server.set(critical("HighErrorRate", "zone-a"));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let zau = zau_with(service_gate());
        // Fresh pods (the evicted ones were replaced), same zone-a rollout.
        let ctx2 = gated_context(fake.client("apps"), &zau, caches(OLD));
        again(&zau, &ctx2).await;
        if written_status(&fake)["pausedBy"] == "Alert" {
            break;
        }
        assert!(Instant::now() < deadline, "zone-a's alert did not pause");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(evictions(&fake).len(), 2, "nothing more evicted");
}

/// `ignoreAlarm: true` silences the gate too: a firing alert does not pause, and the endpoint
/// is not even asked.
#[tokio::test]
async fn ignore_alarm_silences_the_gate() {
    let server = FakePrometheus::start(critical("HighErrorRate", "zone-a")).await;
    let zau = zau_with(json!({"alertGate": gate(&server.url), "ignoreAlarm": true}));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &zau, caches(OLD));
    again(&zau, &ctx).await;
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    assert!(server.seen().is_empty(), "the gate was asked");
    let status = written_status(&fake);
    assert_eq!(
        condition(&status, "Paused")["message"],
        "ignoreAlarm is set: the alert gate is not consulted"
    );
}

/// The alarm holds a due batch (`pausedBy: Alarm`) and, cleared, lets it go with a resume
/// event; meanwhile `spec.paused` is recorded beside it.
#[tokio::test]
async fn an_alarm_pause_resumes_when_it_clears() {
    let zau = zau(Some("my-alarm"));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let alarms = ScriptedAlarm::new(AlarmState::Firing {
        reason: "errors".into(),
    });
    let ctx = context(
        client,
        &zau,
        caches(OLD),
        alarms.clone(),
        LeaderHandle::unelected(),
    );
    again(&zau, &ctx).await;
    assert!(evictions(&fake).is_empty());
    assert_eq!(written_status(&fake)["pausedBy"], "Alarm");

    alarms.set(AlarmState::Clear);
    again(&zau, &ctx).await;
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    let status = written_status(&fake);
    assert_eq!(status["pausedRollout"], false);
    assert!(status.get("pausedBy").is_none());
    assert_eq!(rollout_events(&fake), ["RolloutPaused", "RolloutResumed"]);
}

/// `spec.paused: true` holds the due batch (ManuallyPaused, a Normal event); unset, the batch
/// goes and the rollout says it resumed.
#[tokio::test]
async fn spec_paused_holds_and_unsetting_it_resumes() {
    let held = zau_with(json!({"paused": true}));
    let (fake, client) = fake_api(&held);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &held, caches(OLD));
    let action = again(&held, &ctx).await;
    assert!(evictions(&fake).is_empty());
    let status = written_status(&fake);
    assert_eq!(status["pausedBy"], "Manual");
    assert_eq!(status["pausedRollout"], true);
    assert_eq!(condition(&status, "Paused")["reason"], "ManuallyPaused");
    assert_eq!(action, Action::requeue(POLL));
    let paused_event = fake.requests_to(&Method::POST, EVENTS)[0].json().unwrap();
    assert_eq!(paused_event["type"], "Normal");

    let mut resumed = zau_with(json!({}));
    resumed.metadata.generation = Some(2);
    again(&resumed, &ctx).await;
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    assert_eq!(written_status(&fake)["pausedRollout"], false);
    assert_eq!(rollout_events(&fake), ["RolloutPaused", "RolloutResumed"]);
}

/// zone-a is done (all its pods new and Ready), zone-b untouched: its first batch waits
/// `bakeTime` from now (`nextZoneNotBefore`, `pausedBy: Bake`), the gate still watched (an
/// alert during the bake shows as `Alert,Bake`). With the recorded time past, the batch goes
/// and the field is cleared.
#[tokio::test]
async fn a_bake_holds_the_next_zone_then_lets_it_go() {
    let server = FakePrometheus::start(quiet()).await;
    let pods = || {
        [
            pod_on(0, NEW, "node-a", true),
            pod_on(1, NEW, "node-a", true),
            pod_on(2, OLD, "node-b", true),
            pod_on(3, OLD, "node-b", true),
        ]
    };
    let zau = zau_with(json!({"bakeTime": "5m", "alertGate": gate(&server.url)}));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &zau, caches_of(pods()));
    let before = Timestamp::now();
    let action = again(&zau, &ctx).await;
    assert!(evictions(&fake).is_empty(), "zone-b started without a bake");
    let status = written_status(&fake);
    assert_eq!(status["pausedBy"], "Bake");
    assert_eq!(status["currentZone"], "zone-b");
    assert_eq!(condition(&status, "Paused")["reason"], "Baking");
    let until: Timestamp = status["nextZoneNotBefore"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let bake = until.as_second() - before.as_second();
    // 300 s from the reconcile, rounded up to the second.
    assert!((300..=302).contains(&bake), "bake of {bake} s");
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));

    // An alert during the bake: both hold it.
    server.set(critical("HighErrorRate", "zone-a"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while written_status(&fake)["pausedBy"] != "Alert,Bake" {
        assert!(
            Instant::now() < deadline,
            "the alert did not show during the bake"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        again(&zau, &ctx).await;
    }
    let status = written_status(&fake);
    assert_eq!(condition(&status, "Paused")["reason"], "AlertFiring");
    assert_eq!(
        status["nextZoneNotBefore"].as_str().unwrap(),
        until.to_string(),
        "a later reconcile does not restart the bake"
    );

    // The bake is over (recorded in the past) and the alert gone: zone-b's first batch goes.
    server.set(quiet());
    let mut baked = zau_with(json!({"bakeTime": "5m", "alertGate": gate(&server.url)}));
    baked.status.as_mut().unwrap().next_zone_not_before =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::from_second(before.as_second() - 1).unwrap(),
        ));
    baked.status.as_mut().unwrap().current_zone = Some("zone-b".into());
    baked.status.as_mut().unwrap().update_step = 2;
    let (fake, client) = fake_api(&baked);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let ctx = gated_context(client, &baked, caches_of(pods()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while evictions(&fake).is_empty() {
        assert!(
            Instant::now() < deadline,
            "zone-b did not start after the bake"
        );
        again(&baked, &ctx).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(evictions(&fake), ["web-3", "web-2"]);
    let status = written_status(&fake);
    assert!(status.get("nextZoneNotBefore").is_none(), "{status}");
    assert_eq!(status["pausedRollout"], false);
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}
