//! minAvailable and unhealthyPodEvictionPolicy against the API server's own PodDisruptionBudget:
//! the same spec over identical pods, the same evictions, the same answers.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::*;

/// The budgets compared, by name: each is a ZoneDisruptionBudget over the pods of `z-<name>` and
/// a PodDisruptionBudget over those of `p-<name>`, with this spec (besides the selector).
fn specs() -> [(&'static str, Value); 6] {
    [
        (
            "min2-ifhealthy",
            json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        (
            "min2-always",
            json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        ),
        (
            "min50-ifhealthy",
            json!({"minAvailable": "50%", "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        (
            "max1-ifhealthy",
            json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        (
            "max0-always",
            json!({"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        ),
        (
            "min100-ifhealthy",
            json!({"minAvailable": "100%", "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
    ]
}

/// Pods of each set: one zone's worth (a ZoneDisruptionBudget decides per zone; on one zone it
/// is a PodDisruptionBudget).
const PODS: i32 = 3;

/// One eviction asked of both budgets: the budget, how many of each set's pods were not Ready,
/// which pod was evicted, and the two answers (allowed, or the refusal's HTTP code).
#[derive(Debug)]
struct Row {
    budget: &'static str,
    unready: i32,
    pod: &'static str,
    zdb: Result<(), u16>,
    pdb: Result<(), u16>,
}

/// For each spec, two StatefulSets of 3 pods on one node: one under a ZoneDisruptionBudget, the
/// other under a PodDisruptionBudget of the same spec. With 0, 1 and 2 of each set's pods not
/// Ready, a dry-run eviction (judged as a real one, nothing changed) of a Ready pod and of a pod
/// that is not Ready of each set: the Eviction API answers both sets alike, every time.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn min_available_and_the_unhealthy_pod_policy_decide_as_a_pod_disruption_budget() {
    let port = free_port();
    let fixture = Fixture::new("zdb-pdb", 3, port).await;
    let node = TestNode::create(&fixture.ns, "zone-a").await;
    for (name, _) in specs() {
        for set in [format!("z-{name}"), format!("p-{name}")] {
            let labels = json!({"app": set, "parity": "yes"});
            create_on_node(&fixture.ns, &set, PODS, &node, json!({"app": set}), labels).await;
        }
    }
    let all = usize::try_from(2 * PODS).unwrap() * specs().len();
    pods::wait_all_available(&fixture.pods, "parity=yes", all, None, TIMEOUT).await;
    let _controller = fixture.controller(port, false);
    fixture.wait_ca_bundle().await;
    let pdbs = create_budgets(&fixture).await;

    let mut rows = Vec::new();
    for unready in 0..PODS {
        if unready > 0 {
            // One more pod of each set not Ready: the one before the first Ready one.
            for (name, _) in specs() {
                for set in ["z", "p"] {
                    let pod = format!("{set}-{name}-{}", unready - 1);
                    pods::set_ready(&fixture.pods, &pod, false).await;
                }
            }
        }
        wait_counted(&fixture, &pdbs, PODS - unready).await;
        rows.extend(evictions(&fixture, unready).await);
    }

    let table: Vec<String> = rows.iter().map(Row::to_string).collect();
    println!("{}", table.join("\n"));
    let differ: Vec<&Row> = rows.iter().filter(|r| r.zdb != r.pdb).collect();
    assert!(differ.is_empty(), "answers differ: {differ:#?}");
    // The table holds both answers for both kinds of pod, or it would compare nothing.
    for pod in ["Ready", "not Ready"] {
        for allowed in [true, false] {
            assert!(
                rows.iter()
                    .any(|r| r.pod == pod && r.pdb.is_ok() == allowed),
                "no {pod} pod {} in:\n{}",
                if allowed { "allowed" } else { "refused" },
                table.join("\n")
            );
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<17} {} not Ready, evict a {:<9} pod: ZoneDisruptionBudget {:?}, PodDisruptionBudget {:?}",
            self.budget, self.unready, self.pod, self.zdb, self.pdb
        )
    }
}

/// Each spec's ZoneDisruptionBudget over `z-<name>` and PodDisruptionBudget over `p-<name>`.
async fn create_budgets(fixture: &Fixture) -> Api<PodDisruptionBudget> {
    let pdbs: Api<PodDisruptionBudget> = fixture.ns.api();
    for (name, spec) in specs() {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": format!("z-{name}")}});
        fixture
            .create_budget(&format!("z-{name}"), spec.clone())
            .await;
        spec["selector"] = json!({"matchLabels": {"app": format!("p-{name}")}});
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": format!("p-{name}")},
            "spec": spec,
        }))
        .unwrap();
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    }
    pdbs
}

/// With `unready` pods of each set not Ready (the first ones): for each spec, a dry-run
/// eviction of the first Ready pod and of a pod that is not Ready, of both sets.
async fn evictions(fixture: &Fixture, unready: i32) -> Vec<Row> {
    let answer = |result: Result<(), (u16, String)>| result.map_err(|(code, _)| code);
    let mut rows = Vec::new();
    for (name, _) in specs() {
        let mut evicted = vec![("Ready", unready)];
        if unready > 0 {
            evicted.push(("not Ready", 0));
        }
        for (pod, index) in evicted {
            let zdb = evict(&fixture.pods, &format!("z-{name}-{index}"), true).await;
            let pdb = evict(&fixture.pods, &format!("p-{name}-{index}"), true).await;
            rows.push(Row {
                budget: name,
                unready,
                pod,
                zdb: answer(zdb),
                pdb: answer(pdb),
            });
        }
    }
    rows
}

/// Waits until every budget of both kinds counts `healthy` healthy pods of its 3, for its
/// current generation.
async fn wait_counted(fixture: &Fixture, pdbs: &Api<PodDisruptionBudget>, healthy: i32) {
    for (name, _) in specs() {
        fixture
            .wait_zdb(
                &format!("ZoneDisruptionBudget z-{name} with {healthy} healthy pods"),
                &format!("z-{name}"),
                TIMEOUT,
                |zdb, status| {
                    Some(status.observed_generation) == zdb.metadata.generation
                        && status.expected_pods.values().sum::<i32>() == PODS
                        && status.current_healthy.values().sum::<i32>() == healthy
                },
            )
            .await;
        let pdb = format!("p-{name}");
        wait_for(
            &format!("PodDisruptionBudget {pdb} with {healthy} healthy pods"),
            TIMEOUT,
            || async {
                let object = pdbs.get(&pdb).await.map_err(|e| e.to_string())?;
                let status = object.status.clone().unwrap_or_default();
                let observed = status.observed_generation == object.metadata.generation;
                if observed && status.expected_pods == PODS && status.current_healthy == healthy {
                    Ok(())
                } else {
                    Err(format!("{status:?}"))
                }
            },
        )
        .await;
    }
}
