//! The selectors of monitoring.coreos.com objects and the knobs of the jobs made from them.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::SpromError;
use crate::shared::{check_selector, duration, is_label_name};
use crate::sprom::monitoring::{self, JobSettings, Selectors, ValidMonitoring};
use crate::sprom::{PrometheusMode, ShardedPrometheusSpec};
use crate::units::parse_prometheus_size;

impl ShardedPrometheusSpec {
    /// The selectors of monitoring.coreos.com objects and the knobs of the jobs made from them.
    pub(super) fn monitoring(&self) -> Result<ValidMonitoring, SpromError> {
        if self.mode == PrometheusMode::Agent && self.rule_selector.is_some() {
            return Err(SpromError::AgentWithRuleSelector);
        }
        self.check_scrape_timeout()?;
        self.check_enforced()?;
        let scrape_interval = interval("spec.scrapeInterval", &self.scrape_interval)?;
        Ok(ValidMonitoring {
            service_monitors: selectors(
                (
                    "spec.serviceMonitorSelector",
                    &self.service_monitor_selector,
                ),
                (
                    "spec.serviceMonitorNamespaceSelector",
                    &self.service_monitor_namespace_selector,
                ),
            )?,
            pod_monitors: selectors(
                ("spec.podMonitorSelector", &self.pod_monitor_selector),
                (
                    "spec.podMonitorNamespaceSelector",
                    &self.pod_monitor_namespace_selector,
                ),
            )?,
            scrape_configs: selectors(
                ("spec.scrapeConfigSelector", &self.scrape_config_selector),
                (
                    "spec.scrapeConfigNamespaceSelector",
                    &self.scrape_config_namespace_selector,
                ),
            )?,
            rules: selectors(
                ("spec.ruleSelector", &self.rule_selector),
                ("spec.ruleNamespaceSelector", &self.rule_namespace_selector),
            )?,
            jobs: self.job_settings(&scrape_interval)?,
            scrape_interval,
            evaluation_interval: interval("spec.evaluationInterval", &self.evaluation_interval)?,
        })
    }

    /// The knobs of the jobs made from monitors, with the global `scrape_interval`.
    fn job_settings(&self, scrape_interval: &str) -> Result<JobSettings, SpromError> {
        Ok(JobSettings {
            service_discovery_role: self.service_discovery_role.unwrap_or_default(),
            scrape_interval: Some(scrape_interval.to_string()),
            scrape_timeout: self.scrape_timeout.clone(),
            ignore_namespace_selectors: self.ignore_namespace_selectors,
            override_honor_labels: self.override_honor_labels,
            override_honor_timestamps: self.override_honor_timestamps,
            enforced_namespace_label: self.enforced_namespace_label.clone(),
            enforced_sample_limit: limit("spec.enforcedSampleLimit", self.enforced_sample_limit)?,
            enforced_target_limit: limit("spec.enforcedTargetLimit", self.enforced_target_limit)?,
            enforced_label_limit: limit("spec.enforcedLabelLimit", self.enforced_label_limit)?,
            enforced_label_name_length_limit: limit(
                "spec.enforcedLabelNameLengthLimit",
                self.enforced_label_name_length_limit,
            )?,
            enforced_label_value_length_limit: limit(
                "spec.enforcedLabelValueLengthLimit",
                self.enforced_label_value_length_limit,
            )?,
            enforced_keep_dropped_targets: limit(
                "spec.enforcedKeepDroppedTargets",
                self.enforced_keep_dropped_targets,
            )?,
            enforced_body_size_limit: self.enforced_body_size_limit.clone(),
            ..JobSettings::default()
        })
    }

    /// The scrape timeout is at most the scrape interval: Prometheus refuses the whole
    /// configuration otherwise.
    fn check_scrape_timeout(&self) -> Result<(), SpromError> {
        let Some(timeout) = &self.scrape_timeout else {
            return Ok(());
        };
        let timeout_duration = duration("spec.scrapeTimeout", timeout)?;
        let interval = match &self.scrape_interval {
            Some(interval) => duration("spec.scrapeInterval", interval)?,
            None => Duration::from_secs(30),
        };
        if timeout_duration > interval {
            return Err(SpromError::ScrapeTimeout {
                timeout: timeout.clone(),
                interval: self
                    .scrape_interval
                    .clone()
                    .unwrap_or_else(|| monitoring::DEFAULT_INTERVAL.to_string()),
            });
        }
        Ok(())
    }

    /// `enforcedBodySizeLimit` a Prometheus size, `enforcedNamespaceLabel` a label name.
    fn check_enforced(&self) -> Result<(), SpromError> {
        if let Some(size) = &self.enforced_body_size_limit {
            parse_prometheus_size(size).map_err(|source| SpromError::BodySizeLimit {
                value: size.clone(),
                source,
            })?;
        }
        if let Some(label) = &self.enforced_namespace_label
            && !is_label_name(label)
        {
            return Err(SpromError::EnforcedNamespaceLabel(label.clone()));
        }
        Ok(())
    }
}

/// An object selector and its namespace selector, each checked, by field.
fn selectors(
    (field, selector): (&'static str, &Option<LabelSelector>),
    (namespace_field, namespaces): (&'static str, &Option<LabelSelector>),
) -> Result<Selectors, SpromError> {
    for (field, selector) in [(field, selector), (namespace_field, namespaces)] {
        if let Some(selector) = selector {
            check_selector(selector).map_err(|source| SpromError::Selector { field, source })?;
        }
    }
    Ok(Selectors {
        selector: selector.clone(),
        namespaces: namespaces.clone(),
    })
}

/// A limit of the jobs: 0 or more.
fn limit(field: &'static str, value: Option<i64>) -> Result<Option<u64>, SpromError> {
    value
        .map(|value| u64::try_from(value).map_err(|_| SpromError::NegativeLimit { field, value }))
        .transpose()
}

/// An interval as written, the upstream default when unset.
fn interval(field: &'static str, value: &Option<String>) -> Result<String, SpromError> {
    match value {
        Some(value) => Ok(duration(field, value).map(|_| value.clone())?),
        None => Ok(monitoring::DEFAULT_INTERVAL.to_string()),
    }
}
