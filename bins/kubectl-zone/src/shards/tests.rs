#![allow(clippy::unwrap_used, clippy::expect_used)]
use serde_json::json;
use zone_topology::relabel;
use zone_topology::sharding::{TOPOLOGY_SOURCES, ZonelessTargets};

use super::*;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn topology(shards: u32) -> ShardLayout {
    ShardLayout::topology(
        shards,
        ZONES.iter().map(|z| z.to_string()).collect(),
        ZonelessTargets::Spread,
    )
    .unwrap()
}

/// The user's own rule of the job: keep the pods labelled app=target.
fn own_rule() -> RelabelConfig {
    RelabelConfig::keep(&["__meta_kubernetes_pod_label_app"], "target")
}

/// `/api/v1/status/config` of shard `shard` of `layout`, as Prometheus writes it back: every
/// default spelled out.
fn config_answer(layout: &ShardLayout, shard: u32) -> String {
    let mut rules = vec![own_rule()];
    rules.extend(layout.rules(shard));
    let rules: Vec<Value> = rules
        .iter()
        .map(|rule| {
            let mut rule = serde_json::to_value(rule).unwrap();
            let object = rule.as_object_mut().unwrap();
            object.entry("separator").or_insert(json!(";"));
            object.entry("regex").or_insert(json!("(.*)"));
            object.entry("replacement").or_insert(json!("$1"));
            object.entry("action").or_insert(json!("replace"));
            rule
        })
        .collect();
    let config = json!({"global": {"scrape_interval": "1m"}, "scrape_configs": [
        {"job_name": "targets", "relabel_configs": rules},
    ]});
    json!({"status": "success", "data": {"yaml": serde_norway::to_string(&config).unwrap()}})
        .to_string()
}

/// Targets `n` per zone, with the meta labels discovery gives them (and one other pod of the
/// namespace the job's own rule drops).
fn discovered(per_zone: usize) -> Vec<Labels> {
    let mut targets = Vec::new();
    for (z, zone) in ZONES.iter().enumerate() {
        for i in 0..per_zone {
            targets.push(Labels::from([
                ("__address__".to_string(), format!("10.0.{z}.{i}:8080")),
                (TOPOLOGY_SOURCES[0].to_string(), zone.to_string()),
                (
                    "__meta_kubernetes_pod_label_app".to_string(),
                    "target".to_string(),
                ),
            ]));
        }
    }
    targets
}

/// Each shard's answers for `targets` under `layout`: the targets its full configuration keeps.
fn views(layout: &ShardLayout, targets: &[Labels]) -> BTreeMap<u32, ShardView> {
    (0..layout.shards())
        .map(|shard| {
            let mut rules = vec![own_rule()];
            rules.extend(layout.rules(shard));
            let active: Vec<Value> = targets
                .iter()
                .filter(|labels| relabel::apply(&rules, labels).unwrap().is_some())
                .map(|labels| json!({"scrapePool": "targets", "discoveredLabels": labels}))
                .collect();
            let answer = json!({"status": "success", "data": {"activeTargets": active}});
            let view = parse_view(&answer.to_string(), &config_answer(layout, shard)).unwrap();
            (shard, view)
        })
        .collect()
}

/// 3 → 5 shards (zone-a and zone-b get a second one): the prediction moves exactly the targets
/// that the 5 shards' own configurations place elsewhere, each onto a new shard of its zone.
#[test]
fn a_resize_moves_what_the_new_configurations_place_elsewhere() {
    let targets = discovered(20);
    let (now, then) = (topology(3), topology(5));
    let resize = predict(&now, &then, &views(&now, &targets)).unwrap();
    assert_eq!(resize.targets, 60);
    assert!(resize.unplaced.is_empty(), "{:?}", resize.unplaced);
    let after = views(&then, &targets);
    let mut expected = Vec::new();
    for (shard, view) in &after {
        for target in &view.targets {
            let address = target.discovered["__address__"].clone();
            let before = now_keeper(&now, &targets, &address);
            if before != *shard {
                expected.push((address, before, *shard));
            }
        }
    }
    let mut predicted: Vec<(String, u32, u32)> = resize
        .moves
        .iter()
        .map(|m| (m.target.clone(), m.from, m.to))
        .collect();
    predicted.sort();
    expected.sort();
    assert_eq!(predicted, expected);
    assert!(
        predicted.iter().all(|(_, _, to)| *to >= 3),
        "only onto the new shards"
    );
    // About half of zone-a's and zone-b's targets, none of zone-c's.
    assert!((10..=30).contains(&resize.moved), "{}", resize.moved);
    let counts: Vec<usize> = after.values().map(|v| v.targets.len()).collect();
    assert_eq!(resize.after.values().copied().collect::<Vec<_>>(), counts);
}

fn now_keeper(layout: &ShardLayout, targets: &[Labels], address: &str) -> u32 {
    let labels = targets
        .iter()
        .find(|l| l["__address__"] == address)
        .unwrap();
    let mut rules = vec![own_rule()];
    rules.extend(layout.rules(0));
    let compiled = compiled_rules(layout).unwrap();
    keepers(&compiled, labels)[0]
}

/// Answers that are not Prometheus's are refused with what was wrong, never a panic.
#[test]
fn bad_answers_are_refused() {
    let config = config_answer(&topology(3), 0);
    assert!(
        parse_view("{", &config)
            .unwrap_err()
            .contains("/api/v1/targets")
    );
    assert!(
        parse_view("{\"data\":{}}", &config)
            .unwrap_err()
            .contains("activeTargets")
    );
    let targets = r#"{"data":{"activeTargets":[]}}"#;
    assert!(parse_view(targets, "{}").unwrap_err().contains("data.yaml"));
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let deep = json!({"data": {"yaml": deep}}).to_string();
    assert!(parse_view(targets, &deep).is_err());
}

#[test]
fn retained_shards_show_their_time_left() {
    let status = ShardedPrometheusStatus {
        retained_shards: vec![
            zone_api::sprom::RetainedShard {
                index: 4,
                deletion_deadline: Some("2026-01-01T00:10:00Z".into()),
            },
            zone_api::sprom::RetainedShard {
                index: 5,
                deletion_deadline: None,
            },
        ],
        ..ShardedPrometheusStatus::default()
    };
    let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let rows = retained(&status, now);
    assert_eq!(rows[0].seconds_left, Some(600));
    assert_eq!(rows[1].seconds_left, None);
}
