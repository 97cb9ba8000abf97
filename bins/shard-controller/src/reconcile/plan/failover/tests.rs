#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use zone_api::ShardedPrometheus;

use super::*;
use crate::reconcile::observe::ObservedStatefulSet;

/// Six shards over zones a, b, c (shards 1 and 4 in b), failing over after 2 minutes.
fn valid() -> ValidSprom {
    let sprom: ShardedPrometheus = serde_json::from_value(serde_json::json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": "prom", "namespace": "monitoring"},
        "spec": {
            "shards": 6,
            "shardingStrategy": {
                "mode": "Topology",
                "topology": {"values": ["a", "b", "c"]},
                "zoneFailoverAfter": "2m"
            }
        }
    }))
    .unwrap();
    sprom.spec.validate(zone_topology::ZONE_LABEL).unwrap()
}

/// Shard index → ready pods.
fn observed(ready: &[(u32, i32)]) -> Observed {
    Observed {
        stateful_sets: ready
            .iter()
            .map(|(index, ready)| {
                let sts = ObservedStatefulSet {
                    ready_replicas: *ready,
                    ..ObservedStatefulSet::default()
                };
                (*index, sts)
            })
            .collect::<BTreeMap<_, _>>(),
        ..Observed::default()
    }
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn a_zone_fails_over_once_its_shards_have_all_been_unready_for_the_grace() {
    let valid = valid();
    let zone_b_down = observed(&[(0, 1), (1, 0), (2, 1), (3, 1), (4, 0), (5, 1)]);
    let first = decide(&valid, &zone_b_down, &[], at("2026-01-01T00:00:00Z"));
    assert_eq!(
        first.unready,
        vec![UnreadyZone {
            zone: "b".into(),
            since: "2026-01-01T00:00:00Z".into(),
            failed_over: false
        }]
    );
    assert_eq!(first.layout, valid.layout, "nothing moves within the grace");
    assert_eq!(first.next_look, Some(Duration::from_secs(120)));

    let later = decide(
        &valid,
        &zone_b_down,
        &first.unready,
        at("2026-01-01T00:01:30Z"),
    );
    assert_eq!(
        later.unready[0].since, "2026-01-01T00:00:00Z",
        "since is kept"
    );
    assert_eq!(later.next_look, Some(Duration::from_secs(30)));

    let due = decide(
        &valid,
        &zone_b_down,
        &later.unready,
        at("2026-01-01T00:02:00Z"),
    );
    assert!(due.unready[0].failed_over);
    assert_eq!(due.layout, valid.layout.clone().failed_over(["b"]));
    assert_eq!(due.next_look, None);
    let (_, message) = degraded(&due.layout, &due.unready).unwrap();
    assert!(
        message.contains("zone b since 2026-01-01T00:00:00Z")
            && message.contains("shards of zone a, c"),
        "{message}"
    );

    let mut events = PendingEvents::default();
    let one_back = observed(&[(0, 1), (1, 1), (2, 1), (3, 1), (4, 0), (5, 1)]);
    let back = decide(&valid, &one_back, &due.unready, at("2026-01-01T00:09:00Z"));
    assert!(back.unready.is_empty(), "a ready shard ends it");
    assert_eq!(back.layout, valid.layout, "the buckets return");
    super::events(&due.unready, &back.unready, &mut events);
    assert_eq!(events.events()[0].reason, reason::ZONE_RETURNED);
}

#[test]
fn a_shard_still_ready_or_every_zone_down_moves_nothing() {
    let valid = valid();
    let long_ago = [UnreadyZone {
        zone: "b".into(),
        since: "2025-01-01T00:00:00Z".into(),
        failed_over: false,
    }];
    let now = at("2026-01-01T00:00:00Z");
    let one_of_b_ready = observed(&[(0, 1), (1, 0), (2, 1), (3, 1), (4, 1), (5, 1)]);
    let kept = decide(&valid, &one_of_b_ready, &long_ago, now);
    assert!(kept.unready.is_empty());
    assert_eq!(kept.layout, valid.layout);

    let all_down = decide(&valid, &observed(&[]), &long_ago, now);
    assert_eq!(all_down.unready.len(), 3, "{:?}", all_down.unready);
    assert!(all_down.unready.iter().all(|zone| !zone.failed_over));
    assert_eq!(all_down.layout, valid.layout, "no zone left to take over");
}

/// With `zoneFailover: Disabled` a zone whose shards are all down is reported unready, but its
/// zoneless buckets never move, however long it stays down, and nothing wakes the controller up
/// for it.
#[test]
fn a_disabled_failover_never_moves_the_zoneless_buckets() {
    let mut valid = valid();
    valid.zone_failover_after = None;
    let zone_b_down = observed(&[(0, 1), (1, 0), (2, 1), (3, 1), (4, 0), (5, 1)]);
    let since = at("2026-01-01T00:00:00Z");
    let first = decide(&valid, &zone_b_down, &[], since);
    let later = decide(
        &valid,
        &zone_b_down,
        &first.unready,
        at("2026-01-02T00:00:00Z"),
    );
    assert_eq!(later.unready.len(), 1);
    assert!(!later.unready[0].failed_over);
    assert_eq!(later.layout, valid.layout);
    assert_eq!((first.next_look, later.next_look), (None, None));
}
