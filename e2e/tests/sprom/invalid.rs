//! Specs the controller cannot act on: Degraded reasons (a ServiceAccount that cannot discover,
//! zones without nodes or shards), an invalid spec refused once without a hot loop, a rejected child.

use super::*;

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn sprom_invalid_specs_are_refused_once_and_degraded_reasons_are_named() {
    let fx = new_fixture("sprom-invalid").await;
    let zones = ["zone-a", "zone-b", "zone-c"];

    // No Prometheus ServiceAccount yet: discovery would find nothing; Degraded says so. Its
    // reason is ServiceAccountForbidden, or PodsNotCreated (more serious, so first) once the
    // StatefulSets' refusals to create pods without the ServiceAccount have been seen: which
    // comes first is a race, and the message names the missing discovery either way.
    let generation = fx.apply(spec(3, &["pods"], &zones)).await;
    fx.wait_status(
        "Degraded naming the discovery the ServiceAccount cannot do",
        generation,
        |sprom| {
            let status = fixture::status_of(sprom);
            let degraded = status
                .condition(condition::DEGRADED)
                .ok_or("no Degraded condition")?;
            let reasons = [reason::SERVICE_ACCOUNT_FORBIDDEN, reason::PODS_NOT_CREATED];
            let named = degraded.status == "True"
                && reasons.contains(&degraded.reason.as_str())
                && degraded
                    .message
                    .contains("cannot list nodes, watch nodes, list pods");
            named
                .then_some(())
                .ok_or(format!("{}: {}", degraded.reason, degraded.message))
        },
    )
    .await;

    // With the ServiceAccount bound, a zone with no node is the Degraded reason (zone-x).
    fx.prometheus_service_account().await;
    let generation = fx
        .apply(spec(3, &["pods"], &["zone-a", "zone-b", "zone-x"]))
        .await;
    let status = fx
        .wait_true(generation, condition::DEGRADED, reason::ZONES_WITHOUT_NODES)
        .await;
    let message = &status.condition(condition::DEGRADED).unwrap().message;
    assert!(message.contains("zone-x"), "{message}");

    // Let the shards of zone-a and zone-b become ready first: their pods' readiness reconciles
    // the resource too, and the count below is about the invalid spec alone.
    fx.wait_status(
        "2 of 3 shards ready (zone-x has no node)",
        generation,
        |s| {
            let ready = s.status.as_ref().map_or(0, |s| s.ready_shards);
            (ready == 2).then_some(()).ok_or(format!("{ready} ready"))
        },
    )
    .await;
    an_invalid_spec_is_refused_once_without_a_hot_loop(&fx).await;

    // Fewer shards than zones is valid: the zone without a shard is named, nothing refused.
    let generation = fx.apply(spec(2, &["pods"], &zones)).await;
    let status = fx
        .wait_true(generation, condition::DEGRADED, reason::ZONES_WITHOUT_SHARD)
        .await;
    assert_eq!(
        status.condition(condition::INVALID).unwrap().status,
        "False"
    );
    assert!(
        status
            .condition(condition::DEGRADED)
            .unwrap()
            .message
            .contains("zone-c")
    );

    // A storage change the StatefulSets cannot take (volumeClaimTemplates are immutable): the
    // API server's refusal is the Invalid reason, not an endless retry.
    let mut with_claims = spec(2, &["pods"], &zones);
    with_claims["storage"] = json!({"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
    }}});
    let generation = fx.apply(with_claims).await;
    let status = fx
        .wait_true(generation, condition::INVALID, reason::CHILD_REJECTED)
        .await;
    let message = &status.condition(condition::INVALID).unwrap().message;
    assert!(message.contains("StatefulSet prom-shard-"), "{message}");
}

/// The InvalidSpec events of the namespace, described: what each says, when, and which replica
/// said it.
async fn invalid_spec_events(ns: &TestNamespace) -> Vec<String> {
    fixture::events(ns, |e| e.reason.as_deref() == Some(reason::INVALID_SPEC))
        .await
        .into_iter()
        .map(|e| {
            format!(
                "{} at {:?} series {:?} by {:?}: {:?}",
                e.metadata.name.unwrap_or_default(),
                e.event_time.map(|t| t.0),
                e.series.map(|s| s.count),
                e.reporting_instance,
                e.note,
            )
        })
        .collect()
}

/// An invalid spec: Invalid with the reason, one event, no child changed, no hot loop. (A
/// retention Prometheus cannot represent: the CRD's schema refuses the other invalid specs.)
async fn an_invalid_spec_is_refused_once_without_a_hot_loop(fx: &Fixture) {
    let (secrets_before, sets_before) = children(&fx.ns).await;
    assert_eq!(secrets_before.len(), 3);
    let reconciles_before = fx.reconciles().await;
    let mut invalid = spec(3, &["pods"], &["zone-a", "zone-b", "zone-x"]);
    invalid["retention"] = json!({"time": "300y"});
    let generation = fx.apply(invalid).await;
    let status = fx
        .wait_true(generation, condition::INVALID, reason::INVALID_SPEC)
        .await;
    let message = &status.condition(condition::INVALID).unwrap().message;
    assert!(message.contains("spec.retention.time"), "{message}");
    assert_eq!(
        status.condition(condition::AVAILABLE).unwrap().status,
        "False"
    );
    // GitOps tools see it stuck until the spec changes: kstatus Failed (Stalled).
    assert_eq!(
        fx.kstatus().await,
        (
            e2e::kstatus::Status::Failed,
            Some(("False".into(), reason::INVALID_SPEC.into()))
        )
    );

    // Watch it for a while: the invalid spec is not retried in a loop.
    let window = Duration::from_secs(30);
    let started = std::time::Instant::now();
    // One Warning event, and it stays one.
    wait_for("the Invalid event", TIMEOUT, || async {
        match invalid_spec_events(&fx.ns).await {
            found if found.len() == 1 => Ok(()),
            found => Err(format!("{} events: {found:#?}", found.len())),
        }
    })
    .await;
    let remaining = window.saturating_sub(started.elapsed());
    tokio::time::sleep(remaining).await; // a measurement window, not a synchronisation
    let reconciles = fx.reconciles().await - reconciles_before;
    assert!(
        reconciles <= 5.0,
        "{reconciles} reconciles in 30 s of an invalid spec"
    );
    let found = invalid_spec_events(&fx.ns).await;
    assert_eq!(found.len(), 1, "one event for the invalid spec: {found:#?}");
    let (secrets_after, sets_after) = children(&fx.ns).await;
    for (name, secret) in &secrets_before {
        assert_eq!(
            secrets_after[name].resource_version(),
            secret.resource_version(),
            "{name} unchanged by the invalid spec"
        );
    }
    for (name, set) in &sets_before {
        assert_eq!(
            sets_after[name].metadata.generation, set.metadata.generation,
            "{name} unchanged by the invalid spec"
        );
    }
}
