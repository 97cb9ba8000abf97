#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;
use zone_api::ShardedPrometheus;
use zone_api::sprom::THANOS_SIDECAR_CONTAINER;
use zone_api::sprom::contract::{self, INSTANCE_LABEL};
use zone_operator::testing::{FakePrometheus, Reply, store_of};

use super::prober::{client, probe, targets};
use super::verdict::{Answer, ProbeError};
use super::*;
use zone_operator::prom_api::ApiClient;

const ONE_JOB: &str = "scrape_configs:\n- job_name: a\n";
const TWO_JOBS: &str = "scrape_configs:\n- job_name: a\n- job_name: b\n";

fn print(yaml: &str) -> Fingerprint {
    Fingerprint::of_yaml(yaml).unwrap()
}

fn applied(yaml: &str, secret_changed: bool) -> AppliedConfig {
    AppliedConfig {
        fingerprint: Some(print(yaml)),
        secret_changed,
    }
}

#[test]
fn the_grace_of_a_shard_starts_when_its_configuration_changes() {
    let health = ConfigHealth::default();
    // Seen for the first time, its Secret as in the cluster: applied before the controller
    // started.
    health.record_applied(
        "ns",
        "p",
        &BTreeMap::from([(0, applied(ONE_JOB, false)), (1, applied(ONE_JOB, true))]),
    );
    let seen = health.observe("ns", "p");
    assert_eq!(seen.applied[&0], (print(ONE_JOB), None));
    assert!(seen.applied[&1].1.is_some(), "a rewritten Secret starts it");
    assert!(!seen.probed);
    assert_eq!(seen.grace, DEFAULT_GRACE);
    // The same again keeps its time; another fingerprint starts it; a shard scaled away is
    // forgotten.
    health.record_applied("ns", "p", &BTreeMap::from([(0, applied(TWO_JOBS, false))]));
    let seen = health.observe("ns", "p");
    let (fingerprint, age) = &seen.applied[&0];
    assert_eq!(fingerprint, &print(TWO_JOBS));
    assert!(age.is_some_and(|age| age < Duration::from_secs(60)));
    assert!(!seen.applied.contains_key(&1));
    assert!(health.observe("ns", "other").applied.is_empty());
    assert!(health.observe("other", "p").applied.is_empty());
}

fn probe_of(pod: &str, answer: Answer) -> PodProbe {
    PodProbe {
        pod: pod.to_string(),
        answer,
    }
}

fn refused() -> Answer {
    Answer::Refused {
        last_config_time: None,
    }
}

fn running(yaml: &str) -> Answer {
    Answer::Running {
        served: print(yaml),
    }
}

fn key(name: &str, shard: u32) -> ShardKey {
    ("ns".to_string(), name.to_string(), shard)
}

fn live(names: &[&str]) -> BTreeSet<(String, String)> {
    names
        .iter()
        .map(|name| ("ns".to_string(), name.to_string()))
        .collect()
}

#[test]
fn changed_answers_reconcile_their_resource_only() {
    let health = ConfigHealth::default();
    let round = |p0: Answer| {
        BTreeMap::from([
            (key("p", 0), vec![probe_of("p-0-0", p0)]),
            (key("q", 0), vec![probe_of("q-0-0", running(ONE_JOB))]),
        ])
    };
    // The first round reconciles every resource, pods or not.
    let changed = health.store_answers(round(running(ONE_JOB)), &live(&["p", "q", "r"]));
    assert_eq!(changed, live(&["p", "q", "r"]));
    assert!(health.observe("ns", "p").probed);
    assert!(
        health
            .store_answers(round(running(ONE_JOB)), &live(&["p", "q", "r"]))
            .is_empty()
    );
    assert_eq!(
        health.store_answers(round(refused()), &live(&["p", "q", "r"])),
        live(&["p"])
    );
    assert_eq!(
        health.observe("ns", "p").pods[&0],
        vec![probe_of("p-0-0", refused())]
    );
    // A shard whose pods are gone changes too; a deleted resource is forgotten, not reconciled.
    health.record_applied("ns", "q", &BTreeMap::from([(0, applied(ONE_JOB, false))]));
    let only_p = BTreeMap::from([(key("p", 0), vec![probe_of("p-0-0", refused())])]);
    assert_eq!(health.store_answers(only_p, &live(&["p"])), BTreeSet::new());
    assert!(health.observe("ns", "q").applied.is_empty());
    assert!(health.observe("ns", "q").pods.is_empty());
    let none = BTreeMap::new();
    assert_eq!(health.store_answers(none, &live(&["p"])), live(&["p"]));
}

#[test]
fn the_metric_says_per_shard_whether_its_pods_run_the_applied_configuration() {
    let health = ConfigHealth::new(Duration::ZERO);
    health.record_applied(
        "ns",
        "p",
        &BTreeMap::from([
            (0, applied(TWO_JOBS, false)),
            (1, applied(TWO_JOBS, false)),
            (2, applied(TWO_JOBS, false)),
            (3, applied(TWO_JOBS, false)),
        ]),
    );
    let unreachable = Answer::Unreachable(ProbeError::Connect);
    health.store_answers(
        BTreeMap::from([
            (
                key("p", 0),
                vec![
                    probe_of("a", running(TWO_JOBS)),
                    probe_of("b", unreachable.clone()),
                ],
            ),
            (key("p", 1), vec![probe_of("c", refused())]),
            (key("p", 2), vec![probe_of("d", running(ONE_JOB))]),
            (key("p", 3), vec![probe_of("e", unreachable)]),
        ]),
        &live(&["p"]),
    );
    let states = health.shard_states();
    assert_eq!(
        [0, 1, 2, 3].map(|i| states[&key("p", i)]),
        [Some(true), Some(false), Some(false), None]
    );
}

fn sprom(name: &str, shards: i32, paused: bool) -> ShardedPrometheus {
    serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"shards": shards, "paused": paused, "shardingStrategy": {"mode": "Classic"}},
    }))
    .unwrap()
}

fn pod(name: &str, instance: &str, shard: &str, phase: &str, ip: Option<&str>) -> Pod {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "labels": {INSTANCE_LABEL: instance, contract::SHARD_POD_LABEL: shard},
                     "annotations": {"a": "b"}},
        "spec": {"containers": [{"name": "prometheus"}]},
        "status": {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"},
    }))
    .unwrap();
    strip_pod(&mut pod);
    pod
}

#[test]
fn the_running_pods_of_active_shards_are_asked() {
    let sproms = store_of([sprom("p", 2, false), sprom("paused", 1, true)]);
    let mut deleting = pod("p-1-1", "p", "1", "Running", Some("10.1.0.5"));
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let pods = store_of([
        pod("p-0-0", "p", "0", "Running", Some("10.1.0.1")),
        pod("p-0-1", "p", "0", "Pending", None),
        pod("p-1-0", "p", "1", "Running", Some("fd00::7")),
        deleting,
        // A retained shard (index >= shards), a paused resource, an unknown one, no shard label.
        pod("p-2-0", "p", "2", "Running", Some("10.1.0.2")),
        pod("paused-0-0", "paused", "0", "Running", Some("10.1.0.3")),
        pod("x-0-0", "x", "0", "Running", Some("10.1.0.4")),
        pod("p-bad", "p", "zero", "Running", Some("10.1.0.6")),
    ]);
    let (mut targets, live) = targets(&sproms, &pods);
    targets.sort_by(|a, b| a.pod.cmp(&b.pod));
    let asked: Vec<(&str, String)> = targets
        .iter()
        .map(|t| (t.pod.as_str(), t.address.to_string()))
        .collect();
    assert_eq!(
        asked,
        [
            ("p-0-0", "10.1.0.1:9090".to_string()),
            ("p-1-0", "[fd00::7]:9090".to_string())
        ]
    );
    assert_eq!(targets[1].shard, key("p", 1));
    assert_eq!(targets[1].uid, "uid-p-1-0");
    assert_eq!(live, self::live(&["p", "paused"]));
    let kept = pods.state();
    let stripped = kept.iter().find(|p| p.name_any() == "p-0-0").unwrap();
    assert!(stripped.spec.is_none() && stripped.metadata.annotations.is_none());
    assert_eq!(
        stripped.status.as_ref().unwrap().host_ip,
        None,
        "only phase and IP are kept"
    );
}

/// The cache keeps of a shard's pod what its final upload reads: the sidecar's image (the
/// upload runs it; after an upgrade that changed the default image, the spec's is another)
/// and the upload's attempts, nothing else of the spec.
#[test]
fn a_stripped_pod_keeps_the_sidecars_image_and_the_uploads() {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p-1-0", "namespace": "ns"},
        "spec": {"containers": [
                    {"name": "prometheus", "image": "prometheus:3", "args": ["--a"]},
                    {"name": THANOS_SIDECAR_CONTAINER, "image": "thanos:before", "args": ["sidecar"]}],
                 "ephemeralContainers": [
                    {"name": "debug", "image": "busybox"},
                    {"name": crate::final_upload::pods::container_name(1), "image": "thanos:before"}]},
        "status": {"phase": "Running", "podIP": "10.1.0.1"},
    }))
    .unwrap();
    strip_pod(&mut pod);
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.containers.len(), 1);
    assert_eq!(spec.containers[0].image.as_deref(), Some("thanos:before"));
    assert_eq!(spec.containers[0].args, None);
    let uploads: Vec<&str> = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(uploads, [crate::final_upload::pods::container_name(1)]);
    let read = crate::final_upload::pods::read(&pod);
    assert_eq!(read.sidecar_image.as_deref(), Some("thanos:before"));
}

const RUNTIME_INFO: &str = "/api/v1/status/runtimeinfo";
const CONFIG: &str = "/api/v1/status/config";

/// A Prometheus answering nothing yet (404 on every path).
async fn fake_prometheus() -> FakePrometheus {
    FakePrometheus::start(Reply::json(404, "")).await
}

fn runtime_info(success: bool, last_config_time: &str) -> Reply {
    Reply::success(json!({
        "startTime": "2026-01-01T00:00:00.5Z", "reloadConfigSuccess": success,
        "lastConfigTime": last_config_time, "corruptionCount": 0}))
}

fn config(yaml: &str) -> Reply {
    Reply::success(json!({"yaml": yaml}))
}

fn pod_client() -> ApiClient {
    client().expect("a plain HTTP client")
}

#[tokio::test]
async fn a_pod_is_asked_its_configuration_again_only_after_a_reload() {
    let prometheus = fake_prometheus().await;
    prometheus.answer(RUNTIME_INFO, runtime_info(true, "2026-01-01T00:00:01Z"));
    prometheus.answer(CONFIG, config(ONE_JOB));
    let client = pod_client();
    let (answer, kept) = probe(&client, prometheus.addr, None).await;
    assert_eq!(answer, running(ONE_JOB));
    assert_eq!(prometheus.count(CONFIG), 1);
    // Nothing reloaded: the kept fingerprint, no second request for the configuration.
    prometheus.answer(CONFIG, config(TWO_JOBS));
    let (answer, kept) = probe(&client, prometheus.addr, kept.as_ref()).await;
    assert_eq!(answer, running(ONE_JOB));
    assert_eq!(prometheus.count(CONFIG), 1);
    // A reload: asked again.
    prometheus.answer(RUNTIME_INFO, runtime_info(true, "2026-01-01T00:05:00Z"));
    let (answer, kept) = probe(&client, prometheus.addr, kept.as_ref()).await;
    assert_eq!(answer, running(TWO_JOBS));
    assert_eq!(prometheus.count(CONFIG), 2);
    // A refused reload: what still runs is named by its time; the configuration is not asked.
    prometheus.answer(RUNTIME_INFO, runtime_info(false, "2026-01-01T00:05:00Z"));
    let (answer, kept) = probe(&client, prometheus.addr, kept.as_ref()).await;
    assert_eq!(
        answer,
        Answer::Refused {
            last_config_time: Some("2026-01-01T00:05:00Z".into())
        }
    );
    assert_eq!(prometheus.count(CONFIG), 2);
    assert!(kept.is_some(), "kept for when the reload succeeds again");
}

#[tokio::test]
async fn pods_that_cannot_answer_are_not_probed_with_the_reason() {
    let prometheus = fake_prometheus().await;
    let client = pod_client();
    let unavailable = json!("Service Unavailable").to_string();
    prometheus.answer(RUNTIME_INFO, Reply::json(503, unavailable));
    let (answer, _) = probe(&client, prometheus.addr, None).await;
    assert_eq!(answer, Answer::Unreachable(ProbeError::Status(503)));
    let error = json!({"status": "error", "error": "nope"}).to_string();
    prometheus.answer(RUNTIME_INFO, Reply::json(200, error));
    let (answer, _) = probe(&client, prometheus.addr, None).await;
    assert_eq!(answer, Answer::Unreachable(ProbeError::Unreadable));
    prometheus.answer(RUNTIME_INFO, runtime_info(true, "2026-01-01T00:00:01Z"));
    prometheus.answer(CONFIG, config("scrape_configs: ["));
    let (answer, kept) = probe(&client, prometheus.addr, None).await;
    assert_eq!(answer, Answer::Unreachable(ProbeError::Unreadable));
    assert!(kept.is_none());
    // Nobody listening.
    let gone = FakePrometheus::gone_address();
    let (answer, _) = probe(&client, gone, None).await;
    assert_eq!(answer, Answer::Unreachable(ProbeError::Connect));
}
