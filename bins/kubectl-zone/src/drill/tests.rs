#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use serde_json::json;
use zone_api::sprom::ZoneFailover;

const LABEL: &str = "topology.kubernetes.io/zone";

fn node(name: &str, zone: &str, ready: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LABEL: zone}},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }))
    .unwrap()
}

fn objects() -> Objects {
    let budget = |name: &str, expected: serde_json::Value, policy: Option<&str>| {
        serde_json::from_value::<ZoneDisruptionBudget>(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneDisruptionBudget",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"selector": {"matchLabels": {"app": name}}, "maxUnavailable": 1,
                     "unhealthyPodEvictionPolicy": policy},
            "status": {"expectedPods": expected, "currentHealthy": expected},
        }))
        .unwrap()
    };
    let rollout = |name: &str, old: i32| {
        serde_json::from_value::<ZoneAwareUpdate>(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ZoneAwareUpdate",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"statefulset": name},
            "status": {"totalOldReplicas": old, "currentZone": "zone-a",
                       "oldReplicas": {"zone-a": 0, "zone-b": old}},
        }))
        .unwrap()
    };
    let sprom: ShardedPrometheus = serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
        "metadata": {"name": "prom", "namespace": "apps"},
        "spec": {"shards": 3},
        "status": {"shardStatuses": [
            {"index": 0, "zone": "zone-a", "readyReplicas": 1},
            {"index": 1, "zone": "zone-b", "readyReplicas": 1},
            {"index": 2, "zone": "zone-c", "readyReplicas": 0},
        ]},
    }))
    .unwrap();
    Objects {
        nodes: vec![
            node("a-1", "zone-a", "True"),
            node("b-1", "zone-b", "True"),
            node("b-2", "zone-b", "False"),
            node("c-1", "zone-c", "True"),
        ],
        budgets: vec![
            budget(
                "web",
                json!({"zone-a": 2, "zone-b": 2}),
                Some("AlwaysAllow"),
            ),
            budget("batch", json!({"zone-a": 2}), None),
        ],
        rollouts: vec![rollout("web", 2), rollout("done", 0)],
        shards: vec![sprom],
    }
}

#[test]
fn a_dark_zone_disrupts_its_budgets_pauses_rollouts_and_stops_its_shards() {
    let drill = predict("zone-b", LABEL, &objects()).unwrap();
    assert!(!drill.dark_now);
    let effects: Vec<(&str, &str, Effect)> = drill
        .predictions
        .iter()
        .map(|p| (p.kind, p.name.as_str(), p.effect))
        .collect();
    assert_eq!(
        effects,
        [
            ("ZoneDisruptionBudget", "web", Effect::Disrupted),
            ("ZoneDisruptionBudget", "batch", Effect::Unaffected),
            ("ZoneAwareUpdate", "web", Effect::Paused),
            ("ZoneAwareUpdate", "done", Effect::Idle),
            ("ShardedPrometheus", "prom", Effect::FailsOver),
        ]
    );
    assert_eq!(
        drill.predictions[0].detail,
        "zone-b disrupted (2 pods not Ready): evictions of Ready pods in zone-a, zone-c refused; \
         zone-b's own pods by unhealthyPodEvictionPolicy AlwaysAllow: allowed"
    );
    let b = drill.zones.iter().find(|z| z.zone == "zone-b").unwrap();
    assert_eq!(
        b,
        &ZoneHealth {
            zone: "zone-b".into(),
            nodes: 2,
            ready_nodes: 1,
            budget_pods: 2,
            budget_healthy: 2,
            rollout_old: 2,
            shards: 1,
            ready_shards: 1,
        }
    );
    assert_eq!(
        drill.predictions[4].detail,
        "shard(s) 1 stop: zone-b's targets are down with it; its zoneless targets fail over to \
         the shards of zone-a after 5m"
    );
    let table = table(&drill);
    assert!(table.contains("If zone-b went dark now:"), "{table}");
    assert!(table.contains("zone-b  1/2"), "{table}");
}

#[test]
fn an_unknown_zone_is_refused_and_a_dark_one_is_said() {
    let mut objects = objects();
    let error = predict("zone-x", LABEL, &objects).unwrap_err();
    assert_eq!(
        error,
        "no node is in this zone (zones: zone-a, zone-b, zone-c)"
    );
    objects.nodes[1] = node("b-1", "zone-b", "Unknown");
    assert!(predict("zone-b", LABEL, &objects).unwrap().dark_now);
}

#[test]
fn shards_fail_over_only_with_spread_targets_failover_enabled_and_another_zone_ready() {
    let mut objects = objects();
    let effect = |objects: &Objects| {
        let drill = predict("zone-b", LABEL, objects).unwrap();
        let last = drill.predictions.last().unwrap().clone();
        (last.effect, last.detail)
    };
    objects.shards[0].spec.sharding_strategy.zoneless_targets = ZonelessTargets::Drop;
    let (dropped, why) = effect(&objects);
    assert_eq!(dropped, Effect::ShardsDown);
    assert!(why.contains("nothing to fail over"), "{why}");
    objects.shards[0].spec.sharding_strategy.zoneless_targets = ZonelessTargets::Spread;
    objects.shards[0].spec.sharding_strategy.zone_failover = ZoneFailover::Disabled;
    let (disabled, why) = effect(&objects);
    assert_eq!(disabled, Effect::ShardsDown);
    assert!(why.contains("zoneFailover: Disabled"), "{why}");
    objects.shards[0].spec.sharding_strategy.zone_failover = ZoneFailover::Enabled;
    for shard in &mut objects.shards[0].status.as_mut().unwrap().shard_statuses {
        if shard.zone != "zone-b" {
            shard.ready_replicas = 0;
        }
    }
    let (alone, why) = effect(&objects);
    assert_eq!(alone, Effect::ShardsDown);
    assert!(why.contains("no other zone has a ready shard"), "{why}");
}
