//! Drains of a node with the budget's pods on it: dry-run evictions and `kubectl drain
//! --dry-run=server` get the real eviction's decision, and a real `kubectl drain` retries the
//! webhook's 429s until the budget allows.

use super::*;

impl Fixture {
    /// The StatefulSet `pinned`: `replicas` pods on `node` only, selected by the budget.
    async fn create_pinned(&self, replicas: i32, node: &TestNode) {
        let labels = json!({"app": SET, "set": PINNED});
        create_on_node(&self.ns, PINNED, replicas, node, labels.clone(), labels).await;
    }

    /// name -> uid of the budget's pods that are not terminating.
    async fn live_uids(&self) -> BTreeMap<String, String> {
        self.live_uids_of(&format!("app={SET}")).await
    }
}

/// Six pods spread over the zones, and two `pinned` pods on the test's own node in zone-a; a
/// budget of maxUnavailable 2 over all eight.
async fn pinned_fixture(prefix: &str, port: u16) -> (Fixture, TestNode, (ControllerProcess, u16)) {
    let fixture = Fixture::new(prefix, 6, port).await;
    let node = TestNode::create(&fixture.ns, "zone-a").await;
    fixture.create_pinned(2, &node).await;
    fixture.wait_ready(8).await;
    let controller = fixture.controller_with(port, false, &fixture.self_signed_args());
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(2, false).await;
    fixture.wait_budget(8, 2).await;
    let zones = fixture.pods_by_zone().await;
    assert_eq!(zones["zone-a"].len(), 4, "{zones:?}");
    (fixture, node, controller)
}

/// A dry-run eviction, through the API (`deleteOptions.dryRun`) and through `kubectl drain
/// --dry-run=server`, gets the decision the real eviction gets — allowed, then denied while
/// another zone is disrupted — and records nothing; the real evictions then do as predicted.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_dry_run_matches_real() {
    let port = free_port();
    let (fixture, node, (_controller, metrics)) = pinned_fixture("zdb-dryrun", port).await;
    let client = fixture.ns.client.clone();
    let pinned = [format!("{PINNED}-0"), format!("{PINNED}-1")];
    let uids = fixture.live_uids().await;

    // Allowed: both dry runs succeed, nothing is recorded, nothing is evicted or cordoned.
    let before = fixture.zdbs.get(ZDB).await.unwrap();
    let dry_runs = decisions_for(metrics, "DryRun").await;
    evict(&fixture.pods, &pinned[0], true).await.unwrap();
    let (success, output) = Kubectl::drain(
        &node.name,
        "app=web",
        &["--dry-run=server", "--timeout=60s"],
    )
    .finish(Duration::from_secs(90))
    .await;
    assert!(success, "the dry-run drain failed:\n{output}");
    assert!(
        output.contains(&format!("node/{} drained (server dry run)", node.name)),
        "{output}"
    );
    // The webhook judged the three dry runs (one through the API, two by kubectl) as such.
    assert_eq!(
        decisions_for(metrics, "DryRun").await - dry_runs,
        3.0,
        "{output}"
    );
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "a dry run wrote the budget: {:?}",
        after.status
    );
    assert!(!node.unschedulable(&client).await, "a dry run cordoned");
    assert_eq!(fixture.live_uids().await, uids, "a dry run evicted");

    // Denied while zone-b is disrupted: the dry runs are refused as the real eviction is.
    let zones = fixture.pods_by_zone().await;
    let down = zones["zone-b"][0].clone();
    disrupt_zone_by_unready_pod(&fixture, "zone-b", &down).await;
    let before = fixture.zdbs.get(ZDB).await.unwrap();
    let mentions = ["zone zone-b is disrupted", "zone zone-a must wait"];
    assert_denied(
        evict(&fixture.pods, &pinned[0], true).await,
        "a dry-run eviction in zone-a",
        &mentions,
    );
    assert_denied(
        evict(&fixture.pods, &pinned[0], false).await,
        "the real eviction in zone-a",
        &mentions,
    );
    let (success, output) =
        Kubectl::drain(&node.name, "app=web", &["--dry-run=server", "--timeout=8s"])
            .finish(Duration::from_secs(60))
            .await;
    assert!(!success, "the dry-run drain succeeded:\n{output}");
    assert!(
        output.contains("will retry after 5s") && output.contains(mentions[0]),
        "the dry-run drain should have been refused with a 429:\n{output}"
    );
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "a refused eviction wrote the budget: {:?}",
        after.status
    );
    assert!(!node.unschedulable(&client).await, "a dry run cordoned");
    assert_eq!(fixture.live_uids().await, uids, "a pod was evicted");

    // Once zone-b recovers the real eviction is allowed, as the first dry run said, and unlike
    // it, recorded.
    pods::set_ready(&fixture.pods, &down, true).await;
    fixture.wait_budget(8, 2).await;
    // Kept from coming back (and dropping its record) before the check.
    let _quota = PodQuota::hold(&fixture.ns, 7).await;
    evict(&fixture.pods, &pinned[0], false).await.unwrap();
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        BTreeMap::from([(pinned[0].clone(), "zone-a".to_string())]),
        "{status:?}"
    );
}

/// A real `kubectl drain` of a node with protected pods in zone-a, while zone-b is disrupted:
/// kubectl is refused with 429s, retries every 5 s, and completes once zone-b recovers.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_kubectl_drain_retries_until_budget_allows() {
    let port = free_port();
    let (fixture, node, _controller) = pinned_fixture("zdb-drain", port).await;
    let client = fixture.ns.client.clone();
    let pinned = [format!("{PINNED}-0"), format!("{PINNED}-1")];
    let uids = fixture.live_uids().await;
    let zones = fixture.pods_by_zone().await;
    let down = zones["zone-b"][0].clone();
    disrupt_zone_by_unready_pod(&fixture, "zone-b", &down).await;

    let mut drain = Kubectl::drain(&node.name, "app=web", &["--timeout=120s"]);
    // Two refusals of one pod: kubectl keeps retrying rather than giving up.
    let retry = format!("error when evicting pods/\"{}\"", pinned[0]);
    wait_for(
        "kubectl drain to be refused twice",
        Duration::from_secs(60),
        || {
            let output = drain.output();
            let refusals = output.matches(&retry).count();
            async move { if refusals >= 2 { Ok(()) } else { Err(output) } }
        },
    )
    .await;
    let output = drain.output();
    // kubectl retries only a 429 (TooManyRequests); any other refusal ends the drain.
    assert!(
        output.contains("will retry after 5s") && output.contains("zone zone-b is disrupted"),
        "{output}"
    );
    assert!(drain.is_running(), "kubectl gave up:\n{output}");
    assert!(node.unschedulable(&client).await, "drain cordons first");
    for pod in &pinned {
        assert_eq!(
            fixture.live_uids().await.get(pod),
            uids.get(pod),
            "{pod} was evicted while zone-b was disrupted"
        );
    }

    pods::set_ready(&fixture.pods, &down, true).await;
    let (success, output) = drain.finish(Duration::from_secs(60)).await;
    assert!(success, "the drain failed:\n{output}");
    assert!(
        output.contains(&format!("node/{} drained", node.name)),
        "{output}"
    );
    let live = fixture.live_uids().await;
    for pod in &pinned {
        assert_ne!(live.get(pod), uids.get(pod), "{pod} was not evicted");
    }
    // Both recorded in zone-a (their replacements cannot be scheduled on the cordoned node, so
    // the records stay).
    let status = fixture.status().await;
    assert_eq!(
        status.disrupted_pod_zones,
        pinned
            .iter()
            .map(|p| (p.clone(), "zone-a".to_string()))
            .collect::<BTreeMap<_, _>>(),
        "{status:?}"
    );
}
