//! The webhook configuration while a replica serves: its failurePolicy moved from Ignore to Fail,
//! and drift by someone else repaired (the policy) or reported (the rules).

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;

use super::*;

impl Fixture {
    /// The failurePolicy of the test's webhook configuration.
    async fn failure_policy(&self) -> Option<String> {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(self.ns.client.clone());
        configs
            .get(&self.webhook.name)
            .await
            .unwrap()
            .webhooks
            .unwrap()[0]
            .failure_policy
            .clone()
    }
}

/// The local-process form of the shipped configuration: at Ignore while no replica serves (an
/// eviction goes through), moved to Fail by the replica once it serves, with no one else
/// touching it.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_failure_policy_moves_from_ignore_to_fail_once_a_replica_serves() {
    let port = free_port();
    let fixture = Fixture::new("zdb-policy", 3, port).await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(fixture.ns.client.clone());
    let patch = json!({"webhooks": [{"name": WEBHOOK_NAME, "failurePolicy": "Ignore"}]});
    configs
        .patch(
            &fixture.webhook.name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    // Nothing listens on the port: the failed call is ignored.
    let pods = fixture.list_pods().await;
    evict(&fixture.pods, &pods[0].name_any(), false)
        .await
        .expect("no replica serves and the policy is Ignore: the eviction goes through");
    assert_eq!(fixture.failure_policy().await.as_deref(), Some("Ignore"));

    let started = std::time::Instant::now();
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    wait_for(
        "the failurePolicy moved to Fail",
        Duration::from_secs(60),
        || async {
            match fixture.failure_policy().await.as_deref() {
                Some("Fail") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!("failurePolicy Fail {:?} after the start", started.elapsed());
    wait_for(
        "the gauge showing Fail",
        Duration::from_secs(30),
        || async {
            let fail = metric_sum(
                metrics,
                "zone_aware_zdb_webhook_failure_policy",
                Some("policy=\"Fail\""),
            )
            .await;
            let ignore = metric_sum(
                metrics,
                "zone_aware_zdb_webhook_failure_policy",
                Some("policy=\"Ignore\""),
            )
            .await;
            if (fail, ignore) == (1.0, 0.0) {
                Ok(())
            } else {
                Err(format!("Fail {fail}, Ignore {ignore}"))
            }
        },
    )
    .await;
    // From now on the webhook judges: the frozen budget's eviction is refused.
    fixture.freeze().await;
    assert_denied(
        evict(&fixture.pods, &pods[1].name_any(), false).await,
        "an eviction from the frozen budget",
        &["frozen"],
    );
}

/// Drift of the webhook configuration while a replica serves, made by someone else (an admin, a
/// re-apply): what the replica may change (the failurePolicy, back to Fail) it repairs; what it
/// may not (the rules, which decide whether evictions reach it at all) it reports, in the gauge
/// `zone_aware_zdb_webhook_covers_evictions` (0, the alert's input) and a Warning event on the
/// configuration, until the rules are put back.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_webhook_configuration_drift_is_repaired_or_reported() {
    let port = free_port();
    let fixture = Fixture::new("zdb-drift", 3, port).await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(fixture.ns.client.clone());
    let name = fixture.webhook.name.clone();
    let (_controller, metrics) = fixture.controller_with(port, false, &fixture.self_signed_args());
    let policy_is = |wanted: &'static str| {
        let fixture = &fixture;
        move || async move {
            match fixture.failure_policy().await.as_deref() {
                Some(policy) if policy == wanted => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    };
    wait_for(
        "the failurePolicy moved to Fail",
        Duration::from_secs(60),
        policy_is("Fail"),
    )
    .await;
    wait_covers(metrics, &name, 1.0).await;

    let patch = |webhook: Value| Patch::Strategic(json!({"webhooks": [webhook]}));
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "failurePolicy": "Ignore"})),
        )
        .await
        .unwrap();
    let drifted = std::time::Instant::now();
    wait_for(
        "the failurePolicy repaired to Fail",
        Duration::from_secs(60),
        policy_is("Fail"),
    )
    .await;
    eprintln!(
        "failurePolicy repaired {:.1?} after it was put to Ignore",
        drifted.elapsed()
    );

    let shipped_rules = configs.get(&name).await.unwrap().webhooks.unwrap()[0]
        .rules
        .clone();
    let narrowed = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/binding"], "scope": "Namespaced"}]);
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "rules": narrowed})),
        )
        .await
        .unwrap();
    let drifted = std::time::Instant::now();
    wait_covers(metrics, &name, 0.0).await;
    eprintln!(
        "evictions bypassing the webhook reported {:.1?} after the rules changed",
        drifted.elapsed()
    );
    bypass_reported(
        &fixture.ns.client,
        &name,
        "no webhook's rules match CREATE of pods/eviction",
    )
    .await;

    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"name": WEBHOOK_NAME, "rules": shipped_rules})),
        )
        .await
        .unwrap();
    wait_covers(metrics, &name, 1.0).await;
}

/// Waits until the gauge `zone_aware_zdb_webhook_covers_evictions` of the configuration `name`,
/// at the replica's metrics `port`, is `wanted`.
async fn wait_covers(port: u16, name: &str, wanted: f64) {
    let series = format!("configuration=\"{name}\"");
    wait_for(
        &format!("zone_aware_zdb_webhook_covers_evictions at {wanted}"),
        Duration::from_secs(60),
        || async {
            let value = metric_sum(
                port,
                "zone_aware_zdb_webhook_covers_evictions",
                Some(&series),
            )
            .await;
            (value == wanted).then_some(()).ok_or(format!("{value}"))
        },
    )
    .await;
}

/// Waits for the Warning event EvictionWebhookBypassed on the configuration `name`, saying `why`.
async fn bypass_reported(client: &kube::Client, name: &str, why: &str) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let reported = e2e::fixture::wait_events(&events, "the EvictionWebhookBypassed event", |e| {
        e.reason.as_deref() == Some("EvictionWebhookBypassed")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
    })
    .await
    .remove(0);
    assert_eq!(reported.type_.as_deref(), Some("Warning"));
    let note = reported.note.unwrap_or_default();
    assert!(note.contains(why), "{note}");
}
