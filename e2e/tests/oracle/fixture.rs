//! The monitoring fixture both the operator's Prometheus and the ShardedPrometheus select: two
//! namespaces of workloads (metrics targets on the real nodes of every zone, pods on kwok nodes,
//! an HTTPS target with basic auth), the Secrets their monitors reference, and ServiceMonitors,
//! PodMonitors, ScrapeConfigs and PrometheusRules covering the fields the translation has to get
//! right. Every selected object is labelled `oracle: yes`; one decoy of each kind is not.

use e2e::real::RealNodes;
use e2e::tls::TestCa;
use e2e::{Cluster, TestNamespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const MANAGER: &str = "e2e-oracle";

/// The basic-auth password of the HTTPS target; its bcrypt hash (cost 4) is in its web config.
pub const BASIC_PASSWORD: &str = "oracle-basic-password";
const BASIC_PASSWORD_BCRYPT: &str = "$2b$04$UeRQ7GUWb1k4mIVcrTl9m.rwpXkQQaLgTRlNegxZzmq8gXO0W1Ksm";
/// The bearer token a monitor sends to the plain targets (which ignore it).
pub const BEARER_TOKEN: &str = "oracle-bearer-token-7f3a";
/// The namespace label both namespace selectors match.
pub const NAMESPACE_LABEL: &str = "oracle-fixture";

/// The two namespaces and what is in them.
pub struct Fixture {
    pub a: TestNamespace,
    pub b: TestNamespace,
    /// The value of [`NAMESPACE_LABEL`] on both namespaces.
    pub run: String,
    /// The HTTPS target's serving key, PEM: must never show up outside Secrets.
    pub tls_key: String,
}

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", version, kind),
        plural,
    )
}

/// Server-side applies a monitoring.coreos.com object of `kind` in `ns`.
pub async fn apply(ns: &TestNamespace, version: &str, kind: &str, plural: &str, object: Value) {
    let resource = resource(version, kind, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a named object")
        .to_string();
    let mut object = object;
    object["apiVersion"] = json!(format!("monitoring.coreos.com/{version}"));
    object["kind"] = json!(kind);
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {}/{name}: {e}", ns.name));
}

fn selected(name: &str) -> Value {
    json!({"name": name, "labels": {"oracle": "yes"}})
}

async fn create<K>(ns: &TestNamespace, object: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = ns.api();
    let parsed: K = serde_json::from_value(object.clone()).expect("a manifest");
    api.create(&PostParams::default(), &parsed)
        .await
        .unwrap_or_else(|e| panic!("creating {object} in {}: {e}", ns.name));
}

/// A Deployment `app` of `replicas` pods from `template`, and its Service on port `port`.
async fn workload(
    ns: &TestNamespace,
    app: &str,
    replicas: usize,
    template: Value,
    port: (&str, i32),
) {
    create::<Deployment>(
        ns,
        json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": template,
            },
        }),
    )
    .await;
    create::<Service>(
        ns,
        json!({
            "metadata": {"name": app, "labels": {"app": app, "team": format!("team-{app}")}},
            "spec": {
                "selector": {"app": app},
                "ports": [{"name": port.0, "port": port.1, "targetPort": port.0}],
            },
        }),
    )
    .await;
}

/// The metrics target on the real nodes, its pods labelled `tier: <tier>` too.
fn real_target(real: &RealNodes, app: &str, tier: &str) -> Value {
    let mut template = real.metrics_target_template(app);
    template["metadata"]["labels"]["tier"] = json!(tier);
    template
}

/// The metrics target on the kwok nodes (no toleration of the real nodes' taint): pods with
/// addresses and zones that nothing answers at.
fn kwok_target(real: &RealNodes, app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app, "tier": "fake"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"type": "kwok"},
            "containers": [{
                "name": "target",
                "image": real.metrics_target_image,
                "ports": [{"name": "metrics", "containerPort": 8080}],
            }],
        },
    })
}

/// Prometheus itself as an HTTPS target with basic auth: its own /metrics behind TLS.
fn secure_target(real: &RealNodes) -> Value {
    json!({
        "metadata": {"labels": {"app": "secure", "tier": "back"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"type": "real"},
            "tolerations": [{"key": real.taint, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "prometheus",
                "image": real.prometheus_image,
                "imagePullPolicy": "Never",
                "args": [
                    "--config.file=/etc/secure/prometheus.yml",
                    "--web.config.file=/etc/secure-tls/web.yml",
                    "--storage.tsdb.path=/prometheus",
                ],
                "ports": [{"name": "https", "containerPort": 9090}],
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/secure"},
                    {"name": "tls", "mountPath": "/etc/secure-tls"},
                    {"name": "data", "mountPath": "/prometheus"},
                ],
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": "secure-config"}},
                {"name": "tls", "secret": {"secretName": "secure-tls"}},
                {"name": "data", "emptyDir": {}},
            ],
        },
    })
}

impl Fixture {
    /// Creates both namespaces, labels them, and creates the workloads, Secrets, monitors and
    /// rules (with the operator's CRDs installed).
    pub async fn create(cluster: &Cluster) -> Fixture {
        let real = RealNodes::of(cluster);
        let a = TestNamespace::create(cluster, "oracle-a").await;
        let b = TestNamespace::create(cluster, "oracle-b").await;
        let run = a.suffix().to_string();
        let namespaces: Api<Namespace> = Api::all(a.client.clone());
        for ns in [&a, &b] {
            let patch = json!({"metadata": {"labels": {NAMESPACE_LABEL: run}}});
            namespaces
                .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        let ca = TestCa::new("oracle CA");
        let server_name = format!("secure.{}.svc", a.name);
        let leaf = ca.issue(vec![server_name.clone()], None);
        let fixture = Fixture {
            run,
            tls_key: leaf.key.clone(),
            a,
            b,
        };
        let (a, b) = (&fixture.a, &fixture.b);

        create::<Secret>(
            a,
            json!({
                "metadata": {"name": "secure-tls"},
                "stringData": {
                    "ca.crt": ca.pem,
                    "tls.crt": leaf.cert,
                    "tls.key": leaf.key,
                    "web.yml": format!(
                        "tls_server_config:\n  cert_file: /etc/secure-tls/tls.crt\n  key_file: /etc/secure-tls/tls.key\nbasic_auth_users:\n  scraper: '{BASIC_PASSWORD_BCRYPT}'\n"
                    ),
                },
            }),
        )
        .await;
        create::<Secret>(
            a,
            json!({"metadata": {"name": "secure-auth"},
                   "stringData": {"user": "scraper", "pass": BASIC_PASSWORD}}),
        )
        .await;
        create::<Secret>(
            a,
            json!({"metadata": {"name": "bearer"}, "stringData": {"token": BEARER_TOKEN}}),
        )
        .await;
        create::<ConfigMap>(
            a,
            json!({"metadata": {"name": "secure-config"}, "data": {"prometheus.yml": "global: {}\n"}}),
        )
        .await;

        workload(
            a,
            "web",
            3,
            real_target(&real, "web", "front"),
            ("metrics", 8080),
        )
        .await;
        workload(a, "kwok", 3, kwok_target(&real, "kwok"), ("metrics", 8080)).await;
        workload(a, "secure", 1, secure_target(&real), ("https", 9090)).await;
        workload(
            b,
            "api",
            3,
            real_target(&real, "api", "back"),
            ("metrics", 8080),
        )
        .await;

        fixture.monitors(&server_name).await;
        fixture.rules().await;
        fixture
    }

    async fn monitors(&self, server_name: &str) {
        self.service_monitors(server_name).await;
        self.pod_monitors().await;
        self.scrape_configs().await;
    }

    /// The ServiceMonitors: every endpoint field the translation maps, in both namespaces.
    async fn service_monitors(&self, server_name: &str) {
        let (a, b) = (&self.a, &self.b);
        let service_monitors = [
            // Relabelings, metricRelabelings, targetLabels and podTargetLabels.
            (
                a,
                json!({"metadata": selected("web"), "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "targetLabels": ["team"],
                    "podTargetLabels": ["tier"],
                    "endpoints": [{
                        "port": "metrics", "interval": "5s",
                        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
                        "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}],
                    }],
                }}),
            ),
            // honorLabels, jobLabel, params, a sample limit, a bearer token from a Secret.
            (
                a,
                json!({"metadata": selected("web-honor"), "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "jobLabel": "app",
                    "sampleLimit": 5000,
                    "endpoints": [{
                        "port": "metrics", "path": "/metrics", "honorLabels": true,
                        "params": {"collect": ["all"]},
                        "bearerTokenSecret": {"name": "bearer", "key": "token"},
                    }],
                }}),
            ),
            // HTTPS with a CA and a basic-auth password from Secrets.
            (
                a,
                json!({"metadata": selected("secure"), "spec": {
                    "selector": {"matchLabels": {"app": "secure"}},
                    "endpoints": [{
                        "port": "https", "scheme": "https",
                        "tlsConfig": {"ca": {"secret": {"name": "secure-tls", "key": "ca.crt"}}, "serverName": server_name},
                        "basicAuth": {"username": {"name": "secure-auth", "key": "user"},
                                      "password": {"name": "secure-auth", "key": "pass"}},
                    }],
                }}),
            ),
            // namespaceSelector any: the api Service of namespace b.
            (
                a,
                json!({"metadata": selected("any-namespace"), "spec": {
                    "namespaceSelector": {"any": true},
                    "selector": {"matchLabels": {"app": "api"}},
                    "endpoints": [{"port": "metrics"}],
                }}),
            ),
            // namespaceSelector matchNames, with a keep relabeling.
            (
                a,
                json!({"metadata": selected("match-names"), "spec": {
                    "namespaceSelector": {"matchNames": [b.name]},
                    "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["api", "none"]}]},
                    "endpoints": [{"port": "metrics", "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_label_tier"], "regex": "back", "action": "keep"},
                    ]}],
                }}),
            ),
            // Pods on the kwok nodes.
            (
                a,
                json!({"metadata": selected("kwok"), "spec": {
                    "selector": {"matchLabels": {"app": "kwok"}},
                    "endpoints": [{"port": "metrics"}],
                }}),
            ),
            // In namespace b, selected through the namespace selector.
            (
                b,
                json!({"metadata": selected("api"), "spec": {
                    "selector": {"matchLabels": {"app": "api"}},
                    "targetLabels": ["team"],
                    "endpoints": [{"port": "metrics", "honorTimestamps": false}],
                }}),
            ),
            // Not selected.
            (
                a,
                json!({"metadata": {"name": "decoy", "labels": {"oracle": "no"}}, "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "endpoints": [{"port": "metrics"}],
                }}),
            ),
        ];
        for (ns, object) in service_monitors {
            apply(ns, "v1", "ServiceMonitor", "servicemonitors", object).await;
        }
    }

    /// The PodMonitors, in both namespaces.
    async fn pod_monitors(&self) {
        let (a, b) = (&self.a, &self.b);
        let pod_monitors = [
            (
                a,
                json!({"metadata": selected("web-pods"), "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "podTargetLabels": ["tier"],
                    "podMetricsEndpoints": [{"port": "metrics", "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_label_tier"], "targetLabel": "pod_tier"},
                    ]}],
                }}),
            ),
            (
                a,
                json!({"metadata": selected("kwok-pods"), "spec": {
                    "selector": {"matchLabels": {"app": "kwok"}},
                    "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
                }}),
            ),
            (
                b,
                json!({"metadata": selected("api-pods"), "spec": {
                    "selector": {"matchLabels": {"app": "api"}},
                    "sampleLimit": 10000,
                    "podMetricsEndpoints": [{"port": "metrics", "metricRelabelings": [
                        {"sourceLabels": ["__name__"], "regex": "process_.*", "action": "drop"},
                    ]}],
                }}),
            ),
            (
                a,
                json!({"metadata": {"name": "decoy-pods", "labels": {"oracle": "no"}}, "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "podMetricsEndpoints": [{"port": "metrics"}],
                }}),
            ),
        ];
        for (ns, object) in pod_monitors {
            apply(ns, "v1", "PodMonitor", "podmonitors", object).await;
        }
    }

    /// The ScrapeConfigs: a static target and the endpointslice and pod roles.
    async fn scrape_configs(&self) {
        let (a, b) = (&self.a, &self.b);
        let scrape_configs = [
            // A static target: no zone, so exactly one shard of any zone scrapes it.
            (
                a,
                json!({"metadata": selected("static"), "spec": {
                    "staticConfigs": [{"targets": [format!("web.{}.svc:8080", a.name)], "labels": {"source": "static"}}],
                }}),
            ),
            // The endpointslice role, the zone from the endpoint.
            (
                a,
                json!({"metadata": selected("slices"), "spec": {
                    "kubernetesSDConfigs": [{"role": "EndpointSlice", "namespaces": {"names": [a.name]}}],
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_service_name"], "regex": "web", "action": "keep"},
                        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
                        {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "namespace"},
                    ],
                }}),
            ),
            // The pod role, in namespace b.
            (
                b,
                json!({"metadata": selected("pods"), "spec": {
                    "kubernetesSDConfigs": [{"role": "Pod", "namespaces": {"names": [b.name]}}],
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_label_app"], "regex": "api", "action": "keep"},
                        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
                    ],
                    "sampleLimit": 2000,
                }}),
            ),
            (
                a,
                json!({"metadata": {"name": "decoy-static", "labels": {"oracle": "no"}}, "spec": {
                    "staticConfigs": [{"targets": ["decoy:1"]}],
                }}),
            ),
        ];
        for (ns, object) in scrape_configs {
            apply(ns, "v1alpha1", "ScrapeConfig", "scrapeconfigs", object).await;
        }
    }

    async fn rules(&self) {
        let rules = [
            (
                &self.a,
                json!({"metadata": selected("rules-a"), "spec": {"groups": [{
                    "name": "oracle-a",
                    "rules": [
                        {"record": "job:up:sum", "expr": "sum by (job) (up)"},
                        {"alert": "TargetDown", "expr": "up == 0", "for": "1m", "labels": {"severity": "warning"}},
                    ],
                }]}}),
            ),
            (
                &self.b,
                json!({"metadata": selected("rules-b"), "spec": {"groups": [{
                    "name": "oracle-b", "interval": "10s",
                    "rules": [{"alert": "ApiMissing", "expr": "absent(up{service=\"api\"})"}],
                }]}}),
            ),
            // Refused by both: its expression does not parse.
            (
                &self.a,
                json!({"metadata": selected("rules-bad"), "spec": {"groups": [{
                    "name": "oracle-bad",
                    "rules": [{"alert": "Broken", "expr": "sum(up"}],
                }]}}),
            ),
            (
                &self.a,
                json!({"metadata": {"name": "rules-decoy", "labels": {"oracle": "no"}},
                "spec": {"groups": [{"name": "decoy", "rules": [{"record": "decoy", "expr": "up"}]}]}}),
            ),
        ];
        for (ns, object) in rules {
            apply(ns, "v1", "PrometheusRule", "prometheusrules", object).await;
        }
    }

    /// The selectors, the same in the operator's Prometheus and the ShardedPrometheus.
    pub fn selectors(&self) -> Value {
        let selected = json!({"matchLabels": {"oracle": "yes"}});
        let namespaces = json!({"matchLabels": {NAMESPACE_LABEL: self.run}});
        json!({
            "serviceMonitorSelector": selected, "serviceMonitorNamespaceSelector": namespaces,
            "podMonitorSelector": selected, "podMonitorNamespaceSelector": namespaces,
            "scrapeConfigSelector": selected, "scrapeConfigNamespaceSelector": namespaces,
            "ruleSelector": selected, "ruleNamespaceSelector": namespaces,
            "scrapeInterval": "5s", "evaluationInterval": "5s",
        })
    }

    /// The fixture's secret values: none may appear outside Secrets.
    pub fn secret_values(&self) -> Vec<String> {
        let key_body = self
            .tls_key
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect::<String>();
        vec![
            BASIC_PASSWORD.to_string(),
            BEARER_TOKEN.to_string(),
            key_body.chars().take(48).collect(),
        ]
    }
}
