//! `kubectl zone check`: whether an installation works as its users will find it. Each
//! controller's Ready pods answer their readiness endpoint (read through the API server's proxy,
//! `get pods/proxy`), and, given a pod, the eviction webhook judges and admits a dry-run
//! eviction of it: the zdb-controller's decision counters grow by it, so a namespace the webhook
//! does not cover cannot pass for one it does. With `failurePolicy: Fail`, an unreachable webhook
//! refuses the eviction. Nothing is written (the eviction is a dry run).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::cluster::{Error, proxied, read, reason_of};
use crate::output::columns;

/// The label every object of an installation carries.
const PART_OF: &str = "app.kubernetes.io/part-of=zone-aware-controllers";
/// The binary whose pods serve the eviction webhook.
const WEBHOOK_BINARY: &str = "zdb-controller";
/// The webhook's decision counter (every allowed or denied eviction review).
const DECISIONS: &str = "zone_aware_zdb_webhook_decisions_total";
/// The most of an answer read (a readiness answer or a metrics page).
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// What was checked, and how each check went.
#[derive(Debug, Serialize)]
pub struct Report {
    pub namespace: String,
    pub checks: Vec<Outcome>,
}

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

impl Report {
    /// The checks that failed.
    pub fn failed(&self) -> usize {
        self.checks.iter().filter(|c| !c.ok).count()
    }
}

/// Checks the installation in `namespace`; with `evict` (namespace, pod), the webhook too.
pub async fn check(
    client: &Client,
    namespace: &str,
    evict: Option<(&str, &str)>,
) -> Result<Report, Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployments = deployments
        .list(&ListParams::default().labels(PART_OF))
        .await
        .map_err(read(format!("list deployments in {namespace}")))?;
    let mut checks = Vec::new();
    if deployments.items.is_empty() {
        checks.push(Outcome {
            check: "controllers".into(),
            ok: false,
            detail: format!("no Deployment labelled {PART_OF} in {namespace}"),
        });
    }
    let mut webhook_pods = Vec::new();
    for deployment in &deployments.items {
        let pods = ready_pods(client, namespace, deployment).await?;
        if deployment.name_any() == WEBHOOK_BINARY {
            webhook_pods.clone_from(&pods);
        }
        checks.push(answers(client, namespace, &deployment.name_any(), &pods).await);
    }
    if let Some((pod_namespace, pod)) = evict {
        checks.push(webhook_admits(client, namespace, &webhook_pods, pod_namespace, pod).await);
    }
    Ok(Report {
        namespace: namespace.to_string(),
        checks,
    })
}

/// The Ready pods of `deployment` (by its selector's labels).
async fn ready_pods(
    client: &Client,
    namespace: &str,
    deployment: &Deployment,
) -> Result<Vec<Pod>, Error> {
    let labels = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.selector.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    if labels.is_empty() {
        return Ok(Vec::new());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = pods
        .list(&ListParams::default().labels(&labels))
        .await
        .map_err(read(format!("list pods in {namespace}")))?;
    Ok(pods
        .items
        .into_iter()
        .filter(|pod| {
            zone_views::budget::pods::condition(pod) == zone_topology::budget::PodCondition::Healthy
        })
        .collect())
}

/// Each Ready pod of `binary` answers `/readyz` on its health port.
async fn answers(client: &Client, namespace: &str, binary: &str, pods: &[Pod]) -> Outcome {
    let check = format!("{binary} answers");
    if pods.is_empty() {
        return Outcome {
            check,
            ok: false,
            detail: "no Ready pod".into(),
        };
    }
    for pod in pods {
        let Some(base) = health_port(namespace, pod) else {
            return Outcome {
                check,
                ok: false,
                detail: format!("pod {}: no metrics, https or http port", pod.name_any()),
            };
        };
        if let Err(error) = pod_page(client, &format!("{base}/readyz")).await {
            return Outcome {
                check,
                ok: false,
                detail: format!("pod {}: {error}", pod.name_any()),
            };
        }
    }
    Outcome {
        check,
        ok: true,
        detail: format!("{} Ready pod(s), each answers /readyz", pods.len()),
    }
}

/// The API server's proxy path to the pod's health port: `metrics` (plain HTTP), else the
/// federator's `https` or `http`.
fn health_port(namespace: &str, pod: &Pod) -> Option<String> {
    let ports: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .collect();
    ["metrics", "https", "http"].iter().find_map(|name| {
        let port = ports.iter().find(|p| p.name.as_deref() == Some(*name))?;
        let scheme = if *name == "https" { "https" } else { "http" };
        Some(format!(
            "/api/v1/namespaces/{namespace}/pods/{scheme}:{}:{}/proxy",
            pod.name_any(),
            port.container_port
        ))
    })
}

/// A dry-run eviction of `pod` is admitted, and the webhook's pods decided it.
async fn webhook_admits(
    client: &Client,
    namespace: &str,
    webhook_pods: &[Pod],
    pod_namespace: &str,
    pod: &str,
) -> Outcome {
    let check = "the eviction webhook admits a dry-run eviction".to_string();
    let failed = |detail: String| Outcome {
        check: check.clone(),
        ok: false,
        detail,
    };
    // Without a webhook pod the eviction is still tried: the API server's answer says how the
    // webhook's absence shows (refused under failurePolicy Fail).
    let before = match decisions(client, namespace, webhook_pods).await {
        Ok(count) => count,
        Err(error) => return failed(error),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), pod_namespace);
    let params = EvictParams {
        delete_options: None,
        post_options: PostParams {
            dry_run: true,
            ..PostParams::default()
        },
    };
    if let Err(error) = pods.evict(pod, &params).await {
        return failed(format!(
            "evicting {pod_namespace}/{pod} (dry run): {}",
            reason_of(&error)
        ));
    }
    if webhook_pods.is_empty() {
        return failed(format!(
            "{pod_namespace}/{pod} (dry run): admitted, but no Ready {WEBHOOK_BINARY} pod in \
             {namespace} judged it"
        ));
    }
    let after = match decisions(client, namespace, webhook_pods).await {
        Ok(count) => count,
        Err(error) => return failed(error),
    };
    if after <= before {
        return failed(format!(
            "the eviction of {pod_namespace}/{pod} was admitted without the webhook ({DECISIONS} \
             stayed {before}): its namespaceSelector leaves {pod_namespace} out"
        ));
    }
    Outcome {
        check,
        ok: true,
        detail: format!(
            "{pod_namespace}/{pod} (dry run): admitted, judged by the webhook ({DECISIONS} \
             {before} -> {after})"
        ),
    }
}

/// The sum of the webhook's decisions over its pods.
async fn decisions(client: &Client, namespace: &str, pods: &[Pod]) -> Result<f64, String> {
    let mut sum = 0.0;
    for pod in pods {
        let base = health_port(namespace, pod)
            .ok_or_else(|| format!("pod {}: no metrics port", pod.name_any()))?;
        let page = pod_page(client, &format!("{base}/metrics"))
            .await
            .map_err(|error| format!("pod {}: {error}", pod.name_any()))?;
        sum += counter_sum(&page, DECISIONS);
    }
    Ok(sum)
}

/// The sum of the samples of `name` in a Prometheus text page (pure).
pub fn counter_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A page of a controller's pod through the API server's proxy (`/readyz`, `/metrics`).
async fn pod_page(client: &Client, path: &str) -> Result<String, String> {
    proxied(client, path, "a controller's pod", MAX_ANSWER_BYTES)
        .await
        .map_err(|error| error.to_string())
}

pub fn table(report: &Report) -> String {
    let rows: Vec<Vec<String>> = report
        .checks
        .iter()
        .map(|c| {
            vec![
                if c.ok { "ok" } else { "FAILED" }.to_string(),
                c.check.clone(),
                c.detail.clone(),
            ]
        })
        .collect();
    columns(&["RESULT", "CHECK", "DETAIL"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_their_series_only() {
        let page = "# HELP zone_aware_zdb_webhook_decisions_total decisions\n\
                    zone_aware_zdb_webhook_decisions_total{reason=\"NoBudget\",result=\"allowed\"} 3\n\
                    zone_aware_zdb_webhook_decisions_total{reason=\"DryRun\",result=\"allowed\"} 2\n\
                    zone_aware_zdb_webhook_decisions_total_created 17\n\
                    zone_aware_zdb_webhook_decision_seconds_count 9\n";
        assert_eq!(counter_sum(page, DECISIONS), 5.0);
        assert_eq!(counter_sum("", DECISIONS), 0.0);
    }

    #[test]
    fn failures_are_counted_and_shown() {
        let report = Report {
            namespace: "zone-aware-system".into(),
            checks: vec![
                Outcome {
                    check: "zau-controller answers".into(),
                    ok: true,
                    detail: "2 Ready pod(s), each answers /readyz".into(),
                },
                Outcome {
                    check: "the eviction webhook admits a dry-run eviction".into(),
                    ok: false,
                    detail: "failed calling webhook".into(),
                },
            ],
        };
        assert_eq!(report.failed(), 1);
        let table = table(&report);
        assert!(table.starts_with("RESULT"), "{table}");
        assert!(table.contains("FAILED  the eviction webhook"), "{table}");
    }
}
