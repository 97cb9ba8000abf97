//! Rollout groups (`spec.selector`): one StatefulSet per zone, as Mimir's or Loki's ingesters
//! are deployed, rolled as one through the real reconcile.

use super::*;

const GROUP_STATUS: &str =
    "/apis/zonecontrol.k8s.aws/v1/namespaces/apps/zoneawareupdates/ingesters/status";

/// `ingester-zone-<zone>`: OnDelete, 2 replicas, labelled `rollout-group: <group>`, rolling
/// `<zone>-2` out over `<zone>-1`.
fn ingester_set(zone: &str, group: &str) -> StatefulSet {
    let name = format!("ingester-zone-{zone}");
    let mut set: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": format!("{name}-uid"),
            "generation": 2, "resourceVersion": "10",
            "labels": {"rollout-group": group},
        },
        "spec": {
            "replicas": 2,
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}},
        },
        "status": {
            "replicas": 2, "observedGeneration": 2,
            "currentRevision": format!("{zone}-1"), "updateRevision": format!("{zone}-2"),
        },
    }))
    .unwrap();
    pods::strip_statefulset(&mut set);
    set
}

/// Pod `<ordinal>` of `ingester-zone-<zone>`, Ready, on `node-<zone>`.
fn ingester(zone: &str, ordinal: u32, revision: &str) -> Pod {
    let mut pod = pod_on(ordinal, revision, &format!("node-{zone}"), true);
    let set = format!("ingester-zone-{zone}");
    pod.metadata.name = Some(format!("{set}-{ordinal}"));
    pod.metadata.uid = Some(format!("{set}-{ordinal}-uid"));
    if let Some(owner) = pod
        .metadata
        .owner_references
        .as_mut()
        .and_then(|o| o.first_mut())
    {
        owner.name.clone_from(&set);
    }
    pods::strip_pod(&mut pod);
    pod
}

/// The group's caches: zones a, b and c with one StatefulSet each, plus `other` (a StatefulSet
/// of zone c outside the group, whose pods are old too); `updated` zones' pods run their update
/// revision.
fn group_caches(updated: &[&str]) -> Caches {
    let zones = ["a", "b", "c"];
    let mut sets: Vec<StatefulSet> = zones.iter().map(|z| ingester_set(z, "ingester")).collect();
    let mut other = ingester_set("c", "other");
    other.metadata.name = Some("other".into());
    sets.push(other);
    let pods = zones.iter().flat_map(|zone| {
        let revision = if updated.contains(zone) { "2" } else { "1" };
        (0..2).map(move |ordinal| ingester(zone, ordinal, &format!("{zone}-{revision}")))
    });
    Caches {
        statefulsets: store_of(sets),
        pods: store_of(pods),
        zones: NodeZones::from_store(
            store_of(zones.map(|z| zoned_node(&format!("node-{z}"), &format!("zone-{z}")))),
            ZONE_LABEL,
        ),
    }
}

/// The ZoneAwareUpdate `ingesters` over the group, maxUnavailable 4, with this status.
fn group_zau(status: Value) -> ZoneAwareUpdate {
    serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ZoneAwareUpdate",
        "metadata": {
            "name": "ingesters", "namespace": NAMESPACE, "uid": "group-uid",
            "generation": 1, "resourceVersion": "100",
        },
        "spec": {
            "selector": {"matchLabels": {"rollout-group": "ingester"}},
            "maxUnavailable": 4,
            "exponentialFactor": "2",
        },
        "status": status,
    }))
    .unwrap()
}

/// The statuses written, in order.
fn group_statuses(fake: &FakeApi) -> Vec<Value> {
    fake.requests_to(&Method::PATCH, GROUP_STATUS)
        .iter()
        .map(|r| r.json().unwrap()["status"].clone())
        .collect()
}

const GROUP_REVISIONS: &str = "ingester-zone-a=a-2,ingester-zone-b=b-2,ingester-zone-c=c-2";

/// A new rollout of the group starts in the first zone with one pod of that zone's StatefulSet
/// (the batch counts the group's pods in the zone), the status listing the group's StatefulSets
/// and their revisions before that eviction (the zdb webhook reads them). A StatefulSet outside
/// the selector is never touched.
///
/// If pods were judged against one revision, every ingester would be "old" or none would; if the
/// selector were not applied, `other`'s pods would be counted (7 old, not 6).
#[tokio::test]
async fn a_group_starts_with_one_pod_of_its_first_zone() {
    let zau = group_zau(json!({}));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    reconcile_unelected(client, zau, group_caches(&[]), alarms).await;

    assert_eq!(evictions(&fake), ["ingester-zone-a-1"]);
    let statuses = group_statuses(&fake);
    let announced = &statuses[0];
    assert_eq!(announced["currentZone"], "zone-a");
    assert_eq!(announced["updateRevision"], GROUP_REVISIONS);
    assert_eq!(announced["statefulSets"][1]["name"], "ingester-zone-b");
    assert_eq!(announced["statefulSets"][1]["updateRevision"], "b-2");
    let last = statuses.last().unwrap();
    assert_eq!(last["totalOldReplicas"], 6);
    assert_eq!(
        last["oldReplicas"],
        json!({"zone-a": 2, "zone-b": 2, "zone-c": 2})
    );
    assert_eq!(
        last["currentRevision"],
        "ingester-zone-a=a-1,ingester-zone-b=b-1,ingester-zone-c=c-1"
    );
    let sets = last["statefulSets"].as_array().unwrap();
    assert_eq!(sets.len(), 3);
    assert_eq!(
        sets[2],
        json!({"name": "ingester-zone-c", "currentRevision": "c-1", "updateRevision": "c-2",
            "replicas": 2, "oldReplicas": 2})
    );
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// With zone a done, the group's next zone is b, batches sized by the step reached, never a pod
/// of zone c meanwhile.
#[tokio::test]
async fn a_group_moves_to_its_next_zone_only_when_one_is_done() {
    let zau = group_zau(json!({
        "updateRevision": GROUP_REVISIONS, "updateStep": 2, "currentZone": "zone-a",
    }));
    let (fake, client) = fake_api(&zau);
    fake.on_prefix(Method::POST, "/api/v1/namespaces/apps/pods/")
        .always(201, evicted());
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    reconcile_unelected(client, zau, group_caches(&["a"]), alarms).await;

    assert_eq!(evictions(&fake), ["ingester-zone-b-1", "ingester-zone-b-0"]);
    let last = group_statuses(&fake).pop().unwrap();
    assert_eq!(last["currentZone"], "zone-b");
    assert_eq!(last["statefulSets"][0]["oldReplicas"], 0);
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// Every ingester updated and Ready: each StatefulSet of the group gets its own update revision
/// as status.currentRevision (OnDelete never moves it), and the status says complete.
#[tokio::test]
async fn a_completed_group_records_each_statefulsets_revision() {
    let zau = group_zau(json!({"updateRevision": GROUP_REVISIONS, "updateStep": 3}));
    let (fake, client) = fake_api(&zau);
    for zone in ["a", "b", "c"] {
        let path = format!("/apis/apps/v1/namespaces/apps/statefulsets/ingester-zone-{zone}");
        let fresh = serde_json::to_value(ingester_set(zone, "ingester")).unwrap();
        fake.on(Method::GET, &path).once(200, fresh);
        fake.on(Method::PUT, &format!("{path}/status"))
            .once_with(|request| (200, request.json().unwrap()));
    }
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    let action = reconcile_unelected(client, zau, group_caches(&["a", "b", "c"]), alarms).await;

    assert_eq!(action, Action::await_change());
    for zone in ["a", "b", "c"] {
        let path =
            format!("/apis/apps/v1/namespaces/apps/statefulsets/ingester-zone-{zone}/status");
        let puts = fake.requests_to(&Method::PUT, &path);
        assert_eq!(puts.len(), 1, "{path}");
        assert_eq!(
            puts[0].json().unwrap()["status"]["currentRevision"],
            format!("{zone}-2")
        );
    }
    let last = group_statuses(&fake).pop().unwrap();
    assert_eq!(last["currentRevision"], GROUP_REVISIONS);
    assert_eq!(last["statefulSets"][1]["currentRevision"], "b-2");
    assert_eq!(condition(&last, "Complete")["reason"], "RolloutComplete");
    assert!(evictions(&fake).is_empty());
    assert!(fake.unmatched().is_empty(), "{:?}", fake.unmatched());
}

/// A selector matching nothing is said in the status, and nothing is removed.
#[tokio::test]
async fn a_group_without_statefulsets_says_so() {
    let mut zau = group_zau(json!({}));
    zau.spec.selector =
        serde_json::from_value(json!({"matchLabels": {"rollout-group": "none"}})).unwrap();
    let (fake, client) = fake_api(&zau);
    let alarms = ScriptedAlarm::new(AlarmState::Clear);
    reconcile_unelected(client, zau, group_caches(&[]), alarms).await;

    let last = group_statuses(&fake).pop().unwrap();
    let invalid = condition(&last, "Invalid");
    assert_eq!(invalid["reason"], "StatefulSetNotFound");
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .contains("no StatefulSet of namespace apps matches spec.selector"),
        "{invalid}"
    );
    assert!(evictions(&fake).is_empty());
}

/// A change to a StatefulSet reconciles the rollouts whose group selects it (by its labels), and
/// the one naming it.
#[test]
fn a_statefulset_change_reconciles_the_groups_selecting_it() {
    let group = group_zau(json!({}));
    let named = zau(None);
    let zaus = store_of([group, named]);
    let names = |set: &StatefulSet| -> Vec<String> {
        crate::watches::zaus_for(&zaus, set)
            .into_iter()
            .map(|r| r.name)
            .collect()
    };
    assert_eq!(names(&ingester_set("a", "ingester")), ["ingesters"]);
    assert!(names(&ingester_set("a", "other")).is_empty());
    let web: StatefulSet = serde_json::from_value(statefulset_json("10")).unwrap();
    assert_eq!(names(&web), [ZAU]);
}
