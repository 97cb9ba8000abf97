//! Golden tests of the pure steps: each fixture (a ShardedPrometheus manifest) is validated and
//! built, and every child is compared with the reviewed output in `fixtures/<name>.golden.yaml`.
//! `UPDATE_GOLDEN=1 cargo test -p shard-controller golden` rewrites them; review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use zone_api::ShardedPrometheus;

use crate::children::build::{self, BuildInput};
use crate::monitoring::Monitoring;
use crate::reconcile::validate::validate;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn built_yaml(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    let sprom: ShardedPrometheus = serde_norway::from_str(&text).unwrap();
    let valid = validate(&sprom, "topology.kubernetes.io/zone").unwrap();
    let name = sprom.metadata.name.clone().unwrap();
    let namespace = sprom
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let monitoring = Monitoring::of_spec(&valid);
    let built = build::build(&BuildInput {
        name: &name,
        namespace: &namespace,
        valid: &valid,
        monitoring: &monitoring,
    })
    .unwrap();
    let mut documents = vec![format!(
        "# node metadata disabled by the user: {:?}\n",
        built.node_metadata_disabled
    )];
    for shard in &built.shards {
        // The rendered prometheus.yml as a block, not an escaped string: that is what a reviewer
        // reads, and what each Prometheus shard loads.
        let mut secret = shard.config.clone();
        let config = secret
            .data
            .as_mut()
            .and_then(|data| data.remove(crate::children::config::CONFIG_KEY))
            .unwrap();
        documents.push(format!(
            "# shard {} Secret {}\n{}",
            shard.index,
            crate::children::config::CONFIG_KEY,
            String::from_utf8(config.0).unwrap()
        ));
        documents.push(serde_norway::to_string(&secret).unwrap());
        documents.push(serde_norway::to_string(&shard.stateful_set).unwrap());
        documents.push(serde_norway::to_string(&shard.service).unwrap());
    }
    if let Some(service) = &built.thanos_service {
        documents.push(serde_norway::to_string(service).unwrap());
    }
    documents.join("---\n")
}

fn check(manifest: &Path, golden: &Path) {
    let actual = built_yaml(manifest);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(golden, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(golden).unwrap_or_default();
    if actual != expected {
        let first = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, e)| a != e)
            .unwrap_or(actual.lines().count().min(expected.lines().count()));
        panic!(
            "{} differs from {} from line {} on (run with UPDATE_GOLDEN=1 and review the diff):\n  built:  {:?}\n  golden: {:?}",
            manifest.display(),
            golden.display(),
            first + 1,
            actual.lines().nth(first),
            expected.lines().nth(first)
        );
    }
}

#[test]
fn the_sample_builds_as_reviewed() {
    let root = manifest_dir();
    check(
        &root.join("../../config/samples/shardedprometheus.yaml"),
        &root.join("fixtures/sample.golden.yaml"),
    );
}

#[test]
fn ten_shards_over_three_zones_build_as_reviewed() {
    let root = manifest_dir().join("fixtures");
    check(
        &root.join("ten-shards-three-zones.yaml"),
        &root.join("ten-shards-three-zones.golden.yaml"),
    );
}

#[test]
fn classic_shards_build_as_reviewed() {
    let root = manifest_dir().join("fixtures");
    check(
        &root.join("classic-four-shards.yaml"),
        &root.join("classic-four-shards.golden.yaml"),
    );
}

#[test]
fn prometheus_2_shards_build_with_their_flags_and_reloader_as_reviewed() {
    let root = manifest_dir().join("fixtures");
    check(
        &root.join("prometheus-2.yaml"),
        &root.join("prometheus-2.golden.yaml"),
    );
}

#[test]
fn every_pod_template_option_builds_as_reviewed() {
    let root = manifest_dir().join("fixtures");
    check(
        &root.join("pod-template.yaml"),
        &root.join("pod-template.golden.yaml"),
    );
}

/// The configuration Secret of a retained shard, built from `manifest`'s spec, parsed.
fn retained_config(manifest: &Path, index: u32, zone: Option<&str>) -> serde_json::Value {
    let text = std::fs::read_to_string(manifest).unwrap();
    let sprom: ShardedPrometheus = serde_norway::from_str(&text).unwrap();
    let valid = validate(&sprom, "topology.kubernetes.io/zone").unwrap();
    let name = sprom.metadata.name.clone().unwrap();
    let monitoring = Monitoring::of_spec(&valid);
    let input = BuildInput {
        name: &name,
        namespace: "default",
        valid: &valid,
        monitoring: &monitoring,
    };
    let secret = build::retained_config(&input, index, zone).unwrap();
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some(zone_api::sprom::contract::shard_name(&name, index).as_str())
    );
    let yaml = &secret.data.unwrap()[crate::children::config::CONFIG_KEY];
    serde_norway::from_slice(&yaml.0).unwrap()
}

#[test]
fn a_retained_shard_scrapes_evaluates_and_alerts_nothing_and_keeps_its_labels() {
    let fixtures = manifest_dir().join("fixtures");
    // Rule files and scrape configs in the spec; shard 5 is beyond the spec's shards.
    let config = retained_config(&fixtures.join("classic-four-shards.yaml"), 5, None);
    for key in ["scrape_configs", "rule_files", "alerting"] {
        assert!(config.get(key).is_none(), "{key} in {config}");
    }
    assert_eq!(config["global"]["external_labels"]["shard"], "5");
    // Remote write stays (the WAL drains); the zone label is the shard's zone before it was
    // retained, which the layout no longer knows.
    let config = retained_config(
        &fixtures.join("ten-shards-three-zones.yaml"),
        12,
        Some("zone-b"),
    );
    assert!(config.get("scrape_configs").is_none(), "{config}");
    assert!(
        config["remote_write"]
            .as_array()
            .is_some_and(|rw| !rw.is_empty()),
        "{config}"
    );
    let labels = &config["global"]["external_labels"];
    assert_eq!(labels["shard"], "12");
    assert!(
        labels.as_object().unwrap().values().any(|v| v == "zone-b"),
        "{labels}"
    );
}

#[test]
fn a_thanos_sidecar_builds_as_reviewed() {
    let root = manifest_dir().join("fixtures");
    check(&root.join("thanos.yaml"), &root.join("thanos.golden.yaml"));
}
