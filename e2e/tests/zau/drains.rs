//! A ZoneDisruptionBudget over the rolled StatefulSet and another: a drain in one zone holds the
//! rollout, and a rollout in one zone holds a drain in another.

use super::*;

/// With a ZoneDisruptionBudget (its controller and webhook running) guarding the frontend tier
/// (the rolled StatefulSet `web` and a second one, `cache`), the rollout's evictions are judged
/// like any other: a drain under way in zone-b (a `cache` pod evicted: the rollout's own rules
/// only see `web`) holds the rollout in zone-a, and a rollout under way in zone-a holds a drain
/// in zone-b. A ResourceQuota keeps each first evicted pod from being recreated, so each
/// disruption lasts until the test ends it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_and_zdb_hold_each_other_across_zones() {
    let fixture = Fixture::new("zau-zdb", 6).await;
    let zones = fixture.zones().await;
    let sets: Api<StatefulSet> = fixture.ns.api();
    sets.create(
        &PostParams::default(),
        &named_statefulset("cache", 3, "RollingUpdate"),
    )
    .await
    .unwrap();
    pods::wait_available(&fixture.pods, "app=cache", 3, ROLLOUT_TIMEOUT).await;
    let cache_b = pod_in_zone(&fixture.zones_of("cache").await, "zone-b");
    let web_b = pod_in_zone(&zones, "zone-b");

    let webhook = EvictionWebhook::create(&fixture.cluster, &fixture.ns, free_port()).await;
    let _zdb = webhook.controller(&fixture.ns);
    webhook.wait_ca_bundle(&fixture.ns).await;
    let zdbs: Api<ZoneDisruptionBudget> = fixture.ns.api();
    let zdb = zone_disruption_budget(
        "frontend",
        json!({"selector": {"matchLabels": {"tier": "frontend"}}, "maxUnavailable": 1}),
    );
    zdbs.create(&PostParams::default(), &zdb).await.unwrap();
    wait_disrupted(&zdbs, &[]).await;
    fixture
        .create_zau(json!({"statefulset": SET, "maxUnavailable": 1, "exponentialFactor": "1"}))
        .await;
    let _zau = fixture.controller(&[]);
    fixture.wait_observed().await;

    a_drain_in_zone_b_holds_the_rollout(&fixture, &zdbs, &cache_b).await;
    a_rollout_in_zone_a_holds_a_drain_in_zone_b(&fixture, &zdbs, &zones, [&web_b, &cache_b]).await;
    pods::evict(&fixture.pods, &cache_b, false).await.unwrap();

    // Budgets are judged by the API server and the webhook only: the rollout controller never
    // reads them (it runs the same without the ZoneDisruptionBudget CRD installed).
    let reads: Vec<_> = fixture
        .audit()
        .into_iter()
        .filter(|e| e.sent_by("zau-controller"))
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|o| o.resource == "zonedisruptionbudgets")
        })
        .collect();
    assert!(reads.is_empty(), "{reads:?}");
}

/// A drain in zone-b (the cache pod there evicted, its replacement held) holds the rollout to
/// image 2 in zone-a until the drain ends.
async fn a_drain_in_zone_b_holds_the_rollout(
    fixture: &Fixture,
    zdbs: &Api<ZoneDisruptionBudget>,
    cache_b: &str,
) {
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    pods::evict(&fixture.pods, cache_b, false).await.unwrap();
    wait_disrupted(zdbs, &["zone-b"]).await;
    let revision = fixture.set_image(2).await;
    // The rollout's eviction in zone-a is refused, retried, refused again.
    wait_for(
        "two refused evictions by the rollout",
        Duration::from_secs(60),
        || async {
            let n = refused(fixture);
            if n >= 2 { Ok(()) } else { Err(format!("{n}")) }
        },
    )
    .await;
    let status = fixture.status().await;
    let progressing = condition(&status, "Progressing").unwrap();
    assert_eq!(progressing.1, "DisruptionBudgetExhausted", "{status:?}");
    assert!(progressing.2.contains("zone-b"), "{progressing:?}");
    assert!(
        fixture.removals().is_empty(),
        "the rollout removed a pod while zone-b was disrupted: {:?}",
        fixture.removals()
    );
    let drain_over = Timestamp::now();
    quota.release().await;
    workload::touch(&fixture.sets, "cache").await;
    fixture.wait_complete(&revision).await;
    let removals = fixture.removals();
    assert_eq!(removals.len(), 6, "{removals:?}");
    assert!(
        removals.iter().all(|r| r.at > drain_over),
        "removed before the drain ended at {drain_over}: {removals:?}"
    );
    wait_disrupted(zdbs, &[]).await;
}

/// The other way round: the rollout to image 3 has zone-a disrupted (its first evicted pod
/// held), and a drain's eviction in zone-b (of each of `drained`) is refused naming zone-a.
async fn a_rollout_in_zone_a_holds_a_drain_in_zone_b(
    fixture: &Fixture,
    zdbs: &Api<ZoneDisruptionBudget>,
    zones: &BTreeMap<String, String>,
    drained: [&String; 2],
) {
    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let revision = fixture.set_image(3).await;
    let first = wait_for(
        "the rollout's first eviction",
        Duration::from_secs(60),
        || async {
            let removals = fixture.removals();
            removals
                .get(6)
                .map(|r| r.pod.clone())
                .ok_or_else(|| format!("{} removals", removals.len()))
        },
    )
    .await;
    assert_eq!(zones[&first], "zone-a", "the rollout starts in zone-a");
    wait_disrupted(zdbs, &["zone-a"]).await;
    for drained in drained {
        let Err((code, message)) = pods::evict(&fixture.pods, drained, false).await else {
            panic!("a drain evicted {drained} in zone-b while the rollout had zone-a disrupted");
        };
        assert_eq!(code, 429, "{message}");
        assert!(message.contains("zone-a"), "{message}");
    }
    quota.release().await;
    fixture.touch().await;
    fixture.wait_complete(&revision).await;
    wait_disrupted(zdbs, &[]).await;
}
