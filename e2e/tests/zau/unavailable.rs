//! Pods down during a rollout: an unready updated pod blocks the next batch, an unready old pod in
//! the last zone goes first, and a missing pod counts as unavailable.

use super::*;

/// An update-revision pod made unready blocks the next batch; once Ready again the rollout goes on.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_unready_updated_pod_blocks_progress() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-block",
        6,
        json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    // The first pod removed is the highest ordinal of the first zone; wait for its replacement.
    let first = expected_batches(&zones, 1.0, 1)[0][0].clone();
    wait_for("the first replacement Ready", ROLLOUT_TIMEOUT, || async {
        let pod = fixture.pods.get(&first).await.map_err(|e| e.to_string())?;
        if at_revision(&pod, &revision) && pods::is_ready(&pod) {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    pods::set_ready(&fixture.pods, &first, false).await;
    let status = fixture
        .wait_status("waiting on the unready pod", Duration::from_secs(30), |s| {
            condition(s, "Progressing").is_some_and(|c| c.1 == "Waiting")
        })
        .await;
    // An eviction the controller sent before it saw the pod unready (the test's patch follows
    // kwok's Ready by milliseconds) may still be in flight: it is counted once it has landed.
    tokio::time::sleep(POLL).await; // a settling window, not synchronisation
    let held = fixture.removals().len();
    assert!(held <= 2, "{held} removals");
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert_eq!(
        fixture.removals().len(),
        held,
        "a pod was removed while an updated pod was unready: {status:?}"
    );
    pods::set_ready(&fixture.pods, &first, true).await;
    fixture.wait_complete(&revision).await;
}

/// An old-revision pod unready in the last zone is replaced first (no deadlock: it is already
/// down, and the rollout may be what fixes it).
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_unready_old_pod_in_last_zone_goes_first() {
    let fixture = Fixture::new("zau-deadlock", 6).await;
    let zones = fixture.zones().await;
    let last_zone = zones.values().max().unwrap().clone();
    let victim = zones
        .iter()
        .filter(|(_, z)| **z == last_zone)
        .map(|(p, _)| p.clone())
        .min_by_key(|p| ordinal(p))
        .unwrap();
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}))
        .await;
    let _controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    pods::set_ready(&fixture.pods, &victim, false).await;
    let revision = fixture.set_image(2).await;
    fixture.wait_complete(&revision).await;
    let removals = fixture.removals();
    assert_eq!(
        removals.first().map(|r| r.pod.as_str()),
        Some(victim.as_str()),
        "the unready old pod of {last_zone} goes first: {removals:?}"
    );
    // Then the zone it started is finished before the others start.
    let order: Vec<&String> = removals.iter().map(|r| &zones[&r.pod]).collect();
    let in_last = zones.values().filter(|z| **z == last_zone).count();
    assert!(
        order.len() >= in_last && order[..in_last].iter().all(|z| **z == last_zone),
        "{order:?}"
    );
}

/// A pod deleted by hand counts as unavailable until recreated: while it is missing (a
/// ResourceQuota keeps the StatefulSet controller from recreating it) no batch is removed.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_missing_pod_counts_as_unavailable() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-missing",
        6,
        json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    // At most 5 pods: the pod deleted below cannot be recreated until the quota goes.
    let quota = PodQuota::hold(&fixture.ns, 5).await;
    // A pod in the last zone; the rollout starts in the first.
    let last_zone = zones.values().max().unwrap().clone();
    let victim = zones
        .iter()
        .find(|(_, z)| **z == last_zone)
        .unwrap()
        .0
        .clone();
    pods::delete_and_wait_gone(&fixture.pods, &victim, Duration::from_secs(30)).await;

    let revision = fixture.set_image(2).await;
    let status = fixture
        .wait_status(
            "the rollout to wait for the missing pod",
            Duration::from_secs(60),
            |s| {
                s.update_revision == revision
                    && condition(s, "Progressing").is_some_and(|c| c.1 == "Waiting")
            },
        )
        .await;
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert!(
        fixture.removals().is_empty(),
        "removed a pod while {victim} was missing: {status:?}"
    );
    assert!(
        fixture.pods.get_opt(&victim).await.unwrap().is_none(),
        "the quota did not hold"
    );

    quota.release().await;
    fixture.touch().await;
    fixture.wait_complete(&revision).await;
    assert_eq!(
        fixture.removals().len(),
        5,
        "the recreated pod was already at revision 2"
    );
}
