//! The local zonal cluster's real nodes (kubelet + containerd, one per zone, label `type=real`,
//! tainted so only pods that ask land there) and the metrics-target workload that runs on them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::Cluster;
use crate::workload::ZONE_LABEL;

/// What a test on the real nodes needs from the cluster's env file; panics naming the missing
/// piece (a cluster started with REAL_NODES=0 has none).
pub struct RealNodes {
    /// The taint every real node carries.
    pub taint: String,
    /// The metrics-target image, imported into every real node.
    pub metrics_target_image: String,
    /// The project's image (`make image`; `project_image()`).
    project_image: String,
    /// Prometheus 3.16, static, from e2e/cluster/build.sh.
    pub prometheus_image: String,
    /// Prometheus 2.55.1 (the last 2.x), static, from e2e/cluster/build.sh.
    pub prometheus2_image: String,
    /// prometheus-operator's config reloader, the sidecar of Prometheus 2 shards.
    pub config_reloader_image: String,
    /// Alertmanager 0.35, static, from e2e/cluster/build.sh.
    pub alertmanager_image: String,
    /// Thanos (sidecar, query, store, rule), static, from e2e/cluster/build.sh.
    pub thanos_image: String,
}

impl RealNodes {
    pub fn of(cluster: &Cluster) -> RealNodes {
        assert_eq!(
            cluster.var("E2E_REAL_NODES").as_deref(),
            Some("1"),
            "needs the real nodes: make cluster-up with REAL_NODES=1 (the default)"
        );
        let var = |name: &str| {
            cluster
                .var(name)
                .unwrap_or_else(|| panic!("{name} missing from the cluster's env file"))
        };
        RealNodes {
            taint: var("E2E_REAL_NODE_TAINT"),
            metrics_target_image: var("E2E_METRICS_TARGET_IMAGE"),
            project_image: var("E2E_PROJECT_IMAGE"),
            prometheus_image: var("E2E_PROMETHEUS_IMAGE"),
            prometheus2_image: var("E2E_PROMETHEUS2_IMAGE"),
            config_reloader_image: var("E2E_CONFIG_RELOADER_IMAGE"),
            alertmanager_image: var("E2E_ALERTMANAGER_IMAGE"),
            thanos_image: var("E2E_THANOS_IMAGE"),
        }
    }

    /// Tags `image`, already in every real node, as `alias` there too (`images.sh alias`): the
    /// same image under another name, as a release with another default tag would name it.
    pub fn alias_image(&self, image: &str, alias: &str) {
        let mut command = std::process::Command::new("bash");
        command.current_dir(crate::deploy::repo_root()).args([
            "e2e/cluster/images.sh",
            "alias",
            image,
            alias,
        ]);
        crate::identity::run(command, None);
    }

    /// The project's image (`make image`). Panics in a suite that `make e2e` started before the
    /// image was in the nodes (run_suites.py builds it while the suites that do not need it run):
    /// such a suite belongs in the Makefile's E2E_IMAGE_SUITES.
    pub fn project_image(&self) -> &str {
        assert!(
            std::env::var_os("E2E_PROJECT_IMAGE_PENDING").is_none(),
            "this suite runs the project's image, which make e2e was still building when the \
             suite started: add the suite to E2E_IMAGE_SUITES in the Makefile"
        );
        &self.project_image
    }

    /// A pod template of the metrics target labelled `app: <app>`, on the real nodes, spread
    /// evenly over the zones, Ready once it serves.
    pub fn metrics_target_template(&self, app: &str) -> Value {
        json!({
            "metadata": {"labels": {"app": app}},
            "spec": {
                // The target ignores SIGTERM (PID 1 without a handler): 1 s, then SIGKILL.
                "terminationGracePeriodSeconds": 1,
                "nodeSelector": {"type": "real"},
                "tolerations": [{"key": self.taint, "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [{
                    "maxSkew": 1,
                    "topologyKey": ZONE_LABEL,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}},
                }],
                "containers": [{
                    "name": "target",
                    "image": self.metrics_target_image,
                    "imagePullPolicy": "Never",
                    "args": ["serve"],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    ],
                    "ports": [{"name": "metrics", "containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": "metrics"},
                        "periodSeconds": 1,
                    },
                }],
            },
        })
    }
}

/// The real nodes' names, with their zones.
pub async fn nodes(client: &kube::Client) -> BTreeMap<String, String> {
    crate::nodes::zones(client, "type=real").await
}

impl RealNodes {
    /// Creates the Deployment `app` of `replicas` metrics targets (see
    /// [`RealNodes::metrics_target_template`]) in `ns` and waits until every pod is available.
    pub async fn run_metrics_targets(
        &self,
        ns: &crate::TestNamespace,
        app: &str,
        replicas: usize,
        timeout: std::time::Duration,
    ) -> Vec<k8s_openapi::api::core::v1::Pod> {
        let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
        let deployment = json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": self.metrics_target_template(app),
            },
        });
        let deployment = serde_json::from_value(deployment)
            .unwrap_or_else(|e| panic!("the metrics-target Deployment {app}: {e}"));
        deployments
            .create(&kube::api::PostParams::default(), &deployment)
            .await
            .unwrap_or_else(|e| panic!("creating the Deployment {app}: {e}"));
        let pods = ns.api();
        crate::pods::wait_available(&pods, &format!("app={app}"), replicas, timeout).await
    }
}
