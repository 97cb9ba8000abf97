//! Which evictions a budget allows, zone by zone: evictions, an unready pod and a deleted pod
//! disrupting their zone, a pod selected by two budgets, shadow mode, and a budget the Go
//! controller left, adopted and judged from the cluster.

use super::*;

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn two_evictions_in_one_zone_then_that_zone_and_every_other_is_refused() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-budget", 9, 2, false).await;

    assert_eq!(zones.len(), 3, "{zones:?}");
    let zone_a = &zones["zone-a"];
    let zone_b = &zones["zone-b"];
    assert_eq!(zone_a.len(), 3, "{zones:?}");

    // A dry run is judged like a real eviction and records nothing.
    evict(&fixture.pods, &zone_a[0], true).await.unwrap();
    assert!(fixture.status().await.disrupted_pods.is_empty());

    // The evicted pods are not recreated until the quota goes: on a slow machine they could
    // otherwise be back and Ready before the checks below, which then would test nothing.
    let quota = PodQuota::hold(&fixture.ns, 7).await;
    evict(&fixture.pods, &zone_a[0], false).await.unwrap();
    evict(&fixture.pods, &zone_a[1], false).await.unwrap();
    // Both recorded in zone-a, terminating or gone (a record places its missing pod).
    let status = fixture.status().await;
    assert_eq!(status.disrupted_zones, ["zone-a"], "{status:?}");
    assert_eq!(status.current_unhealthy["zone-a"], 2, "{status:?}");
    assert_eq!(
        status.disrupted_pod_zones,
        zone_a[..2]
            .iter()
            .map(|pod| (pod.clone(), "zone-a".to_string()))
            .collect::<BTreeMap<_, _>>(),
        "{status:?}"
    );

    assert_denied(
        evict(&fixture.pods, &zone_a[2], false).await,
        "a third eviction in zone-a",
        &["zone-a", "maxUnavailable 2"],
    );
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while zone-a is disrupted",
        &["zone zone-a is disrupted", "zone-b"],
    );
    // A dry run is refused the same way.
    assert_denied(
        evict(&fixture.pods, &zone_b[0], true).await,
        "a dry-run eviction in zone-b",
        &["zone-a"],
    );

    // Once the evicted pods are recreated and Ready, their records are dropped and another zone
    // may be disrupted.
    quota.release().await;
    fixture.touch_statefulset().await;
    fixture.wait_ready(9).await;
    fixture
        .wait_status("the records dropped, no zone disrupted", |status| {
            status.disrupted_pods.is_empty() && status.disrupted_zones.is_empty()
        })
        .await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn shadow_mode_allows_what_it_would_deny() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-shadow", 6, 1, true).await;
    evict(&fixture.pods, &zones["zone-a"][0], false)
        .await
        .unwrap();
    // Would be denied (zone-a is disrupted), allowed in shadow mode.
    evict(&fixture.pods, &zones["zone-b"][0], false)
        .await
        .unwrap();
    let events: Api<Event> = fixture.ns.api();
    wait_for(
        "a WouldDenyEviction event",
        Duration::from_secs(30),
        || async {
            let found = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("WouldDenyEviction"))
                .filter_map(|e| e.note)
                .find(|note| note.contains("zone-a"));
            found.ok_or_else(|| "no event yet".to_string())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn an_unready_pod_disrupts_its_zone_and_may_itself_be_evicted() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-unready", 6, 1, false).await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    pods::set_ready(&fixture.pods, &zone_a[0], false).await;
    fixture
        .wait_status("zone-a disrupted by the unready pod", |status| {
            status.disrupted_zones == ["zone-a"] && status.disruptions_allowed["zone-a"] == 0
        })
        .await;
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while a zone-a pod is unready",
        &["zone zone-a is disrupted", "zone-b"],
    );
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "a second pod of zone-a with maxUnavailable 1",
        &["zone-a", "maxUnavailable 1"],
    );
    // Evicting the pod that is already down removes no availability: allowed, not recorded.
    evict(&fixture.pods, &zone_a[0], false).await.unwrap();
    assert!(fixture.status().await.disrupted_pods.is_empty());
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn a_pod_selected_by_two_budgets_cannot_be_evicted() {
    let port = free_port();
    let fixture = Fixture::new("zdb-overlap", 3, port).await;
    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(1, false).await;
    fixture
        .create_budget(
            "web-too",
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": 1}),
        )
        .await;
    wait_for("both budgets marked Invalid", TIMEOUT, || async {
        let mut states = Vec::new();
        for name in [ZDB, "web-too"] {
            let status = fixture
                .zdbs
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            states.push(status.conditions.iter().any(|c| {
                c.type_ == "Invalid" && c.status == "True" && c.reason == "OverlappingBudgets"
            }));
        }
        if states.iter().all(|s| *s) {
            Ok(())
        } else {
            Err(format!("{states:?}"))
        }
    })
    .await;
    let pod = fixture.list_pods().await[0].name_any();
    // The webhook's cache of budgets is its own watch, which converges on its own (one that
    // expires re-lists after a backoff): dry runs, which evict nothing, show when it has both.
    wait_for("the webhook to refuse a dry run", TIMEOUT, || async {
        match evict(&fixture.pods, &pod, true).await {
            Err((429, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_denied(
        evict(&fixture.pods, &pod, false).await,
        "a pod of two budgets",
        &["web", "web-too"],
    );
}

/// A pod deleted by hand (not evicted: the webhook never hears of it) and not recreated yet
/// counts as unhealthy in its zone: evictions in every other zone are refused until it is back.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_deleted_pod_blocks_other_zones() {
    let (fixture, _controller, zones) = Fixture::with_budget("zdb-missing", 9, 1, false).await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    // At most 8 pods: the pod deleted below cannot be recreated until the quota goes.
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let victim = &zone_a[0];
    pods::delete_and_wait_gone(&fixture.pods, victim, TIMEOUT).await;
    fixture
        .wait_status("zone-a disrupted by the missing pod", |status| {
            let missing = status.conditions.iter().any(|c| {
                c.type_ == "Disrupted"
                    && c.status == "True"
                    && c.message == "zone-a: 1 other pod(s) unavailable or missing"
            });
            missing
                && status.disrupted_zones == ["zone-a"]
                && status.current_unhealthy["zone-a"] == 1
                && status.expected_pods["zone-a"] == 3
        })
        .await;
    assert_denied(
        evict(&fixture.pods, &zone_b[0], false).await,
        "an eviction in zone-b while a zone-a pod is missing",
        &[
            "zone zone-a is disrupted",
            "1 other pod(s) unavailable or missing",
            "zone zone-b must wait",
        ],
    );
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "a second zone-a pod while one is missing, maxUnavailable 1",
        &["zone zone-a already has 1 of maxUnavailable 1"],
    );
    assert!(
        fixture.pods.get_opt(victim).await.unwrap().is_none(),
        "the quota did not hold: the pod was recreated, so the denials were not about a missing pod"
    );

    // Quota gone; a touch of the StatefulSet makes its controller retry at once.
    quota.release().await;
    fixture.touch_statefulset().await;
    fixture.wait_ready(9).await;
    fixture.wait_budget(9, 1).await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
}

/// A budget as the Go controller left it — its spec, and its status (no conditions, no record
/// zones, stale records, counts of another time) for the current generation — is adopted: the
/// status is recomputed from the cluster, the stale records (a pod recreated since, a pod that
/// no longer exists) are dropped and block nothing, and evictions are judged from the cluster.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_go_shaped_objects_adopted() {
    // A record older than every pod of the test: its pod has been recreated since.
    let before_pods = k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() - 5,
    )
    .unwrap();
    let port = free_port();
    let fixture = Fixture::new("zdb-adopt", 9, port).await;
    let zones = fixture.pods_by_zone().await;
    let (zone_a, zone_b) = (&zones["zone-a"], &zones["zone-b"]);

    let created = fixture
        .create_budget(
            ZDB,
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": 1, "dryRun": false}),
        )
        .await;
    let now =
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .unwrap();
    // The Go controller's status fields only, as it wrote them while zone-a was drained.
    let go_status = json!({
        "observedGeneration": created.metadata.generation.unwrap(),
        "disruptedPods": {
            zone_a[0].clone(): before_pods.to_string(),
            "web-100": now.to_string(),
        },
        "disruptionsAllowed": {"zone-a": 0, "zone-b": 0, "zone-c": 0},
        "currentHealthy": {"zone-a": 1, "zone-b": 3, "zone-c": 3},
        "currentUnhealthy": {"zone-a": 2, "zone-b": 0, "zone-c": 0},
        "desiredHealthy": {"zone-a": 2, "zone-b": 2, "zone-c": 2},
        "expectedPods": {"zone-a": 3, "zone-b": 3, "zone-c": 3},
    });
    fixture
        .zdbs
        .patch_status(
            ZDB,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": go_status})),
        )
        .await
        .unwrap();
    let stored = fixture.status().await;
    assert_eq!(stored.disrupted_pods.len(), 2, "{stored:?}");
    assert!(stored.conditions.is_empty(), "{stored:?}");

    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    let adopted = |status: &ZoneDisruptionBudgetStatus| {
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let per_zone = |n: i32| {
            BTreeMap::from([
                ("zone-a".to_string(), n),
                ("zone-b".to_string(), n),
                ("zone-c".to_string(), n),
            ])
        };
        ready
            && status.disrupted_pods.is_empty()
            && status.disrupted_pod_zones.is_empty()
            && status.disrupted_zones.is_empty()
            && status.expected_pods == per_zone(3)
            && status.current_healthy == per_zone(3)
            && status.current_unhealthy == per_zone(0)
            && status.disruptions_allowed == per_zone(1)
    };
    let timeout = Duration::from_secs(30);
    fixture
        .wait_zdb("the Go status adopted", ZDB, timeout, |_, s| adopted(s))
        .await;

    // Judged from the cluster: zone-b may go first, then zone-a waits for it (the evicted pod
    // is kept from coming back meanwhile).
    let _quota = PodQuota::hold(&fixture.ns, 8).await;
    evict(&fixture.pods, &zone_b[0], false).await.unwrap();
    assert_denied(
        evict(&fixture.pods, &zone_a[1], false).await,
        "an eviction in zone-a after one in zone-b",
        &["zone zone-b is disrupted", &zone_b[0]],
    );
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        BTreeMap::from([(zone_b[0].clone(), "zone-b".to_string())]),
        "{status:?}"
    );
}
