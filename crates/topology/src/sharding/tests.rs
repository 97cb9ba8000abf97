#![allow(clippy::unwrap_used)]

use super::*;
use crate::relabel::{CompiledRules, Labels, apply};

const ZONE_KEY: &str = "topology.kubernetes.io/zone";

fn zones(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn spread(shards: u32, names: &[&str]) -> ShardLayout {
    ShardLayout::topology(shards, zones(names), ZonelessTargets::Spread).unwrap()
}

fn target(address: &str, extra: &[(&str, &str)]) -> Labels {
    let mut labels = Labels::from([("__address__".to_string(), address.to_string())]);
    for (name, value) in extra {
        labels.insert(name.to_string(), value.to_string());
    }
    labels
}

fn compiled(layout: &ShardLayout) -> Vec<CompiledRules> {
    compiled_rules(layout).unwrap()
}

/// The proposal's edge-case table, 10 shards over zones A..C: zone A gets the extra shard, and
/// shard 9 (idle upstream) owns a quarter of zone A's buckets.
#[test]
fn ten_shards_three_zones_leave_no_shard_idle() {
    let layout = spread(10, &["A", "B", "C"]);
    let zone_row: Vec<&str> = (0..10).map(|i| layout.zone(i).unwrap()).collect();
    let in_zone_row: Vec<u32> = (0..10).map(|i| layout.in_zone(i)).collect();
    assert_eq!(zone_row, ["A", "B", "C", "A", "B", "C", "A", "B", "C", "A"]);
    assert_eq!(in_zone_row, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    assert_eq!(
        layout.per_zone(),
        vec![("A".into(), 4), ("B".into(), 3), ("C".into(), 3)]
    );
    assert_eq!(layout.zone_buckets(9).len(), 256);
    let warning = layout.uneven().unwrap();
    assert_eq!((warning.nearest_below, warning.nearest_above), (9, 12));
    assert_eq!(
        warning.to_string(),
        "shards per zone differ (A: 4, B: 3, C: 3); 9 or 12 shards would be even"
    );
    assert!(spread(9, &["A", "B", "C"]).uneven().is_none());
}

/// The proposal's second table, 2 shards over A..C: valid; C has no shard and is spread.
#[test]
fn fewer_shards_than_zones_name_the_zones_without_a_shard() {
    let layout = spread(2, &["A", "B", "C"]);
    assert_eq!(layout.zones_without_shard(), vec!["C".to_string()]);
    assert!(
        layout.uneven().is_none(),
        "ZonesWithoutShard says it, not UnevenZones"
    );
    let rules = compiled(&layout);
    let kept: Vec<u32> = (0..100)
        .flat_map(|i| {
            let labels = target(&format!("10.0.{i}.1:80"), &[(TOPOLOGY_SOURCES[0], "C")]);
            keepers(&rules, &labels)
        })
        .collect();
    assert_eq!(kept.len(), 100, "each zone-C target kept exactly once");
    assert!(
        kept.contains(&0) && kept.contains(&1),
        "spread over both shards"
    );
}

#[test]
fn invalid_layouts_are_rejected() {
    let err = |shards, names: &[&str]| {
        ShardLayout::topology(shards, zones(names), ZonelessTargets::Spread).unwrap_err()
    };
    assert_eq!(err(3, &[]), ShardingError::NoZones);
    assert_eq!(err(0, &["a"]), ShardingError::ShardCount(0));
    assert_eq!(err(1025, &["a"]), ShardingError::ShardCount(1025));
    assert_eq!(err(3, &["a", ""]), ShardingError::EmptyZone);
    assert_eq!(
        err(3, &["a", "b", "a"]),
        ShardingError::DuplicateZone("a".into())
    );
    assert!(ShardLayout::classic(0).is_err());
    assert!(ShardLayout::classic(1024).is_ok());
}

#[test]
fn topology_sources_are_used_in_order_of_precedence() {
    let layout = ShardLayout::topology(3, zones(&["a", "b", "c"]), ZonelessTargets::Drop).unwrap();
    let rules = compiled(&layout);
    let [slice, node, pod] = TOPOLOGY_SOURCES;
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[(pod, "c")], "c"),
        (&[(node, "b"), (pod, "c")], "b"),
        (&[(slice, "a"), (node, "b"), (pod, "c")], "a"),
        (&[(TMP_TOPOLOGY, "c"), (slice, "a"), (node, "b")], "c"),
        (&[(slice, ""), (node, "b")], "b"),
    ];
    for (extra, zone) in cases {
        let labels = target("10.0.0.1:80", extra);
        let kept: Vec<&str> = keepers(&rules, &labels)
            .iter()
            .map(|shard| layout.zone(*shard).unwrap())
            .collect();
        assert_eq!(kept, vec![zone], "{extra:?}");
    }
}

#[test]
fn a_user_set_hash_input_decides_the_bucket() {
    let layout = ShardLayout::classic(8).unwrap();
    let rules = compiled(&layout);
    // Same pod name behind different addresses: always the same shard.
    let shards: BTreeSet<Vec<u32>> = (0..20)
        .map(|i| {
            keepers(
                &rules,
                &target(&format!("10.1.{i}.1:80"), &[(TMP_HASH, "pod-a")]),
            )
        })
        .collect();
    assert_eq!(shards.len(), 1);
    let expected = owners(8)[crate::hashmod::hashmod("pod-a", u64::from(BUCKETS)) as usize];
    assert_eq!(shards.into_iter().next(), Some(vec![expected]));
}

#[test]
fn zoneless_targets_follow_the_policy() {
    let drop = ShardLayout::topology(6, zones(&["a", "b", "c"]), ZonelessTargets::Drop).unwrap();
    let spread = spread(6, &["a", "b", "c"]);
    let (drop_rules, spread_rules) = (compiled(&drop), compiled(&spread));
    let mut spread_keepers = BTreeSet::new();
    for i in 0..300 {
        let address = format!("10.0.{i}.9:80");
        for labels in [
            target(&address, &[]),
            target(&address, &[(TOPOLOGY_SOURCES[2], "z")]),
        ] {
            assert!(keepers(&drop_rules, &labels).is_empty());
            let kept = keepers(&spread_rules, &labels);
            assert_eq!(kept.len(), 1, "{labels:?}");
            spread_keepers.insert(kept[0]);
        }
    }
    assert_eq!(
        spread_keepers.len(),
        6,
        "zoneless targets reach every shard"
    );
}

#[test]
fn quote_meta_escapes_only_re2_metacharacters() {
    assert_eq!(quote_meta("europe-west4-a"), "europe-west4-a");
    assert_eq!(quote_meta("us.east+1(x)$"), r"us\.east\+1\(x\)\$");
}

#[test]
fn zone_names_are_regex_escaped() {
    let layout =
        ShardLayout::topology(2, zones(&["us.east", "usXeast"]), ZonelessTargets::Drop).unwrap();
    // Unescaped, "us.east" would also keep targets of zone "usXeast".
    let labels = target("10.0.0.1:80", &[(TOPOLOGY_SOURCES[0], "usXeast")]);
    assert_eq!(keepers(&compiled(&layout), &labels), vec![1]);
}

#[test]
fn retained_shards_keep_nothing() {
    for i in 0..200 {
        let labels = target(&format!("10.0.{i}.1:80"), &[(TOPOLOGY_SOURCES[0], "a")]);
        assert!(apply(&rules_scraping_nothing(), &labels).unwrap().is_none());
    }
}

#[test]
fn external_labels_and_node_selector() {
    let layout = spread(4, &["europe-west4-a", "europe-west4-b"]);
    let labels = layout.external_labels(2, Some("zone"));
    assert_eq!(labels["shard"], "2");
    assert_eq!(labels["zone"], "europe-west4-a");
    assert!(!layout.external_labels(2, None).contains_key("zone"));
    let classic = ShardLayout::classic(4).unwrap();
    assert!(
        !classic
            .external_labels(2, Some("zone"))
            .contains_key("zone")
    );

    let user = BTreeMap::from([
        ("foo".to_string(), "bar".to_string()),
        (ZONE_KEY.to_string(), "will be replaced".to_string()),
    ]);
    let selector = layout.node_selector(2, &user);
    assert_eq!(selector["foo"], "bar");
    assert_eq!(selector[ZONE_KEY], "europe-west4-a");
    assert_eq!(classic.node_selector(2, &user), user);
    let relabelled = layout.clone().with_zone_label("example.com/zone");
    let selector = relabelled.node_selector(2, &user);
    assert_eq!(selector["example.com/zone"], "europe-west4-a");
    assert_eq!(
        selector[ZONE_KEY], "will be replaced",
        "another key is the user's"
    );
}

#[test]
fn node_metadata_is_attached_unless_the_user_set_it() {
    let mut config = serde_json::json!({
        "job_name": "pods",
        "kubernetes_sd_configs": [
            {"role": "pod"},
            {"role": "node"},
            {"role": "endpointslice", "attach_metadata": {"node": false}},
        ]
    });
    let outcome = attach_node_metadata(&mut config);
    assert!(outcome.attached);
    assert_eq!(outcome.disabled_by_user, vec!["endpointslice".to_string()]);
    let sd = &config["kubernetes_sd_configs"];
    assert_eq!(sd[0]["attach_metadata"]["node"], true);
    assert!(sd[1].get("attach_metadata").is_none());
    assert_eq!(
        sd[2]["attach_metadata"]["node"], false,
        "an explicit false is kept"
    );
    assert!(
        !attach_node_metadata(&mut config).attached,
        "second pass changes nothing"
    );
    assert_eq!(
        attach_node_metadata(&mut serde_json::json!({"static_configs": []})),
        NodeMetadata::default()
    );
}

#[test]
fn modes_parse_with_the_address_alias() {
    let mode: ShardingMode = serde_json::from_str("\"Address\"").unwrap();
    assert_eq!(mode, ShardingMode::Classic);
    assert_eq!(ShardingMode::default(), ShardingMode::Topology);
    assert_eq!(ZonelessTargets::default(), ZonelessTargets::Spread);
}

#[test]
fn another_zone_label_is_read_from_its_meta_labels() {
    let layout = ShardLayout::topology(2, zones(&["r1", "r2"]), ZonelessTargets::Drop)
        .unwrap()
        .with_zone_label("example.com/rack");
    let rules = compiled(&layout);
    let labels = target(
        "10.0.0.1:80",
        &[("__meta_kubernetes_node_label_example_com_rack", "r2")],
    );
    assert_eq!(keepers(&rules, &labels), vec![1]);
    // The default label is no longer a source.
    let labels = target("10.0.0.1:80", &[(TOPOLOGY_SOURCES[1], "r2")]);
    assert!(keepers(&rules, &labels).is_empty());
    assert_eq!(
        sanitize_label_name("topology.kubernetes.io/zone"),
        "topology_kubernetes_io_zone"
    );
}

/// prometheus-operator's opt-out: a target labelled `__tmp_disable_sharding` by its job's
/// relabelings is scraped by every shard, in both modes; the others still by exactly one.
#[test]
fn disable_sharding_puts_a_target_on_every_shard() {
    for layout in [
        spread(7, &["A", "B", "C"]),
        ShardLayout::classic(5).unwrap(),
        ShardLayout::topology(4, zones(&["A", "B"]), ZonelessTargets::Drop).unwrap(),
    ] {
        let rules = compiled(&layout);
        let every: Vec<u32> = (0..layout.shards()).collect();
        for (i, zone) in ["A", "B", "Z", ""].into_iter().enumerate() {
            let address = format!("10.0.0.{i}:9090");
            let zone_label = format!(
                "__meta_kubernetes_node_label_{}",
                sanitize_label_name(ZONE_KEY)
            );
            let opted_out = target(
                &address,
                &[(&zone_label, zone), (TMP_DISABLE_SHARDING, "yes")],
            );
            assert_eq!(
                keepers(&rules, &opted_out),
                every,
                "{layout:?} zone {zone:?}"
            );
            let sharded = target(&address, &[(&zone_label, zone)]);
            assert!(
                keepers(&rules, &sharded).len() <= 1,
                "{layout:?} zone {zone:?}"
            );
        }
    }
}

/// Zone b's shards down: every zoneless target is kept by exactly one shard of zone a or c
/// (the same one as before unless it was zone b's), zone b's shards keep what they kept (for
/// their return), zoned targets stay where they were, and the failover is undone by the layout
/// without it.
#[test]
fn a_failed_over_zone_hands_only_its_zoneless_buckets_to_the_other_zones() {
    let layout = spread(6, &["a", "b", "c"]);
    let failed = layout.clone().failed_over(["b"]);
    assert_eq!(
        failed.failed_over_zones(),
        &BTreeSet::from(["b".to_string()])
    );
    let (before, during) = (compiled(&layout), compiled(&failed));
    let mut moved = 0;
    for i in 0..600 {
        let address = format!("10.1.{}.{}:80", i / 200, i % 200);
        let zoneless = target(&address, &[]);
        let (was, kept) = (keepers(&before, &zoneless), keepers(&during, &zoneless));
        let (down, now): (Vec<u32>, Vec<u32>) =
            kept.into_iter().partition(|s| failed.zone(*s) == Some("b"));
        assert_eq!(now.len(), 1, "{zoneless:?}");
        match failed.zone(was[0]) {
            Some("b") => {
                moved += 1;
                assert_eq!(down, was, "zone b's shard keeps its own: {zoneless:?}");
            }
            _ => {
                assert_eq!(was, now, "a surviving shard's target moved: {zoneless:?}");
                assert!(down.is_empty(), "{zoneless:?}");
            }
        }
        for zone in ["a", "b", "c"] {
            let zoned = target(&address, &[(TOPOLOGY_SOURCES[2], zone)]);
            assert_eq!(
                keepers(&before, &zoned),
                keepers(&during, &zoned),
                "{zoned:?}"
            );
        }
    }
    assert!(
        moved > 100,
        "zone b's share of the zoneless targets moved: {moved}"
    );
    assert_eq!(
        failed.clone().failed_over([]),
        layout,
        "the return undoes it"
    );
}

#[test]
fn a_failover_needs_a_surviving_zone_and_spread_zoneless_targets() {
    let layout = spread(3, &["a", "b", "c"]);
    assert!(
        layout
            .clone()
            .failed_over(["a", "b", "c"])
            .failed_over_zones()
            .is_empty()
    );
    assert!(
        layout
            .clone()
            .failed_over(["x"])
            .failed_over_zones()
            .is_empty()
    );
    let drop = ShardLayout::topology(3, zones(&["a", "b", "c"]), ZonelessTargets::Drop).unwrap();
    assert!(drop.failed_over(["b"]).failed_over_zones().is_empty());
    // Zone c has no shard (2 shards, 3 zones): nothing of its to fail over.
    assert!(
        spread(2, &["a", "b", "c"])
            .failed_over(["c"])
            .failed_over_zones()
            .is_empty()
    );
}
