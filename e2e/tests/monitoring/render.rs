//! `make manifests MONITORING=1` rendered and checked object by object: a PodMonitor and a
//! headless metrics Service per binary and the PrometheusRule, all accepted by the API server.

use e2e::deploy::make;
use e2e::identity;

use super::*;

/// The port each binary's metrics are served on (container port name): the federator serves
/// them on its API port.
fn metrics_port(binary: &str) -> &'static str {
    match binary {
        "rules-federator" => "https",
        _ => "metrics",
    }
}

/// `make manifests MONITORING=1`: a PodMonitor per binary (job label = the binary's name, every
/// shard scrapes every pod) and the PrometheusRule, in the deploy namespace, with the labels a
/// Prometheus selects them by; a headless `<binary>-metrics` Service per binary on a container
/// port of its Deployment. All of it accepted by the API server (the prometheus-operator v0.85
/// CRDs validate the monitors and the rule).
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn monitoring_component_renders_monitors_rule_and_metrics_services() {
    let cluster = Cluster::get();
    e2e::operator::install_crds(&cluster).await;
    let ns = TestNamespace::create(&cluster, "monitoring-render").await;
    let rendered = make(
        &cluster,
        "manifests",
        &[("NAMESPACE", &ns.name), ("IMG", IMG), ("MONITORING", "1")],
    );
    let objects = identity::yaml_to_json(&rendered);
    let find = |kind: &str, name: &str| find(&objects, kind, name);
    let labels = part_of_and_component();
    for binary in controllers() {
        rendered_monitor_and_metrics_service(&objects, &ns.name, &binary, &labels);
    }
    let rule = find("PrometheusRule", RULE);
    assert_eq!(rule["metadata"]["namespace"], ns.name.as_str());
    for (key, value) in labels.as_object().unwrap() {
        assert_eq!(&rule["metadata"]["labels"][key], value, "{key}");
    }

    let output = api_server_accepts_the_monitoring_objects(&cluster, &objects, &ns.name);
    assert!(
        output.contains(&format!(
            "prometheusrule.monitoring.coreos.com/{RULE} serverside-applied"
        )),
        "{output}"
    );
}

/// The rendered object of `kind` named `name`.
fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} rendered"))
}

/// The PodMonitor of `binary` rendered in `ns` with the `labels` a Prometheus selects by, and
/// its headless metrics Service on the port of its Deployment's container.
fn rendered_monitor_and_metrics_service(objects: &[Value], ns: &str, binary: &str, labels: &Value) {
    let find = |kind: &str, name: &str| find(objects, kind, name);
    let monitor = find("PodMonitor", binary);
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["namespace"], ns);
    for (key, value) in labels.as_object().unwrap() {
        assert_eq!(
            &monitor["metadata"]["labels"][key], value,
            "{binary}: {key}"
        );
    }
    let spec = &monitor["spec"];
    assert_eq!(spec["jobLabel"], "app.kubernetes.io/name");
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"app.kubernetes.io/name": binary}})
    );
    let endpoints = spec["podMetricsEndpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1, "{binary}");
    assert_eq!(endpoints[0]["port"], metrics_port(binary));
    assert_eq!(endpoints[0]["path"], "/metrics");
    if binary == "rules-federator" {
        // Over HTTPS; nothing secret is sent or scraped (see config/monitoring).
        assert_eq!(endpoints[0]["scheme"], "https");
        assert_eq!(endpoints[0]["tlsConfig"]["insecureSkipVerify"], true);
    }
    // The series' own namespace (of a ZAU, a budget) wins over the pod's.
    assert_eq!(endpoints[0]["honorLabels"], true, "{binary}");
    assert!(
        endpoints[0]["relabelings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["targetLabel"] == "__tmp_disable_sharding"
                && r["replacement"] == "true"
                && r["action"] == "replace"),
        "{binary}: every shard scrapes every pod"
    );

    // The Deployment's container has the port the PodMonitor and the Service name.
    let deployment = find("Deployment", binary);
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    let container_port = ports
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == metrics_port(binary))
        .unwrap_or_else(|| panic!("{binary} has no port {}", metrics_port(binary)));
    let service = find("Service", &format!("{binary}-metrics"));
    assert_eq!(service["metadata"]["namespace"], ns);
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(
        service["spec"]["selector"],
        json!({"app.kubernetes.io/name": binary})
    );
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "metrics", "port": container_port["containerPort"], "targetPort": metrics_port(binary), "protocol": "TCP"}])
    );
}

/// The API server accepts the monitoring objects and the Services (in the test namespace `ns`:
/// a dry run cannot create the deploy namespace); returns kubectl's output.
fn api_server_accepts_the_monitoring_objects(
    cluster: &Cluster,
    objects: &[Value],
    ns: &str,
) -> String {
    let mut accepted: Vec<Value> = objects
        .iter()
        .filter(|o| {
            matches!(o["kind"].as_str(), Some("PodMonitor" | "PrometheusRule"))
                || (o["kind"] == "Service"
                    && o["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.ends_with("-metrics")))
        })
        .cloned()
        .collect();
    assert_eq!(accepted.len(), 2 * controllers().len() + 1);
    for object in &mut accepted {
        object["metadata"]["namespace"] = json!(ns);
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": accepted});
    let mut command = identity::kubectl(cluster);
    command.args(["apply", "--server-side", "--dry-run=server", "-f", "-"]);
    let output = identity::run(command, Some(list.to_string().as_bytes()));
    for binary in controllers() {
        for what in [
            format!("podmonitor.monitoring.coreos.com/{binary} serverside-applied"),
            format!("service/{binary}-metrics serverside-applied"),
        ] {
            assert!(output.contains(&what), "{what}: {output}");
        }
    }
    output
}
