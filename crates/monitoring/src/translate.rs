//! ServiceMonitor, PodMonitor and ScrapeConfig → Prometheus `scrape_configs` entries (and a
//! ShardedPrometheus's `remoteWrite` and `alerting` with their references resolved), as
//! prometheus-operator v0.85 generates them for Prometheus v3 (same job names, same relabelling
//! rules in the same order, hence the same target labels), for a `Prometheus` without
//! scrape classes.
//!
//! Deliberate differences from upstream, all because the controller runs its own sharding and
//! ships the configuration as a Secret:
//! - **Credentials are inlined**: `basic_auth`, `authorization.credentials`, OAuth2 client id
//!   and secret, proxy connect headers and TLS `ca`/`cert`/`key` carry the values read from
//!   the referenced Secrets/ConfigMaps, instead of upstream's files under
//!   `/etc/prometheus/certs`. Paths the user wrote (`caFile`, `certFile`, `keyFile`,
//!   `bearerTokenFile`) pass through.
//! - **`bearerTokenSecret`** becomes `authorization: {type: Bearer, credentials: …}` rather
//!   than upstream's `bearer_token: …`; Prometheus converts the latter into the former, so the
//!   scrape is identical.
//! - **No hashmod sharding rules** (`__tmp_hash`, `$(SHARD)`): the controller appends its own
//!   zone-aware sharding rules after everything emitted here.
//! - **Invalid combinations are rejected** (several credential mechanisms on one job, non-PEM
//!   TLS material, a `Basic` authorization type) where upstream would emit a job Prometheus
//!   refuses, failing the whole reload.
//! - A missing Secret/ConfigMap key is an error naming the field, never a silently dropped
//!   credential.

mod alerting;
mod auth;
mod common;
mod monitor;
mod pod_monitor;
mod refs;
mod relabel;
mod remote_write;
mod scrape_config;
mod service_monitor;
mod units;

use serde_json::{Map, Value};

pub use alerting::{
    AlertingSettings, AlertingSpec, AlertmanagerEndpoints, ValidAlerting, alerting,
    references_of_alerting,
};
pub use remote_write::{references_of_remote_write, remote_write};

use crate::Object;
use crate::monitors::{PodMonitorSpec, ScrapeConfigSpec, ServiceMonitorSpec};
use crate::resolve::{KeyRef, Resolver};

/// One Prometheus `scrape_configs` entry, with Prometheus's snake_case keys.
pub type Job = Map<String, Value>;

/// How ServiceMonitor targets are discovered (`serviceDiscoveryRole` of the Prometheus CR).
pub use zone_api::sprom::ServiceDiscoveryRole as DiscoveryRole;

/// The Prometheus-level settings (fields of the Prometheus CR) that shape the generated jobs,
/// as the ShardedPrometheus's validation gives them.
pub use zone_api::sprom::{ExcludedObject, JobSettings as Settings};

/// One job per endpoint, named `serviceMonitor/<namespace>/<name>/<index>`.
pub fn service_monitor(
    obj: &Object<ServiceMonitorSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    service_monitor::jobs(obj, settings, values)
}

/// One job per endpoint, named `podMonitor/<namespace>/<name>/<index>`.
pub fn pod_monitor(
    obj: &Object<PodMonitorSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    pod_monitor::jobs(obj, settings, values)
}

/// One job, named `scrapeConfig/<namespace>/<name>`.
pub fn scrape_config(
    obj: &Object<ScrapeConfigSpec>,
    settings: &Settings,
    values: &dyn Resolver,
) -> Result<Vec<Job>, String> {
    scrape_config::jobs(obj, settings, values)
}

/// Every Secret/ConfigMap key the ServiceMonitor needs, in its namespace, sorted.
pub fn references_of_service_monitor(obj: &Object<ServiceMonitorSpec>) -> Vec<KeyRef> {
    service_monitor::references(obj)
}

/// Every Secret/ConfigMap key the PodMonitor needs, in its namespace, sorted.
pub fn references_of_pod_monitor(obj: &Object<PodMonitorSpec>) -> Vec<KeyRef> {
    pod_monitor::references(obj)
}

/// Every Secret/ConfigMap key the ScrapeConfig needs, in its namespace, sorted.
pub fn references_of_scrape_config(obj: &Object<ScrapeConfigSpec>) -> Vec<KeyRef> {
    scrape_config::references(obj)
}
