//! ServiceMonitor and PodMonitor → one job per endpoint, written once: a monitor is the fields
//! both specs share ([`MonitorSpec`]) and a discovery [`Role`]; an endpoint is a
//! [`MonitorEndpoint`]: the fields both kinds of endpoint share ([`ScrapeEndpoint`]) and its
//! own HTTP client settings. The job is built
//! in named sections: discovery, scrape parameters, HTTP client, target relabelling (selector,
//! port, meta labels, target labels, job label, endpoint label, the user's rules, the enforced
//! namespace), limits and metric relabelling.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use zone_topology::relabel::RelabelConfig as Rule;

use super::auth::{self, AuthUse, Ctx, Json};
use super::common::{self, set, set_non_empty, set_opt};
use super::refs::Refs;
use super::relabel::{self, constant, copy, copy_if_set, sanitize_label_name, selector_rules};
use super::{DiscoveryRole, Job, Settings};
use crate::Object;
use crate::monitors::{
    AttachMetadata, BasicAuth, IntOrString, LabelSelector, Limits, NamespaceSelector,
    NativeHistogramConfig, OAuth2, ProxyConfig, RelabelConfig, SafeAuthorization, SafeTlsConfig,
    SecretKeySelector, SelectorMechanism,
};
use crate::resolve::{KeyRef, Resolver};

/// The fields a ServiceMonitor spec and a PodMonitor spec share, borrowed.
pub(super) struct MonitorSpec<'a> {
    pub job_label: &'a Option<String>,
    pub pod_target_labels: &'a [String],
    pub selector: &'a LabelSelector,
    pub selector_mechanism: Option<SelectorMechanism>,
    pub namespace_selector: &'a NamespaceSelector,
    pub limits: &'a Limits,
    pub scrape_protocols: &'a [String],
    pub fallback_scrape_protocol: Option<&'a String>,
    pub native_histograms: &'a NativeHistogramConfig,
    pub attach_metadata: Option<&'a AttachMetadata>,
    pub scrape_class_name: Option<&'a String>,
    pub body_size_limit: Option<&'a str>,
}

/// Borrows the [`MonitorSpec`] of a `ServiceMonitorSpec` or a `PodMonitorSpec` (the fields
/// have the same names in both).
macro_rules! monitor_spec {
    ($spec:expr) => {{
        let spec = $spec;
        $crate::translate::monitor::MonitorSpec {
            job_label: &spec.job_label,
            pod_target_labels: &spec.pod_target_labels,
            selector: &spec.selector,
            selector_mechanism: spec.selector_mechanism,
            namespace_selector: &spec.namespace_selector,
            limits: &spec.limits,
            scrape_protocols: &spec.scrape_protocols,
            fallback_scrape_protocol: spec.fallback_scrape_protocol.as_ref(),
            native_histograms: &spec.native_histograms,
            attach_metadata: spec.attach_metadata.as_ref(),
            scrape_class_name: spec.scrape_class_name.as_ref(),
            body_size_limit: spec.body_size_limit.as_deref(),
        }
    }};
}
pub(super) use monitor_spec;

/// The fields a ServiceMonitor endpoint and a PodMonitor podMetricsEndpoint share, borrowed.
pub(super) struct ScrapeEndpoint<'a> {
    /// The Service port's name (ServiceMonitor) or the container port's (PodMonitor).
    pub port: &'a Option<String>,
    /// The container port, by name or number; used when `port` (and `portNumber`) is empty.
    pub target_port: Option<&'a IntOrString>,
    pub path: &'a Option<String>,
    pub scheme: &'a Option<String>,
    pub params: &'a Option<BTreeMap<String, Vec<String>>>,
    pub interval: &'a Option<String>,
    pub scrape_timeout: &'a Option<String>,
    pub bearer_token_secret: Option<&'a SecretKeySelector>,
    pub authorization: Option<&'a SafeAuthorization>,
    pub honor_labels: bool,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: &'a Option<bool>,
    pub basic_auth: Option<&'a BasicAuth>,
    pub oauth2: Option<&'a OAuth2>,
    pub metric_relabel_configs: &'a [RelabelConfig],
    pub relabel_configs: &'a [RelabelConfig],
    pub proxy: &'a ProxyConfig,
    pub follow_redirects: &'a Option<bool>,
    pub enable_http2: &'a Option<bool>,
    pub filter_running: Option<bool>,
}

/// Borrows the [`ScrapeEndpoint`] of an `Endpoint` or a `PodMetricsEndpoint` (the fields have
/// the same names in both).
macro_rules! scrape_endpoint {
    ($endpoint:expr) => {{
        let ep = $endpoint;
        $crate::translate::monitor::ScrapeEndpoint {
            port: &ep.port,
            target_port: ep.target_port.as_ref(),
            path: &ep.path,
            scheme: &ep.scheme,
            params: &ep.params,
            interval: &ep.interval,
            scrape_timeout: &ep.scrape_timeout,
            bearer_token_secret: ep.bearer_token_secret.as_ref(),
            authorization: ep.authorization.as_ref(),
            honor_labels: ep.honor_labels,
            honor_timestamps: ep.honor_timestamps,
            track_timestamps_staleness: &ep.track_timestamps_staleness,
            basic_auth: ep.basic_auth.as_ref(),
            oauth2: ep.oauth2.as_ref(),
            metric_relabel_configs: &ep.metric_relabel_configs,
            relabel_configs: &ep.relabel_configs,
            proxy: &ep.proxy,
            follow_redirects: &ep.follow_redirects,
            enable_http2: &ep.enable_http2,
            filter_running: ep.filter_running,
        }
    }};
}
pub(super) use scrape_endpoint;

/// How a monitor's targets are discovered: a ServiceMonitor through Endpoints or
/// EndpointSlices, a PodMonitor through Pods. Everything that differs between the two kinds
/// of monitor, except the endpoint's HTTP client, follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Endpoints,
    EndpointSlice,
    Pod,
}

impl Role {
    /// The role discovering a Service's endpoints (a ServiceMonitor's, an Alertmanager's), as
    /// the Prometheus's `serviceDiscoveryRole` asks.
    pub(super) fn of_services(role: DiscoveryRole) -> Role {
        match role {
            DiscoveryRole::Endpoints => Role::Endpoints,
            DiscoveryRole::EndpointSlice => Role::EndpointSlice,
        }
    }

    /// The first segment of the job name.
    fn kind(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "serviceMonitor",
            Role::Pod => "podMonitor",
        }
    }

    /// The resource named in the Prometheus's `excludedFromEnforcement`.
    fn resource(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "servicemonitors",
            Role::Pod => "podmonitors",
        }
    }

    /// The spec field listing the endpoints, naming them in errors.
    fn endpoints_field(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "endpoints",
            Role::Pod => "podMetricsEndpoints",
        }
    }

    /// The Kubernetes SD role.
    pub(super) fn sd_role(self) -> &'static str {
        match self {
            Role::Endpoints => "endpoints",
            Role::EndpointSlice => "endpointslice",
            Role::Pod => "pod",
        }
    }

    /// The object whose labels the `selector` and `jobLabel` read.
    fn selected(self) -> &'static str {
        match self {
            Role::Endpoints | Role::EndpointSlice => "service",
            Role::Pod => "pod",
        }
    }

    /// The SD roles the `RoleSelector` mechanism selects on.
    fn selector_roles(self) -> Vec<&'static str> {
        match self {
            Role::Endpoints | Role::EndpointSlice => vec![self.sd_role(), "service"],
            Role::Pod => vec!["pod"],
        }
    }

    /// The meta label holding the name of the discovered port.
    pub(super) fn port_name_label(self) -> &'static str {
        match self {
            Role::Endpoints => "__meta_kubernetes_endpoint_port_name",
            Role::EndpointSlice => "__meta_kubernetes_endpointslice_port_name",
            Role::Pod => "__meta_kubernetes_pod_container_port_name",
        }
    }
}

/// A ServiceMonitor or a PodMonitor, as the job builder reads it.
pub(super) struct Monitor<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub spec: MonitorSpec<'a>,
    /// Service labels copied onto targets (a ServiceMonitor's `targetLabels`).
    pub target_labels: &'a [String],
    pub role: Role,
}

impl<'a> Monitor<'a> {
    /// The monitor `obj`, whose shared fields are `spec`, without Service target labels.
    pub(super) fn of<S>(obj: &'a Object<S>, spec: MonitorSpec<'a>, role: Role) -> Self {
        Monitor {
            namespace: &obj.namespace,
            name: &obj.name,
            spec,
            target_labels: &[],
            role,
        }
    }
}

/// One endpoint of a monitor: a ServiceMonitor `endpoints` entry or a PodMonitor
/// `podMetricsEndpoints` entry.
pub(super) trait MonitorEndpoint {
    /// The fields both kinds of endpoint share.
    fn scrape(&self) -> ScrapeEndpoint<'_>;
    /// A container port number (PodMonitor `portNumber`), used when `port` is empty.
    fn port_number(&self) -> Option<i32> {
        None
    }
    /// The TLS settings holding references to Secrets and ConfigMaps.
    fn safe_tls(&self) -> Option<&SafeTlsConfig>;
    /// The proxy, TLS and credential fields of the job, checked as this kind checks them.
    fn client(&self, job: &mut Job, settings: &Settings, ctx: Ctx<'_>) -> Result<(), String>;
}

/// One job per endpoint; a problem is reported under the endpoint's field and index.
pub(super) fn jobs<E: MonitorEndpoint>(
    monitor: &Monitor<'_>,
    endpoints: &[E],
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    relabel::check_selector("selector", monitor.spec.selector)?;
    common::check_scrape_class(monitor.spec.scrape_class_name)?;
    let ctx = Ctx {
        namespace: monitor.namespace,
        values,
    };
    let field = monitor.role.endpoints_field();
    endpoints
        .iter()
        .enumerate()
        .map(|(index, endpoint)| {
            job(monitor, settings, ctx, index, endpoint)
                .map_err(|problem| format!("{field}[{index}].{problem}"))
        })
        .collect()
}

/// Every Secret/ConfigMap key the endpoints need, in the monitor's namespace, sorted.
pub(super) fn references<E: MonitorEndpoint>(namespace: &str, endpoints: &[E]) -> Vec<KeyRef> {
    let mut refs = Refs::new(namespace);
    for endpoint in endpoints {
        let scrape = endpoint.scrape();
        refs.bearer_token(scrape.bearer_token_secret);
        refs.client(
            scrape.basic_auth,
            scrape.authorization,
            scrape.oauth2,
            endpoint.safe_tls(),
            scrape.proxy,
        );
    }
    refs.into_vec()
}

fn job<E: MonitorEndpoint>(
    monitor: &Monitor<'_>,
    settings: &Settings,
    ctx: Ctx<'_>,
    index: usize,
    endpoint: &E,
) -> Result<Job, String> {
    let (spec, scrape) = (&monitor.spec, endpoint.scrape());
    let mut job = Job::new();
    let (kind, namespace, name) = (monitor.role.kind(), monitor.namespace, monitor.name);
    set(
        &mut job,
        "job_name",
        format!("{kind}/{namespace}/{name}/{index}"),
    );
    honour(&mut job, settings, &scrape);
    let role_selector = spec.selector_mechanism == Some(SelectorMechanism::RoleSelector);
    let sd = discovery(monitor, settings, role_selector)?;
    set(&mut job, "kubernetes_sd_configs", json!([sd]));
    common::check_interval(
        settings,
        ("interval", scrape.interval.as_deref()),
        ("scrapeTimeout", scrape.scrape_timeout.as_deref()),
    )?;
    scrape_params(&mut job, &scrape);
    endpoint.client(&mut job, settings, ctx)?;

    let enforced = common::enforced_namespace(settings, monitor.role.resource(), namespace, name);
    let mut rules = target_rules(monitor, settings, endpoint, role_selector);
    rules.extend(relabel::user_rules("relabelings", scrape.relabel_configs)?);
    rules.extend(enforced.clone());
    set(&mut job, "relabel_configs", relabel::to_json(&rules));

    limits(&mut job, settings, spec)?;
    common::metric_relabelings(
        &mut job,
        "metricRelabelings",
        scrape.metric_relabel_configs,
        enforced,
    )?;
    Ok(job)
}

/// `honor_labels`, `honor_timestamps` and `track_timestamps_staleness`.
fn honour(job: &mut Job, settings: &Settings, scrape: &ScrapeEndpoint<'_>) {
    common::honor_labels(job, settings, scrape.honor_labels);
    common::honor_timestamps(job, settings, scrape.honor_timestamps);
    set_opt(
        job,
        "track_timestamps_staleness",
        scrape.track_timestamps_staleness,
    );
}

/// The one Kubernetes SD config: role, namespaces, node metadata and, with the `RoleSelector`
/// mechanism, the selector as SD selectors.
fn discovery(
    monitor: &Monitor<'_>,
    settings: &Settings,
    role_selector: bool,
) -> Result<Json, String> {
    let spec = &monitor.spec;
    let mut sd = Json::new();
    set(&mut sd, "role", monitor.role.sd_role());
    let namespaces = common::namespaces(settings, spec.namespace_selector, monitor.namespace);
    if !namespaces.is_empty() {
        set(&mut sd, "namespaces", json!({ "names": namespaces }));
    }
    if let Some(attach) = spec.attach_metadata {
        set(
            &mut sd,
            "attach_metadata",
            json!({ "node": attach.node.unwrap_or(false) }),
        );
    }
    if role_selector {
        let label = relabel::selector_string("selector", spec.selector)?;
        let selectors: Vec<Value> = monitor
            .role
            .selector_roles()
            .iter()
            .map(|role| json!({ "role": role, "label": label }))
            .collect();
        set(&mut sd, "selectors", selectors);
    }
    Ok(sd)
}

/// Interval, timeout, path, parameters, scheme and HTTP flags of the endpoint.
fn scrape_params(job: &mut Job, scrape: &ScrapeEndpoint<'_>) {
    set_non_empty(job, "scrape_interval", scrape.interval);
    set_non_empty(job, "scrape_timeout", scrape.scrape_timeout);
    set_non_empty(job, "metrics_path", scrape.path);
    if let Some(params) = scrape.params {
        set(job, "params", json!(params));
    }
    set_non_empty(job, "scheme", scrape.scheme);
    set_opt(job, "follow_redirects", scrape.follow_redirects);
    set_opt(job, "enable_http2", scrape.enable_http2);
}

/// The generated target relabelling, before the user's rules.
fn target_rules<E: MonitorEndpoint>(
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
        &scrape,
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
    scrape: &ScrapeEndpoint<'_>,
) -> Option<Rule> {
    if let Some(port) = port_name {
        Some(Rule::keep(&[role.port_name_label()], port))
    } else if let Some(number) = port_number.filter(|number| *number != 0) {
        Some(Rule::keep(
            &["__meta_kubernetes_pod_container_port_number"],
            &number.to_string(),
        ))
    } else {
        target_port_filter(scrape.target_port)
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

/// Per-job limits, native histograms, scrape protocols and the body size limit.
fn limits(job: &mut Job, settings: &Settings, spec: &MonitorSpec<'_>) -> Result<(), String> {
    common::limits(job, settings, spec.limits);
    common::native_histograms(job, spec.native_histograms)?;
    common::protocols(job, spec.scrape_protocols, spec.fallback_scrape_protocol)?;
    common::body_size_limit(
        job,
        spec.body_size_limit,
        settings.enforced_body_size_limit.as_deref(),
    )
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

/// The credentials of an endpoint, of which at most one may be set.
pub(super) struct Credentials<'a> {
    basic_auth: Option<&'a BasicAuth>,
    oauth2: Option<&'a OAuth2>,
    authorization: Option<&'a SafeAuthorization>,
    bearer_secret: Option<&'a SecretKeySelector>,
    /// A ServiceMonitor's `bearerTokenFile`, when non-empty.
    pub bearer_file: Option<&'a str>,
}

impl<'a> Credentials<'a> {
    pub(super) fn of(scrape: &ScrapeEndpoint<'a>, bearer_file: Option<&'a str>) -> Self {
        Credentials {
            basic_auth: scrape.basic_auth,
            oauth2: scrape.oauth2,
            // An empty `authorization: {}` is no authorization at all, as upstream reads it.
            authorization: scrape.authorization.filter(|a| !a.is_empty()),
            bearer_secret: scrape.bearer_token_secret.filter(|s| !s.name.is_empty()),
            bearer_file: bearer_file.filter(|file| !file.is_empty()),
        }
    }

    pub(super) fn check_exclusive(&self) -> Result<(), String> {
        auth::check_exclusive(
            "authentication",
            &AuthUse {
                basic_auth: self.basic_auth.is_some(),
                oauth2: self.oauth2.is_some(),
                authorization: self.authorization.is_some(),
                bearer_token_secret: self.bearer_secret.is_some(),
                bearer_token_file: self.bearer_file.is_some(),
            },
        )
    }

    pub(super) fn add_oauth2(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(oauth) = self.oauth2 {
            set(job, "oauth2", auth::oauth2(ctx, "oauth2", oauth)?);
        }
        Ok(())
    }

    /// `bearerTokenSecret` (as an `authorization` of type Bearer) and `basicAuth`.
    pub(super) fn add_bearer_and_basic(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(secret) = self.bearer_secret {
            let value = auth::bearer_token(ctx, "bearerTokenSecret", secret)?;
            set(job, "authorization", value);
        }
        if let Some(basic) = self.basic_auth {
            set(
                job,
                "basic_auth",
                auth::basic_auth(ctx, "basicAuth", basic)?,
            );
        }
        Ok(())
    }

    pub(super) fn add_authorization(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(authorization) = self.authorization {
            let value = auth::authorization(ctx, "authorization", authorization)?;
            set(job, "authorization", value);
        }
        Ok(())
    }
}
