//! `monitoring.coreos.com` objects — ServiceMonitor, PodMonitor, ScrapeConfig, PrometheusRule —
//! turned into Prometheus configuration (pure), with prometheus-operator's semantics: the same
//! selection, the same job names and target labels, credentials resolved from Secrets and
//! ConfigMaps of the object's namespace.
//!
//! The controller reads the objects and the Secrets they reference; everything here is a
//! function of those values, so it is tested without a cluster.

use std::collections::BTreeMap;

pub mod mixin;
pub mod monitors;
pub mod redact;
pub mod resolve;
pub mod rules;
pub mod select;
pub mod translate;

/// One selected object, as the controller hands it over: its identity and its typed spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Object<S> {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub spec: S,
}

/// An object left out of the configuration, and why (named in the status and an event).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rejection {
    /// `ServiceMonitor`, `PodMonitor`, `ScrapeConfig` or `PrometheusRule`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// What is wrong, naming the field (or the rule) to fix. Never contains a secret value.
    pub reason: String,
}
