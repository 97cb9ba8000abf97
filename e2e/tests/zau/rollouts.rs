//! Rollouts of an OnDelete StatefulSet: the batches removed follow the plan (exponential factors 2
//! and 0, a percentage), a new revision mid-rollout and a rollback converge, and a dry run
//! reports the plan and removes nothing.

use super::*;

/// 12 replicas over 3 zones, one rollout: the batches the controller removed (audit log) are
/// exactly the expected sequence, never more than `max` replicas down, never two zones at once.
async fn rollout_follows_the_plan(
    prefix: &str,
    factor: &str,
    max_unavailable: Value,
    max: usize,
    extra_args: &[&str],
) {
    let fixture = Fixture::new(prefix, 12).await;
    let zones = fixture.zones().await;
    let per_zone: BTreeMap<&String, usize> = zones.values().fold(BTreeMap::new(), |mut m, z| {
        *m.entry(z).or_default() += 1;
        m
    });
    assert!(
        per_zone.len() == 3 && per_zone.values().all(|n| *n == 4),
        "spread: {per_zone:?}"
    );
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": max_unavailable, "exponentialFactor": factor}))
        .await;
    let _controller = fixture.controller(extra_args);
    fixture.wait_observed().await;
    let monitor = Monitor::start(
        fixture.pods.clone(),
        &format!("app={SET}"),
        fixture.replicas,
    )
    .await;

    let current_revision = |set: StatefulSet| set.status.and_then(|s| s.current_revision);
    let old_revision = current_revision(fixture.sets.get(SET).await.unwrap());
    let revision = fixture.set_image(2).await;
    let status = fixture.wait_complete(&revision).await;

    let removed = fixture.removals();
    let got = batches(&removed);
    let want = expected_batches(&zones, factor.parse().unwrap(), max);
    assert_eq!(got, want, "removal batches (audit log) vs the plan");
    let (worst_down, worst_zones) = monitor.worst();
    assert!(
        worst_down <= max,
        "{worst_down} replicas unavailable at once (max {max})"
    );
    assert!(worst_down >= 1, "the monitor saw no disruption at all");
    assert_eq!(
        worst_zones, 1,
        "replicas unavailable in {worst_zones} zones at once"
    );
    assert!(
        removed
            .iter()
            .all(|r| r.agent.starts_with("zau-controller/")),
        "{removed:?}"
    );

    // Completion is recorded on the StatefulSet (OnDelete never moves currentRevision) and in
    // the status, with an event. The StatefulSet controller may write back a status it computed
    // before that write (its retry on conflict keeps the currentRevision it read): the
    // controller records the completion again. Such a write is made here too, on purpose.
    let recorded = || async {
        wait_for(
            "the StatefulSet's currentRevision",
            Duration::from_secs(60),
            || async {
                match current_revision(fixture.sets.get(SET).await.unwrap()) {
                    Some(current) if current == revision => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    };
    recorded().await;
    assert_ne!(old_revision.as_deref(), Some(revision.as_str()));
    fixture
        .sets
        .patch_status(
            SET,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentRevision": old_revision}})),
        )
        .await
        .unwrap();
    recorded().await;
    assert_eq!(status.current_revision, revision);
    assert!(!status.paused_rollout);
    fixture.wait_event("RolloutComplete").await;
    assert!(!fixture.events("BatchRemoved").await.is_empty());
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_factor_2() {
    rollout_follows_the_plan("zau-f2", "2", json!(4), 4, &[]).await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_factor_0() {
    // Also the caches' fallback for API servers without streaming lists.
    rollout_follows_the_plan("zau-f0", "0", json!(4), 4, &["--initial-list", "paginated"]).await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_batches_follow_the_plan_percent() {
    // 25% of 12 replicas = 3.
    rollout_follows_the_plan("zau-pct", "2", json!("25%"), 3, &[]).await;
}

/// A second image change half way: the step restarts at 1 pod, pods of both older revisions are
/// replaced, the rollout converges to the newest. Then a rollback to the first template converges.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_new_revision_mid_rollout_and_rollback_converge() {
    let fixture = Fixture::new("zau-rev", 12).await;
    let first = fixture.update_revision().await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 2, "exponentialFactor": "2"}))
        .await;
    let _controller = fixture.controller(&[]);
    let second = fixture.set_image(2).await;
    // Wait for about half the pods to be replaced.
    wait_for("half the pods at revision 2", ROLLOUT_TIMEOUT, || async {
        let at_second = fixture
            .list_pods()
            .await
            .iter()
            .filter(|p| at_revision(p, &second))
            .count();
        if at_second >= 6 {
            Ok(())
        } else {
            Err(format!("{at_second}"))
        }
    })
    .await;
    let at_second_step = fixture.status().await.update_step;
    let third = fixture.set_image(3).await;
    assert_ne!(second, third);
    // The controller notices the new revision and starts again at step 0: the first status that
    // shows revision 3 (batches are >= 1 s apart: kwok's readiness delay) is at most a batch or
    // two into the new rollout, while revision 2 had reached step >= 4 (6 pods in batches of
    // 1, 2, 2, ...).
    assert!(at_second_step >= 3, "revision 2 step {at_second_step}");
    let reset = fixture
        .wait_status(
            "the step reset for revision 3",
            Duration::from_secs(60),
            |s| s.update_revision == third,
        )
        .await;
    assert!(
        reset.update_step <= 2,
        "step {} after the new revision (was {at_second_step})",
        reset.update_step
    );
    fixture.wait_complete(&third).await;
    // Pods of both older revisions were replaced.
    let stale: Vec<String> = fixture
        .list_pods()
        .await
        .iter()
        .filter(|p| !at_revision(p, &third))
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        stale.is_empty(),
        "pods not at the newest revision: {stale:?}"
    );
    fixture.wait_event("NewRevision").await;

    // Rollback: the first template again. The StatefulSet reuses the first revision.
    let rolled_back = fixture.set_image(1).await;
    assert_eq!(
        rolled_back, first,
        "rollback reuses the first ControllerRevision"
    );
    fixture.wait_complete(&first).await;
}

/// `dryRun: true`: plans, reports the batch it would remove, removes nothing.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_dry_run_reports_the_plan_and_removes_nothing() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-dry",
        6,
        json!({"statefulset": SET, "maxUnavailable": 2, "exponentialFactor": "2", "dryRun": true}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    fixture.set_image(2).await;
    let event = fixture.wait_event("DryRunBatch").await;
    let note = event.note.unwrap_or_default();
    let first = &expected_batches(&zones, 2.0, 2)[0][0];
    assert!(note.contains(first), "{note} should name {first}");
    let status = fixture.status().await;
    assert_eq!(status.total_old_replicas, 6);
    tokio::time::sleep(POLL * 4).await; // an observation window, not synchronisation
    assert!(fixture.removals().is_empty());
    assert_eq!(fixture.status().await.total_old_replicas, 6);
}
