//! The CloudWatch pause alarm: a metric alarm in ALARM pauses the rollout and OK resumes it, a
//! missing alarm pauses unless ignored, and CloudWatch unreachable pauses with AlarmUnavailable.

use e2e::localstack::LocalStack;

use super::*;

/// A metric alarm in ALARM mid-rollout pauses it (no removal for 3 poll intervals,
/// `pausedRollout: true`); OK resumes it to completion.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_metric_alarm_pauses_and_resumes() {
    let fixture = Fixture::new("zau-alarm", 6).await;
    let cloudwatch = fixture.cluster.cloudwatch().await;
    let alarm = alarm_name(&fixture);
    clear_alarm(&cloudwatch, &alarm).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "2", "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    wait_for("the first batch", ROLLOUT_TIMEOUT, || async {
        let n = fixture.removals().len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    fire_alarm(&cloudwatch, &alarm).await;
    let paused = fixture
        .wait_status("pausedRollout", Duration::from_secs(60), |s| {
            s.paused_rollout
        })
        .await;
    let (state, reason, message) = condition(&paused, "Paused").unwrap();
    assert_eq!((state.as_str(), reason.as_str()), ("True", "AlarmFiring"));
    assert!(message.contains(&alarm), "{message}");
    fixture.wait_event("RolloutPaused").await;
    // Let the batch in flight when the alarm fired settle, then watch a window of 3+ polls.
    fixture.wait_converged_or_paused().await;
    let removed_at_pause = fixture.removals().len();
    let window = POLL * 4;
    tokio::time::sleep(window).await; // an observation window, not synchronisation
    assert_eq!(
        fixture.removals().len(),
        removed_at_pause,
        "pods were removed while the alarm was in ALARM"
    );
    assert!(fixture.status().await.paused_rollout);
    assert!(fixture.status().await.total_old_replicas > 0);

    clear_alarm(&cloudwatch, &alarm).await;
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
    fixture.wait_event("RolloutResumed").await;
}

impl Fixture {
    /// Waits until no pod is missing, terminating or unready (the rollout is paused between
    /// batches).
    async fn wait_converged_or_paused(&self) {
        self.wait_converged_at(None).await;
    }
}

/// An alarm name that does not exist pauses the rollout with a condition that says so; with
/// `ignoreAlarm: true` the same firing alarm does not pause it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_missing_alarm_pauses_and_ignore_alarm_does_not() {
    let fixture = Fixture::new("zau-noalarm", 3).await;
    let alarm = alarm_name(&fixture);
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller(&[]);
    let revision = fixture.set_image(2).await;
    // CloudWatch's first answer can be slow enough on a loaded machine (LocalStack, the lookup's
    // 10 s timeout) that the rollout first pauses as AlarmUnavailable, the fail-safe; the
    // controller asks again every second and says the alarm is missing once CloudWatch answers.
    let status = fixture
        .wait_status(
            "paused for the missing alarm",
            Duration::from_secs(60),
            |s| {
                s.paused_rollout
                    && condition(s, "Paused")
                        .is_some_and(|(_, reason, _)| reason == "AlarmNotFound")
            },
        )
        .await;
    let (_, _, message) = condition(&status, "Paused").unwrap();
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        fixture.removals().is_empty(),
        "removed pods without the alarm"
    );

    // The alarm now exists and fires, but the ZAU ignores it.
    let cloudwatch = fixture.cluster.cloudwatch().await;
    fire_alarm(&cloudwatch, &alarm).await;
    fixture
        .zaus
        .patch(
            ZAU,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ignoreAlarm": true}})),
        )
        .await
        .unwrap();
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
    assert_eq!(fixture.removals().len(), 3);
}

/// CloudWatch unreachable (LocalStack stopped) pauses with `AlarmUnavailable`; back (alarm
/// recreated, OK) the rollout resumes. Uses a LocalStack of its own.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_cloudwatch_down_pauses_with_alarm_unavailable() {
    let fixture = Fixture::new("zau-cwdown", 6).await;
    let mut localstack = LocalStack::start(&fixture.cluster).await;
    let cloudwatch = e2e::cluster::cloudwatch_at(&localstack.endpoint()).await;
    let alarm = alarm_name(&fixture);
    clear_alarm(&cloudwatch, &alarm).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "pauseRolloutAlarm": alarm}))
        .await;
    let _controller = fixture.controller_with(false, &[], &localstack.endpoint());
    let revision = fixture.set_image(2).await;
    wait_for("the first batch", ROLLOUT_TIMEOUT, || async {
        let n = fixture.removals().len();
        if n >= 1 { Ok(()) } else { Err(format!("{n}")) }
    })
    .await;
    localstack.stop();
    let status = fixture
        .wait_status("AlarmUnavailable", Duration::from_secs(90), |s| {
            condition(s, "Paused").is_some_and(|c| c.0 == "True" && c.1 == "AlarmUnavailable")
        })
        .await;
    assert!(status.paused_rollout);
    fixture.wait_converged_or_paused().await;
    let removed = fixture.removals().len();
    assert!(
        removed < 6,
        "the rollout finished while CloudWatch was down"
    );

    localstack.restart().await;
    // LocalStack keeps no state across restarts: recreate the alarm.
    let cloudwatch = e2e::cluster::cloudwatch_at(&localstack.endpoint()).await;
    clear_alarm(&cloudwatch, &alarm).await;
    let status = fixture.wait_complete(&revision).await;
    assert!(!status.paused_rollout);
}
