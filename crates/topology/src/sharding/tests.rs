#![allow(clippy::unwrap_used)]

use super::*;
use crate::relabel::{Labels, apply};

fn zones(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// The proposal's first edge-case table: 10 shards over zones A..C.
#[test]
fn ten_shards_three_zones_matches_the_proposal_table() {
    let layout = ShardLayout::new(10, zones(&["A", "B", "C"])).unwrap();
    let zone_row: Vec<&str> = (0..10).map(|i| layout.zone(i)).collect();
    let in_zone_row: Vec<u32> = (0..10).map(|i| layout.in_zone(i)).collect();
    assert_eq!(zone_row, ["A", "B", "C", "A", "B", "C", "A", "B", "C", "A"]);
    assert_eq!(in_zone_row, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    assert_eq!(layout.modulus(), 3);
    let warning = layout.uneven().unwrap();
    assert_eq!(warning.idle, vec![9]);
    assert_eq!((warning.nearest_below, warning.nearest_above), (9, 12));
    assert_eq!(
        warning.to_string(),
        "10 shards is not a multiple of 3 zones: shard(s) 9 scrape nothing; use 9 or 12 shards"
    );
}

/// The proposal's second edge-case table: 2 shards over zones A..C leave C unscraped.
#[test]
fn two_shards_three_zones_is_rejected_naming_zone_c() {
    let err = ShardLayout::new(2, zones(&["A", "B", "C"])).unwrap_err();
    assert_eq!(
        err,
        ShardingError::TooFewShards {
            shards: 2,
            zones: 3,
            unscraped: vec!["C".into()]
        }
    );
    assert!(
        err.to_string().contains("zone(s) C would never be scraped"),
        "{err}"
    );
}

#[test]
fn even_layouts_have_no_warning_and_no_idle_shard() {
    let layout = ShardLayout::new(12, zones(&["a", "b", "c"])).unwrap();
    assert_eq!(layout.uneven(), None);
    assert!(layout.idle_shards().is_empty());
}

#[test]
fn invalid_zone_lists_are_rejected() {
    assert_eq!(ShardLayout::new(3, vec![]), Err(ShardingError::NoZones));
    assert_eq!(
        ShardLayout::new(0, zones(&["a"])),
        Err(ShardingError::NoShards)
    );
    assert_eq!(
        ShardLayout::new(3, zones(&["a", "a"])),
        Err(ShardingError::DuplicateZone("a".into()))
    );
    assert_eq!(
        ShardLayout::new(3, zones(&["a", ""])),
        Err(ShardingError::EmptyZone)
    );
}

#[test]
fn autoscaled_counts_round_up_to_a_zone_multiple() {
    assert_eq!(round_up_to_zone_multiple(1, 3), 3);
    assert_eq!(round_up_to_zone_multiple(3, 3), 3);
    assert_eq!(round_up_to_zone_multiple(4, 3), 6);
    assert_eq!(round_up_to_zone_multiple(0, 3), 3);
    assert_eq!(round_up_to_zone_multiple(5, 1), 5);
}

/// The proposal's Classic example (shard 2 of 4), as YAML.
#[test]
fn classic_rules_match_the_proposal_example() {
    let yaml = serde_norway::to_string(&classic_rules(4, 2)).unwrap();
    let expected = "\
- source_labels:
  - __address__
  - __tmp_hash
  target_label: __tmp_hash
  regex: (.+);
  replacement: $1
  action: replace
- source_labels:
  - __tmp_hash
  target_label: __tmp_hash
  modulus: 4
  action: hashmod
- source_labels:
  - __tmp_hash
  regex: '2'
  action: keep
";
    assert_eq!(yaml, expected);
}

/// The proposal's Topology example: 4 shards over two zones, shard 2 ⇒ europe-west4-a, in-zone
/// index 1, hashmod by 2 (the proposal prints modulus 4, one of its errors: that would leave half
/// of each zone's targets unscraped).
#[test]
fn topology_rules_for_the_proposal_example() {
    let layout = ShardLayout::new(4, zones(&["europe-west4-a", "europe-west4-b"])).unwrap();
    assert_eq!(
        (layout.zone(2), layout.in_zone(2), layout.modulus()),
        ("europe-west4-a", 1, 2)
    );
    let rules = topology_rules(&layout, 2, ZonelessTargets::Drop);
    let keep_zone = RelabelConfig::keep(&[TMP_TOPOLOGY], "europe-west4-a");
    assert!(rules.contains(&keep_zone), "{rules:#?}");
    let hashmod = RelabelConfig::hashmod(&[TMP_HASH], TMP_HASH, 2);
    assert!(rules.contains(&hashmod));
    assert_eq!(rules.last(), Some(&RelabelConfig::keep(&[TMP_HASH], "1")));
}

fn target(address: &str, extra: &[(&str, &str)]) -> Labels {
    let mut labels = Labels::from([("__address__".to_string(), address.to_string())]);
    for (name, value) in extra {
        labels.insert(name.to_string(), value.to_string());
    }
    labels
}

fn keeping_shards(layout: &ShardLayout, zoneless: ZonelessTargets, labels: &Labels) -> Vec<u32> {
    (0..layout.shards())
        .filter(|shard| {
            let rules = topology_rules(layout, *shard, zoneless);
            apply(&rules, labels).unwrap().is_some()
        })
        .collect()
}

#[test]
fn topology_sources_are_used_in_order_of_precedence() {
    let layout = ShardLayout::new(3, zones(&["a", "b", "c"])).unwrap();
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
        let kept = keeping_shards(&layout, ZonelessTargets::Drop, &labels);
        let kept_zones: Vec<&str> = kept.iter().map(|shard| layout.zone(*shard)).collect();
        assert_eq!(kept_zones, vec![zone], "{extra:?}");
    }
}

#[test]
fn zoneless_targets_follow_the_policy() {
    let layout = ShardLayout::new(6, zones(&["a", "b", "c"])).unwrap();
    let zoneless = target("10.0.0.9:80", &[]);
    let unlisted = target("10.0.0.9:80", &[(TOPOLOGY_SOURCES[2], "z")]);
    for labels in [zoneless, unlisted] {
        assert!(keeping_shards(&layout, ZonelessTargets::Drop, &labels).is_empty());
        let kept = keeping_shards(&layout, ZonelessTargets::FirstZone, &labels);
        assert_eq!(kept.len(), 1);
        assert_eq!(layout.zone(kept[0]), "a");
    }
}

#[test]
fn quote_meta_escapes_only_re2_metacharacters() {
    assert_eq!(quote_meta("europe-west4-a"), "europe-west4-a");
    assert_eq!(quote_meta("us.east+1(x)$"), r"us\.east\+1\(x\)\$");
}

#[test]
fn zone_names_are_regex_escaped() {
    let layout = ShardLayout::new(2, zones(&["us.east", "usXeast"])).unwrap();
    // Unescaped, "us.east" would also keep targets of zone "usXeast".
    let labels = target("10.0.0.1:80", &[(TOPOLOGY_SOURCES[0], "usXeast")]);
    let kept = keeping_shards(&layout, ZonelessTargets::Drop, &labels);
    assert_eq!(kept, vec![1]);
}

#[test]
fn idle_and_retained_shards_keep_nothing() {
    let layout = ShardLayout::new(4, zones(&["a", "b", "c"])).unwrap();
    assert_eq!(layout.idle_shards(), vec![3]);
    for i in 0..200 {
        let labels = target(&format!("10.0.{i}.1:80"), &[(TOPOLOGY_SOURCES[0], "a")]);
        let rules = topology_rules(&layout, 3, ZonelessTargets::FirstZone);
        assert!(apply(&rules, &labels).unwrap().is_none());
        assert!(apply(&rules_scraping_nothing(), &labels).unwrap().is_none());
    }
}

#[test]
fn external_labels_and_node_selector() {
    let layout = ShardLayout::new(4, zones(&["europe-west4-a", "europe-west4-b"])).unwrap();
    let labels = external_labels(Some(&layout), 2, "zone");
    assert_eq!(labels["shard"], "2");
    assert_eq!(labels["zone"], "europe-west4-a");
    assert!(!external_labels(Some(&layout), 2, "").contains_key("zone"));
    assert!(!external_labels(None, 2, "zone").contains_key("zone"));

    let user = BTreeMap::from([
        ("foo".to_string(), "bar".to_string()),
        (ZONE_LABEL.to_string(), "will be replaced".to_string()),
    ]);
    let selector = node_selector(&layout, 2, &user);
    assert_eq!(selector["foo"], "bar");
    assert_eq!(selector[ZONE_LABEL], "europe-west4-a");
}

#[test]
fn node_metadata_is_attached_for_the_roles_that_need_it() {
    let mut config = serde_json::json!({
        "job_name": "pods",
        "kubernetes_sd_configs": [
            {"role": "pod"},
            {"role": "node"},
            {"role": "endpointslice", "attach_metadata": {"node": false}},
        ]
    });
    assert!(attach_node_metadata(&mut config));
    let sd = &config["kubernetes_sd_configs"];
    assert_eq!(sd[0]["attach_metadata"]["node"], true);
    assert!(sd[1].get("attach_metadata").is_none());
    assert_eq!(sd[2]["attach_metadata"]["node"], true);
    assert!(
        !attach_node_metadata(&mut config),
        "second pass changes nothing"
    );
    assert!(!attach_node_metadata(
        &mut serde_json::json!({"static_configs": []})
    ));
}

#[test]
fn modes_parse_with_the_address_alias() {
    let mode: ShardingMode = serde_json::from_str("\"Address\"").unwrap();
    assert_eq!(mode, ShardingMode::Classic);
    let mode: ShardingMode = serde_json::from_str("\"Topology\"").unwrap();
    assert_eq!(mode, ShardingMode::Topology);
    assert_eq!(ZonelessTargets::default(), ZonelessTargets::FirstZone);
}
