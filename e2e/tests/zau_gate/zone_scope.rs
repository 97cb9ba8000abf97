//! An alert in another zone than the one rolled: `zoneScope: Any` pauses at once,
//! `RolloutZone` rolls the other zones and waits at the alerting one.

use kube::api::DeleteParams;

use super::*;

/// A zone-c pod of the application (outside the StatefulSet) errs. Rolling zone-a under
/// `zoneScope: Any` pauses at once and removes nothing; under `RolloutZone` zone-a and zone-b
/// roll without a pause, and the rollout pauses on reaching zone-c, until the alert resolves.
/// The gate reaches the federator through a Service's EndpointSlice.
#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn zau_gate_an_alert_in_another_zone_pauses_under_any_but_not_under_rollout_zone() {
    let fx = Fixture::new("zau-gate-scope", Gate::Service).await;
    start_a_faulty_pod_in_zone_c(&fx).await;
    let alert = fx.federator.wait_firing("zone-c").await;
    assert_eq!(alert.shard, "2");

    fx.create_zau(
        json!({"maxUnavailable": 2, "exponentialFactor": "0"}),
        json!({
            "matchers": format!(r#"{{alertname="{ALERT}", severity="page"}}"#),
            "zoneScope": "Any",
            "pollInterval": POLL_SPEC,
            "timeout": "1s",
        }),
    )
    .await;
    let revision = fx.set_errors("0").await;
    fx.wait_status("Any: paused by zone-c's alert", |s| {
        s.update_revision == revision
            && paused_by(s).contains(pause_source::ALERT)
            && paused_for(s, reason::ALERT_FIRING)
    })
    .await;
    // zone-a is the rollout's first zone: under RolloutZone it would roll now.
    let until = Timestamp::now() + signed(4 * POLL);
    fx.assert_no_removal_until(until, 0, "under Any while zone-c alerted")
        .await;

    under_rollout_zone_zones_a_and_b_roll_and_zone_c_waits(&fx).await;

    // The faulty pod goes; zone-c's alert resolves and its pods roll.
    fx.pods
        .delete("faulty", &DeleteParams::default())
        .await
        .unwrap();
    fx.federator.wait_quiet().await;
    let last_firing = fx.last_firing("zone-c").await;
    fx.wait_complete(&revision).await;
    let removals = fx.removals();
    assert_eq!(removals.len(), REPLICAS, "{removals:?}");
    let zone_c = fx.in_zone(&removals, "zone-c");
    assert_eq!(zone_c.len(), 2);
    assert!(
        zone_c.iter().all(|r| r.at > last_firing),
        "zone-c rolled while its alert fired (last firing evaluation {last_firing}): {zone_c:?}"
    );
}

/// The pod `faulty`: a pod of the application outside the StatefulSet, in zone-c, erring.
async fn start_a_faulty_pod_in_zone_c(fx: &Fixture) {
    let mut template = fx.real.metrics_target_template("faulty");
    template["metadata"]["name"] = json!("faulty");
    template["metadata"]["labels"][PART_OF] = json!(SET);
    template["spec"]["nodeSelector"][e2e::workload::ZONE_LABEL] = json!("zone-c");
    template["spec"]
        .as_object_mut()
        .unwrap()
        .remove("topologySpreadConstraints");
    template["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ERRORS_PER_SECOND", "value": FAULTY}));
    fixture::create(&fx.pods, template).await;
}

/// `zoneScope: RolloutZone`: zone-a and zone-b roll, zone-c's alert pausing nothing until
/// zone-b's batch was removed; it holds the rollout when zone-c's turn comes.
async fn under_rollout_zone_zones_a_and_b_roll_and_zone_c_waits(fx: &Fixture) {
    fx.patch_zau(json!({"alertGate": {"zoneScope": "RolloutZone"}}))
        .await;
    let scoped = Timestamp::now();
    let removals = fx.wait_removals(4).await;
    let status = fx
        .wait_status("RolloutZone: paused with zone-c left", |s| {
            s.observed_generation == Some(2)
                && s.total_old_replicas == 2
                && s.old_replicas.get("zone-c") == Some(&2)
                && paused_for(s, reason::ALERT_FIRING)
        })
        .await;
    assert!(paused_by(&status).contains(pause_source::ALERT));
    let rolled: BTreeSet<&str> = removals.iter().map(|r| r.pod.as_str()).collect();
    let zones_ab: BTreeSet<&str> = fx
        .zones
        .iter()
        .filter(|(_, z)| *z != "zone-c")
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(rolled, zones_ab, "zone-a and zone-b rolled: {removals:?}");
    // Until zone-b's batch was removed, zone-c's alert paused nothing.
    let entries = fx.statuses.entries();
    let zone_b_removed = removals[3].at;
    let held: Vec<_> = entries
        .iter()
        .filter(|(at, s)| {
            *at >= scoped
                && *at < zone_b_removed
                && s.observed_generation == Some(2)
                && paused_by(s).contains(pause_source::ALERT)
        })
        .collect();
    assert!(
        held.is_empty(),
        "paused by zone-c's alert while rolling another zone: {held:?}"
    );
    let until = Timestamp::now() + signed(4 * POLL);
    fx.assert_no_removal_until(until, 4, "in zone-c while its alert fired")
        .await;
}
