//! Two replicas with leader election: the leader killed mid-rollout, the standby resumes from the
//! status, and the two never both remove.

use super::*;

/// Two replicas with leader election: only the leader removes pods. The leader is killed
/// mid-rollout; the other takes over and resumes from the status (the batches still follow the
/// plan), and the two never both remove.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_leader_killed_mid_rollout_hands_over_cleanly() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-leader",
        12,
        json!({"statefulset": SET, "maxUnavailable": 4, "exponentialFactor": "2"}),
    )
    .await;
    let replica = |identity: &str| {
        let extra = [
            "--identity",
            identity,
            "--lease-duration",
            "6s",
            "--renew-interval",
            "2s",
        ];
        fixture.controller_with(true, &extra, &fixture.cluster.aws_endpoint())
    };
    let mut a = Some(replica("zau-a"));
    let mut b = Some(replica("zau-b"));
    let revision = fixture.set_image(2).await;
    // Two batches (1 + 2 pods), then kill whoever removed them.
    let leader = wait_for("two batches", ROLLOUT_TIMEOUT, || async {
        let removals = fixture.removals();
        if removals.len() >= 3 {
            Ok(removals[0].agent.clone())
        } else {
            Err(format!("{}", removals.len()))
        }
    })
    .await;
    let (survivor, identity) = if leader.contains("(zau-a)") {
        a.take();
        (b, "zau-b")
    } else {
        assert!(leader.contains("(zau-b)"), "{leader}");
        b.take();
        (a, "zau-a")
    };
    // The survivor exits as designed if it in turn misses a renewal (an API server slowed by
    // a loaded machine); kubelet would restart it, so the test does.
    let mut survivor = survivor.expect("the survivor was started");
    let supervise = async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await; // polling the child process
            if !survivor.is_running() {
                eprintln!(
                    "{identity} exited ({}); restarting it",
                    survivor.log.display()
                );
                survivor = replica(identity);
            }
        }
    };
    tokio::select! {
        _ = fixture.wait_complete(&revision) => {}
        () = supervise => {}
    }
    let removals = fixture.removals();
    let first_other = removals
        .iter()
        .position(|r| r.agent != leader)
        .expect("the standby took over and removed pods");
    assert!(
        removals[first_other..].iter().all(|r| r.agent != leader),
        "both replicas removed pods: {removals:?}"
    );
    assert_eq!(
        batches(&removals),
        expected_batches(&zones, 2.0, 4),
        "the rollout resumed at the recorded step"
    );
}
