//! The local zonal cluster behaves like a real multi-zone cluster: the real scheduler spreads a
//! StatefulSet over zones, the real StatefulSet controller recreates pods, pods terminate
//! gracefully, LocalStack serves CloudWatch alarms, and the API server calls eviction webhooks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_cloudwatch::types::StateValue;
use axum::routing::post;
use axum::{Json, Router};
use e2e::localstack::{put_alarm, set_alarm};
use e2e::tls::TlsServer;
use e2e::webhook::EvictionWebhook;
use e2e::workload::{spread_statefulset, to_statefulset};
use e2e::{Cluster, TestNamespace, pods, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, EvictParams, PostParams};
use serde_json::{Value, json};

/// `replicas` pods spread over the zones, created one by one (OrderedReady), 3 s of grace.
fn statefulset(name: &str, replicas: usize) -> StatefulSet {
    let mut manifest = spread_statefulset(name, replicas, "registry.invalid/app:1");
    manifest["spec"]
        .as_object_mut()
        .unwrap()
        .remove("podManagementPolicy");
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(3);
    to_statefulset(manifest)
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn statefulset_spreads_over_zones_and_pods_are_recreated() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "smoke").await;
    let client = ns.client.clone();
    let sets: Api<StatefulSet> = ns.api();
    let pod_api: Api<Pod> = ns.api();
    sets.create(&PostParams::default(), &statefulset("web", 6))
        .await
        .unwrap();

    let ready = pods::wait_available(&pod_api, "app=web", 6, Duration::from_secs(60)).await;
    let zones = e2e::nodes::zones(&client, "").await;
    let mut per_zone: BTreeMap<String, u32> = BTreeMap::new();
    for pod in &ready {
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("StatefulSet", "web")
        );
        let node = pods::node_of(pod).expect("scheduled");
        *per_zone.entry(zones[node].clone()).or_default() += 1;
    }
    let expected: BTreeMap<String, u32> = ["zone-a", "zone-b", "zone-c"]
        .iter()
        .map(|z| (z.to_string(), 2))
        .collect();
    assert_eq!(per_zone, expected, "the scheduler spreads 2 pods per zone");

    // Deleting a pod: it stays visibly Terminating for its grace period, then the StatefulSet
    // controller recreates it (new UID) and it becomes Ready again.
    let old_uid = pod_api.get("web-1").await.unwrap().metadata.uid.unwrap();
    pod_api
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = pod_api.get("web-1").await.unwrap();
    assert!(
        pods::is_terminating(&terminating),
        "deleted pod is Terminating, not gone at once"
    );
    wait_for(
        "web-1 recreated and Ready",
        Duration::from_secs(60),
        || async {
            match pod_api.get_opt("web-1").await.unwrap() {
                Some(pod)
                    if pod.metadata.uid.as_deref() != Some(old_uid.as_str())
                        && pods::is_ready(&pod) =>
                {
                    Ok(())
                }
                Some(pod) => Err(format!(
                    "uid {:?} ready {}",
                    pod.metadata.uid,
                    pods::is_ready(&pod)
                )),
                None => Err("absent".into()),
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn localstack_metric_alarm_can_be_set_to_alarm_and_read_back() {
    let cluster = Cluster::get();
    let cloudwatch = cluster.cloudwatch().await;
    let name = format!("e2e-smoke-{}", std::process::id());
    put_alarm(&cloudwatch, &name).await;
    set_alarm(&cloudwatch, &name, StateValue::Alarm).await;
    let described = cloudwatch
        .describe_alarms()
        .alarm_names(&name)
        .send()
        .await
        .expect("DescribeAlarms");
    let alarm = &described.metric_alarms()[0];
    assert_eq!(alarm.state_value(), Some(&StateValue::Alarm));
    cloudwatch
        .delete_alarms()
        .alarm_names(&name)
        .send()
        .await
        .expect("DeleteAlarms");
}

#[derive(Debug, Clone)]
struct Received {
    namespace: String,
    name: String,
    sub_resource: String,
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn eviction_webhook_receives_admission_reviews_of_real_evictions() {
    let cluster = Cluster::get();
    let ns = TestNamespace::create(&cluster, "webhook").await;

    // A webhook that records every review and denies with 429 once told to.
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let deny = Arc::new(Mutex::new(false));
    let router = {
        let (received, deny) = (received.clone(), deny.clone());
        Router::new().route(
            "/validate",
            post(move |Json(review): Json<Value>| {
                let (received, deny) = (received.clone(), deny.clone());
                async move {
                    let request = &review["request"];
                    received.lock().unwrap().push(Received {
                        namespace: request["namespace"].as_str().unwrap_or_default().into(),
                        name: request["name"].as_str().unwrap_or_default().into(),
                        sub_resource: request["subResource"].as_str().unwrap_or_default().into(),
                    });
                    let denied = *deny.lock().unwrap();
                    let mut response = json!({"uid": request["uid"], "allowed": !denied});
                    if denied {
                        response["status"] = json!({"code": 429, "reason": "TooManyRequests", "message": "e2e says no"});
                    }
                    Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                }
            }),
        )
    };
    let server = TlsServer::start(router).await;
    let _webhook = EvictionWebhook::for_server(&cluster, &ns, &server, "/validate").await;

    let sets: Api<StatefulSet> = ns.api();
    let pod_api: Api<Pod> = ns.api();
    sets.create(&PostParams::default(), &statefulset("evictee", 2))
        .await
        .unwrap();
    pods::wait_available(&pod_api, "app=evictee", 2, Duration::from_secs(60)).await;

    // The configuration takes effect asynchronously in the API server: poll until a real
    // eviction reaches the server.
    *deny.lock().unwrap() = true;
    let error = wait_for(
        "an eviction denied by the webhook",
        Duration::from_secs(30),
        || async {
            match pod_api.evict("evictee-0", &EvictParams::default()).await {
                Err(kube::Error::Api(status)) if status.code == 429 => Ok(status),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(error.message.contains("e2e says no"), "{}", error.message);
    let seen = received.lock().unwrap().clone();
    let review = seen
        .iter()
        .find(|r| r.name == "evictee-0")
        .expect("the webhook saw the eviction");
    assert_eq!(
        (review.namespace.as_str(), review.sub_resource.as_str()),
        (ns.name.as_str(), "eviction")
    );
    assert!(
        !pods::is_terminating(&pod_api.get("evictee-0").await.unwrap()),
        "a denied eviction deletes nothing"
    );

    // Allowed: the pod is evicted for real.
    *deny.lock().unwrap() = false;
    pod_api
        .evict("evictee-1", &EvictParams::default())
        .await
        .expect("allowed eviction");
    assert!(
        received
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.name == "evictee-1")
    );
}

/// The real nodes run pods: a Deployment of the metrics target spread over the three zones turns
/// Ready (its readiness probe answered by the real kubelet), and each pod's `/metrics` answers a
/// pod of another real node (`kubectl exec`, through the kubelet's authenticated API). `kubectl
/// logs` reads the container's output.
#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn smoke_real_nodes_serve_metrics_across_zones() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let ns = TestNamespace::create(&cluster, "smoke-real").await;
    let nodes = e2e::real::nodes(&ns.client).await;
    assert_eq!(
        nodes
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "one real node in each of three zones: {nodes:?}"
    );
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "metrics"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "metrics"}},
            "template": real.metrics_target_template("metrics"),
        },
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pod_api: Api<Pod> = ns.api();
    let ready = pods::wait_available(&pod_api, "app=metrics", 3, Duration::from_secs(120)).await;
    let placed: BTreeMap<String, (String, String)> = ready
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
            let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
            (p.metadata.name.clone().unwrap(), (node, ip))
        })
        .collect();
    let zones: std::collections::BTreeSet<&String> =
        placed.values().map(|(node, _)| &nodes[node]).collect();
    assert_eq!(
        zones.len(),
        3,
        "one pod per zone, on real nodes: {placed:?}"
    );

    let names: Vec<&String> = placed.keys().collect();
    for (i, server) in names.iter().enumerate() {
        let client = names[(i + 1) % names.len()];
        assert_ne!(placed[*server].0, placed[client].0, "another node");
        let url = format!("http://{}:8080/metrics", placed[*server].1);
        let mut exec = e2e::identity::kubectl(&cluster);
        exec.args([
            "exec",
            "-n",
            &ns.name,
            client,
            "--",
            "/metrics-target",
            "fetch",
            &url,
        ]);
        let body = e2e::identity::run(exec, None);
        assert!(
            body.contains(&format!(
                "metrics_target_info{{pod=\"{server}\",node=\"{}\"",
                placed[*server].0
            )),
            "{client} fetched {url}: {body}"
        );
        assert!(body.contains("metrics_target_requests_total{path=\"/metrics\"}"));
    }
    let mut logs = e2e::identity::kubectl(&cluster);
    logs.args(["logs", "-n", &ns.name, names[0]]);
    let output = e2e::identity::run(logs, None);
    assert!(output.contains("serving on 0.0.0.0:8080"), "{output}");
}

/// The real nodes share fixed host paths, so one cluster per host runs them: `cluster-up` from
/// another checkout stops at once with one line naming the running cluster, and leaves it be.
#[tokio::test]
#[ignore = "needs the local zonal cluster with real nodes (make e2e)"]
async fn smoke_real_nodes_a_second_checkout_cannot_start_its_own() {
    let cluster = Cluster::get();
    e2e::real::RealNodes::of(&cluster);
    let root = e2e::deploy::repo_root();
    let other = std::env::temp_dir().join(format!("e2e-other-checkout-{}", std::process::id()));
    copy_dir(&root.join("e2e/cluster"), &other.join("e2e/cluster"));
    let output = std::process::Command::new("bash")
        .arg(other.join("e2e/cluster/up.sh"))
        .env("REAL_NODES", "1")
        .output()
        .unwrap();
    let started_nodes = other.join("e2e/.cluster/nodes").exists();
    let _ = std::fs::remove_dir_all(&other);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "a second cluster-up went ahead: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    let running = root.join("e2e/.cluster");
    assert!(
        stderr.contains(&running.display().to_string()) && stderr.contains("make cluster-down"),
        "names the running cluster and what to do: {stderr}"
    );
    assert!(!started_nodes, "the second checkout started no node");
    // The running cluster's real nodes are still Ready.
    let nodes = e2e::real::nodes(&cluster.client().await).await;
    let api: Api<Node> = Api::all(cluster.client().await);
    for name in nodes.keys() {
        let node = api.get(name).await.unwrap();
        assert!(e2e::nodes::is_ready(&node), "{name} still Ready");
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
