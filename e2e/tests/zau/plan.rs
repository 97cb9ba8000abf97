//! `kubectl zone rollout plan` through the real kubectl, which finds the plugin on PATH: the plan
//! printed before a rollout is what the controller then removes (the audit log).

use super::*;

/// `kubectl zone rollout plan <name> -n <namespace> -o json` as the test's admin: the plan.
pub(super) fn planned(fixture: &Fixture, name: &str) -> Value {
    e2e::kubectl_zone::json(
        &fixture.cluster,
        &["rollout", "plan", name, "-n", &fixture.ns.name],
    )
}

/// The batches of a plan, as pod names.
pub(super) fn planned_batches(plan: &Value) -> Vec<Vec<String>> {
    plan["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|batch| serde_json::from_value(batch["pods"].clone()).unwrap())
        .collect()
}

/// The source document's figure (30 replicas, maxUnavailable 4, factor 2), held by hand after
/// the new revision: the plan says so and lists the rule's batches; released, the controller
/// removes exactly those batches.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_kubectl_zone_plan_is_what_the_controller_removes() {
    let (fixture, zones) = Fixture::with_zau(
        "zau-plan",
        30,
        json!({"statefulset": SET, "maxUnavailable": 4, "exponentialFactor": "2", "paused": true}),
    )
    .await;
    let _controller = fixture.controller(&[]);
    // Before the rollout: its preview for the new image.
    let ns = fixture.ns.name.clone();
    let preview = e2e::kubectl_zone::json(
        &fixture.cluster,
        &["rollout", "plan", ZAU, "-n", &ns, "--image", &image(2)],
    );
    assert_eq!(preview["whatIf"], true, "{preview}");
    // kubectl's own completion reaches the plugin.
    let offered =
        e2e::kubectl_zone::completions(&fixture.cluster, &["rollout", "plan", "web", "--im"]);
    assert_eq!(
        offered,
        ["--image"],
        "kubectl __complete zone rollout plan web --im"
    );
    let revision = fixture.set_image(2).await;
    fixture
        .wait_status("the rollout held by hand", ROLLOUT_TIMEOUT, |s| {
            s.update_revision == revision && s.paused_by == "Manual"
        })
        .await;
    let plan = planned(&fixture, ZAU);
    assert_eq!(plan["updateRevision"], revision.as_str());
    assert_eq!(plan["heldBy"][0]["source"], "Manual", "{plan}");
    let batches = planned_batches(&plan);
    assert_eq!(batches, expected_batches(&zones, 2.0, 4), "the plan");
    assert_eq!(
        planned_batches(&preview),
        batches,
        "the preview before the rollout"
    );

    fixture.set_paused(false).await;
    fixture.wait_complete(&revision).await;
    assert_eq!(
        super::batches(&fixture.removals()),
        batches,
        "removed (audit log)"
    );
    assert_eq!(
        planned_batches(&planned(&fixture, ZAU)),
        Vec::<Vec<String>>::new()
    );
}
