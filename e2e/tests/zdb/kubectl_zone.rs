//! `kubectl zone budget --drain` through the real kubectl: the evictions it predicts for a node
//! are those the webhook then allows and refuses in a real `kubectl drain` of it.

use super::*;

/// The evictions a prediction allows, and those it refuses with their messages.
fn predicted(prediction: &Value) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut allowed = BTreeSet::new();
    let mut refused = BTreeMap::new();
    for eviction in prediction["evictions"].as_array().unwrap() {
        let pod = eviction["pod"].as_str().unwrap().to_string();
        if eviction["allowed"] == true {
            allowed.insert(pod);
        } else {
            refused.insert(pod, eviction["message"].as_str().unwrap().to_string());
        }
    }
    (allowed, refused)
}

/// The pods a `kubectl drain` output says were evicted, and those the webhook refused, with each
/// refusal's lines (not the line of kubectl's own timeout at the end).
fn drained(output: &str, namespace: &str) -> (BTreeSet<String>, BTreeMap<String, Vec<String>>) {
    let mut evicted = BTreeSet::new();
    let mut refused: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in output.lines() {
        if let Some(pod) = line
            .strip_prefix("pod/")
            .and_then(|rest| rest.strip_suffix(" evicted"))
        {
            evicted.insert(pod.to_string());
        }
        if let Some(rest) = line
            .strip_prefix("error when evicting pods/\"")
            .filter(|rest| rest.contains("(will retry after 5s)"))
        {
            let pod = rest.split('"').next().unwrap().to_string();
            assert!(rest.contains(&format!("-n \"{namespace}\"")), "{line}");
            refused.entry(pod).or_default().push(line.to_string());
        }
    }
    (evicted, refused)
}

/// A node in zone-b holding two pods of the budget `web` (maxUnavailable 1, zone-a disrupted by
/// an unready pod), two of `free` (maxUnavailable 2) and one of no budget, all labelled
/// `drain=yes`; the zdb-controller serving the webhook.
async fn drain_fixture() -> (Fixture, TestNode, ControllerProcess) {
    let port = free_port();
    let fixture = Fixture::new("zdb-zone-drain", 3, port).await;
    let ns = &fixture.ns;
    let node = TestNode::create(ns, "zone-b").await;
    let pinned = json!({"app": SET, "set": PINNED});
    let labels = json!({"app": SET, "set": PINNED, "drain": "yes"});
    create_on_node(ns, PINNED, 2, &node, pinned, labels).await;
    create_pinned_set(ns, "free", 2, &node).await;
    create_pinned_set(ns, "lone", 1, &node).await;
    pods::wait_all_available(&fixture.pods, "drain=yes", 5, None, TIMEOUT).await;
    fixture.wait_ready(5).await;
    let controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    fixture.create_zdb(1, false).await;
    let free = json!({"selector": {"matchLabels": {"app": "free"}}, "maxUnavailable": 2});
    fixture.create_budget("free", free).await;
    for (name, pods) in [(ZDB, 5), ("free", 2)] {
        let what = format!("budget {name} computed");
        fixture
            .wait_zdb(&what, name, TIMEOUT, |zdb, s| {
                Some(s.observed_generation) == zdb.metadata.generation
                    && s.current_healthy.values().sum::<i32>() == pods
            })
            .await;
    }
    let zones = fixture.pods_by_zone().await;
    disrupt_zone_by_unready_pod(&fixture, "zone-a", &zones["zone-a"][0]).await;
    (fixture, node, controller)
}

/// On [`drain_fixture`]'s node, `kubectl zone budget --drain` predicts 3 evictions allowed and 2
/// refused, with the webhook's words, and exits 3; a real `kubectl drain` of the node then evicts
/// exactly those 3 and is refused, retry after retry, exactly those 2 with exactly those words.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn zdb_kubectl_zone_drain_predicts_the_webhook() {
    let (fixture, node, _controller) = drain_fixture().await;
    let cluster = Cluster::get();
    let args = [
        "budget",
        "--drain",
        &node.name,
        "--pod-selector",
        "drain=yes",
        "-o",
        "json",
    ];
    let answer = e2e::kubectl_zone::run(&cluster, &cluster.kubeconfig, &args);
    assert_eq!(answer.code, 3, "a refusal predicted: {answer:?}");
    let (allowed, refused) = predicted(&answer.json());
    let names =
        |pods: &[&str]| -> BTreeSet<String> { pods.iter().map(|p| p.to_string()).collect() };
    let expected = names(&["free-0", "free-1", "lone-0"]);
    assert_eq!(allowed, expected, "{}", answer.stdout);
    let refused_pods: BTreeSet<String> = refused.keys().cloned().collect();
    assert_eq!(
        refused_pods,
        names(&["pinned-0", "pinned-1"]),
        "{}",
        answer.stdout
    );
    let before = fixture.live_uids_of("drain=yes").await;

    let (success, output) = Kubectl::drain(&node.name, "drain=yes", &["--timeout=15s"])
        .finish(Duration::from_secs(90))
        .await;
    assert!(!success, "the drain of refused pods succeeded:\n{output}");
    let (evicted, refusals) = drained(&output, &fixture.ns.name);
    assert_eq!(evicted, allowed, "evicted as predicted:\n{output}");
    let refused_by_kubectl: BTreeSet<String> = refusals.keys().cloned().collect();
    assert_eq!(
        refused_by_kubectl, refused_pods,
        "refused as predicted:\n{output}"
    );
    for (pod, message) in &refused {
        let lines = &refusals[pod];
        assert!(lines.len() >= 2, "kubectl retried {pod}:\n{output}");
        for line in lines {
            assert!(
                line.ends_with(message.as_str()),
                "refused with the predicted words ({message}):\n{line}"
            );
        }
    }
    let after = fixture.live_uids_of("drain=yes").await;
    for pod in refused.keys() {
        assert_eq!(after.get(pod), before.get(pod), "{pod} was evicted");
    }
    for pod in &allowed {
        assert_ne!(after.get(pod), before.get(pod), "{pod} was not evicted");
    }
}
