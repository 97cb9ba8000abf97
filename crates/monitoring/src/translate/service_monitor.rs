//! ServiceMonitor → one job per endpoint, discovered through Endpoints or EndpointSlices.

use serde_json::{Value, json};
use zone_topology::relabel::RelabelConfig as Rule;

use super::auth::{self, AuthUse, Ctx};
use super::common::{self, set, set_opt};
use super::refs::Refs;
use super::relabel::{self, constant, copy, copy_if_set, sanitize_label_name, selector_rules};
use super::{DiscoveryRole, Job, Settings};
use crate::Object;
use crate::monitors::{Endpoint, IntOrString, SelectorMechanism, ServiceMonitorSpec};
use crate::resolve::{KeyRef, Resolver};

pub(super) fn jobs(
    obj: &Object<ServiceMonitorSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    let spec = &obj.spec;
    relabel::check_selector("selector", &spec.selector)?;
    common::check_scrape_class(spec.scrape_class_name.as_ref())?;
    let ctx = Ctx {
        namespace: &obj.namespace,
        values,
    };
    spec.endpoints
        .iter()
        .enumerate()
        .map(|(index, endpoint)| {
            job(obj, settings, ctx, index, endpoint)
                .map_err(|problem| format!("endpoints[{index}].{problem}"))
        })
        .collect()
}

pub(super) fn references(obj: &Object<ServiceMonitorSpec>) -> Vec<KeyRef> {
    let mut refs = Refs::new(&obj.namespace);
    for endpoint in &obj.spec.endpoints {
        refs.bearer_token(endpoint.bearer_token_secret.as_ref());
        refs.client(
            endpoint.basic_auth.as_ref(),
            endpoint.authorization.as_ref(),
            endpoint.oauth2.as_ref(),
            endpoint.tls_config.as_ref().map(|tls| &tls.safe),
            &endpoint.proxy,
        );
    }
    refs.into_vec()
}

fn job(
    obj: &Object<ServiceMonitorSpec>,
    settings: &Settings,
    ctx: Ctx<'_>,
    index: usize,
    ep: &Endpoint,
) -> Result<Job, String> {
    let spec = &obj.spec;
    let slices = settings.service_discovery_role == DiscoveryRole::EndpointSlice;
    let role = if slices { "endpointslice" } else { "endpoints" };
    let mut job = Job::new();
    set(
        &mut job,
        "job_name",
        format!("serviceMonitor/{}/{}/{index}", obj.namespace, obj.name),
    );
    common::honor_labels(&mut job, settings, ep.honor_labels);
    common::honor_timestamps(&mut job, settings, ep.honor_timestamps);
    set_opt(
        &mut job,
        "track_timestamps_staleness",
        &ep.track_timestamps_staleness,
    );

    let mut sd = super::auth::Json::new();
    set(&mut sd, "role", role);
    let namespaces = common::namespaces(settings, &spec.namespace_selector, &obj.namespace);
    if !namespaces.is_empty() {
        set(&mut sd, "namespaces", json!({ "names": namespaces }));
    }
    if let Some(attach) = &spec.attach_metadata {
        set(
            &mut sd,
            "attach_metadata",
            json!({ "node": attach.node.unwrap_or(false) }),
        );
    }
    let role_selector = spec.selector_mechanism == Some(SelectorMechanism::RoleSelector);
    if role_selector {
        let label = relabel::selector_string("selector", &spec.selector)?;
        let selectors: Vec<Value> = [role, "service"]
            .iter()
            .map(|role| json!({ "role": role, "label": label }))
            .collect();
        set(&mut sd, "selectors", selectors);
    }
    set(&mut job, "kubernetes_sd_configs", json!([sd]));

    common::check_interval(
        settings,
        ("interval", ep.interval.as_deref()),
        ("scrapeTimeout", ep.scrape_timeout.as_deref()),
    )?;
    endpoint_http(&mut job, settings, ctx, ep)?;

    let mut rules = vec![copy("job", "__tmp_prometheus_job_name")];
    if !role_selector {
        rules.extend(selector_rules("service", &spec.selector));
    }
    let port_name = ep.port.as_deref().filter(|port| !port.is_empty());
    if let Some(port) = port_name {
        let source = if slices {
            "__meta_kubernetes_endpointslice_port_name"
        } else {
            "__meta_kubernetes_endpoint_port_name"
        };
        rules.push(Rule::keep(&[source], port));
    } else if let Some(rule) = target_port_filter(ep.target_port.as_ref()) {
        rules.push(rule);
    }
    let flavour = if slices { "endpointslice" } else { "endpoint" };
    let kind = format!("__meta_kubernetes_{flavour}_address_target_kind");
    let name = format!("__meta_kubernetes_{flavour}_address_target_name");
    for (kind_value, target) in [("Node", "node"), ("Pod", "pod")] {
        rules.push(Rule {
            source_labels: vec![kind.clone(), name.clone()],
            separator: Some(";".into()),
            regex: Some(format!("{kind_value};(.*)")),
            replacement: Some("${1}".into()),
            target_label: Some(target.into()),
            ..Rule::default()
        });
    }
    rules.push(copy("__meta_kubernetes_namespace", "namespace"));
    rules.push(copy("__meta_kubernetes_service_name", "service"));
    rules.push(copy("__meta_kubernetes_pod_name", "pod"));
    rules.push(copy("__meta_kubernetes_pod_container_name", "container"));
    if ep.filter_running != Some(false) {
        rules.push(running_filter());
    }
    for label in &spec.target_labels {
        let source = format!(
            "__meta_kubernetes_service_label_{}",
            sanitize_label_name(label)
        );
        rules.push(copy_if_set(&source, &sanitize_label_name(label)));
    }
    for label in spec
        .pod_target_labels
        .iter()
        .chain(&settings.pod_target_labels)
    {
        let source = format!("__meta_kubernetes_pod_label_{}", sanitize_label_name(label));
        rules.push(copy_if_set(&source, &sanitize_label_name(label)));
    }
    rules.push(Rule {
        replacement: Some("${1}".into()),
        ..copy("__meta_kubernetes_service_name", "job")
    });
    if let Some(job_label) = spec.job_label.as_deref().filter(|l| !l.is_empty()) {
        let source = format!(
            "__meta_kubernetes_service_label_{}",
            sanitize_label_name(job_label)
        );
        rules.push(copy_if_set(&source, "job"));
    }
    if let Some(port) = port_name {
        rules.push(constant("endpoint", port));
    } else if let Some(port) = target_port_text(ep.target_port.as_ref()) {
        rules.push(constant("endpoint", &port));
    }
    let enforced =
        common::enforced_namespace(settings, "servicemonitors", &obj.namespace, &obj.name);
    rules.extend(relabel::user_rules("relabelings", &ep.relabel_configs)?);
    rules.extend(enforced.clone());
    set(&mut job, "relabel_configs", relabel::to_json(&rules));

    common::limits(&mut job, settings, &spec.limits);
    common::native_histograms(&mut job, &spec.native_histograms)?;
    common::protocols(
        &mut job,
        &spec.scrape_protocols,
        spec.fallback_scrape_protocol.as_ref(),
    )?;
    common::body_size_limit(
        &mut job,
        spec.body_size_limit.as_deref(),
        settings.enforced_body_size_limit.as_deref(),
    )?;
    common::metric_relabelings(
        &mut job,
        "metricRelabelings",
        &ep.metric_relabel_configs,
        enforced,
    )?;
    Ok(job)
}

/// Scrape parameters and HTTP client settings of an endpoint.
fn endpoint_http(
    job: &mut Job,
    settings: &Settings,
    ctx: Ctx<'_>,
    ep: &Endpoint,
) -> Result<(), String> {
    common::set_non_empty(job, "scrape_interval", &ep.interval);
    common::set_non_empty(job, "scrape_timeout", &ep.scrape_timeout);
    common::set_non_empty(job, "metrics_path", &ep.path);
    if let Some(params) = &ep.params {
        set(job, "params", json!(params));
    }
    common::set_non_empty(job, "scheme", &ep.scheme);
    set_opt(job, "follow_redirects", &ep.follow_redirects);
    set_opt(job, "enable_http2", &ep.enable_http2);
    auth::proxy(ctx, "proxyConfig", &ep.proxy, job)?;

    let bearer_file = ep.bearer_token_file.as_deref().filter(|f| !f.is_empty());
    let bearer_secret = ep
        .bearer_token_secret
        .as_ref()
        .filter(|s| !s.name.is_empty());
    // An empty `authorization: {}` is no authorization at all, as upstream reads it.
    let authorization = ep.authorization.as_ref().filter(|a| !a.is_empty());
    if settings.deny_arbitrary_fs_access {
        let tls_files = ep.tls_config.as_ref().is_some_and(|tls| {
            [&tls.ca_file, &tls.cert_file, &tls.key_file]
                .iter()
                .any(|path| path.as_deref().is_some_and(|p| !p.is_empty()))
        });
        if bearer_file.is_some() || tls_files {
            return Err(
                "tlsConfig/bearerTokenFile: file system access is denied by the Prometheus \
                 arbitraryFSAccessThroughSMs setting"
                    .into(),
            );
        }
    }
    auth::check_exclusive(
        "authentication",
        &AuthUse {
            basic_auth: ep.basic_auth.is_some(),
            oauth2: ep.oauth2.is_some(),
            authorization: authorization.is_some(),
            bearer_token_secret: bearer_secret.is_some(),
            bearer_token_file: bearer_file.is_some(),
        },
    )?;
    if let Some(oauth) = &ep.oauth2 {
        set(job, "oauth2", auth::oauth2(ctx, "oauth2", oauth)?);
    }
    if let Some(tls) = &ep.tls_config {
        set(
            job,
            "tls_config",
            Value::Object(auth::tls(ctx, "tlsConfig", tls)?),
        );
    }
    if let Some(file) = bearer_file {
        set(job, "bearer_token_file", file);
    }
    if let Some(secret) = bearer_secret {
        set(
            job,
            "authorization",
            auth::bearer_token(ctx, "bearerTokenSecret", secret)?,
        );
    }
    if let Some(basic) = &ep.basic_auth {
        set(
            job,
            "basic_auth",
            auth::basic_auth(ctx, "basicAuth", basic)?,
        );
    }
    if let Some(authorization) = authorization {
        set(
            job,
            "authorization",
            auth::authorization(ctx, "authorization", authorization)?,
        );
    }
    Ok(())
}

/// Drops Pods that finished (`Succeeded`/`Failed`): they keep their IP in discovery for a while.
pub(super) fn running_filter() -> Rule {
    Rule::drop(&["__meta_kubernetes_pod_phase"], "(Failed|Succeeded)")
}

/// The keep rule for a (deprecated) container `targetPort`: by name, or by non-zero number.
pub(super) fn target_port_filter(port: Option<&IntOrString>) -> Option<Rule> {
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
pub(super) fn target_port_text(port: Option<&IntOrString>) -> Option<String> {
    match port? {
        IntOrString::String(name) if !name.is_empty() => Some(name.clone()),
        IntOrString::String(_) => None,
        IntOrString::Int(number) => Some(number.to_string()),
    }
}
