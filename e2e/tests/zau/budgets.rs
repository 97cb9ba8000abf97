//! Rollouts through a ZoneDisruptionBudget over the same pods: the webhook (run with
//! `--rollout-user`, the controller's user) lets the controller's own evictions past the zone's
//! limit in the zone the rollout is in, and nobody else's; a freeze holds the rollout unless the
//! budget says `rolloutsWhenFrozen: Proceed`.

use e2e::identity;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::*;

/// A client of a ServiceAccount `evictor` of the test's namespace that may read and evict its
/// pods: a caller other than the controller, asking what the controller asks.
pub(super) async fn evictor(fixture: &Fixture) -> Api<Pod> {
    let ns = &fixture.ns.name;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "evictor"}})).unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "evictor"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        ],
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "evictor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "evictor"},
        "subjects": [{"kind": "ServiceAccount", "name": "evictor", "namespace": ns}],
    }))
    .unwrap();
    let create = PostParams::default();
    let accounts: Api<ServiceAccount> = fixture.ns.api();
    accounts.create(&create, &account).await.unwrap();
    let roles: Api<Role> = fixture.ns.api();
    roles.create(&create, &role).await.unwrap();
    let bindings: Api<RoleBinding> = fixture.ns.api();
    bindings.create(&create, &binding).await.unwrap();
    let client = identity::service_account_client(&fixture.cluster, ns, "evictor").await;
    Api::namespaced(client, ns)
}

/// The refusal of a dry-run eviction of `pod` through `pods`, its message.
pub(super) async fn refused_eviction(pods: &Api<Pod>, pod: &str, what: &str) -> String {
    match pods::evict(pods, pod, true).await {
        Ok(()) => panic!("{what}: the eviction of {pod} was allowed"),
        Err((code, message)) => {
            assert_eq!(code, 429, "{what}: {message}");
            message
        }
    }
}

/// The ZoneDisruptionBudget `frontend` over the 9 pods, `spec` besides its selector, computed.
pub(super) async fn frontend_budget(zdbs: &Api<ZoneDisruptionBudget>, spec: Value) {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"tier": "frontend"}});
    zdbs.create(
        &PostParams::default(),
        &zone_disruption_budget("frontend", spec),
    )
    .await
    .unwrap();
    wait_disrupted(zdbs, &[]).await;
}

/// The zdb-controller serving a webhook for the namespace, the rollout's evictions being those
/// of `controller`'s user. Returns the webhook and its process, and a pod API as that user.
pub(super) async fn webhook_for(
    fixture: &Fixture,
    controller: &ControllerProcess,
) -> (EvictionWebhook, ControllerProcess, Api<Pod>) {
    let client = match &controller.identity {
        Some(account) => account.client().await,
        None => fixture.ns.client.clone(),
    };
    let user = identity::username(&client).await;
    let webhook = EvictionWebhook::create(&fixture.cluster, &fixture.ns, free_port()).await;
    let process = webhook.controller_with(&fixture.ns, &[format!("--rollout-user={user}")]);
    webhook.wait_ca_bundle(&fixture.ns).await;
    (webhook, process, Api::namespaced(client, &fixture.ns.name))
}

/// Merges `spec` into the budget `frontend`'s and waits until it is computed.
pub(super) async fn patch_budget(zdbs: &Api<ZoneDisruptionBudget>, spec: Value) {
    let patch = json!({"spec": spec});
    zdbs.patch("frontend", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    fixture::wait_status(
        zdbs,
        "frontend",
        "the budget computed",
        ROLLOUT_TIMEOUT,
        |zdb, status| Some(status.observed_generation) == zdb.metadata.generation,
    )
    .await;
}

/// Waits until the rollout says a frozen budget holds it.
pub(super) async fn held_by_the_freeze(fixture: &Fixture) {
    let status = fixture
        .wait_status("the rollout held by the freeze", ROLLOUT_TIMEOUT, |s| {
            condition(s, "Progressing").is_some_and(|c| c.1 == "DisruptionBudgetExhausted")
        })
        .await;
    let progressing = condition(&status, "Progressing").unwrap();
    assert!(progressing.2.contains("frozen"), "{progressing:?}");
}

/// The start of both tests: 9 pods, a ZoneAwareUpdate of maxUnavailable 3, factor 2 (batches
/// of 1 then 2 in each zone) with its controller, the webhook knowing the controller's user, the
/// budget `frontend` of `spec` over the pods, and another user who may evict them.
struct Cooperation {
    // Dropped first, in this order: the controllers, then the webhook configuration, before
    // the namespace goes.
    _processes: [ControllerProcess; 2],
    _webhook: EvictionWebhook,
    fixture: Fixture,
    zones: BTreeMap<String, String>,
    zdbs: Api<ZoneDisruptionBudget>,
    /// The pods as the controller's user.
    as_controller: Api<Pod>,
    /// The pods as another user.
    others: Api<Pod>,
}

impl Cooperation {
    async fn start(prefix: &str, spec: Value) -> Cooperation {
        let fixture = Fixture::new(prefix, 9).await;
        let zones = fixture.zones().await;
        fixture
            .create_zau(json!({"statefulset": SET, "maxUnavailable": 3, "exponentialFactor": "2"}))
            .await;
        let zau = fixture.controller(&[]);
        fixture.wait_observed().await;
        let (webhook, zdb, as_controller) = webhook_for(&fixture, &zau).await;
        let zdbs: Api<ZoneDisruptionBudget> = fixture.ns.api();
        frontend_budget(&zdbs, spec).await;
        let others = evictor(&fixture).await;
        Cooperation {
            _processes: [zdb, zau],
            _webhook: webhook,
            fixture,
            zones,
            zdbs,
            as_controller,
            others,
        }
    }
}

/// A budget of maxUnavailable 1 over the 9 pods and a rollout of maxUnavailable 3, factor 2
/// (batches of 1 then 2 in each zone). While the rollout holds zone-a disrupted (its first
/// evicted pod's replacement held by a quota), another caller's eviction of a zone-a pod is
/// refused (the zone's 1 is spent), the very same request from the controller's user is
/// allowed, and even it may not evict in zone-b. Released, the rollout completes with its
/// batches of 2 through the budget of 1 and not one eviction refused.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_rollout_evictions_pass_the_budget_of_their_zone_and_no_one_elses() {
    let coop = Cooperation::start("zau-coop", json!({"maxUnavailable": 1})).await;
    let (fixture, zones, zdbs, others) = (&coop.fixture, &coop.zones, &coop.zdbs, &coop.others);
    let as_controller = &coop.as_controller;

    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let revision = fixture.set_image(2).await;
    let first = wait_for("the rollout's first eviction", ROLLOUT_TIMEOUT, || async {
        fixture
            .removals()
            .first()
            .map(|r| r.pod.clone())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert_eq!(zones[&first], "zone-a", "the rollout starts in zone-a");
    wait_disrupted(zdbs, &["zone-a"]).await;
    fixture
        .wait_status("the update rolling zone-a", ROLLOUT_TIMEOUT, |s| {
            s.current_zone.as_deref() == Some("zone-a") && s.update_revision == revision
        })
        .await;
    let old_a = zones
        .iter()
        .find(|(pod, zone)| *zone == "zone-a" && **pod != first)
        .map(|(pod, _)| pod.clone())
        .unwrap();
    let pod_b = pod_in_zone(zones, "zone-b");

    let message = refused_eviction(others, &old_a, "another caller in zone-a").await;
    assert!(message.contains("maxUnavailable 1"), "{message}");
    pods::evict(as_controller, &old_a, true)
        .await
        .unwrap_or_else(|e| panic!("the controller's eviction of {old_a} in zone-a: {e:?}"));
    let message = refused_eviction(as_controller, &pod_b, "the controller in zone-b").await;
    assert!(message.contains("zone zone-a is disrupted"), "{message}");

    quota.release().await;
    fixture.touch().await;
    fixture.wait_complete(&revision).await;
    let removals = fixture.removals();
    assert_eq!(removals.len(), 9, "{removals:?}");
    // Refusals while the budget's status still counts the zone just finished are the rule of
    // one zone at a time; none was for the zone's own limit.
    let capped: Vec<String> = audit::removals(&fixture.audit(), &fixture.ns.name)
        .filter(|e| e.sent_by("zau-controller") && e.code() == 429)
        .map(|e| e.message().to_string())
        .filter(|message| message.contains("maxUnavailable"))
        .collect();
    assert!(
        capped.is_empty(),
        "rollout evictions capped by the zone's budget: {capped:#?}"
    );
    let sizes: Vec<usize> = batches(&removals).iter().map(Vec::len).collect();
    assert!(
        sizes.contains(&2),
        "no batch of 2 through the budget of 1: {sizes:?}"
    );
}

/// A frozen budget (maxUnavailable 0) holds the rollout, which says why; with
/// `rolloutsWhenFrozen: Proceed` the rollout goes on to completion while another caller's
/// eviction is still refused as frozen.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_rollout_waits_for_a_frozen_budget_unless_it_lets_rollouts_proceed() {
    let coop = Cooperation::start("zau-freeze", json!({"maxUnavailable": 0})).await;
    let (fixture, zones, zdbs, others) = (&coop.fixture, &coop.zones, &coop.zdbs, &coop.others);

    let revision = fixture.set_image(2).await;
    wait_for(
        "two refused evictions by the rollout",
        ROLLOUT_TIMEOUT,
        || async {
            let n = refused(fixture);
            if n >= 2 { Ok(()) } else { Err(format!("{n}")) }
        },
    )
    .await;
    held_by_the_freeze(fixture).await;
    assert!(fixture.removals().is_empty(), "{:?}", fixture.removals());

    patch_budget(zdbs, json!({"rolloutsWhenFrozen": "Proceed"})).await;
    let proceeding = Timestamp::now();
    let pod = pod_in_zone(zones, "zone-c");
    let message = refused_eviction(others, &pod, "another caller under the freeze").await;
    assert!(message.contains("frozen"), "{message}");
    fixture.wait_complete(&revision).await;
    assert_eq!(fixture.removals().len(), 9);
    // The controller writes each zone to its status before that zone's first eviction, so the
    // webhook knows the rollout's evictions from the first: none refused for the freeze since.
    let held: Vec<String> = audit::removals(&fixture.audit(), &fixture.ns.name)
        .filter(|e| e.sent_by("zau-controller") && e.code() == 429)
        .filter(|e| {
            e.stage_timestamp
                .parse::<Timestamp>()
                .is_ok_and(|at| at > proceeding)
        })
        .map(|e| format!("{}: {}", e.object_name(), e.message()))
        .filter(|refusal| refusal.contains("frozen"))
        .collect();
    assert!(
        held.is_empty(),
        "held by the freeze after Proceed: {held:#?}"
    );
}
