//! The specs of `monitoring.coreos.com` ServiceMonitor, PodMonitor (v1) and ScrapeConfig
//! (v1alpha1), in the CRDs' camelCase shape, as prometheus-operator v0.85 defines them.
//!
//! Every field is optional or defaulted and unknown fields are ignored, so an object written
//! for a newer operator still parses; what translation does not support is rejected there,
//! naming the field, rather than silently dropped here.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use k8s_openapi::api::core::v1::{ConfigMapKeySelector, SecretKeySelector};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
pub use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `spec` of a ServiceMonitor: endpoints of Services, discovered through Endpoints or
/// EndpointSlices.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceMonitorSpec {
    pub job_label: Option<String>,
    pub target_labels: Vec<String>,
    pub pod_target_labels: Vec<String>,
    pub endpoints: Vec<Endpoint>,
    pub selector: LabelSelector,
    pub selector_mechanism: Option<SelectorMechanism>,
    pub namespace_selector: NamespaceSelector,
    #[serde(flatten)]
    pub limits: Limits,
    pub scrape_protocols: Vec<String>,
    pub fallback_scrape_protocol: Option<String>,
    #[serde(flatten)]
    pub native_histograms: NativeHistogramConfig,
    pub attach_metadata: Option<AttachMetadata>,
    #[serde(rename = "scrapeClass")]
    pub scrape_class_name: Option<String>,
    pub body_size_limit: Option<String>,
}

/// `spec` of a PodMonitor: container ports of Pods.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodMonitorSpec {
    pub job_label: Option<String>,
    pub pod_target_labels: Vec<String>,
    pub pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
    pub selector: LabelSelector,
    pub selector_mechanism: Option<SelectorMechanism>,
    pub namespace_selector: NamespaceSelector,
    #[serde(flatten)]
    pub limits: Limits,
    pub scrape_protocols: Vec<String>,
    pub fallback_scrape_protocol: Option<String>,
    #[serde(flatten)]
    pub native_histograms: NativeHistogramConfig,
    pub attach_metadata: Option<AttachMetadata>,
    #[serde(rename = "scrapeClass")]
    pub scrape_class_name: Option<String>,
    pub body_size_limit: Option<String>,
}

/// Per-job limits shared by the three kinds (`sampleLimit`, `targetLimit`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Limits {
    pub sample_limit: Option<u64>,
    pub target_limit: Option<u64>,
    pub label_limit: Option<u64>,
    pub label_name_length_limit: Option<u64>,
    pub label_value_length_limit: Option<u64>,
    pub keep_dropped_targets: Option<u64>,
}

/// How a monitor's `selector` is applied: relabelling rules (the default) or Kubernetes SD
/// role selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SelectorMechanism {
    RelabelConfig,
    RoleSelector,
}

/// Which namespaces a monitor looks in: all (`any`), the listed ones, or (neither) its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NamespaceSelector {
    pub any: bool,
    pub match_names: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AttachMetadata {
    pub node: Option<bool>,
}

/// Native-histogram knobs, inlined in each kind's spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NativeHistogramConfig {
    pub scrape_classic_histograms: Option<bool>,
    pub native_histogram_bucket_limit: Option<u64>,
    pub native_histogram_min_bucket_factor: Option<Quantity>,
    #[serde(rename = "convertClassicHistogramsToNHCB")]
    pub convert_classic_histograms_to_nhcb: Option<bool>,
}

/// A Kubernetes quantity (`"1.1"`, `"1100m"`), written either as a string or a bare number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => Ok(Quantity(text)),
            serde_json::Value::Number(number) => Ok(Quantity(number.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "a quantity is a string or a number, not {other}"
            ))),
        }
    }
}

/// Proxy settings, inlined in endpoints, OAuth2 and SD configs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyConfig {
    pub proxy_url: Option<String>,
    pub no_proxy: Option<String>,
    pub proxy_from_environment: Option<bool>,
    pub proxy_connect_header: BTreeMap<String, Vec<SecretKeySelector>>,
}

/// One scraped port of a ServiceMonitor.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Endpoint {
    /// Name of the Service port (matched against the endpoint/endpointslice port name).
    pub port: Option<String>,
    /// Pod container port, by name or number; only used when `port` is empty.
    pub target_port: Option<IntOrString>,
    pub path: Option<String>,
    pub scheme: Option<String>,
    pub params: Option<BTreeMap<String, Vec<String>>>,
    pub interval: Option<String>,
    pub scrape_timeout: Option<String>,
    pub tls_config: Option<TlsConfig>,
    pub bearer_token_file: Option<String>,
    pub bearer_token_secret: Option<SecretKeySelector>,
    pub authorization: Option<SafeAuthorization>,
    pub honor_labels: bool,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: Option<bool>,
    pub basic_auth: Option<BasicAuth>,
    pub oauth2: Option<OAuth2>,
    #[serde(rename = "metricRelabelings")]
    pub metric_relabel_configs: Vec<RelabelConfig>,
    #[serde(rename = "relabelings")]
    pub relabel_configs: Vec<RelabelConfig>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    pub follow_redirects: Option<bool>,
    pub enable_http2: Option<bool>,
    pub filter_running: Option<bool>,
}

/// One scraped port of a PodMonitor.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodMetricsEndpoint {
    /// Name of the container port.
    pub port: Option<String>,
    /// Number of the container port; only used when `port` is empty.
    pub port_number: Option<i32>,
    /// Deprecated upstream; only used when `port` and `portNumber` are empty.
    pub target_port: Option<IntOrString>,
    pub path: Option<String>,
    pub scheme: Option<String>,
    pub params: Option<BTreeMap<String, Vec<String>>>,
    pub interval: Option<String>,
    pub scrape_timeout: Option<String>,
    pub tls_config: Option<SafeTlsConfig>,
    pub bearer_token_secret: Option<SecretKeySelector>,
    pub honor_labels: bool,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: Option<bool>,
    pub basic_auth: Option<BasicAuth>,
    pub oauth2: Option<OAuth2>,
    pub authorization: Option<SafeAuthorization>,
    #[serde(rename = "metricRelabelings")]
    pub metric_relabel_configs: Vec<RelabelConfig>,
    #[serde(rename = "relabelings")]
    pub relabel_configs: Vec<RelabelConfig>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    pub follow_redirects: Option<bool>,
    pub enable_http2: Option<bool>,
    pub filter_running: Option<bool>,
}

/// A key of a Secret or of a ConfigMap (exactly one must be set).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretOrConfigMap {
    pub secret: Option<SecretKeySelector>,
    pub config_map: Option<ConfigMapKeySelector>,
}

impl SecretOrConfigMap {
    pub fn is_empty(&self) -> bool {
        self.secret.is_none() && self.config_map.is_none()
    }
}

/// TLS settings that cannot read the Prometheus container's file system.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SafeTlsConfig {
    pub ca: SecretOrConfigMap,
    pub cert: SecretOrConfigMap,
    pub key_secret: Option<SecretKeySelector>,
    pub server_name: Option<String>,
    pub insecure_skip_verify: Option<bool>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
}

impl SafeTlsConfig {
    /// Nothing set: upstream treats it as absent on PodMonitor and ScrapeConfig jobs.
    pub fn is_empty(&self) -> bool {
        *self == SafeTlsConfig::default()
    }
}

/// [`SafeTlsConfig`] plus paths inside the Prometheus container (ServiceMonitor only).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsConfig {
    #[serde(flatten)]
    pub safe: SafeTlsConfig,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BasicAuth {
    pub username: SecretKeySelector,
    pub password: SecretKeySelector,
}

/// The `Authorization` header: a type (default `Bearer`) and credentials from a Secret.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SafeAuthorization {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub credentials: Option<SecretKeySelector>,
}

impl SafeAuthorization {
    /// Neither a type nor credentials: upstream treats it as absent on jobs.
    pub fn is_empty(&self) -> bool {
        self.type_.as_deref().is_none_or(str::is_empty) && self.credentials.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OAuth2 {
    pub client_id: SecretOrConfigMap,
    pub client_secret: SecretKeySelector,
    pub token_url: String,
    pub scopes: Vec<String>,
    pub endpoint_params: BTreeMap<String, String>,
    pub tls_config: Option<SafeTlsConfig>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
}

/// A relabelling rule in the CRD's shape. `action` is case-insensitive (`Replace`, `replace`,
/// `HashMod`...); an absent action is Prometheus's default, `replace`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RelabelConfig {
    pub source_labels: Vec<String>,
    pub separator: Option<String>,
    pub target_label: Option<String>,
    pub regex: Option<String>,
    pub modulus: Option<u64>,
    pub replacement: Option<String>,
    pub action: Option<String>,
}

/// `spec` of a ScrapeConfig (v1alpha1): one Prometheus job with its own service discovery.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScrapeConfigSpec {
    pub job_name: Option<String>,
    pub static_configs: Vec<StaticConfig>,
    #[serde(rename = "fileSDConfigs")]
    pub file_sd_configs: Vec<FileSdConfig>,
    #[serde(rename = "httpSDConfigs")]
    pub http_sd_configs: Vec<HttpSdConfig>,
    #[serde(rename = "kubernetesSDConfigs")]
    pub kubernetes_sd_configs: Vec<KubernetesSdConfig>,
    #[serde(flatten)]
    pub unsupported: UnsupportedSdConfigs,
    #[serde(rename = "relabelings")]
    pub relabel_configs: Vec<RelabelConfig>,
    pub metrics_path: Option<String>,
    pub scrape_interval: Option<String>,
    pub scrape_timeout: Option<String>,
    pub scrape_protocols: Vec<String>,
    pub fallback_scrape_protocol: Option<String>,
    pub honor_timestamps: Option<bool>,
    pub track_timestamps_staleness: Option<bool>,
    pub honor_labels: Option<bool>,
    pub params: BTreeMap<String, Vec<String>>,
    pub scheme: Option<String>,
    pub enable_compression: Option<bool>,
    #[serde(rename = "enableHTTP2")]
    pub enable_http2: Option<bool>,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<SafeAuthorization>,
    pub oauth2: Option<OAuth2>,
    pub tls_config: Option<SafeTlsConfig>,
    #[serde(flatten)]
    pub limits: Limits,
    #[serde(flatten)]
    pub native_histograms: NativeHistogramConfig,
    #[serde(rename = "metricRelabelings")]
    pub metric_relabel_configs: Vec<RelabelConfig>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    pub name_validation_scheme: Option<String>,
    pub name_escaping_scheme: Option<String>,
    #[serde(rename = "scrapeClass")]
    pub scrape_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StaticConfig {
    pub targets: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FileSdConfig {
    pub files: Vec<String>,
    pub refresh_interval: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpSdConfig {
    pub url: String,
    pub refresh_interval: Option<String>,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<SafeAuthorization>,
    pub oauth2: Option<OAuth2>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    pub tls_config: Option<SafeTlsConfig>,
    pub follow_redirects: Option<bool>,
    #[serde(rename = "enableHTTP2")]
    pub enable_http2: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubernetesSdConfig {
    pub api_server: Option<String>,
    /// `Pod`, `Endpoints`, `EndpointSlice`, `Service`, `Node` or `Ingress` (any case).
    pub role: String,
    pub namespaces: Option<NamespaceDiscovery>,
    pub attach_metadata: Option<AttachMetadata>,
    pub selectors: Vec<K8sSelectorConfig>,
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<SafeAuthorization>,
    pub oauth2: Option<OAuth2>,
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    pub follow_redirects: Option<bool>,
    #[serde(rename = "enableHTTP2")]
    pub enable_http2: Option<bool>,
    pub tls_config: Option<SafeTlsConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NamespaceDiscovery {
    #[serde(rename = "ownNamespace")]
    pub include_own_namespace: Option<bool>,
    pub names: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct K8sSelectorConfig {
    pub role: String,
    pub label: Option<String>,
    pub field: Option<String>,
}

/// Service discovery kinds of ScrapeConfig that are not translated: kept only to reject an
/// object that uses them (silently scraping less than asked would be worse).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct UnsupportedSdConfigs {
    #[serde(rename = "consulSDConfigs")]
    pub consul: Vec<serde_json::Value>,
    #[serde(rename = "dnsSDConfigs")]
    pub dns: Vec<serde_json::Value>,
    #[serde(rename = "ec2SDConfigs")]
    pub ec2: Vec<serde_json::Value>,
    #[serde(rename = "azureSDConfigs")]
    pub azure: Vec<serde_json::Value>,
    #[serde(rename = "gceSDConfigs")]
    pub gce: Vec<serde_json::Value>,
    #[serde(rename = "openstackSDConfigs")]
    pub openstack: Vec<serde_json::Value>,
    #[serde(rename = "digitalOceanSDConfigs")]
    pub digital_ocean: Vec<serde_json::Value>,
    #[serde(rename = "kumaSDConfigs")]
    pub kuma: Vec<serde_json::Value>,
    #[serde(rename = "eurekaSDConfigs")]
    pub eureka: Vec<serde_json::Value>,
    #[serde(rename = "dockerSDConfigs")]
    pub docker: Vec<serde_json::Value>,
    #[serde(rename = "linodeSDConfigs")]
    pub linode: Vec<serde_json::Value>,
    #[serde(rename = "hetznerSDConfigs")]
    pub hetzner: Vec<serde_json::Value>,
    #[serde(rename = "nomadSDConfigs")]
    pub nomad: Vec<serde_json::Value>,
    #[serde(rename = "dockerSwarmSDConfigs")]
    pub docker_swarm: Vec<serde_json::Value>,
    #[serde(rename = "puppetDBSDConfigs")]
    pub puppet_db: Vec<serde_json::Value>,
    #[serde(rename = "lightSailSDConfigs")]
    pub light_sail: Vec<serde_json::Value>,
    #[serde(rename = "ovhcloudSDConfigs")]
    pub ovhcloud: Vec<serde_json::Value>,
    #[serde(rename = "scalewaySDConfigs")]
    pub scaleway: Vec<serde_json::Value>,
    #[serde(rename = "ionosSDConfigs")]
    pub ionos: Vec<serde_json::Value>,
}

impl UnsupportedSdConfigs {
    /// The spec field names of the kinds that are set, in a stable order.
    pub fn used(&self) -> Vec<&'static str> {
        let kinds: [(&'static str, &Vec<serde_json::Value>); 19] = [
            ("consulSDConfigs", &self.consul),
            ("dnsSDConfigs", &self.dns),
            ("ec2SDConfigs", &self.ec2),
            ("azureSDConfigs", &self.azure),
            ("gceSDConfigs", &self.gce),
            ("openstackSDConfigs", &self.openstack),
            ("digitalOceanSDConfigs", &self.digital_ocean),
            ("kumaSDConfigs", &self.kuma),
            ("eurekaSDConfigs", &self.eureka),
            ("dockerSDConfigs", &self.docker),
            ("linodeSDConfigs", &self.linode),
            ("hetznerSDConfigs", &self.hetzner),
            ("nomadSDConfigs", &self.nomad),
            ("dockerSwarmSDConfigs", &self.docker_swarm),
            ("puppetDBSDConfigs", &self.puppet_db),
            ("lightSailSDConfigs", &self.light_sail),
            ("ovhcloudSDConfigs", &self.ovhcloud),
            ("scalewaySDConfigs", &self.scaleway),
            ("ionosSDConfigs", &self.ionos),
        ];
        kinds
            .into_iter()
            .filter(|(_, configs)| !configs.is_empty())
            .map(|(name, _)| name)
            .collect()
    }
}
