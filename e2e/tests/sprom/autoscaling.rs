//! A real HorizontalPodAutoscaler on CPU scaling the shards (not the pods) up and down, counting
//! only active shards.

use super::*;

/// What the HPA and the ShardedPrometheus say at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScaleSample {
    hpa_current: i32,
    hpa_desired: i32,
    spec_shards: i32,
    status_shards: i32,
    retained: usize,
    selected_pods: usize,
}

async fn scale_sample(
    fx: &Fixture,
    hpas: &Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>,
) -> Result<ScaleSample, String> {
    let hpa = hpas.get(NAME).await.map_err(|e| e.to_string())?;
    let hpa_status = hpa.status.unwrap_or_default();
    let sprom = fx.sproms.get(NAME).await.map_err(|e| e.to_string())?;
    let status = sprom.status.unwrap_or_default();
    let pods: Api<Pod> = fx.ns.api();
    let selected_pods = if status.selector.is_empty() {
        0
    } else {
        pods.list(&ListParams::default().labels(&status.selector))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len()
    };
    Ok(ScaleSample {
        hpa_current: hpa_status.current_replicas.unwrap_or(0),
        hpa_desired: hpa_status.desired_replicas,
        spec_shards: sprom.spec.shards,
        status_shards: status.shards,
        retained: status.retained_shards.len(),
        selected_pods,
    })
}

/// Waits until the HPA and the resource agree on `shards` (and the selector lists one pod per
/// shard), checking every sample on the way: the HPA's current replicas are never more than the
/// active shards the resource reported (never shards × replicas, never the retained shards).
async fn follow_hpa(
    fx: &Fixture,
    hpas: &Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>,
    shards: i32,
    seen: &mut Vec<ScaleSample>,
) {
    let samples = std::cell::RefCell::new(std::mem::take(seen));
    wait_for(
        &format!("the HPA and the resource at {shards} shards"),
        Duration::from_secs(300),
        || async {
            let sample = scale_sample(fx, hpas).await?;
            let mut samples = samples.borrow_mut();
            let max_seen = samples
                .iter()
                .map(|s| s.status_shards)
                .chain([sample.status_shards])
                .max()
                .unwrap_or(0);
            assert!(
                sample.hpa_current <= max_seen,
                "the HPA counts {} replicas, the resource never had more than {max_seen} active shards: {sample:?}",
                sample.hpa_current
            );
            if samples.last() != Some(&sample) {
                eprintln!("{sample:?}");
                samples.push(sample.clone());
            }
            (sample.hpa_current == shards
                && sample.spec_shards == shards
                && sample.status_shards == shards
                && sample.selected_pods == usize::try_from(shards).unwrap_or(0))
            .then_some(())
            .ok_or(format!("{sample:?}"))
        },
    )
    .await;
    *seen = samples.into_inner();
}

#[tokio::test]
#[ignore = "needs the local zonal cluster with its real nodes and metrics-server (make e2e)"]
async fn sprom_a_real_hpa_on_cpu_scales_shards_not_pods() {
    let cluster = Cluster::get();
    let real = e2e::real::RealNodes::of(&cluster);
    let fx = new_fixture("sprom-hpa").await;
    fx.prometheus_service_account().await;
    let target_addresses = six_metrics_targets(&fx, &real).await;

    // Two replicas per shard with a small CPU request, so that an idle Prometheus is a
    // measurable share of it; Retain, so that scaled-down shards keep running pods.
    let generation = fx
        .apply(fixture::on_real_nodes(&real, json!({
            "shards": 3,
            "replicas": 2,
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "shardRetentionPolicy": {"whenScaled": "Retain", "retain": {"retentionPeriod": "1h"}},
            "scrapeConfigs": [{
                "job_name": "targets",
                "scrape_interval": "2s",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [fx.ns.name]}}],
                "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_label_app"], "regex": "target", "action": "keep"}],
            }],
        })))
        .await;
    fx.wait_ready_shards("3 ready shards", generation, 3).await;
    the_hpa_scales_up_then_down_counting_active_shards(&fx).await;

    // One shard, fewer than the zones: it scrapes every zone's targets.
    let sprom = fx.sproms.get(NAME).await.unwrap();
    let status = sprom.status.unwrap();
    assert_eq!(
        status.true_reason(condition::DEGRADED),
        Some(reason::ZONES_WITHOUT_SHARD),
        "{:?}",
        status.conditions
    );
    let pods: Api<Pod> = fx.ns.api();
    let shard_zero = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={NAME},zonecontrol.k8s.aws/shard=0"
        )))
        .await
        .unwrap()
        .items;
    assert_eq!(shard_zero.len(), 2);
    for pod in &shard_zero {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        wait_for(
            &format!("{} scraping the targets of every zone", pod.name_any()),
            TIMEOUT,
            || async {
                let scraped = pod_targets(&ip, "targets").await?;
                let addresses: std::collections::BTreeSet<String> =
                    scraped.keys().cloned().collect();
                (addresses == target_addresses)
                    .then_some(())
                    .ok_or(format!("{addresses:?}, want {target_addresses:?}"))
            },
        )
        .await;
    }
}

/// Six metrics targets, two per zone on the real nodes, available: their addresses.
async fn six_metrics_targets(
    fx: &Fixture,
    real: &e2e::real::RealNodes,
) -> std::collections::BTreeSet<String> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = fx.ns.api();
    let target = json!({
        "metadata": {"name": "target"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "target"}},
                 "template": real.metrics_target_template("target")},
    });
    fixture::create(&deployments, target).await;
    let pods: Api<Pod> = fx.ns.api();
    let targets = e2e::pods::wait_available(&pods, "app=target", 6, TIMEOUT).await;
    targets
        .iter()
        .map(|p| {
            format!(
                "{}:8080",
                p.status.as_ref().unwrap().pod_ip.clone().unwrap()
            )
        })
        .collect()
}

/// The HorizontalPodAutoscaler of the ShardedPrometheus, 1 to 4 shards, aiming at
/// `utilization` % of the CPU request.
fn hpa(utilization: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": NAME},
        "spec": {
            "scaleTargetRef": {"apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus", "name": NAME},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": utilization}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    })
}

/// Up: a target below what an idle Prometheus uses drives the HPA to maxReplicas. Down: a
/// target far above the use drives it to minReplicas; the retained shards' pods keep running
/// and count for nothing.
async fn the_hpa_scales_up_then_down_counting_active_shards(fx: &Fixture) {
    let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> = fx.ns.api();
    fixture::apply(&hpas, NAME, MANAGER, &hpa(1)).await;
    let mut seen = Vec::new();
    follow_hpa(fx, &hpas, 4, &mut seen).await;
    let pods_running = fx.prometheus_pods().await.len();
    assert_eq!(
        pods_running, 8,
        "4 shards of 2 replicas run; the HPA counts 4"
    );

    fixture::apply(&hpas, NAME, MANAGER, &hpa(1000)).await;
    follow_hpa(fx, &hpas, 1, &mut seen).await;
    let last = seen.last().cloned().unwrap();
    assert_eq!(last.retained, 3, "{last:?}");
    eprintln!("HPA samples: {}", seen.len());
}
