//! Rollout groups: one StatefulSet per zone (as Mimir's or Loki's ingesters are deployed), one
//! ZoneAwareUpdate over the group (`spec.selector`). Each zone's StatefulSet runs on a kwok node
//! of the test's own in that zone, so a drain touches nothing of another test.

use e2e::nodes::{TEST_NODE_TAINT, TestNode};
use e2e::process::Kubectl;
use e2e::prometheus::PrometheusProcess;

use super::budgets::{
    evictor, frontend_budget, held_by_the_freeze, patch_budget, refused_eviction, webhook_for,
};
use super::plan::{planned, planned_batches};
use super::*;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const PER_ZONE: usize = 3;
/// The label of the group's StatefulSets, as rollout-operator's users label theirs.
const GROUP: &str = "rollout-group";

/// `web-<zone>`: `PER_ZONE` pods on `node`, OnDelete, image 1. Every pod of the group is
/// labelled `app: web` and `tier: frontend` (what the fixture's helpers and a budget select), and
/// `shard: <zone>` (what its own StatefulSet selects).
fn zonal_set(zone: &str, node: &TestNode) -> StatefulSet {
    let name = format!("web-{zone}");
    let mut manifest = spread_statefulset(&name, PER_ZONE, &image(1));
    let spec = &mut manifest["spec"];
    spec["updateStrategy"] = json!({"type": "OnDelete"});
    spec["selector"] = json!({"matchLabels": {"app": SET, "shard": zone}});
    spec["template"]["metadata"]["labels"] = json!({"app": SET, "shard": zone, "tier": "frontend"});
    let pod = &mut spec["template"]["spec"];
    pod.as_object_mut()
        .unwrap()
        .remove("topologySpreadConstraints");
    pod["nodeSelector"] = json!({"kubernetes.io/hostname": node.name});
    pod["tolerations"] = json!([{"key": TEST_NODE_TAINT, "operator": "Equal", "value": node.taint, "effect": "NoSchedule"}]);
    manifest["metadata"]["labels"] = json!({GROUP: SET});
    to_statefulset(manifest)
}

/// The group's StatefulSets, with their pods Ready, and the nodes they run on.
struct Group {
    fixture: Fixture,
    /// By zone, in [`ZONES`] order.
    nodes: Vec<TestNode>,
}

impl Group {
    async fn new(prefix: &str) -> Group {
        let fixture = Fixture::empty(prefix, PER_ZONE * ZONES.len()).await;
        let mut nodes = Vec::new();
        for zone in ZONES {
            let node = TestNode::create(&fixture.ns, zone).await;
            let set = zonal_set(zone, &node);
            fixture
                .sets
                .create(&PostParams::default(), &set)
                .await
                .unwrap();
            nodes.push(node);
        }
        let group = Group { fixture, nodes };
        group.fixture.wait_converged_at(None).await;
        group
    }

    /// The ZoneAwareUpdate `web` over the group, with `spec` besides its selector.
    async fn create_zau(&self, mut spec: Value) {
        spec["selector"] = json!({"matchLabels": {GROUP: SET}});
        self.fixture.create_zau(spec).await;
    }

    /// Changes every StatefulSet's image at once (as one `kubectl apply` of the three would):
    /// their update revisions, by StatefulSet.
    async fn set_image(&self, version: u32) -> BTreeMap<String, String> {
        let sets = &self.fixture.sets;
        let image = &image(version);
        let changes = ZONES.map(|zone| async move {
            let name = format!("web-{zone}");
            let revision = workload::set_image(sets, &name, image, Duration::from_secs(30)).await;
            (name, revision)
        });
        futures::future::join_all(changes)
            .await
            .into_iter()
            .collect()
    }

    async fn touch(&self) {
        for zone in ZONES {
            workload::touch(&self.fixture.sets, &format!("web-{zone}")).await;
        }
    }

    /// Waits until every pod runs its StatefulSet's revision of `revisions`, Ready, and the
    /// status says the group's rollout is complete, each StatefulSet recorded at its revision.
    async fn wait_complete(&self, revisions: &BTreeMap<String, String>) -> ZoneAwareUpdateStatus {
        for (zone, revision) in ZONES.iter().zip(revisions.values()) {
            let selector = format!("shard={zone}");
            let pods = &self.fixture.pods;
            pods::wait_all_available(pods, &selector, PER_ZONE, Some(revision), ROLLOUT_TIMEOUT)
                .await;
        }
        let complete = |s: &ZoneAwareUpdateStatus| {
            let recorded: BTreeMap<String, String> = s
                .stateful_sets
                .iter()
                .filter(|set| set.current_revision == set.update_revision)
                .map(|set| (set.name.clone(), set.update_revision.clone()))
                .collect();
            recorded == *revisions
                && s.total_old_replicas == 0
                && condition(s, "Complete").is_some_and(|c| c.0 == "True")
        };
        let fixture = &self.fixture;
        fixture
            .wait_status("the group's rollout complete", ROLLOUT_TIMEOUT, complete)
            .await
    }
}

/// The status' `updateRevision` of a group: each StatefulSet's, `name=revision`, joined.
fn joined(revisions: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = revisions
        .iter()
        .map(|(set, rev)| format!("{set}={rev}"))
        .collect();
    parts.join(",")
}

/// The zones of `removals` in order, each once per visit.
fn zone_visits(zones: &BTreeMap<String, String>, removals: &[Removal]) -> Vec<String> {
    let mut visits: Vec<String> = Vec::new();
    for removal in removals {
        let zone = &zones[&removal.pod];
        if visits.last() != Some(zone) {
            visits.push(zone.clone());
        }
    }
    visits
}

/// A real Prometheus whose alert `GroupHold` (severity critical) fires while its rule is loaded.
struct Gate {
    prometheus: PrometheusProcess,
}

impl Gate {
    const CONFIG: &str = "global: {evaluation_interval: 1s}\n";

    async fn firing() -> Gate {
        let prometheus = PrometheusProcess::start("group-gate", Self::CONFIG, &[]).await;
        let rules = prometheus.dir.join("rules.yml");
        std::fs::write(
            &rules,
            "groups:\n- name: hold\n  rules:\n  - alert: GroupHold\n    expr: vector(1)\n    labels: {severity: critical}\n",
        )
        .unwrap();
        prometheus.rewrite_config(&format!(
            "{}rule_files: [{}]\n",
            Self::CONFIG,
            rules.display()
        ));
        Gate { prometheus }
    }

    fn spec(&self) -> Value {
        json!({"url": self.prometheus.url(), "matchers": "{severity=\"critical\"}", "pollInterval": "1s", "timeout": "1s"})
    }

    /// Unloads the rule: the alert is gone.
    fn resolve(&self) {
        self.prometheus.rewrite_config(Self::CONFIG);
    }
}

impl Fixture {
    /// Merges `spec` into the ZoneAwareUpdate's.
    pub(super) async fn patch_spec(&self, spec: Value) {
        let patch = json!({"spec": spec});
        self.zaus
            .patch(ZAU, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub(super) async fn set_paused(&self, paused: bool) {
        self.patch_spec(json!({"paused": paused})).await;
    }
}

/// Waits until the group's rollout to `revisions` is held by `sources` (`pausedBy`), nothing
/// removed.
async fn held_by(fixture: &Fixture, sources: &str, revisions: &BTreeMap<String, String>) {
    let status = fixture
        .wait_status(
            &format!("the group held by {sources}"),
            ROLLOUT_TIMEOUT,
            |s| s.paused_by == sources && s.update_revision == joined(revisions),
        )
        .await;
    assert_eq!(status.total_old_replicas, 9, "{status:?}");
    assert!(fixture.removals().is_empty(), "{:?}", fixture.removals());
}

/// Three StatefulSets, one per zone, one ZoneAwareUpdate over the group (maxUnavailable 4,
/// factor 2): held while its alarm is in ALARM and while its alert gate has a matching alert
/// firing (nothing removed), then rolled zone by zone in the batches of docs/zau.md's rules over
/// the group's pods (audit log), never two zones at once; each StatefulSet is recorded at its
/// own revision. A rollback half way follows the same rules.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_group_rolls_zone_by_zone_held_by_the_alarm_and_the_alert_gate() {
    let group = Group::new("zau-group").await;
    let fixture = &group.fixture;
    let zones = fixture.zones().await;
    let cloudwatch = fixture.cluster.cloudwatch().await;
    let alarm = alarm_name(fixture);
    fire_alarm(&cloudwatch, &alarm).await;
    let gate = Gate::firing().await;
    group
        .create_zau(json!({"maxUnavailable": 4, "exponentialFactor": "2", "pauseRolloutAlarm": alarm, "alertGate": gate.spec()}))
        .await;
    let _controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    let monitor = Monitor::start(
        fixture.pods.clone(),
        &format!("app={SET}"),
        fixture.replicas,
    )
    .await;
    let revisions = group.set_image(2).await;

    held_by(fixture, "Alarm,Alert", &revisions).await;
    clear_alarm(&cloudwatch, &alarm).await;
    held_by(fixture, "Alert", &revisions).await;
    let plan = planned(fixture, ZAU);
    assert_eq!(plan["heldBy"][0]["source"], "Alert", "{plan}");
    let batches_planned = planned_batches(&plan);
    gate.resolve();
    group.wait_complete(&revisions).await;

    let removed = fixture.removals();
    let want = expected_batches(&zones, 2.0, 4);
    assert_eq!(batches(&removed), want, "the group's batches (audit log)");
    assert_eq!(
        batches_planned, want,
        "kubectl zone's plan while the alert held the group"
    );
    assert_eq!(
        zone_visits(&zones, &removed),
        ZONES,
        "zones one after another"
    );
    assert_eq!(
        monitor.worst().1,
        1,
        "unavailable pods in two zones at once"
    );
    assert!(monitor.worst().0 <= 4, "{:?}", monitor.worst());
    for (set, revision) in &revisions {
        let status = fixture.sets.get(set).await.unwrap().status.unwrap();
        assert_eq!(status.current_revision.as_ref(), Some(revision), "{set}");
    }
    drop(monitor);
    a_rollback_half_way_follows_the_same_rules(&group, &zones, &revisions).await;
}

/// Image 3 over the group, with a bake between zones: zone-a rolled, zone-b baking; then image
/// 2 again. The rollback starts over from one pod in zone-a, the only zone at image 3, and
/// completes there: the bake belonged to image 3's rollout, and zones b and c never left image 2.
/// (A new revision of any StatefulSet of a group starts the batches again at one pod.)
async fn a_rollback_half_way_follows_the_same_rules(
    group: &Group,
    zones: &BTreeMap<String, String>,
    second: &BTreeMap<String, String>,
) {
    let fixture = &group.fixture;
    fixture.patch_spec(json!({"bakeTime": "1h"})).await;
    let monitor = Monitor::start(
        fixture.pods.clone(),
        &format!("app={SET}"),
        fixture.replicas,
    )
    .await;
    let removed_before = fixture.removals().len();
    let third = group.set_image(3).await;
    let baking = fixture
        .wait_status("zone-a at image 3, zone-b baking", ROLLOUT_TIMEOUT, |s| {
            s.update_revision == joined(&third) && s.paused_by == "Bake"
        })
        .await;
    assert_eq!(baking.old_replicas.get("zone-a"), Some(&0), "{baking:?}");
    assert_eq!(baking.total_old_replicas, 6, "{baking:?}");
    // Held by hand while the three StatefulSets change, so that the rollback starts once, from
    // their three new revisions, rather than again as each is observed.
    fixture.set_paused(true).await;
    let rolled_back_at = Timestamp::now();
    let back = group.set_image(2).await;
    assert_eq!(&back, second, "a rollback reuses the ControllerRevisions");
    fixture
        .wait_status("the rollback held by hand", ROLLOUT_TIMEOUT, |s| {
            s.update_revision == joined(&back) && s.paused_by == "Manual"
        })
        .await;
    fixture.set_paused(false).await;
    group.wait_complete(&back).await;

    let removed = fixture.removals();
    let (forward, back): (Vec<Removal>, Vec<Removal>) = removed[removed_before..]
        .iter()
        .cloned()
        .partition(|r| r.sent < rolled_back_at);
    assert_eq!(zone_visits(zones, &forward), ["zone-a"], "{forward:?}");
    assert_eq!(zone_visits(zones, &back), ["zone-a"], "{back:?}");
    let sizes: Vec<usize> = batches(&back).iter().map(Vec::len).collect();
    assert_eq!(sizes, [1, 2], "the rollback's batches: {back:?}");
    assert_eq!(
        monitor.worst().1,
        1,
        "unavailable pods in two zones at once"
    );
}

/// A budget of maxUnavailable 1 over the group's pods: while the rollout holds zone-a disrupted
/// (a quota keeps its first evicted pod from coming back), another caller's eviction there is
/// refused and the controller's same request allowed, and a real `kubectl drain` of zone-c's
/// node is refused throughout; released, the rollout's batches in a zone are not capped to 1.
/// Then a frozen budget holds the next rollout, which says why, until the budget lets rollouts
/// proceed.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zau_group_rolls_through_a_budget_that_refuses_a_drain_elsewhere() {
    let group = Group::new("zau-group-zdb").await;
    let fixture = &group.fixture;
    let zones = fixture.zones().await;
    group
        .create_zau(json!({"maxUnavailable": 3, "exponentialFactor": "2"}))
        .await;
    let controller = fixture.controller(&[]);
    fixture.wait_observed().await;
    let (_webhook, _zdb, as_controller) = webhook_for(fixture, &controller).await;
    let zdbs: Api<ZoneDisruptionBudget> = fixture.ns.api();
    frontend_budget(&zdbs, json!({"maxUnavailable": 1})).await;
    let others = evictor(fixture).await;

    let quota = PodQuota::hold(&fixture.ns, 8).await;
    let revisions = group.set_image(2).await;
    let first = wait_for("the rollout's first eviction", ROLLOUT_TIMEOUT, || async {
        let removals = fixture.removals();
        removals
            .first()
            .map(|r| r.pod.clone())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert_eq!(zones[&first], "zone-a", "the group starts in zone-a");
    wait_disrupted(&zdbs, &["zone-a"]).await;
    let old_a = zones
        .iter()
        .find(|(pod, zone)| *zone == "zone-a" && **pod != first)
        .map(|(pod, _)| pod.clone())
        .unwrap();
    let message = refused_eviction(&others, &old_a, "another caller in zone-a").await;
    assert!(message.contains("maxUnavailable 1"), "{message}");
    pods::evict(&as_controller, &old_a, true)
        .await
        .unwrap_or_else(|e| panic!("the controller's eviction of {old_a} in zone-a: {e:?}"));
    a_drain_of_zone_c_is_refused_throughout(&group).await;

    quota.release().await;
    group.touch().await;
    group.wait_complete(&revisions).await;
    let capped: Vec<String> = audit::removals(&fixture.audit(), &fixture.ns.name)
        .filter(|e| e.sent_by("zau-controller") && e.code() == 429)
        .map(|e| e.message().to_string())
        .filter(|message| message.contains("maxUnavailable"))
        .collect();
    assert!(capped.is_empty(), "rollout evictions capped: {capped:#?}");
    let sizes: Vec<usize> = batches(&fixture.removals()).iter().map(Vec::len).collect();
    assert!(
        sizes.iter().any(|n| *n >= 2),
        "no batch over the budget's 1: {sizes:?}"
    );
    a_frozen_budget_holds_the_group_until_it_lets_rollouts_proceed(&group, &zdbs).await;
}

/// `kubectl drain` of zone-c's node (its group pods) while the rollout has zone-a disrupted:
/// every eviction refused naming zone-a until the drain gives up; no zone-c pod replaced. The
/// node is uncordoned after.
async fn a_drain_of_zone_c_is_refused_throughout(group: &Group) {
    let fixture = &group.fixture;
    let before = pods::list(&fixture.pods, "shard=zone-c").await;
    let node = &group.nodes[2].name;
    let (drained, output) = Kubectl::drain(node, "app=web", &["--timeout=15s"])
        .finish(Duration::from_secs(90))
        .await;
    assert!(!drained, "the drain of zone-c succeeded:\n{output}");
    assert!(
        output.contains("zone zone-a is disrupted") && output.contains("will retry after"),
        "refused, and retried, naming zone-a:\n{output}"
    );
    let after = pods::list(&fixture.pods, "shard=zone-c").await;
    let uids = |pods: &[Pod]| -> BTreeSet<String> { pods.iter().filter_map(|p| p.uid()).collect() };
    assert_eq!(uids(&before), uids(&after), "a zone-c pod was evicted");
    let mut uncordon = Kubectl::start(&["uncordon", node]);
    let (done, output) = uncordon.finish(Duration::from_secs(30)).await;
    assert!(done, "uncordon {node}: {output}");
}

/// The budget frozen (maxUnavailable 0): the next rollout of the group removes nothing and says
/// the budget is frozen; with `rolloutsWhenFrozen: Proceed` it completes.
async fn a_frozen_budget_holds_the_group_until_it_lets_rollouts_proceed(
    group: &Group,
    zdbs: &Api<ZoneDisruptionBudget>,
) {
    let fixture = &group.fixture;
    patch_budget(zdbs, json!({"maxUnavailable": 0})).await;
    let removed_before = fixture.removals().len();
    let revisions = group.set_image(3).await;
    held_by_the_freeze(fixture).await;
    assert_eq!(fixture.removals().len(), removed_before);
    patch_budget(zdbs, json!({"rolloutsWhenFrozen": "Proceed"})).await;
    group.wait_complete(&revisions).await;
    assert_eq!(fixture.removals().len(), removed_before + 9);
}
