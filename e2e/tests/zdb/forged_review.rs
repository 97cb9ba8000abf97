//! The webhook's port is reachable by more than the API server: an AdmissionReview posted to it
//! directly is judged like any other and, allowed, recorded. What such a record may cost is
//! bounded by the confirmation window: the pod it names is never evicted, so it still stands,
//! and the record stops counting once the window has passed.

use std::time::Instant;

use e2e::tls::https_post;
use e2e::webhook::admission_review;
use zone_topology::budget::CONFIRMATION_WINDOW_MS;

use super::*;

/// What a record no eviction followed may hold other zones for, at most: the window, the
/// second the stored time is truncated to, the controller's requeue a second after the
/// deadline, and slack for a loaded machine.
const HELD_AT_MOST: Duration =
    Duration::from_millis(CONFIRMATION_WINDOW_MS.unsigned_abs() + 1_000 + 1_000 + 3_000);

/// A budget of 6 pods (maxUnavailable 1 per zone), computed, under one zdb-controller started
/// with the self-signed flags and `extra`.
struct Budget {
    fixture: Fixture,
    _controller: ControllerProcess,
    metrics_port: u16,
    /// A pod of zone-a, the forged review's, and one of zone-b.
    target: String,
    other: String,
    /// The webhook's CA, which any client can read off the caBundle.
    ca: String,
    port: u16,
}

impl Budget {
    async fn start(prefix: &str, extra: &[String]) -> Budget {
        let port = free_port();
        let fixture = Fixture::new(prefix, 6, port).await;
        let mut args = fixture.self_signed_args();
        args.extend_from_slice(extra);
        let (controller, metrics_port) = fixture.controller_with(port, false, &args);
        fixture.wait_ca_bundle().await;
        fixture.create_zdb(1, false).await;
        fixture.wait_budget(6, 1).await;
        let zones = fixture.pods_by_zone().await;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = fixture.ns.api();
        let data = secrets.get(TLS_SECRET).await.unwrap().data.unwrap();
        Budget {
            target: zones["zone-a"][0].clone(),
            other: zones["zone-b"][0].clone(),
            ca: String::from_utf8(data["ca.crt"].0.clone()).unwrap(),
            fixture,
            _controller: controller,
            metrics_port,
            port,
        }
    }

    /// The zone-a pod's eviction is the budget's one record, so an eviction in zone-b is
    /// refused (`when` says at which point of the test).
    async fn zone_a_holds_zone_b(&self, when: &str) {
        let status = self.fixture.status().await;
        assert_eq!(
            status.disrupted_pod_zones,
            BTreeMap::from([(self.target.clone(), "zone-a".to_string())]),
            "{when}: {status:?}"
        );
        assert_denied(
            evict(&self.fixture.pods, &self.other, false).await,
            &format!("an eviction in zone-b {when}"),
            &["zone zone-a is disrupted"],
        );
    }

    /// POSTs the review of evicting the zone-a pod to the webhook's port, as any client that
    /// reaches it can (the API server sends the same one): the HTTP status and body.
    async fn forge(&self) -> (u16, String) {
        let review = admission_review("forged", &self.fixture.ns.name, &self.target, false);
        https_post(
            SocketAddr::from(([127, 0, 0, 1], self.port)),
            "127.0.0.1",
            &self.ca,
            "/validate-eviction",
            &String::from_utf8(review).unwrap(),
        )
        .await
        .unwrap()
    }
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
    let budget = Budget::start("zdb-forged", &[]).await;
    let Budget {
        fixture,
        metrics_port,
        target,
        other,
        ..
    } = &budget;
    let target_uid = fixture.pods.get(target).await.unwrap().uid();
    let (code, body) = budget.forge().await;
    let forged_at = Instant::now();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{body}");
    // Recorded, and held while the record counts...
    budget
        .zone_a_holds_zone_b("right after the forged review")
        .await;
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
        *metrics_port,
        "zone_aware_zdb_unconfirmed_evictions_total",
        Some(&format!("namespace=\"{}\"", fixture.ns.name)),
    )
    .await;
    assert_eq!(unconfirmed, 1.0);
}

/// With `--webhook-client-ca-file` (the CA of the client certificate the local cluster's API
/// server presents to webhooks), the same forged review is not judged at all: 401, nothing
/// recorded, counted as Unauthenticated; the API server's own call of a real eviction is judged
/// and recorded as before.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn with_client_authentication_a_forged_review_is_refused() {
    let client_ca = Cluster::get()
        .env
        .get("E2E_WEBHOOK_CLIENT_CA")
        .cloned()
        .expect("E2E_WEBHOOK_CLIENT_CA in e2e/.cluster/env: the local cluster's webhook client CA");
    let budget = Budget::start(
        "zdb-client-auth",
        &["--webhook-client-ca-file".to_string(), client_ca],
    )
    .await;
    let Budget {
        fixture,
        metrics_port,
        target,
        ..
    } = &budget;
    let (code, body) = budget.forge().await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("client certificate"), "{body}");
    assert!(fixture.status().await.disrupted_pods.is_empty());
    let unauthenticated = decisions_for(*metrics_port, "Unauthenticated").await;
    assert_eq!(unauthenticated, 1.0);

    // The API server presents its certificate: its call is judged, allowed and recorded, and
    // the next one, in another zone, refused as the budget says.
    let _quota = PodQuota::hold(&fixture.ns, 5).await;
    evict(&fixture.pods, target, false).await.unwrap();
    budget
        .zone_a_holds_zone_b("after the API server's eviction")
        .await;
}
