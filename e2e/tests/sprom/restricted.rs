//! Shards in a namespace enforcing Pod Security `restricted`, with a sidecar beside Prometheus.

use super::*;

/// Labels the test namespace to enforce Pod Security `restricted`, and proves the API server
/// enforces it: a pod with no security context is refused (dry run).
async fn enforce_restricted(fx: &Fixture, image: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fx.ns.client.clone());
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(&fx.ns.name, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    let pods: Api<Pod> = fx.ns.api();
    let bare = json!({
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    });
    let refused = pods
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &serde_json::from_value(bare).unwrap(),
        )
        .await
        .expect_err("a pod without a security context is refused in a restricted namespace");
    assert!(
        refused.to_string().contains("restricted"),
        "refused for another reason: {refused}"
    );
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes (make e2e)"]
async fn sprom_shards_run_in_a_restricted_namespace_with_a_sidecar_beside_prometheus() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-restricted").await;
    fx.prometheus_service_account().await;
    enforce_restricted(&fx, &real.metrics_target_image).await;

    // The sidecar is the metrics target (it serves on 8080 beside Prometheus's 9090), restricted
    // itself: no escalation, no capability.
    let generation = fx
        .apply(fixture::on_real_nodes(
            &real,
            json!({
                "shards": 3,
                // Every shard scrapes its own pod's sidecar: a static target, kept on every shard
                // (not hashed to one) by prometheus-operator's opt-out label.
                "scrapeConfigs": [{"job_name": "sidecar", "scrape_interval": "2s",
                    "static_configs": [{"targets": ["localhost:8080"],
                        "labels": {"__tmp_disable_sharding": "true"}}]}],
                "podMetadata": {"labels": {"team": "observability"}},
                "containers": [{
                    "name": "sidecar",
                    "image": real.metrics_target_image,
                    "imagePullPolicy": "Never",
                    "args": ["serve"],
                    "ports": [{"name": "sidecar", "containerPort": 8080}],
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }],
            }),
        ))
        .await;
    fx.wait_ready_shards("3 ready shards in the restricted namespace", generation, 3)
        .await;
    let shard_pods = fx.prometheus_pods().await;
    assert_eq!(shard_pods.len(), 3);
    for pod in &shard_pods {
        let name = pod.name_any();
        assert_eq!(
            pod.labels().get("team").map(String::as_str),
            Some("observability")
        );
        let spec = pod.spec.as_ref().unwrap();
        let seccomp = spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.seccomp_profile.as_ref())
            .map(|profile| profile.type_.as_str());
        assert_eq!(seccomp, Some("RuntimeDefault"), "{name}");
        // Both containers run (not only started): every container ready.
        let statuses = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.clone())
            .unwrap_or_default();
        let running: Vec<(&str, bool)> = statuses
            .iter()
            .map(|status| (status.name.as_str(), status.ready))
            .collect();
        assert_eq!(running, [("prometheus", true), ("sidecar", true)], "{name}");
        // Prometheus scrapes the sidecar through localhost: the two share the pod.
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        wait_for(&format!("{name} scraping its sidecar"), TIMEOUT, || async {
            let scraped = pod_targets(&ip, "sidecar").await?;
            if scraped.values().any(|health| health == "up") {
                Ok(())
            } else {
                Err(format!("{scraped:?}"))
            }
        })
        .await;
    }
}
