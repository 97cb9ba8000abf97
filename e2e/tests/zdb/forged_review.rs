//! The webhook's port is reachable by more than the API server: an AdmissionReview posted to it
//! directly is judged like any other and, allowed, recorded. What such a record may cost is
//! bounded by the confirmation window: the pod it names is never evicted, so it still stands,
//! and the record stops counting once the window has passed.

use std::time::Instant;

use e2e::tls::https_post;
use zone_topology::budget::CONFIRMATION_WINDOW_MS;

use super::*;

/// What a record no eviction followed may hold other zones for, at most: the window, the
/// second the stored time is truncated to, the controller's requeue a second after the
/// deadline, and slack for a loaded machine.
const HELD_AT_MOST: Duration =
    Duration::from_millis(CONFIRMATION_WINDOW_MS.unsigned_abs() + 1_000 + 1_000 + 3_000);

/// The AdmissionReview the API server would send for `POST pods/<pod>/eviction`, sent by
/// someone else.
fn forged_review(namespace: &str, pod: &str) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-00000000f0e6",
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": pod,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:attacker"},
            "object": {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace},
            },
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
    .to_string()
}

/// A review forged straight to the webhook (no API server, no pod evicted) is allowed and
/// recorded, as every eviction is before the API server carries it out. A real eviction in
/// another zone is then refused, but only until the confirmation window passes: the forged
/// record's pod still runs, so the controller drops the record, says so in a warning event and
/// counts it. (Before the window existed, the record held every other zone for two minutes,
/// and one forged review per budget every two minutes stopped every drain.)
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn a_forged_review_holds_other_zones_only_for_the_confirmation_window() {
    let port = free_port();
    let fixture = Fixture::new("zdb-forged", 6, port).await;
    let (_controller, metrics_port) =
        fixture.controller_with(port, false, &fixture.self_signed_args());
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(1, false).await;
    fixture.wait_budget(6, 1).await;
    let zones = fixture.pods_by_zone().await;
    let (target, other) = (&zones["zone-a"][0], &zones["zone-b"][0]);
    let target_uid = fixture.pods.get(target).await.unwrap().uid();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = fixture.ns.api();
    let data = secrets.get(TLS_SECRET).await.unwrap().data.unwrap();
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();

    let (code, body) = https_post(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "127.0.0.1",
        &ca,
        "/validate-eviction",
        &forged_review(&fixture.ns.name, target),
    )
    .await
    .unwrap();
    let forged_at = Instant::now();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{body}");
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        BTreeMap::from([(target.clone(), "zone-a".to_string())]),
        "the forged review recorded: {status:?}"
    );

    // Held while the record counts...
    assert_denied(
        evict(&fixture.pods, other, false).await,
        "an eviction in zone-b right after the forged review",
        &["zone zone-a is disrupted"],
    );
    // ...and allowed once it no longer does.
    wait_for("the eviction in zone-b allowed", HELD_AT_MOST, || async {
        match evict(&fixture.pods, other, false).await {
            Ok(()) => Ok(()),
            Err((429, message)) => Err(message),
            Err(other) => panic!("the eviction in zone-b failed otherwise: {other:?}"),
        }
    })
    .await;
    let held = forged_at.elapsed();
    eprintln!(
        "a forged review held zone-b for {:.1} s (confirmation window {} s)",
        held.as_secs_f64(),
        CONFIRMATION_WINDOW_MS / 1000
    );

    // The forged record's pod was never touched; the record was dropped as unconfirmed, with
    // a warning naming it, and counted.
    let pod = fixture.pods.get(target).await.unwrap();
    assert_eq!(pod.uid(), target_uid);
    assert!(pod.metadata.deletion_timestamp.is_none());
    let status = fixture.status().await;
    assert!(
        !status.disrupted_pods.contains_key(target.as_str()),
        "{status:?}"
    );
    let events: Api<Event> = fixture.ns.api();
    let warnings = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        warnings.iter().any(|e| e.reason.as_deref()
            == Some(zone_api::zdb::reason::EVICTION_UNCONFIRMED)
            && e.type_.as_deref() == Some("Warning")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains(target.as_str()))),
        "no EvictionUnconfirmed warning naming {target}"
    );
    let unconfirmed = metric_sum(
        metrics_port,
        "zone_aware_zdb_unconfirmed_evictions_total",
        Some(&format!("namespace=\"{}\"", fixture.ns.name)),
    )
    .await;
    assert_eq!(unconfirmed, 1.0);
}
