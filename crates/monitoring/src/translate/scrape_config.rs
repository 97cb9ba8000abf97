//! ScrapeConfig → one job, with its static targets and its file, HTTP and Kubernetes service
//! discovery. Other discovery kinds are rejected, naming the field.

use serde_json::{Value, json};
use zone_topology::relabel::{Action, RelabelConfig as Rule};

use super::auth::{self, AuthUse, Ctx, Json};
use super::common::{self, set, set_opt};
use super::refs::Refs;
use super::relabel::{self, copy};
use super::{Job, Settings};
use crate::Object;
use crate::monitors::{
    BasicAuth, HttpSdConfig, KubernetesSdConfig, OAuth2, ProxyConfig, SafeAuthorization,
    SafeTlsConfig, ScrapeConfigSpec,
};
use crate::resolve::{KeyRef, Resolver};

pub(super) fn jobs(
    obj: &Object<ScrapeConfigSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    let spec = &obj.spec;
    common::check_scrape_class(spec.scrape_class_name.as_ref())?;
    if let Some(kind) = spec.unsupported.used().first() {
        return Err(format!(
            "{kind}: this service discovery kind is not supported; use staticConfigs, \
             fileSDConfigs, httpSDConfigs or kubernetesSDConfigs"
        ));
    }
    let ctx = Ctx {
        namespace: &obj.namespace,
        values,
    };
    let mut job = Job::new();
    set(
        &mut job,
        "job_name",
        format!("scrapeConfig/{}/{}", obj.namespace, obj.name),
    );
    scrape_params(&mut job, settings, spec)?;
    // On the job (not in SD configs), empty `authorization: {}` and `tlsConfig: {}` are
    // absent, as upstream reads them.
    let client = Client {
        authorization: spec.authorization.as_ref().filter(|a| !a.is_empty()),
        tls: spec.tls_config.as_ref().filter(|tls| !tls.is_empty()),
        ..client_of!(spec)
    };
    client.add(ctx, "", &mut job)?;
    common::limits(&mut job, settings, &spec.limits);
    common::native_histograms(&mut job, &spec.native_histograms)?;
    common::body_size_limit(&mut job, None, settings.enforced_body_size_limit.as_deref())?;
    discovery(&mut job, ctx, spec)?;
    relabelings(&mut job, settings, obj)?;
    name_schemes(&mut job, spec);
    Ok(vec![job])
}

pub(super) fn references(obj: &Object<ScrapeConfigSpec>) -> Vec<KeyRef> {
    let spec = &obj.spec;
    let mut refs = Refs::new(&obj.namespace);
    client_of!(spec).references(&mut refs);
    for config in &spec.http_sd_configs {
        client_of!(config).references(&mut refs);
    }
    for config in &spec.kubernetes_sd_configs {
        client_of!(config).references(&mut refs);
    }
    refs.into_vec()
}

/// Honour flags, path, parameters, HTTP flags, interval and timeout, protocols and scheme.
fn scrape_params(
    job: &mut Job,
    settings: &Settings,
    spec: &ScrapeConfigSpec,
) -> Result<(), String> {
    if spec.honor_timestamps.is_some() {
        common::honor_timestamps(job, settings, spec.honor_timestamps);
    }
    set_opt(
        job,
        "track_timestamps_staleness",
        &spec.track_timestamps_staleness,
    );
    if let Some(honor) = spec.honor_labels {
        common::honor_labels(job, settings, honor);
    }
    set_opt(job, "metrics_path", &spec.metrics_path);
    if !spec.params.is_empty() {
        set(job, "params", json!(spec.params));
    }
    set_opt(job, "enable_compression", &spec.enable_compression);
    set_opt(job, "enable_http2", &spec.enable_http2);
    common::check_interval(
        settings,
        ("scrapeInterval", spec.scrape_interval.as_deref()),
        ("scrapeTimeout", spec.scrape_timeout.as_deref()),
    )?;
    set_opt(job, "scrape_interval", &spec.scrape_interval);
    set_opt(job, "scrape_timeout", &spec.scrape_timeout);
    common::protocols(
        job,
        &spec.scrape_protocols,
        spec.fallback_scrape_protocol.as_ref(),
    )?;
    if let Some(scheme) = &spec.scheme {
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("scheme: {scheme:?} is neither HTTP nor HTTPS"));
        }
        set(job, "scheme", scheme);
    }
    Ok(())
}

/// Static targets, then file, HTTP and Kubernetes service discovery.
fn discovery(job: &mut Job, ctx: Ctx<'_>, spec: &ScrapeConfigSpec) -> Result<(), String> {
    static_configs(job, spec)?;
    if !spec.file_sd_configs.is_empty() {
        let configs: Vec<Value> = spec
            .file_sd_configs
            .iter()
            .map(|config| {
                let mut out = Json::new();
                set(&mut out, "files", json!(config.files));
                set_opt(&mut out, "refresh_interval", &config.refresh_interval);
                Value::Object(out)
            })
            .collect();
        set(job, "file_sd_configs", configs);
    }
    if !spec.http_sd_configs.is_empty() {
        let configs = spec
            .http_sd_configs
            .iter()
            .enumerate()
            .map(|(index, config)| {
                http_sd(ctx, &format!("httpSDConfigs[{index}]."), config).map(Value::Object)
            })
            .collect::<Result<Vec<_>, _>>()?;
        set(job, "http_sd_configs", configs);
    }
    if !spec.kubernetes_sd_configs.is_empty() {
        let configs = spec
            .kubernetes_sd_configs
            .iter()
            .enumerate()
            .map(|(index, config)| {
                kubernetes_sd(ctx, &format!("kubernetesSDConfigs[{index}]."), config)
                    .map(Value::Object)
            })
            .collect::<Result<Vec<_>, _>>()?;
        set(job, "kubernetes_sd_configs", configs);
    }
    Ok(())
}

/// `relabel_configs` (the job name, `jobName`, the user's rules and the enforced namespace
/// label) and `metric_relabel_configs`.
fn relabelings(
    job: &mut Job,
    settings: &Settings,
    obj: &Object<ScrapeConfigSpec>,
) -> Result<(), String> {
    let spec = &obj.spec;
    let mut rules = vec![copy("job", "__tmp_prometheus_job_name")];
    if let Some(name) = &spec.job_name {
        rules.push(Rule {
            target_label: Some("job".into()),
            action: Some(Action::Replace),
            replacement: Some(name.clone()),
            ..Rule::default()
        });
    }
    let enforced = common::enforced_namespace(settings, "scrapeconfigs", &obj.namespace, &obj.name);
    // Upstream adds the enforced label to targets only when the object has relabelings of its
    // own (series get it through metric_relabel_configs regardless).
    if !spec.relabel_configs.is_empty() {
        rules.extend(relabel::user_rules("relabelings", &spec.relabel_configs)?);
        rules.extend(enforced.clone());
    }
    set(job, "relabel_configs", relabel::to_json(&rules));
    common::metric_relabelings(
        job,
        "metricRelabelings",
        &spec.metric_relabel_configs,
        enforced,
    )
}

/// `metric_name_validation_scheme` and `metric_name_escaping_scheme`, as Prometheus spells them.
fn name_schemes(job: &mut Job, spec: &ScrapeConfigSpec) {
    if let Some(scheme) = &spec.name_validation_scheme {
        set(
            job,
            "metric_name_validation_scheme",
            scheme.to_ascii_lowercase(),
        );
    }
    let escaping = spec
        .name_escaping_scheme
        .as_deref()
        .and_then(|scheme| match scheme {
            "AllowUTF8" => Some("allow-utf-8"),
            "Underscores" => Some("underscores"),
            "Dots" => Some("dots"),
            "Values" => Some("values"),
            _ => None,
        });
    if let Some(escaping) = escaping {
        set(job, "metric_name_escaping_scheme", escaping);
    }
}

/// The HTTP client settings shared by the job and its SD configs.
struct Client<'a> {
    basic_auth: Option<&'a BasicAuth>,
    authorization: Option<&'a SafeAuthorization>,
    oauth2: Option<&'a OAuth2>,
    tls: Option<&'a SafeTlsConfig>,
    proxy: &'a ProxyConfig,
}

/// The [`Client`] of the spec or of one of its SD configs (the fields have the same names in
/// each), as written.
macro_rules! client_of {
    ($config:expr) => {{
        let config = $config;
        Client {
            basic_auth: config.basic_auth.as_ref(),
            authorization: config.authorization.as_ref(),
            oauth2: config.oauth2.as_ref(),
            tls: config.tls_config.as_ref(),
            proxy: &config.proxy,
        }
    }};
}
use client_of;

impl Client<'_> {
    fn add(&self, ctx: Ctx<'_>, field: &str, out: &mut Json) -> Result<(), String> {
        auth::check_exclusive(
            &format!("{field}authentication"),
            &AuthUse {
                basic_auth: self.basic_auth.is_some(),
                oauth2: self.oauth2.is_some(),
                authorization: self.authorization.is_some(),
                ..AuthUse::default()
            },
        )?;
        auth::proxy(ctx, &format!("{field}proxyConfig"), self.proxy, out)?;
        if let Some(basic) = self.basic_auth {
            set(
                out,
                "basic_auth",
                auth::basic_auth(ctx, &format!("{field}basicAuth"), basic)?,
            );
        }
        if let Some(authorization) = self.authorization {
            let value = auth::authorization(ctx, &format!("{field}authorization"), authorization)?;
            set(out, "authorization", value);
        }
        if let Some(oauth) = self.oauth2 {
            set(
                out,
                "oauth2",
                auth::oauth2(ctx, &format!("{field}oauth2"), oauth)?,
            );
        }
        if let Some(tls) = self.tls {
            let tls = auth::safe_tls(ctx, &format!("{field}tlsConfig"), tls)?;
            set(out, "tls_config", Value::Object(tls));
        }
        Ok(())
    }

    /// Every Secret/ConfigMap key of these settings.
    fn references(&self, refs: &mut Refs<'_>) {
        refs.client(
            self.basic_auth,
            self.authorization,
            self.oauth2,
            self.tls,
            self.proxy,
        );
    }
}

fn static_configs(job: &mut Job, spec: &ScrapeConfigSpec) -> Result<(), String> {
    if spec.static_configs.is_empty() {
        return Ok(());
    }
    let mut configs = Vec::new();
    for (index, config) in spec.static_configs.iter().enumerate() {
        if config.labels.keys().any(String::is_empty) {
            return Err(format!("staticConfigs[{index}].labels: empty label name"));
        }
        configs.push(json!({ "targets": config.targets, "labels": config.labels }));
    }
    set(job, "static_configs", configs);
    Ok(())
}

fn http_sd(ctx: Ctx<'_>, field: &str, config: &HttpSdConfig) -> Result<Json, String> {
    let host = config
        .url
        .strip_prefix("http://")
        .or_else(|| config.url.strip_prefix("https://"))
        .unwrap_or("");
    if host.is_empty() || host.starts_with('/') {
        return Err(format!(
            "{field}url: {:?} is not an http(s) URL with a host",
            config.url
        ));
    }
    let mut out = Json::new();
    client_of!(config).add(ctx, field, &mut out)?;
    set(&mut out, "url", config.url.as_str());
    set_opt(&mut out, "refresh_interval", &config.refresh_interval);
    set_opt(&mut out, "follow_redirects", &config.follow_redirects);
    set_opt(&mut out, "enable_http2", &config.enable_http2);
    Ok(out)
}

const ROLES: [&str; 6] = [
    "pod",
    "endpoints",
    "endpointslice",
    "service",
    "node",
    "ingress",
];

fn kubernetes_sd(ctx: Ctx<'_>, field: &str, config: &KubernetesSdConfig) -> Result<Json, String> {
    let role = config.role.to_ascii_lowercase();
    if !ROLES.contains(&role.as_str()) {
        return Err(format!(
            "{field}role: {:?} is not one of {}",
            config.role,
            ROLES.join(", ")
        ));
    }
    let own_namespace = config
        .namespaces
        .as_ref()
        .is_some_and(|ns| ns.include_own_namespace == Some(true));
    if config.api_server.is_some() && own_namespace {
        return Err(format!(
            "{field}namespaces.ownNamespace: cannot be used with apiServer"
        ));
    }
    let allowed: &[&str] = match role.as_str() {
        "endpoints" => &["pod", "service", "endpoints"],
        "endpointslice" => &["pod", "service", "endpointslice"],
        "pod" => &["pod"],
        "service" => &["service"],
        "node" => &["node"],
        _ => &["ingress"],
    };
    let mut out = Json::new();
    set_opt(&mut out, "api_server", &config.api_server);
    set(&mut out, "role", role.as_str());
    client_of!(config).add(ctx, field, &mut out)?;
    set_opt(&mut out, "follow_redirects", &config.follow_redirects);
    set_opt(&mut out, "enable_http2", &config.enable_http2);
    if let Some(namespaces) = &config.namespaces {
        let mut ns = Json::new();
        set(&mut ns, "names", json!(namespaces.names));
        set_opt(&mut ns, "own_namespace", &namespaces.include_own_namespace);
        set(&mut out, "namespaces", Value::Object(ns));
    }
    if !config.selectors.is_empty() {
        let mut selectors = Vec::new();
        for (index, selector) in config.selectors.iter().enumerate() {
            let selector_role = selector.role.to_ascii_lowercase();
            if !allowed.contains(&selector_role.as_str()) {
                return Err(format!(
                    "{field}selectors[{index}].role: the {role} role supports only {} selectors",
                    allowed.join(", ")
                ));
            }
            let mut entry = Json::new();
            set(&mut entry, "role", selector_role);
            set_opt(&mut entry, "label", &selector.label);
            set_opt(&mut entry, "field", &selector.field);
            selectors.push(Value::Object(entry));
        }
        set(&mut out, "selectors", selectors);
    }
    if let Some(attach) = &config.attach_metadata
        && matches!(role.as_str(), "pod" | "endpoints" | "endpointslice")
    {
        set(
            &mut out,
            "attach_metadata",
            json!({ "node": attach.node.unwrap_or(false) }),
        );
    }
    Ok(out)
}
