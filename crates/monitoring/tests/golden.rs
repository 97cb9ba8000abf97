//! Golden tests: realistic objects under `fixtures/scrape/*.yaml` → the jobs in
//! `fixtures/scrape/*.golden.yaml`. Run with `UPDATE_GOLDENS=1` to rewrite the goldens, then
//! review the diff against what prometheus-operator would generate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use zone_monitoring::Object;
use zone_monitoring::translate::{DiscoveryRole, Job, Settings};
use zone_monitoring::translate::{pod_monitor, scrape_config, service_monitor};

#[derive(Deserialize)]
struct Manifest {
    kind: String,
    metadata: Metadata,
    spec: Value,
}

#[derive(Deserialize)]
struct Metadata {
    namespace: String,
    name: String,
}

fn object<S: serde::de::DeserializeOwned>(manifest: &Manifest) -> Object<S> {
    Object {
        namespace: manifest.metadata.namespace.clone(),
        name: manifest.metadata.name.clone(),
        uid: String::new(),
        labels: Default::default(),
        spec: serde_json::from_value(manifest.spec.clone()).expect("spec parses"),
    }
}

fn translate(manifest: &Manifest, settings: &Settings) -> Vec<Job> {
    let values = support::values();
    match manifest.kind.as_str() {
        "ServiceMonitor" => service_monitor(&object(manifest), settings, &values),
        "PodMonitor" => pod_monitor(&object(manifest), settings, &values),
        "ScrapeConfig" => scrape_config(&object(manifest), settings, &values),
        other => panic!("unexpected kind {other}"),
    }
    .expect("translates")
}

fn check(name: &str, settings: Settings) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/scrape");
    let input = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
    let manifest: Manifest = serde_norway::from_str(&input).unwrap();
    let jobs = translate(&manifest, &settings);
    let golden_path = dir.join(format!("{name}.golden.yaml"));
    if std::env::var_os("UPDATE_GOLDENS").is_some() {
        std::fs::write(&golden_path, serde_norway::to_string(&jobs).unwrap()).unwrap();
    }
    let golden: Value =
        serde_norway::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    // Compared as values: map key order depends on serde_json features, not on us.
    assert_eq!(serde_json::to_value(&jobs).unwrap(), golden, "{name}");
}

#[test]
fn kube_state_metrics_service_monitor() {
    check("servicemonitor-kube-state-metrics", Settings::default());
}

#[test]
fn pod_monitor_with_basic_auth() {
    check("podmonitor-web", Settings::default());
}

#[test]
fn scrape_config_with_static_and_node_discovery() {
    check("scrapeconfig-external", Settings::default());
}

#[test]
fn endpointslice_service_monitor_under_enforcement() {
    check(
        "servicemonitor-endpointslice-enforced",
        Settings {
            service_discovery_role: DiscoveryRole::EndpointSlice,
            enforced_namespace_label: Some("namespace".into()),
            enforced_sample_limit: Some(10000),
            enforced_label_limit: Some(100),
            enforced_body_size_limit: Some("50MB".into()),
            ..Settings::default()
        },
    );
}
