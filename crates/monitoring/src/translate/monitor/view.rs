//! Borrowed views of the fields ServiceMonitor and PodMonitor share: the spec's
//! ([`MonitorSpec`]) and an endpoint's ([`ScrapeEndpoint`]). The two kinds spell these fields
//! alike, so one macro borrows them from either.

use std::collections::BTreeMap;

use crate::monitors::{
    AttachMetadata, BasicAuth, IntOrString, LabelSelector, Limits, NamespaceSelector,
    NativeHistogramConfig, OAuth2, ProxyConfig, RelabelConfig, SafeAuthorization,
    SecretKeySelector, SelectorMechanism,
};

/// The fields a ServiceMonitor spec and a PodMonitor spec share, borrowed.
pub(crate) struct MonitorSpec<'a> {
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
pub(crate) use monitor_spec;

/// The fields a ServiceMonitor endpoint and a PodMonitor podMetricsEndpoint share, borrowed.
pub(crate) struct ScrapeEndpoint<'a> {
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
pub(crate) use scrape_endpoint;
