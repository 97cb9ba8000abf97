//! What holds a rollout without an alert: an unreachable gate, the bake between zones, and a
//! manual pause set during the bake.

use super::*;

impl Fixture {
    /// When the kubelet last wrote the status of `pod` (of this namespace) before `before`, from
    /// the audit log (to the microsecond): for a pod that turned Ready and stayed so, the write
    /// that made it Ready.
    fn last_kubelet_status_write(&self, pod: &str, before: Timestamp) -> Option<Timestamp> {
        self.audit()
            .iter()
            .filter(|e| {
                e.sent_by("kubelet")
                    && e.succeeded()
                    && e.object_ref.as_ref().is_some_and(|o| {
                        o.namespace == self.ns.name
                            && o.resource == "pods"
                            && o.subresource == "status"
                            && o.name == pod
                    })
            })
            .filter_map(|e| e.stage_timestamp.parse::<Timestamp>().ok())
            .filter(|at| *at < before)
            .max()
    }
}

/// The gate unreachable (the federator stopped): the rollout pauses with AlertGateUnavailable
/// naming the endpoint and removes nothing; the federator started again on the same port, it
/// proceeds. Between zones it bakes: the next zone's first removal comes no earlier than
/// `bakeTime` after the previous zone's last pod turned Ready. `paused: true` set during a bake
/// holds the rollout past the bake's end; unset, it resumes.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn zau_gate_an_unreachable_gate_bake_time_and_a_manual_pause_hold_the_rollout() {
    let bake = Duration::from_secs(8);
    let mut fx = Fixture::new("zau-gate-bake", Gate::Url).await;
    fx.create_zau(
        json!({"maxUnavailable": 1, "exponentialFactor": "1", "bakeTime": format!("{}s", bake.as_secs())}),
        json!({
            "matchers": format!(r#"{{alertname="{ALERT}"}}"#),
            "pollInterval": POLL_SPEC,
            "timeout": "1s",
        }),
    )
    .await;
    let revision = an_unreachable_gate_pauses_until_the_federator_is_back(&mut fx).await;
    let restarted = Timestamp::now();

    // zone-a in two batches, then the bake.
    let removals = fx.wait_removals(2).await;
    assert!(removals[0].at > restarted, "{removals:?}");
    assert_eq!(fx.in_zone(&removals, "zone-a").len(), 2, "{removals:?}");
    fx.wait_zone_ready("zone-a", &revision).await;
    let status = fx
        .wait_status("baking after zone-a", |s| {
            paused_by(s).contains(pause_source::BAKE) && s.next_zone_not_before.is_some()
        })
        .await;
    let not_before = status.next_zone_not_before.unwrap().0;
    a_manual_pause_holds_past_the_bake(&fx, not_before).await;
    let resumed = Timestamp::now();

    // zone-b, the bake, zone-c.
    fx.wait_complete(&revision).await;
    // GitOps tools see it done (kstatus Current, Ready True).
    assert_eq!(
        fx.kstatus().await,
        (
            kstatus::Status::Current,
            Some(("True".into(), reason::ROLLOUT_COMPLETE.into()))
        )
    );
    let removals = fx.removals();
    assert_eq!(removals.len(), REPLICAS, "{removals:?}");
    let order: Vec<&str> = removals.iter().map(|r| fx.zones[&r.pod].as_str()).collect();
    assert_eq!(
        order,
        ["zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c"]
    );
    assert!(removals[2].at > resumed, "{removals:?}");
    zone_c_started_a_bake_after_zone_b_was_ready(&fx, &removals, bake, not_before).await;
}

/// The federator stopped: no clear answer, no removal (Paused, AlertGateUnavailable naming the
/// endpoint); then started again on the same port. Returns the revision rolled out.
async fn an_unreachable_gate_pauses_until_the_federator_is_back(fx: &mut Fixture) -> String {
    fx.federator.stop().await;
    let revision = fx.set_errors("0").await;
    let url = fx.federator.url();
    let status = fx
        .wait_status("Paused: AlertGateUnavailable", |s| {
            s.update_revision == revision && paused_for(s, reason::ALERT_GATE_UNAVAILABLE)
        })
        .await;
    let message = paused(&status).unwrap().2;
    assert!(message.contains(&url), "the reason names {url}: {message}");
    assert!(paused_by(&status).contains(pause_source::ALERT));
    let until = Timestamp::now() + signed(3 * POLL);
    fx.assert_no_removal_until(until, 0, "while the gate was unreachable")
        .await;
    fx.federator.start();
    revision
}

/// `paused: true` set during the bake (which ends at `not_before`) holds the rollout past its
/// end; unset, it resumes.
async fn a_manual_pause_holds_past_the_bake(fx: &Fixture, not_before: Timestamp) {
    fx.patch_zau(json!({"paused": true})).await;
    let status = fx
        .wait_status("paused by hand", |s| {
            paused_by(s).contains(pause_source::MANUAL)
        })
        .await;
    assert!(status.paused_rollout, "{status:?}");
    assert!(
        Timestamp::now() < not_before,
        "the manual pause landed after the bake ended ({not_before}): the test cannot tell"
    );
    fx.assert_no_removal_until(not_before + signed(3 * POLL), 2, "while paused by hand")
        .await;
    let status = fx.status().await;
    assert!(
        paused_for(&status, reason::MANUALLY_PAUSED),
        "the bake is over, the manual pause remains: {status:?}"
    );
    assert_eq!(
        paused_by(&status),
        BTreeSet::from([pause_source::MANUAL]),
        "{status:?}"
    );
    // Not done for GitOps tools: kstatus InProgress (Reconciling), Ready False saying why.
    assert_eq!(
        fx.kstatus().await,
        (
            kstatus::Status::InProgress,
            Some(("False".into(), reason::MANUALLY_PAUSED.into()))
        )
    );
    fx.patch_zau(json!({"paused": false})).await;
}

/// zone-c's first removal (the fifth of `removals`) came no earlier than `bake` after zone-b's
/// last pod turned Ready, and not much later; the status announced when zone-c could start
/// (a nextZoneNotBefore after zone-a's `not_before`), and it did not start earlier.
async fn zone_c_started_a_bake_after_zone_b_was_ready(
    fx: &Fixture,
    removals: &[Removal],
    bake: Duration,
    not_before: Timestamp,
) {
    let zone_b_pods: Vec<Pod> = pods::list(&fx.pods, &format!("app={SET}"))
        .await
        .into_iter()
        .filter(|p| fx.zones[&p.name_any()] == "zone-b")
        .collect();
    let zone_b_ready = zone_b_pods.iter().filter_map(ready_since).max().unwrap();
    let gap = removals[4].at.duration_since(zone_b_ready);
    // The Ready condition's time is whole seconds; the kubelet's write of it, to the microsecond.
    let written = zone_b_pods
        .iter()
        .filter_map(|p| fx.last_kubelet_status_write(&p.name_any(), removals[4].at))
        .max()
        .unwrap();
    println!(
        "zau_gate: zone-c's first removal {:.3} s after zone-b's last pod turned Ready ({zone_b_ready}), {:.3} s after the kubelet wrote it ({written}); bakeTime {bake:?}",
        seconds(gap),
        seconds(removals[4].at.duration_since(written))
    );
    assert!(
        gap >= signed(bake),
        "zone-c started {:.3} s after zone-b was Ready, before the bake of {bake:?}",
        seconds(gap)
    );
    assert!(
        gap <= signed(bake + 3 * POLL),
        "zone-c started {:.3} s after zone-b was Ready: the bake of {bake:?} held it longer than it should",
        seconds(gap)
    );
    // The status announced when zone-c could start, and it did not start earlier.
    let announced = fx
        .statuses
        .entries()
        .into_iter()
        .filter_map(|(_, s)| s.next_zone_not_before.map(|t| t.0))
        .filter(|t| *t > not_before)
        .max()
        .expect("a nextZoneNotBefore for zone-c");
    assert!(
        announced >= zone_b_ready + signed(bake),
        "{announced} is not a bake after {zone_b_ready}"
    );
    assert!(removals[4].at >= announced, "{removals:?} vs {announced}");
}
