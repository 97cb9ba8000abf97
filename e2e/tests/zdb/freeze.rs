//! Frozen budgets (`maxUnavailable` 0 or "0%"): every eviction of their pods refused with a 429
//! naming the freeze, through the API and in a real `kubectl drain` that takes other pods.

use super::*;

/// `maxUnavailable: "0%"` (and 0, see [`zdb_frozen_budgets_hold_a_drain_that_takes_other_pods`])
/// is a freeze, not an invalid budget: the status says so, every eviction of a running pod is
/// refused with a 429 naming the freeze — a dry run too — and nothing is recorded. (It used to be
/// Invalid, and an invalid budget allows every eviction.)
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_zero_percent_freezes_the_budget() {
    let port = free_port();
    let fixture = Fixture::new("zdb-frozen", 3, port).await;
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    fixture.wait_ca_bundle().await;
    fixture
        .create_budget(
            ZDB,
            json!({"selector": {"matchLabels": {"app": SET}}, "maxUnavailable": "0%"}),
        )
        .await;
    let frozen = fixture
        .wait_zdb(
            "the budget computed as frozen",
            ZDB,
            TIMEOUT,
            |zdb, status| {
                Some(status.observed_generation) == zdb.metadata.generation
                    && status.conditions.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.status == "True"
                            && c.reason == zone_api::zdb::reason::FROZEN
                            && c.message.contains("frozen")
                    })
            },
        )
        .await;
    let status = frozen.status.clone().unwrap();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "Invalid" && c.status == "True"),
        "{status:?}"
    );
    assert!(
        status.disruptions_allowed.values().all(|n| *n == 0),
        "{status:?}"
    );
    let before = decisions_for(metrics, "Frozen").await;
    for pod in fixture.list_pods().await {
        let name = pod.name_any();
        for dry_run in [true, false] {
            assert_denied(
                evict(&fixture.pods, &name, dry_run).await,
                &format!("evicting {name} (dry run: {dry_run}) from a frozen budget"),
                &["frozen", "maxUnavailable 0"],
            );
        }
    }
    assert_eq!(decisions_for(metrics, "Frozen").await - before, 6.0);
    let after = fixture.zdbs.get(ZDB).await.unwrap();
    assert_eq!(
        after.resource_version(),
        frozen.resource_version(),
        "a refused eviction wrote the budget: {:?}",
        after.status
    );
    assert_eq!(fixture.list_pods().await.len(), 3, "a pod was evicted");
    let events: Api<Event> = fixture.ns.api();
    let frozen_events = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(zone_api::zdb::reason::FROZEN))
        .count();
    assert_eq!(frozen_events, 1, "one BudgetFrozen event as it froze");

    // Raised, it is a budget again: one eviction is allowed.
    let patch = json!({"spec": {"maxUnavailable": 1}});
    fixture
        .zdbs
        .patch(ZDB, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    fixture.wait_budget(3, 1).await;
    let pod = fixture.list_pods().await[0].name_any();
    evict(&fixture.pods, &pod, false).await.unwrap();
}

/// A real `kubectl drain` of a node holding the pods of three budgets: `frozen-int`
/// (maxUnavailable 0), `frozen-pct` ("0%") and `free` (maxUnavailable 2). The free budget's pods
/// are evicted; each frozen one's are refused with 429s naming the freeze, kubectl retries them
/// until its timeout, and they still run.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_frozen_budgets_hold_a_drain_that_takes_other_pods() {
    let port = free_port();
    let fixture = Fixture::new("zdb-freeze-drain", 3, port).await;
    let node = TestNode::create(&fixture.ns, "zone-a").await;
    let budgets = [
        ("frozen-int", json!(0)),
        ("frozen-pct", json!("0%")),
        ("free", json!(2)),
    ];
    for (name, _) in &budgets {
        create_pinned_set(&fixture.ns, name, 2, &node).await;
    }
    pods::wait_all_available(&fixture.pods, "drain=yes", 6, None, TIMEOUT).await;
    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    for (name, max_unavailable) in &budgets {
        fixture
            .create_budget(
                name,
                json!({"selector": {"matchLabels": {"app": name}}, "maxUnavailable": max_unavailable}),
            )
            .await;
    }
    for (name, _) in &budgets {
        fixture
            .wait_zdb(
                &format!("budget {name} computed"),
                name,
                TIMEOUT,
                |zdb, status| {
                    Some(status.observed_generation) == zdb.metadata.generation
                        && status.expected_pods.values().sum::<i32>() == 2
                        && status.current_healthy.values().sum::<i32>() == 2
                },
            )
            .await;
    }
    let before = fixture.live_uids_of("drain=yes").await;
    assert_eq!(before.len(), 6, "every pod of the three sets: {before:?}");
    let client = fixture.ns.client.clone();

    let (success, output) = Kubectl::drain(&node.name, "drain=yes", &["--timeout=20s"])
        .finish(Duration::from_secs(90))
        .await;
    assert!(!success, "the drain of frozen pods succeeded:\n{output}");
    assert!(node.unschedulable(&client).await, "drain cordons first");
    for frozen in ["frozen-int", "frozen-pct"] {
        let refusal = format!("error when evicting pods/\"{frozen}-0\"");
        assert!(
            output.matches(&refusal).count() >= 2,
            "kubectl retried {frozen}-0's 429s:\n{output}"
        );
    }
    assert!(
        output.contains("will retry after 5s") && output.contains("frozen (maxUnavailable 0)"),
        "refused with a 429 naming the freeze:\n{output}"
    );
    let after = fixture.live_uids_of("drain=yes").await;
    for frozen in ["frozen-int", "frozen-pct"] {
        for i in 0..2 {
            let pod = format!("{frozen}-{i}");
            assert_eq!(after.get(&pod), before.get(&pod), "{pod} was evicted");
        }
    }
    // The other budget's pods were evicted (their replacements cannot go back onto the cordoned
    // node, so they are gone or new).
    for i in 0..2 {
        let pod = format!("free-{i}");
        assert_ne!(after.get(&pod), before.get(&pod), "{pod} was not evicted");
    }
}
