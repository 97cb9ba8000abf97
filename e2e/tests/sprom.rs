//! ShardedPrometheus controller e2e on the local zonal cluster, as its ServiceAccount: children
//! pinned to zones by the real scheduler, config changes reaching every shard's config Secret in
//! place (no shard config in any ConfigMap), deleted children restored, invalid specs refused
//! once without a hot loop, and Degraded reasons for a ServiceAccount that cannot discover and
//! for zones without nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::fixture;
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::conditions::Conditions;
use zone_api::sprom::{condition, reason};

#[path = "sprom/autoscaling.rs"]
mod autoscaling;
#[path = "sprom/federator.rs"]
mod federator;
#[path = "sprom/invalid.rs"]
mod invalid;
#[path = "sprom/kubectl_zone.rs"]
mod kubectl_zone;
#[path = "sprom/paused.rs"]
mod paused;
#[path = "sprom/real_prometheus.rs"]
mod real_prometheus;
#[path = "sprom/restricted.rs"]
mod restricted;
#[path = "sprom/shards.rs"]
mod shards;

const TIMEOUT: Duration = Duration::from_secs(120);
const MANAGER: &str = "e2e-sprom";
const NAME: &str = "prom";

/// The ShardedPrometheus [`NAME`] under test, with the shard controller watching its namespace.
type Fixture = fixture::Sprom;

async fn new_fixture(prefix: &str) -> Fixture {
    Fixture::new(prefix, NAME, MANAGER, TIMEOUT).await
}

fn spec(shards: u32, jobs: &[&str], zones: &[&str]) -> Value {
    let scrape: Vec<Value> = jobs
        .iter()
        .map(|job| json!({"job_name": job, "kubernetes_sd_configs": [{"role": "pod"}]}))
        .collect();
    json!({
        "shards": shards,
        "replicas": 2,
        // kwok nodes run the pods of this test (Ready without a container runtime).
        "nodeSelector": {"type": "kwok"},
        "shardingStrategy": {"topology": {"values": zones}},
        "scrapeConfigs": scrape,
    })
}

/// The `prometheus.yml` of a shard's config Secret (empty if it has none).
fn config_of(secret: &Secret) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("prometheus.yml"))
        .map_or_else(String::new, |b| String::from_utf8_lossy(&b.0).into_owned())
}

/// The shard config Secrets and the StatefulSets of the ShardedPrometheus, by name.
async fn children(ns: &TestNamespace) -> (BTreeMap<String, Secret>, BTreeMap<String, StatefulSet>) {
    let selector = format!("app.kubernetes.io/instance={NAME}");
    let params = ListParams::default().labels(&selector);
    let secrets: Api<Secret> = ns.api();
    let sets: Api<StatefulSet> = ns.api();
    let secrets = secrets
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    let sets = sets
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    (secrets, sets)
}

/// The active targets of `job` a Prometheus pod reports from its own API: address → health.
async fn pod_targets(pod_ip: &str, job: &str) -> Result<BTreeMap<String, String>, String> {
    let address = format!("{pod_ip}:9090")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let (code, body) = e2e::process::http_get_from(address, "/api/v1/targets?state=active").await?;
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    let body: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let active = body["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(active
        .iter()
        .filter(|t| t["scrapePool"] == job)
        .map(|t| {
            (
                t["discoveredLabels"]["__address__"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                t["health"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// A scrape job `name` of the pods labelled `app: target` of the test namespace.
fn target_job(fx: &Fixture, name: &str) -> Value {
    json!({
        "job_name": name,
        "scrape_interval": "2s",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
        "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
    })
}
