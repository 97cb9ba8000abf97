//! The generated target relabelling of a monitor's job, before the user's rules: the job
//! name, the finished-Pod filter, the selector, the port, the meta labels, the target labels,
//! the `job` label and the `endpoint` label, in upstream's order for each role.

use zone_topology::relabel::RelabelConfig as Rule;

use super::{Monitor, MonitorEndpoint, Role};
use crate::monitors::IntOrString;
use crate::translate::Settings;
use crate::translate::relabel::{constant, copy, copy_if_set, sanitize_label_name, selector_rules};

/// The generated target relabelling, before the user's rules.
pub(super) fn target_rules<E: MonitorEndpoint>(
    monitor: &Monitor<'_>,
    settings: &Settings,
    endpoint: &E,
    role_selector: bool,
) -> Vec<Rule> {
    let (role, scrape) = (monitor.role, endpoint.scrape());
    let running = scrape.filter_running != Some(false);
    let mut rules = vec![copy("job", "__tmp_prometheus_job_name")];
    // Upstream drops finished Pods first for a PodMonitor, after the meta labels for a
    // ServiceMonitor.
    if running && role == Role::Pod {
        rules.push(running_filter());
    }
    if !role_selector {
        rules.extend(selector_rules(role.selected(), monitor.spec.selector));
    }
    let port_name = scrape.port.as_deref().filter(|port| !port.is_empty());
    rules.extend(port_filter(
        role,
        port_name,
        endpoint.port_number(),
        scrape.target_port,
    ));
    rules.extend(meta_labels(role));
    if running && role != Role::Pod {
        rules.push(running_filter());
    }
    rules.extend(target_labels(monitor, settings));
    rules.extend(job_label(monitor));
    // Upstream names the endpoint after `port` or `targetPort`, never after `portNumber`.
    if let Some(port) = port_name {
        rules.push(constant("endpoint", port));
    } else if let Some(port) = target_port_text(scrape.target_port) {
        rules.push(constant("endpoint", &port));
    }
    rules
}

/// The keep rule for the scraped port: `port` by name, else a PodMonitor's `portNumber`, else
/// the container `targetPort`.
fn port_filter(
    role: Role,
    port_name: Option<&str>,
    port_number: Option<i32>,
    target_port: Option<&IntOrString>,
) -> Option<Rule> {
    if let Some(port) = port_name {
        Some(Rule::keep(&[role.port_name_label()], port))
    } else if let Some(number) = port_number.filter(|number| *number != 0) {
        Some(Rule::keep(
            &["__meta_kubernetes_pod_container_port_number"],
            &number.to_string(),
        ))
    } else {
        target_port_filter(target_port)
    }
}

/// The `node`/`pod` (from the endpoint's target), `namespace`, `service`, `pod` and
/// `container` labels, in upstream's order for the role.
fn meta_labels(role: Role) -> Vec<Rule> {
    let flavour = match role {
        Role::Endpoints => "endpoint",
        Role::EndpointSlice => "endpointslice",
        Role::Pod => {
            return vec![
                copy("__meta_kubernetes_namespace", "namespace"),
                copy("__meta_kubernetes_pod_container_name", "container"),
                copy("__meta_kubernetes_pod_name", "pod"),
            ];
        }
    };
    let kind = format!("__meta_kubernetes_{flavour}_address_target_kind");
    let name = format!("__meta_kubernetes_{flavour}_address_target_name");
    let mut rules: Vec<Rule> = [("Node", "node"), ("Pod", "pod")]
        .into_iter()
        .map(|(kind_value, target)| Rule {
            source_labels: vec![kind.clone(), name.clone()],
            separator: Some(";".into()),
            regex: Some(format!("{kind_value};(.*)")),
            replacement: Some("${1}".into()),
            target_label: Some(target.into()),
            ..Rule::default()
        })
        .collect();
    rules.push(copy("__meta_kubernetes_namespace", "namespace"));
    rules.push(copy("__meta_kubernetes_service_name", "service"));
    rules.push(copy("__meta_kubernetes_pod_name", "pod"));
    rules.push(copy("__meta_kubernetes_pod_container_name", "container"));
    rules
}

/// The monitor's Service `targetLabels`, then its and the Prometheus's `podTargetLabels`.
fn target_labels(monitor: &Monitor<'_>, settings: &Settings) -> Vec<Rule> {
    let copy_label = |object: &str, label: &String| {
        let label = sanitize_label_name(label);
        copy_if_set(&format!("__meta_kubernetes_{object}_label_{label}"), &label)
    };
    let pod_labels = monitor
        .spec
        .pod_target_labels
        .iter()
        .chain(&settings.pod_target_labels);
    monitor
        .target_labels
        .iter()
        .map(|label| copy_label("service", label))
        .chain(pod_labels.map(|label| copy_label("pod", label)))
        .collect()
}

/// The `job` label: the Service's name (ServiceMonitor) or `<namespace>/<name>` (PodMonitor),
/// replaced by the `jobLabel` label of the selected object when that is set.
fn job_label(monitor: &Monitor<'_>) -> Vec<Rule> {
    let mut rules = vec![match monitor.role {
        Role::Endpoints | Role::EndpointSlice => Rule {
            replacement: Some("${1}".into()),
            ..copy("__meta_kubernetes_service_name", "job")
        },
        Role::Pod => constant("job", &format!("{}/{}", monitor.namespace, monitor.name)),
    }];
    let job_label = monitor.spec.job_label.as_deref();
    if let Some(label) = job_label.filter(|label| !label.is_empty()) {
        let (object, label) = (monitor.role.selected(), sanitize_label_name(label));
        let source = format!("__meta_kubernetes_{object}_label_{label}");
        rules.push(copy_if_set(&source, "job"));
    }
    rules
}

/// Drops Pods that finished (`Succeeded`/`Failed`): they keep their IP in discovery for a while.
fn running_filter() -> Rule {
    Rule::drop(&["__meta_kubernetes_pod_phase"], "(Failed|Succeeded)")
}

/// The keep rule for a (deprecated) container `targetPort`: by name, or by non-zero number.
fn target_port_filter(port: Option<&IntOrString>) -> Option<Rule> {
    match port? {
        IntOrString::String(name) if !name.is_empty() => Some(Rule::keep(
            &["__meta_kubernetes_pod_container_port_name"],
            name,
        )),
        IntOrString::Int(number) if *number != 0 => Some(Rule::keep(
            &["__meta_kubernetes_pod_container_port_number"],
            &number.to_string(),
        )),
        _ => None,
    }
}

/// The `endpoint` label for a `targetPort`, as upstream prints it: a number always (even 0),
/// a name when non-empty.
fn target_port_text(port: Option<&IntOrString>) -> Option<String> {
    match port? {
        IntOrString::String(name) if !name.is_empty() => Some(name.clone()),
        IntOrString::String(_) => None,
        IntOrString::Int(number) => Some(number.to_string()),
    }
}
