//! ServiceMonitor and PodMonitor → one job per endpoint, written once: a monitor is the fields
//! both specs share ([`MonitorSpec`]) and a discovery [`Role`]; an endpoint is a
//! [`MonitorEndpoint`]: the fields both kinds of endpoint share ([`ScrapeEndpoint`]) and its
//! own HTTP client settings. The job is built in named sections: discovery, scrape parameters,
//! HTTP client ([`MonitorEndpoint::client`]), target relabelling ([`targets`]), the user's rules
//! and the enforced namespace, limits and metric relabelling.

mod credentials;
mod role;
mod targets;
mod view;

use serde_json::{Value, json};

use super::auth::{Ctx, Json};
use super::common::{self, set, set_non_empty, set_opt};
use super::refs::Refs;
use super::relabel;
use super::{Job, Settings};
use crate::Object;
use crate::monitors::{SafeTlsConfig, SelectorMechanism};
use crate::resolve::{KeyRef, Resolver};

pub(super) use credentials::Credentials;
pub(super) use role::Role;
pub(super) use view::{MonitorSpec, ScrapeEndpoint, monitor_spec, scrape_endpoint};

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
    let mut rules = targets::target_rules(monitor, settings, endpoint, role_selector);
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
