//! What the selected monitoring.coreos.com objects add to every shard: scrape jobs from
//! ServiceMonitors, PodMonitors and ScrapeConfigs (credentials resolved), rule files from
//! PrometheusRules, and what was left out. Computed once per reconcile and shared by every
//! active shard.

use serde_json::{Map, Value};
use zone_api::ValidSprom;
use zone_monitoring::Rejection;
use zone_monitoring::rules::RuleFile;

/// The monitoring part of every active shard's configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Monitoring {
    /// Jobs made from monitors, before the sharding rules; credentials inline (the shard
    /// configuration is a Secret).
    pub jobs: Vec<Map<String, Value>>,
    /// The remote_write entries with their credential references resolved.
    pub remote_write: Vec<Map<String, Value>>,
    /// The `alerting` section (Alertmanagers and alert relabelling), credentials resolved;
    /// None without `spec.alerting`.
    pub alerting: Option<Map<String, Value>>,
    /// Rule files made from PrometheusRules, stored in [`crate::children::build::rule_config_map_name`]
    /// ConfigMaps.
    pub rule_files: Vec<RuleFile>,
    /// With `spec.thanos`: the rule files of the global PrometheusRules, for the Thanos Ruler
    /// (stored in [`crate::children::build::global_rule_config_map_name`] ConfigMaps; at least
    /// one, empty without global rules). None without `spec.thanos`: global rules stay on the
    /// shards.
    pub global_rule_files: Option<Vec<RuleFile>>,
    /// Monitors whose jobs are in `jobs`.
    pub monitors: u32,
    /// Selected objects left out, and why (bounded lists are made from it for the status).
    pub rejected: Vec<Rejection>,
    /// Selected kinds the API server does not serve (prometheus-operator's CRDs missing).
    pub not_served: Vec<&'static str>,
    /// What Prometheus would refuse in the rule files of `spec.ruleFiles` (ConfigMaps the pods
    /// mount as they are): one line per file.
    pub rule_file_problems: Vec<String>,
    /// Some of `rejected` were left out because the shards' ServiceAccount may not read them
    /// (looked at again when the review's answer expires: no watch tells of an RBAC change).
    pub access_denied: bool,
    /// Objects of other namespaces are in use by the shards' ServiceAccount's permission there
    /// (that namespace's consent): looked at again when the review's answer expires, so a
    /// revoked consent takes them out as soon as a refused one would be let in.
    pub consented: bool,
}

impl Monitoring {
    /// Nothing at all (tests, and statics).
    #[cfg(test)]
    pub const NONE: Monitoring = Monitoring {
        jobs: Vec::new(),
        remote_write: Vec::new(),
        alerting: None,
        rule_files: Vec::new(),
        global_rule_files: None,
        monitors: 0,
        rejected: Vec::new(),
        not_served: Vec::new(),
        rule_file_problems: Vec::new(),
        access_denied: false,
        consented: false,
    };

    /// Rule groups in `rule_files` (every shard evaluates them).
    pub fn rule_groups(&self) -> u32 {
        groups(&self.rule_files)
    }

    /// Rule groups in `global_rule_files` (the Thanos Ruler evaluates them).
    pub fn global_rule_groups(&self) -> u32 {
        self.global_rule_files.as_deref().map_or(0, groups)
    }

    /// Nothing from monitoring objects: the spec's own remote_write only.
    pub fn of_spec(valid: &ValidSprom) -> Monitoring {
        Monitoring {
            remote_write: valid.remote_write.clone(),
            ..Monitoring::default()
        }
    }
}

/// The rule groups of `files`.
fn groups(files: &[RuleFile]) -> u32 {
    files
        .iter()
        .map(|file| u32::try_from(file.groups).unwrap_or(u32::MAX))
        .fold(0, u32::saturating_add)
}

pub mod cache;
pub mod error;
pub mod kinds;
pub mod observe;
pub mod tenancy;
pub mod translate;
