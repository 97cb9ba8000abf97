#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use zone_operator::testing::{FakePrometheus, Reply};

use super::measure::{self, Scraped, Targets, Vector, target_zone};
use super::*;

fn sources() -> Vec<String> {
    topology_sources("topology.kubernetes.io/zone").to_vec()
}

#[test]
fn a_target_is_classed_by_its_zone_against_the_pods() {
    assert_eq!(Class::of(Some("a"), Some("a")), Class::SameZone);
    assert_eq!(Class::of(Some("a"), Some("b")), Class::CrossZone);
    assert_eq!(Class::of(Some("a"), None), Class::Zoneless);
    assert_eq!(Class::of(None, Some("a")), Class::Zoneless);
}

/// The zone is read as the shards' relabelling reads it: a discovered `__tmp_topology`, then the
/// endpoint slice's zone, the node's label, the pod's label; empty values do not count.
#[test]
fn a_targets_zone_is_read_in_the_relabellings_order() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let slice = "__meta_kubernetes_endpointslice_endpoint_zone";
    let node = "__meta_kubernetes_node_label_topology_kubernetes_io_zone";
    let pod = "__meta_kubernetes_pod_label_topology_kubernetes_io_zone";
    let zone = |pairs: &[(&str, &str)]| target_zone(&labels(pairs), &sources());
    assert_eq!(
        zone(&[(pod, "c"), (node, "b"), (slice, "a")]),
        Some("a".into())
    );
    assert_eq!(
        zone(&[(pod, "c"), (node, "b"), (slice, "")]),
        Some("b".into())
    );
    assert_eq!(zone(&[(pod, "c")]), Some("c".into()));
    assert_eq!(
        zone(&[(TMP_TOPOLOGY_LABEL, "z"), (slice, "a")]),
        Some("z".into())
    );
    assert_eq!(zone(&[("__address__", "10.0.0.1:80")]), None);
}

const TMP_TOPOLOGY_LABEL: &str = zone_topology::sharding::TMP_TOPOLOGY;

fn targets_answer() -> serde_json::Value {
    json!({"activeTargets": [
        {"discoveredLabels": {"__meta_kubernetes_endpointslice_endpoint_zone": "zone-a"},
         "labels": {"instance": "10.0.0.1:8080", "job": "app"}},
        {"discoveredLabels": {"__meta_kubernetes_node_label_topology_kubernetes_io_zone": "zone-b"},
         "labels": {"instance": "10.0.0.2:8080", "job": "app"}},
        {"discoveredLabels": {"__address__": "db:9100"},
         "labels": {"instance": "db:9100", "job": "static"}},
    ]})
}

fn vector_answer() -> serde_json::Value {
    json!({"resultType": "vector", "result": [
        {"metric": {"instance": "10.0.0.1:8080", "job": "app"}, "value": [100.0, "1200"]},
        {"metric": {"instance": "10.0.0.2:8080", "job": "app"}, "value": [100.0, "3400"]},
        {"metric": {"instance": "db:9100", "job": "static"}, "value": [100.0, "50"]},
        // A target gone since: zoneless. A body over its limit (-1) counts nothing.
        {"metric": {"instance": "10.0.0.9:8080", "job": "app"}, "value": [100.0, "7"]},
        {"metric": {"instance": "big:1", "job": "static"}, "value": [100.0, "-1"]},
        {"metric": {"instance": "odd:1", "job": "static"}, "value": [100.0, "NaN"]},
    ]})
}

fn scraped(zone: Option<&str>, bytes: f64) -> Scraped {
    Scraped {
        zone: zone.map(str::to_owned),
        bytes,
    }
}

#[test]
fn each_series_takes_the_zone_of_the_target_with_its_labels() {
    let targets: Targets = serde_json::from_value(targets_answer()).unwrap();
    let vector: Vector = serde_json::from_value(vector_answer()).unwrap();
    assert_eq!(
        measure::join(&targets, vector, &sources()),
        [
            scraped(Some("zone-a"), 1200.0),
            scraped(Some("zone-b"), 3400.0),
            scraped(None, 50.0),
            scraped(None, 7.0),
            scraped(None, 0.0),
            scraped(None, 0.0),
        ]
    );
}

/// Against a fake Prometheus: the targets, then the window `(start, end]` asked as a range of
/// milliseconds at the end's time.
#[tokio::test]
async fn a_pod_is_asked_its_targets_and_the_bytes_of_its_window() {
    let prometheus = FakePrometheus::start(Reply::json(404, "")).await;
    prometheus.answer("/api/v1/targets", Reply::success(targets_answer()));
    prometheus.answer("/api/v1/query", Reply::success(vector_answer()));
    let client = prober::client().unwrap().gzip();
    let got = measure::scraped(&client, prometheus.addr, 1000.0, 1060.5, &sources())
        .await
        .unwrap();
    assert_eq!(got.len(), 6);
    let paths = prometheus.paths();
    assert_eq!(paths[0], "/api/v1/targets?state=active");
    assert_eq!(
        paths[1],
        "/api/v1/query?query=sum_over_time%28scrape_body_size_bytes%5B60500ms%5D%29&time=1060.500"
    );
    // No answer: no figures, and the window is asked again next round.
    prometheus.answer("/api/v1/query", Reply::json(503, "\"busy\""));
    let none = measure::scraped(&client, prometheus.addr, 1000.0, 1060.0, &sources()).await;
    assert_eq!(none, None);
}

fn round(end: f64, shards: &[(u32, f64, f64, f64)], classic: f64) -> Round {
    Round {
        end,
        seconds: 0.0,
        shards: shards
            .iter()
            .map(|(index, same, cross, zoneless)| {
                let bytes = Bytes {
                    same_zone: *same,
                    cross_zone: *cross,
                    zoneless: *zoneless,
                };
                (*index, bytes)
            })
            .collect(),
        classic_cross_zone: classic,
        generation: Some(1),
    }
}

fn resource() -> (String, String) {
    ("ns".to_owned(), "p".to_owned())
}

#[test]
fn the_status_projects_the_last_hour_to_a_day() {
    let ledger = TrafficLedger::default();
    assert_eq!(ledger.observe("ns", "p"), None, "nothing before a round");
    assert!(ledger.record(resource(), round(1_000_000.0, &[(0, 60.0, 0.0, 6.0)], 40.0)));
    assert!(!ledger.record(
        resource(),
        round(
            1_000_060.0,
            &[(0, 60.0, 0.0, 6.0), (1, 0.0, 120.0, 0.0)],
            40.0
        )
    ));
    let status = ledger.observe("ns", "p").unwrap();
    // Two rounds of 60 s: 120 s, a day is 720 times that.
    assert_eq!(status.measured_seconds, 120);
    assert_eq!(status.measured_at, "1970-01-12T13:47:40Z");
    assert_eq!(status.total.same_zone_bytes_per_day, 120 * 720);
    assert_eq!(status.total.cross_zone_bytes_per_day, 120 * 720);
    assert_eq!(status.total.zoneless_bytes_per_day, 12 * 720);
    assert_eq!(status.classic_cross_zone_bytes_per_day, 80 * 720);
    assert_eq!(status.shards.len(), 2);
    assert_eq!(status.shards[1].index, 1);
    assert_eq!(status.shards[1].bytes.cross_zone_bytes_per_day, 120 * 720);
    // An hour later, the first two rounds are out of the window.
    ledger.record(
        resource(),
        round(1_003_660.0, &[(0, 3600.0, 0.0, 0.0)], 0.0),
    );
    let status = ledger.observe("ns", "p").unwrap();
    assert_eq!(status.measured_seconds, 3600);
    assert_eq!(status.total.same_zone_bytes_per_day, 3600 * 24);
    assert_eq!(status.total.cross_zone_bytes_per_day, 0);
    // A new spec: the rounds of the old one are forgotten.
    let changed = Round {
        generation: Some(2),
        ..round(1_003_720.0, &[(0, 0.0, 60.0, 0.0)], 0.0)
    };
    assert!(
        ledger.record(resource(), changed),
        "the first of the new spec"
    );
    let status = ledger.observe("ns", "p").unwrap();
    assert_eq!(status.measured_seconds, 60);
    assert_eq!(status.total.same_zone_bytes_per_day, 0);
    assert_eq!(status.total.cross_zone_bytes_per_day, 60 * 1440);
    // A resource gone is forgotten.
    let gone = ledger.forget_all_but(&BTreeSet::new());
    assert_eq!(gone, [resource()]);
    assert_eq!(ledger.observe("ns", "p"), None);
}

#[test]
fn a_window_follows_the_last_counted_one_and_is_bounded() {
    assert_eq!(window_start(None, 10_000.0), 10_000.0 - 60.0);
    assert_eq!(window_start(Some(9_990.0), 10_000.0), 9_990.0);
    assert_eq!(window_start(Some(0.0), 10_000.0), 10_000.0 - 3600.0);
}

#[test]
fn classic_sharding_would_scrape_across_zones_what_lies_outside_the_pods_zone() {
    let pods = BTreeMap::from([
        ("a".to_owned(), 2),
        ("b".to_owned(), 2),
        ("c".to_owned(), 2),
    ]);
    assert!((outside_share(&pods, "a") - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(outside_share(&pods, "d"), 1.0);
    assert_eq!(outside_share(&BTreeMap::new(), "a"), 0.0);
}

fn target(name: &str, shard: u32, node: &str) -> Target {
    Target {
        shard: ("ns".to_owned(), name.to_owned(), shard),
        pod: format!("{name}-{shard}-{node}"),
        uid: format!("uid-{name}-{shard}-{node}"),
        address: "10.0.0.1:9090".parse().unwrap(),
        node: Some(node.to_owned()),
    }
}

/// Each pod's bytes classed against its own zone and summed per shard; the Classic estimate
/// weighs each zoned target by the share of all the resource's pods (answered or not) outside
/// its zone; a resource none of whose pods answered has no round.
#[test]
fn answers_are_summed_per_shard_against_each_pods_zone() {
    let zone_of = |target: &Target| match target.node.as_deref() {
        Some("node-x") => None,
        node => node.map(|n| n.trim_start_matches("node-").to_owned()),
    };
    let from = |zone: &str, bytes: f64| scraped(Some(zone), bytes);
    let answers = vec![
        (
            target("p", 0, "node-a"),
            Some(vec![from("a", 100.0), from("b", 10.0)]),
        ),
        (
            target("p", 0, "node-b"),
            Some(vec![from("a", 100.0), scraped(None, 5.0)]),
        ),
        (target("p", 1, "node-c"), None),
        (target("p", 1, "node-x"), Some(vec![from("c", 7.0)])),
        (target("q", 0, "node-a"), None),
    ];
    let rounds = sum(&answers, 500.0, zone_of);
    assert_eq!(rounds.len(), 1, "q answered nothing: {rounds:?}");
    let p = &rounds[&resource()];
    assert_eq!(p.end, 500.0);
    let shard0 = p.shards[&0];
    assert_eq!(
        (shard0.same_zone, shard0.cross_zone, shard0.zoneless),
        (100.0, 110.0, 5.0)
    );
    let shard1 = p.shards[&1];
    assert_eq!(
        (shard1.same_zone, shard1.cross_zone, shard1.zoneless),
        (0.0, 0.0, 7.0)
    );
    // p's pods with a zone: a, b, c (one each). Zone a's 200 bytes: 2/3 outside; b's 10: 2/3;
    // c's 7: 2/3. The zoneless 5 bytes are not weighed.
    let expected = (200.0 + 10.0 + 7.0) * 2.0 / 3.0;
    assert!(
        (p.classic_cross_zone - expected).abs() < 1e-9,
        "{}",
        p.classic_cross_zone
    );
}

/// A pod that answered counts up to this round's end next time; one that did not keeps its
/// last end (its next answer covers the gap); a pod never counted and silent has none.
#[test]
fn a_pod_that_did_not_answer_keeps_its_window_open() {
    let ends = HashMap::from([
        ("uid-p-0-node-a".to_owned(), 100.0),
        ("uid-p-0-node-b".to_owned(), 100.0),
        ("uid-gone".to_owned(), 100.0),
    ]);
    let answers = vec![
        (target("p", 0, "node-a"), Some(Vec::new())),
        (target("p", 0, "node-b"), None),
        (target("p", 1, "node-c"), None),
        (target("p", 1, "node-d"), Some(Vec::new())),
    ];
    let next = next_ends(&ends, &answers, 160.0);
    assert_eq!(
        next,
        HashMap::from([
            ("uid-p-0-node-a".to_owned(), 160.0),
            ("uid-p-0-node-b".to_owned(), 100.0),
            ("uid-p-1-node-d".to_owned(), 160.0),
        ])
    );
}
