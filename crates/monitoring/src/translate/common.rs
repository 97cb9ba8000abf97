//! Job fields shared by the three kinds: honour flags, limits (with the Prometheus-level
//! enforced limits), native histograms, scrape protocols, body size, namespaces and the
//! enforced namespace label.

use serde_json::{Value, json};
use zone_topology::relabel::RelabelConfig as Rule;

use super::auth::Json;
use super::relabel::constant;
use super::units;
use super::{Job, Settings};
use crate::monitors::{Limits, NamespaceSelector, NativeHistogramConfig};

pub(crate) const GLOBAL_SCRAPE_INTERVAL: &str = "30s";

pub(crate) fn set(job: &mut Json, key: &str, value: impl Into<Value>) {
    job.insert(key.to_string(), value.into());
}

pub(crate) fn set_opt<T: Into<Value> + Clone>(job: &mut Json, key: &str, value: &Option<T>) {
    if let Some(value) = value {
        set(job, key, value.clone());
    }
}

pub(crate) fn set_non_empty(job: &mut Json, key: &str, value: &Option<String>) {
    if let Some(value) = value.as_deref().filter(|value| !value.is_empty()) {
        set(job, key, value);
    }
}

/// `honor_labels`, forced false by `overrideHonorLabels`.
pub(crate) fn honor_labels(job: &mut Job, settings: &Settings, honor: bool) {
    set(
        job,
        "honor_labels",
        honor && !settings.override_honor_labels,
    );
}

/// `honor_timestamps`: written only when the object sets it or the override applies; the
/// override forces false.
pub(crate) fn honor_timestamps(job: &mut Job, settings: &Settings, honor: Option<bool>) {
    if honor.is_none() && !settings.override_honor_timestamps {
        return;
    }
    let value = honor.unwrap_or(false) && !settings.override_honor_timestamps;
    set(job, "honor_timestamps", value);
}

/// The job's limit against the enforced one. Prometheus ≥ 2.45 applies the enforced limit
/// globally, so a job without its own limit gets none; otherwise the smaller wins. Zero
/// means "no limit" on both sides.
pub(crate) fn limit(user: Option<u64>, enforced: Option<u64>) -> Option<u64> {
    match (user, enforced.unwrap_or(0)) {
        (user, 0) => user,
        (None | Some(0), _) => None,
        (Some(user), enforced) => Some(user.min(enforced)),
    }
}

pub(crate) fn limits(job: &mut Job, settings: &Settings, limits: &Limits) {
    let pairs = [
        (
            "sample_limit",
            limits.sample_limit,
            settings.enforced_sample_limit,
        ),
        (
            "target_limit",
            limits.target_limit,
            settings.enforced_target_limit,
        ),
        (
            "label_limit",
            limits.label_limit,
            settings.enforced_label_limit,
        ),
        (
            "label_name_length_limit",
            limits.label_name_length_limit,
            settings.enforced_label_name_length_limit,
        ),
        (
            "label_value_length_limit",
            limits.label_value_length_limit,
            settings.enforced_label_value_length_limit,
        ),
        (
            "keep_dropped_targets",
            limits.keep_dropped_targets,
            settings.enforced_keep_dropped_targets,
        ),
    ];
    for (key, user, enforced) in pairs {
        set_opt(job, key, &limit(user, enforced));
    }
}

/// Native histogram fields, with Prometheus v3's names.
pub(crate) fn native_histograms(
    job: &mut Job,
    config: &NativeHistogramConfig,
) -> Result<(), String> {
    set_opt(
        job,
        "native_histogram_bucket_limit",
        &config.native_histogram_bucket_limit,
    );
    if let Some(factor) = &config.native_histogram_min_bucket_factor {
        let value = units::quantity(&factor.0)
            .map_err(|problem| format!("nativeHistogramMinBucketFactor: {problem}"))?;
        set(job, "native_histogram_min_bucket_factor", value);
    }
    set_opt(
        job,
        "always_scrape_classic_histograms",
        &config.scrape_classic_histograms,
    );
    set_opt(
        job,
        "convert_classic_histograms_to_nhcb",
        &config.convert_classic_histograms_to_nhcb,
    );
    Ok(())
}

const PROTOCOLS: [&str; 5] = [
    "PrometheusProto",
    "OpenMetricsText0.0.1",
    "OpenMetricsText1.0.0",
    "PrometheusText0.0.4",
    "PrometheusText1.0.0",
];

/// `scrape_protocols` and `fallback_scrape_protocol`.
pub(crate) fn protocols(
    job: &mut Job,
    protocols: &[String],
    fallback: Option<&String>,
) -> Result<(), String> {
    if let Some(bad) = protocols.iter().find(|p| !PROTOCOLS.contains(&p.as_str())) {
        return Err(format!("scrapeProtocols: unknown protocol {bad:?}"));
    }
    if !protocols.is_empty() {
        set(job, "scrape_protocols", json!(protocols));
    }
    if let Some(fallback) = fallback {
        if !PROTOCOLS.contains(&fallback.as_str()) {
            return Err(format!(
                "fallbackScrapeProtocol: unknown protocol {fallback:?}"
            ));
        }
        set(job, "fallback_scrape_protocol", fallback.as_str());
    }
    Ok(())
}

/// `body_size_limit`: the smaller of the object's and the enforced one.
pub(crate) fn body_size_limit(
    job: &mut Job,
    user: Option<&str>,
    enforced: Option<&str>,
) -> Result<(), String> {
    let user = user.filter(|size| !size.is_empty());
    let enforced = enforced.filter(|size| !size.is_empty());
    let chosen = match (user, enforced) {
        (user, None) => user,
        (None, enforced) => enforced,
        (Some(user), Some(enforced)) => {
            let mine = units::byte_size(user).map_err(|p| format!("bodySizeLimit: {p}"))?;
            let cap = units::byte_size(enforced)
                .map_err(|p| format!("Prometheus enforcedBodySizeLimit: {p}"))?;
            Some(if mine > cap { enforced } else { user })
        }
    };
    if let Some(size) = chosen {
        units::byte_size(size).map_err(|p| format!("bodySizeLimit: {p}"))?;
        set(job, "body_size_limit", size);
    }
    Ok(())
}

/// Upstream's check: a scrape timeout must parse and not exceed the interval (the object's,
/// else the global one). Intervals must parse too. Each pair is (field name, value).
pub(crate) fn check_interval(
    settings: &Settings,
    (interval_field, interval): (&str, Option<&str>),
    (timeout_field, timeout): (&str, Option<&str>),
) -> Result<(), String> {
    let interval = interval.filter(|i| !i.is_empty());
    if let Some(interval) = interval {
        units::duration_ms(interval).map_err(|p| format!("{interval_field}: {p}"))?;
    }
    let Some(timeout) = timeout.filter(|t| !t.is_empty()) else {
        return Ok(());
    };
    let timeout_ms = units::duration_ms(timeout).map_err(|p| format!("{timeout_field}: {p}"))?;
    let effective = interval
        .or(settings.scrape_interval.as_deref())
        .unwrap_or(GLOBAL_SCRAPE_INTERVAL);
    let interval_ms =
        units::duration_ms(effective).map_err(|p| format!("the Prometheus scrapeInterval: {p}"))?;
    if timeout_ms > interval_ms {
        return Err(format!(
            "{timeout_field}: {timeout:?} is greater than the scrape interval {effective:?}"
        ));
    }
    Ok(())
}

/// The Prometheus has no scrape classes, so naming one is an error (as upstream).
pub(crate) fn check_scrape_class(name: Option<&String>) -> Result<(), String> {
    match name.filter(|name| !name.is_empty()) {
        Some(name) => Err(format!(
            "scrapeClass: {name:?} not found in the Prometheus scrapeClasses (there are none)"
        )),
        None => Ok(()),
    }
}

/// Namespaces to discover in; empty means all.
pub(crate) fn namespaces(
    settings: &Settings,
    selector: &NamespaceSelector,
    own: &str,
) -> Vec<String> {
    if settings.ignore_namespace_selectors {
        vec![own.to_string()]
    } else if selector.any {
        Vec::new()
    } else if selector.match_names.is_empty() {
        vec![own.to_string()]
    } else {
        selector.match_names.clone()
    }
}

/// The rule adding the enforced namespace label, unless the object is excluded.
pub(crate) fn enforced_namespace(
    settings: &Settings,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Option<Rule> {
    let label = settings
        .enforced_namespace_label
        .as_deref()
        .filter(|l| !l.is_empty())?;
    let excluded = settings.excluded_from_enforcement.iter().any(|entry| {
        let group = if entry.group.is_empty() {
            "monitoring.coreos.com"
        } else {
            &entry.group
        };
        !entry.namespace.is_empty()
            && group == "monitoring.coreos.com"
            && entry.resource == resource
            && entry.namespace == namespace
            && (entry.name.is_empty() || entry.name == name)
    });
    (!excluded).then(|| constant(label, namespace))
}

/// `metric_relabel_configs`: the object's `metricRelabelings` (checked, named by `field`), then
/// the enforced namespace label; absent when both are empty, as upstream writes it.
pub(crate) fn metric_relabelings(
    job: &mut Job,
    field: &str,
    user: &[crate::monitors::RelabelConfig],
    enforced: Option<Rule>,
) -> Result<(), String> {
    let mut rules = super::relabel::user_rules(field, user)?;
    rules.extend(enforced);
    if !rules.is_empty() {
        set(
            job,
            "metric_relabel_configs",
            super::relabel::to_json(&rules),
        );
    }
    Ok(())
}
