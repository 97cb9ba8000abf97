//! What a ShardedPrometheus takes from prometheus-operator's `Prometheus` resource: the monitor
//! and rule selectors and the knobs that shape the jobs generated from monitors, with the same
//! names and semantics, so a team migrates by changing the kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of ServiceMonitor, PodMonitor, ScrapeConfig and PrometheusRule.
pub const MONITORING_GROUP: &str = "monitoring.coreos.com";

/// The Kubernetes discovery role of ServiceMonitor jobs.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceDiscoveryRole {
    #[default]
    Endpoints,
    EndpointSlice,
}

/// A resource selector with its namespace selector, as the `Prometheus` resource pairs them.
/// `selector` None selects nothing; `namespaces` None means the ShardedPrometheus's own
/// namespace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selectors {
    pub selector: Option<LabelSelector>,
    pub namespaces: Option<LabelSelector>,
}

impl Selectors {
    pub fn selects_anything(&self) -> bool {
        self.selector.is_some()
    }
}

/// An entry of the Prometheus CR's `excludedFromEnforcement`: objects the enforced namespace
/// label is not added to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExcludedObject {
    /// API group; empty means `monitoring.coreos.com`.
    pub group: String,
    /// `servicemonitors`, `podmonitors` or `scrapeconfigs`.
    pub resource: String,
    /// Required: entries without a namespace are ignored, as upstream does.
    pub namespace: String,
    /// Empty: every object of that resource in the namespace.
    pub name: String,
}

/// The Prometheus-level settings (fields of the Prometheus CR) that shape the generated jobs.
/// Defaults are the CR's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSettings {
    pub service_discovery_role: ServiceDiscoveryRole,
    /// Global scrape interval; `None` is upstream's default, `30s`. Only used to check that an
    /// endpoint's `scrapeTimeout` fits (a job without `interval` inherits the global one).
    pub scrape_interval: Option<String>,
    /// Global scrape timeout. It never appears in jobs (Prometheus applies it, clamped to the
    /// job's interval); kept so the controller can pass the CR through unchanged.
    pub scrape_timeout: Option<String>,
    /// Every monitor only looks in its own namespace, whatever its `namespaceSelector`.
    pub ignore_namespace_selectors: bool,
    /// `honor_labels` is always false.
    pub override_honor_labels: bool,
    /// `honor_timestamps` is always false.
    pub override_honor_timestamps: bool,
    /// Label set to the object's namespace on every target and series.
    pub enforced_namespace_label: Option<String>,
    pub excluded_from_enforcement: Vec<ExcludedObject>,
    /// Pod labels copied onto every ServiceMonitor/PodMonitor target (after the monitor's own).
    pub pod_target_labels: Vec<String>,
    /// Refuse ServiceMonitors reading files of the Prometheus container
    /// (`arbitraryFSAccessThroughSMs.deny`).
    pub deny_arbitrary_fs_access: bool,
    pub enforced_sample_limit: Option<u64>,
    pub enforced_target_limit: Option<u64>,
    pub enforced_label_limit: Option<u64>,
    pub enforced_label_name_length_limit: Option<u64>,
    pub enforced_label_value_length_limit: Option<u64>,
    pub enforced_keep_dropped_targets: Option<u64>,
    pub enforced_body_size_limit: Option<String>,
}

/// The validated monitoring part of a spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidMonitoring {
    pub service_monitors: Selectors,
    pub pod_monitors: Selectors,
    pub scrape_configs: Selectors,
    /// Always selects nothing in Agent mode (validation refuses a rule selector there).
    pub rules: Selectors,
    /// The global scrape interval: the spec's, else prometheus-operator's 30s.
    pub scrape_interval: String,
    /// The rule evaluation interval: the spec's, else 30s.
    pub evaluation_interval: String,
    /// What shapes the jobs made from monitors.
    pub jobs: JobSettings,
}

impl ValidMonitoring {
    /// Whether any monitoring.coreos.com object can be selected.
    pub fn selects_anything(&self) -> bool {
        [
            &self.service_monitors,
            &self.pod_monitors,
            &self.scrape_configs,
            &self.rules,
        ]
        .iter()
        .any(|selectors| selectors.selects_anything())
    }
}

/// prometheus-operator's default global scrape and evaluation interval.
pub const DEFAULT_INTERVAL: &str = "30s";
