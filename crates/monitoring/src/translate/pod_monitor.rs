//! PodMonitor → one job per endpoint, discovered through the `pod` role.

use serde_json::{Value, json};
use zone_topology::relabel::RelabelConfig as Rule;

use super::auth::{self, AuthUse, Ctx, Json};
use super::common::{self, set, set_non_empty, set_opt};
use super::refs::Refs;
use super::relabel::{self, constant, copy, copy_if_set, sanitize_label_name, selector_rules};
use super::service_monitor::{running_filter, target_port_filter, target_port_text};
use super::{Job, Settings};
use crate::Object;
use crate::monitors::{PodMetricsEndpoint, PodMonitorSpec, SelectorMechanism};
use crate::resolve::{KeyRef, Resolver};

pub(super) fn jobs(
    obj: &Object<PodMonitorSpec>,
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
    spec.pod_metrics_endpoints
        .iter()
        .enumerate()
        .map(|(index, endpoint)| {
            job(obj, settings, ctx, index, endpoint)
                .map_err(|problem| format!("podMetricsEndpoints[{index}].{problem}"))
        })
        .collect()
}

pub(super) fn references(obj: &Object<PodMonitorSpec>) -> Vec<KeyRef> {
    let mut refs = Refs::new(&obj.namespace);
    for endpoint in &obj.spec.pod_metrics_endpoints {
        refs.bearer_token(endpoint.bearer_token_secret.as_ref());
        refs.client(
            endpoint.basic_auth.as_ref(),
            endpoint.authorization.as_ref(),
            endpoint.oauth2.as_ref(),
            endpoint.tls_config.as_ref(),
            &endpoint.proxy,
        );
    }
    refs.into_vec()
}

fn job(
    obj: &Object<PodMonitorSpec>,
    settings: &Settings,
    ctx: Ctx<'_>,
    index: usize,
    ep: &PodMetricsEndpoint,
) -> Result<Job, String> {
    let spec = &obj.spec;
    let mut job = Job::new();
    set(
        &mut job,
        "job_name",
        format!("podMonitor/{}/{}/{index}", obj.namespace, obj.name),
    );
    common::honor_labels(&mut job, settings, ep.honor_labels);
    common::honor_timestamps(&mut job, settings, ep.honor_timestamps);
    set_opt(
        &mut job,
        "track_timestamps_staleness",
        &ep.track_timestamps_staleness,
    );

    let mut sd = Json::new();
    set(&mut sd, "role", "pod");
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
        set(
            &mut sd,
            "selectors",
            json!([{ "role": "pod", "label": label }]),
        );
    }
    set(&mut job, "kubernetes_sd_configs", json!([sd]));

    common::check_interval(
        settings,
        ("interval", ep.interval.as_deref()),
        ("scrapeTimeout", ep.scrape_timeout.as_deref()),
    )?;
    endpoint_http(&mut job, ctx, ep)?;

    let mut rules = vec![copy("job", "__tmp_prometheus_job_name")];
    if ep.filter_running != Some(false) {
        rules.push(running_filter());
    }
    if !role_selector {
        rules.extend(selector_rules("pod", &spec.selector));
    }
    let port_name = ep.port.as_deref().filter(|port| !port.is_empty());
    if let Some(port) = port_name {
        rules.push(Rule::keep(
            &["__meta_kubernetes_pod_container_port_name"],
            port,
        ));
    } else if let Some(number) = ep.port_number.filter(|number| *number != 0) {
        rules.push(Rule::keep(
            &["__meta_kubernetes_pod_container_port_number"],
            &number.to_string(),
        ));
    } else if let Some(rule) = target_port_filter(ep.target_port.as_ref()) {
        rules.push(rule);
    }
    rules.push(copy("__meta_kubernetes_namespace", "namespace"));
    rules.push(copy("__meta_kubernetes_pod_container_name", "container"));
    rules.push(copy("__meta_kubernetes_pod_name", "pod"));
    for label in spec
        .pod_target_labels
        .iter()
        .chain(&settings.pod_target_labels)
    {
        let source = format!("__meta_kubernetes_pod_label_{}", sanitize_label_name(label));
        rules.push(copy_if_set(&source, &sanitize_label_name(label)));
    }
    rules.push(constant("job", &format!("{}/{}", obj.namespace, obj.name)));
    if let Some(job_label) = spec.job_label.as_deref().filter(|l| !l.is_empty()) {
        let source = format!(
            "__meta_kubernetes_pod_label_{}",
            sanitize_label_name(job_label)
        );
        rules.push(copy_if_set(&source, "job"));
    }
    // Upstream names the endpoint after `port` or `targetPort`, never after `portNumber`.
    if let Some(port) = port_name {
        rules.push(constant("endpoint", port));
    } else if let Some(port) = target_port_text(ep.target_port.as_ref()) {
        rules.push(constant("endpoint", &port));
    }
    let enforced = common::enforced_namespace(settings, "podmonitors", &obj.namespace, &obj.name);
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

/// Scrape parameters and HTTP client settings of a pod endpoint.
fn endpoint_http(job: &mut Job, ctx: Ctx<'_>, ep: &PodMetricsEndpoint) -> Result<(), String> {
    set_non_empty(job, "scrape_interval", &ep.interval);
    set_non_empty(job, "scrape_timeout", &ep.scrape_timeout);
    set_non_empty(job, "metrics_path", &ep.path);
    if let Some(params) = &ep.params {
        set(job, "params", json!(params));
    }
    set_non_empty(job, "scheme", &ep.scheme);
    set_opt(job, "follow_redirects", &ep.follow_redirects);
    set_opt(job, "enable_http2", &ep.enable_http2);

    let bearer_secret = ep
        .bearer_token_secret
        .as_ref()
        .filter(|s| !s.name.is_empty());
    // Empty `authorization: {}` and `tlsConfig: {}` are absent, as upstream reads them.
    let authorization = ep.authorization.as_ref().filter(|a| !a.is_empty());
    let tls = ep.tls_config.as_ref().filter(|tls| !tls.is_empty());
    auth::check_exclusive(
        "authentication",
        &AuthUse {
            basic_auth: ep.basic_auth.is_some(),
            oauth2: ep.oauth2.is_some(),
            authorization: authorization.is_some(),
            bearer_token_secret: bearer_secret.is_some(),
            bearer_token_file: false,
        },
    )?;
    if let Some(tls) = tls {
        set(
            job,
            "tls_config",
            Value::Object(auth::safe_tls(ctx, "tlsConfig", tls)?),
        );
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
    if let Some(oauth) = &ep.oauth2 {
        set(job, "oauth2", auth::oauth2(ctx, "oauth2", oauth)?);
    }
    auth::proxy(ctx, "proxyConfig", &ep.proxy, job)?;
    if let Some(authorization) = authorization {
        set(
            job,
            "authorization",
            auth::authorization(ctx, "authorization", authorization)?,
        );
    }
    Ok(())
}
