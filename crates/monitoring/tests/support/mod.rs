//! Shared helpers: objects from YAML, a store of Secrets/ConfigMaps, and a Prometheus-like
//! target pipeline running the generated relabel_configs on discovered label sets.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;
use zone_monitoring::Object;
use zone_monitoring::resolve::{Source, Values};
use zone_monitoring::translate::Job;
use zone_topology::relabel::{CompiledRules, Labels, RelabelConfig};

pub const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n";
pub const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
pub const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n";

/// An object in namespace `team` named `name`, its spec parsed from YAML.
pub fn object<S: DeserializeOwned>(name: &str, spec_yaml: &str) -> Object<S> {
    Object {
        namespace: "team".into(),
        name: name.into(),
        uid: "uid-1".into(),
        labels: BTreeMap::new(),
        spec: serde_norway::from_str(spec_yaml).expect("spec parses"),
    }
}

/// The Secrets and ConfigMaps of namespace `team` the tests reference.
pub fn values() -> Values {
    let mut values = Values::default();
    let secret = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    values.insert(
        Source::Secret,
        "team",
        "creds",
        secret(&[
            ("user", "alice"),
            ("pass", "s3cret-pass"),
            ("token", "s3cret-token"),
            ("client-id", "the-client"),
            ("client-secret", "s3cret-client"),
            ("header", "Basic abc"),
        ]),
    );
    values.insert(
        Source::Secret,
        "team",
        "tls",
        secret(&[
            ("ca.crt", CA),
            ("tls.crt", CERT),
            ("tls.key", KEY),
            ("junk", "not pem"),
        ]),
    );
    values.insert(
        Source::ConfigMap,
        "team",
        "ca-bundle",
        secret(&[("ca.crt", CA), ("id", "cm-client")]),
    );
    values
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The relabel_configs of a job, parsed back into the evaluator's rules.
pub fn rules(job: &Job, key: &str) -> Vec<RelabelConfig> {
    serde_json::from_value(job.get(key).cloned().unwrap_or(Value::Array(vec![])))
        .expect("rules parse")
}

/// What Prometheus does with one discovered target of `job`: sets `job` to the job name,
/// relabels, then drops `__`-prefixed labels and defaults `instance` to the address.
/// `None`: the target is dropped.
pub fn target(job: &Job, discovered: &Labels) -> Option<Labels> {
    let compiled = CompiledRules::new(&rules(job, "relabel_configs")).expect("rules compile");
    let mut input = discovered.clone();
    input.insert("job".into(), job["job_name"].as_str().unwrap().to_string());
    let mut out = compiled.apply(&input)?;
    let address = out.get("__address__").cloned()?;
    out.retain(|name, _| !name.starts_with("__"));
    out.entry("instance".into()).or_insert(address);
    Some(out)
}

/// A Pod behind Service `api` of namespace `team`, as the endpoints role discovers it.
pub fn endpoints_target() -> Labels {
    labels(&[
        ("__address__", "10.0.0.5:8080"),
        ("__meta_kubernetes_namespace", "team"),
        ("__meta_kubernetes_service_name", "api"),
        ("__meta_kubernetes_service_label_app", "api"),
        ("__meta_kubernetes_service_labelpresent_app", "true"),
        (
            "__meta_kubernetes_service_label_app_kubernetes_io_part_of",
            "shop",
        ),
        (
            "__meta_kubernetes_service_labelpresent_app_kubernetes_io_part_of",
            "true",
        ),
        ("__meta_kubernetes_endpoint_port_name", "web"),
        ("__meta_kubernetes_endpoint_address_target_kind", "Pod"),
        (
            "__meta_kubernetes_endpoint_address_target_name",
            "api-7d9f-x",
        ),
        ("__meta_kubernetes_pod_name", "api-7d9f-x"),
        ("__meta_kubernetes_pod_container_name", "server"),
        ("__meta_kubernetes_pod_phase", "Running"),
        ("__meta_kubernetes_pod_label_team", "core"),
        ("__meta_kubernetes_pod_labelpresent_team", "true"),
        ("__meta_kubernetes_pod_container_port_name", "web"),
        ("__meta_kubernetes_pod_container_port_number", "8080"),
    ])
}

/// The same target as the endpointslice role names it.
pub fn endpointslice_target() -> Labels {
    endpoints_target()
        .into_iter()
        .map(|(name, value)| (name.replace("_endpoint_", "_endpointslice_"), value))
        .collect()
}

/// A container port of Pod `web-0` of namespace `team`, as the pod role discovers it.
pub fn pod_target() -> Labels {
    labels(&[
        ("__address__", "10.0.0.9:9090"),
        ("__meta_kubernetes_namespace", "team"),
        ("__meta_kubernetes_pod_name", "web-0"),
        ("__meta_kubernetes_pod_container_name", "app"),
        ("__meta_kubernetes_pod_container_port_name", "metrics"),
        ("__meta_kubernetes_pod_container_port_number", "9090"),
        ("__meta_kubernetes_pod_phase", "Running"),
        ("__meta_kubernetes_pod_label_app", "web"),
        ("__meta_kubernetes_pod_labelpresent_app", "true"),
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name", "web"),
        (
            "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name",
            "true",
        ),
    ])
}

/// Sets `name` to `value` in a copy of `base` (`""` removes it).
pub fn with(base: &Labels, name: &str, value: &str) -> Labels {
    let mut out = base.clone();
    if value.is_empty() {
        out.remove(name);
    } else {
        out.insert(name.into(), value.into());
    }
    out
}

/// A JSON value from YAML, for comparing parts of jobs.
pub fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).expect("yaml parses")
}
