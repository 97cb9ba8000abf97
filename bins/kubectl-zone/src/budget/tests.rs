#![allow(clippy::unwrap_used, clippy::expect_used)]
use serde_json::json;
use zone_topology::IntOrPercent;
use zone_views::budget::batch::testing::budget;

use super::*;

/// A Ready pod of `namespace` with `labels`, owned by `owner` (a kind), in `zone`.
fn pod(
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
    owner: &str,
    zone: &str,
) -> (Pod, Zone) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "u", "controller": true}],
        },
        "spec": {"containers": [], "nodeName": format!("node-{zone}")},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    (pod, Zone::known(zone))
}

fn web(name: &str, zone: &str) -> (Pod, Zone) {
    pod("apps", name, json!({"app": "web"}), "StatefulSet", zone)
}

fn at() -> Time {
    view::time_of_ms(2_000_000)
}

fn verdicts(drain: &DrainPrediction) -> Vec<(&str, bool, &str)> {
    drain
        .evictions
        .iter()
        .map(|e| (e.pod.as_str(), e.allowed, e.reason.as_str()))
        .collect()
}

/// A drain meets the webhook's decisions in order: the second eviction of a zone sees the first
/// one's record, a zone waits while another is disrupted, a pod of no budget goes, a pod of two
/// budgets stays, and a DaemonSet's pod is not evicted at all.
#[test]
fn a_drain_is_decided_in_order_on_each_budget() {
    let web_budget = budget(IntOrPercent::Int(2), [1, 0, 0], [0, 0, 0]);
    let mut other = budget(IntOrPercent::Int(2), [0, 0, 0], [0, 0, 0]);
    other.metadata.name = Some("cache".into());
    other.spec.selector = serde_json::from_value(json!({"matchLabels": {"app": "cache"}})).unwrap();
    let mut overlapping = other.clone();
    overlapping.metadata.name = Some("also-cache".into());
    let budgets = BTreeMap::from([("apps".to_string(), vec![web_budget, other, overlapping])]);
    let pods = vec![
        web("web-3", "zone-a"),
        web("web-0", "zone-a"),
        web("web-1", "zone-b"),
        pod(
            "apps",
            "cache-0",
            json!({"app": "cache"}),
            "StatefulSet",
            "zone-a",
        ),
        pod(
            "apps",
            "lone",
            json!({"app": "lone"}),
            "ReplicaSet",
            "zone-a",
        ),
        pod("kube-system", "proxy", json!({}), "DaemonSet", "zone-a"),
    ];
    let nodes = vec!["node-zone-a".to_string(), "node-zone-b".to_string()];
    let drain = predict(&nodes, &pods, &budgets, &at());
    assert_eq!(
        verdicts(&drain),
        [
            ("cache-0", false, reason::OVERLAPPING_BUDGETS),
            ("lone", true, reason::NO_BUDGET),
            ("web-0", true, reason::RECORDED),
            ("web-1", false, reason::OTHER_ZONE_DISRUPTED),
            ("web-3", false, reason::ZONE_BUDGET_EXHAUSTED),
        ]
    );
    assert_eq!(drain.refused(), 3);
    assert_eq!(drain.skipped, ["kube-system/proxy (DaemonSet)"]);
    let message = |pod: &str| {
        drain
            .evictions
            .iter()
            .find(|e| e.pod == pod)
            .and_then(|e| e.message.clone())
            .unwrap()
    };
    assert_eq!(
        message("web-1"),
        "cannot evict pod web-1: ZoneDisruptionBudget web: zone zone-a is disrupted (web-0 evicted; 1 other pod(s) unavailable or missing): evictions in zone zone-b must wait until it recovers"
    );
    assert!(
        message("cache-0").contains("(cache, also-cache)"),
        "{}",
        message("cache-0")
    );
    let table = drain_table(&drain);
    assert!(
        table.starts_with("drain of node-zone-a, node-zone-b: 5 evictions, 3 refused\n"),
        "{table}"
    );
}

/// A budget in shadow mode lets the drain through, with the webhook's warning.
#[test]
fn a_shadow_budget_allows_with_a_warning() {
    let mut shadow = budget(IntOrPercent::Int(1), [1, 0, 0], [0, 0, 0]);
    shadow.spec.dry_run = true;
    let budgets = BTreeMap::from([("apps".to_string(), vec![shadow])]);
    let drain = predict(&[], &[web("web-1", "zone-b")], &budgets, &at());
    assert_eq!(verdicts(&drain), [("web-1", true, reason::SHADOW)]);
    assert!(
        drain.evictions[0].message.as_deref().unwrap().contains(
            "shadow mode (spec.dryRun): allowed, but it would have denied: cannot evict pod web-1"
        ),
        "{:?}",
        drain.evictions[0].message
    );
}

/// The zones come from the status; the pods that may go now are those of the budget the webhook
/// would allow alone: only the disrupted zone's while it has room.
#[test]
fn the_state_shows_the_zones_and_who_may_go() {
    let zdb = budget(IntOrPercent::Int(2), [1, 0, 0], [1, 0, 0]);
    let pods = vec![
        web("web-0", "zone-a"),
        web("web-1", "zone-b"),
        web("web-2", "zone-c"),
    ];
    let state = state(&zdb, std::slice::from_ref(&zdb), Some(&pods), &at());
    assert_eq!(state.limit, "maxUnavailable 2");
    assert_eq!(
        state.evictable_now.as_deref(),
        Some(&["web-0".to_string()][..])
    );
    assert_eq!(
        state.zones[0],
        ZoneRow {
            zone: "zone-a".into(),
            expected: 8,
            healthy: 7,
            disrupted: 1,
            allowed: 1,
            blocking: "old-zone-a-0 evicted".into(),
        }
    );
    assert_eq!(state.zones[1].allowed, 0, "{:?}", state.zones[1]);
    assert!(state.not_deciding.is_none());

    let mut unobserved = zdb.clone();
    unobserved.metadata.generation = Some(2);
    let state = super::state(&unobserved, &[], Some(&pods), &at());
    assert!(
        state
            .not_deciding
            .unwrap()
            .contains("generation 2 is not computed yet")
    );
    assert_eq!(state.evictable_now.as_deref(), Some(&[][..]));
}
