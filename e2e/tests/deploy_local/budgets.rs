//! The sample ShardedPrometheus's disruption budgets under the deployed controllers: the
//! shard-controller (as its ServiceAccount, through its admission policies) keeps a
//! ZoneDisruptionBudget over the shards' pods and a PodDisruptionBudget per shard; `kubectl
//! drain` of zone-a's real node takes one replica of zone-a's shard and no more, and a drain of
//! zone-b's real node meanwhile is refused by the deployed webhook, every pod of zone-b left
//! running; turned off, the budgets are removed.

use e2e::process::Kubectl;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use zone_api::{ShardedPrometheus, ZoneDisruptionBudget};

use super::*;

/// The sample's shard pods, as a drain selects them.
pub(super) const SHARD_PODS: &str =
    "app.kubernetes.io/instance=prometheus,app.kubernetes.io/managed-by=shard-controller";
const TIMEOUT: Duration = Duration::from_secs(180);

/// Real nodes the test cordons, uncordoned when it ends however it ends: the other tests of the
/// suite run pods on them.
struct Cordoned(Vec<String>);

impl Drop for Cordoned {
    fn drop(&mut self) {
        for node in &self.0 {
            let _ = e2e::identity::kubectl(&Cluster::get())
                .args(["uncordon", node])
                .status();
        }
    }
}

/// The sample's shards at 2 replicas each on the real nodes (`real`: node → zone): the budgets
/// hold a drain of two zones, and go when turned off.
pub async fn shard_budgets_hold_a_two_zone_drain(
    victim: &TestNamespace,
    real: &BTreeMap<String, String>,
) {
    let sproms: Api<ShardedPrometheus> = victim.api();
    let sproms = &sproms;
    let patch = |spec: serde_json::Value| async move {
        let patch = json!({ "spec": spec });
        sproms
            .patch("prometheus", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    };
    patch(json!({"replicas": 2})).await;
    budgets_in_force(victim).await;
    let node_of_zone: BTreeMap<&str, &str> = real
        .iter()
        .map(|(node, zone)| (zone.as_str(), node.as_str()))
        .collect();
    let zone_b_before = shard_pods_of(victim, real, "zone-b").await;
    assert_eq!(
        zone_b_before.len(),
        2,
        "zone-b's shard pods: {zone_b_before:?}"
    );
    let cordoned = Cordoned(vec![
        node_of_zone["zone-a"].to_string(),
        node_of_zone["zone-b"].to_string(),
    ]);

    // zone-a: one replica of its shard goes (its replacement cannot schedule on the cordoned
    // node), the other is refused by the shard's PodDisruptionBudget until the drain gives up.
    let mut drain = Kubectl::drain(&cordoned.0[0], SHARD_PODS, &["--timeout=30s"]);
    let (drained, output) = drain.finish(Duration::from_secs(90)).await;
    assert!(
        !drained,
        "the drain of zone-a took both replicas:\n{output}"
    );
    assert!(
        output.contains("violate the pod's disruption budget"),
        "the second replica refused by the shard's PodDisruptionBudget:\n{output}"
    );
    let zone_a = shard_pods_of(victim, real, "zone-a").await;
    assert_eq!(
        zone_a.len(),
        1,
        "one replica of zone-a's shard left: {zone_a:?}"
    );

    // zone-b meanwhile: refused by the ZoneDisruptionBudget, through the deployed webhook.
    let mut drain = Kubectl::drain(&cordoned.0[1], SHARD_PODS, &["--timeout=20s"]);
    let (drained, output) = drain.finish(Duration::from_secs(90)).await;
    assert!(!drained, "the drain of zone-b went through:\n{output}");
    assert!(
        output.contains("zone zone-a is disrupted")
            && output.contains("evictions in zone zone-b must wait"),
        "refused by the zone budget, naming zone-a:\n{output}"
    );
    let zone_b_after = shard_pods_of(victim, real, "zone-b").await;
    assert_eq!(zone_b_after, zone_b_before, "zone-b's shard pods untouched");

    drop(cordoned);
    pods::wait_all_available(&victim.api(), SHARD_PODS, 6, None, TIMEOUT).await;

    patch(json!({"disruptionBudgets": {"zones": false, "shards": false}})).await;
    wait_for("the shards' budgets removed", TIMEOUT, || async {
        let zdbs: Api<ZoneDisruptionBudget> = victim.api();
        let pdbs: Api<PodDisruptionBudget> = victim.api();
        let all = ListParams::default().labels(SHARD_PODS);
        let left = zdbs
            .list(&all)
            .await
            .map_err(|e| e.to_string())?
            .items
            .len()
            + pdbs
                .list(&all)
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
        (left == 0).then_some(()).ok_or(format!("{left} left"))
    })
    .await;
}

/// Waits for the budgets the deployed shard-controller writes: a PodDisruptionBudget per shard
/// (maxUnavailable 1, owned by the ShardedPrometheus) allowing one eviction, and the
/// ZoneDisruptionBudget `prometheus-shards` counting 2 healthy pods in each zone.
async fn budgets_in_force(victim: &TestNamespace) {
    let pdbs: Api<PodDisruptionBudget> = victim.api();
    let zdbs: Api<ZoneDisruptionBudget> = victim.api();
    wait_for("the shards' budgets in force", TIMEOUT, || async {
        for shard in 0..3 {
            let name = format!("prometheus-shard-{shard}");
            let pdb = pdbs
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or(format!("no PodDisruptionBudget {name}"))?;
            let owner = pdb.metadata.owner_references.clone().unwrap_or_default();
            assert!(
                owner.iter().any(|o| o.kind == "ShardedPrometheus"),
                "{name} owned by the ShardedPrometheus: {owner:?}"
            );
            let spec = pdb.spec.clone().unwrap_or_default();
            assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)), "{name}");
            let allowed = pdb.status.map_or(0, |s| s.disruptions_allowed);
            if allowed != 1 {
                return Err(format!("{name} allows {allowed} disruptions"));
            }
        }
        let zdb = zdbs
            .get_opt("prometheus-shards")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no ZoneDisruptionBudget prometheus-shards")?;
        let healthy = zdb.status.map(|s| s.current_healthy).unwrap_or_default();
        let want: BTreeMap<String, i32> = ["zone-a", "zone-b", "zone-c"]
            .map(|z| (z.to_string(), 2))
            .into();
        (healthy == want)
            .then_some(())
            .ok_or(format!("healthy per zone {healthy:?}"))
    })
    .await;
}

/// The names and UIDs of the sample's shard pods running on `zone`'s real node.
async fn shard_pods_of(
    victim: &TestNamespace,
    real: &BTreeMap<String, String>,
    zone: &str,
) -> BTreeSet<(String, String)> {
    let pods: Api<Pod> = victim.api();
    let listed = pods
        .list(&ListParams::default().labels(SHARD_PODS))
        .await
        .unwrap();
    listed
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pods::node_of(pod)
                .and_then(|node| real.get(node))
                .map(String::as_str)
                == Some(zone)
        })
        .map(|pod| {
            (
                pod.metadata.name.unwrap_or_default(),
                pod.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}
