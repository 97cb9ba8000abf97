//! The settings, from the environment (see the crate's documentation for each).

use std::time::Duration;

use e2e::perf::setting;
use serde_json::{Value, json};

pub struct Settings {
    pub pods: usize,
    pub sets: usize,
    pub rate: u32,
    pub seconds: u64,
    pub warmup_seconds: u64,
    pub allowed_rate: u32,
    pub allowed_count: usize,
    pub storm: StormSettings,
    pub p99_ms: f64,
    pub rss_mib: f64,
    pub pod_timeout: Duration,
}

impl Settings {
    pub fn from_env() -> Settings {
        let settings = Settings {
            pods: setting("ZDB_PERF_PODS", 3000),
            sets: setting("ZDB_PERF_SETS", 6),
            rate: setting("ZDB_PERF_RATE", 200),
            seconds: setting("ZDB_PERF_SECONDS", 30),
            warmup_seconds: setting("ZDB_PERF_WARMUP_SECONDS", 3),
            allowed_rate: setting("ZDB_PERF_ALLOWED_RATE", 20),
            allowed_count: setting("ZDB_PERF_ALLOWED_COUNT", 600),
            storm: StormSettings::from_env(setting("ZDB_PERF_RATE", 200)),
            p99_ms: setting("ZDB_PERF_P99_MS", 5.0),
            rss_mib: setting("ZDB_PERF_RSS_MIB", 50.0),
            pod_timeout: Duration::from_secs(setting("ZDB_PERF_POD_TIMEOUT", 900)),
        };
        assert!(settings.sets >= 2, "ZDB_PERF_SETS must be at least 2");
        assert!(
            settings.pods >= settings.sets * 6,
            "ZDB_PERF_PODS must give each set at least 2 pods per zone"
        );
        assert!(
            settings.rate > 0 && settings.allowed_rate > 0,
            "ZDB_PERF_RATE and ZDB_PERF_ALLOWED_RATE must be positive"
        );
        settings
    }
}

pub struct StormSettings {
    pub seconds: u64,
    /// Pods of the storm's ReplicaSet.
    pub pods: usize,
    pub rate: u32,
    /// One storm per value, each on a budget recreated with it.
    pub max_unavailable: Vec<String>,
    pub rss_mib: f64,
    /// Allowed evictions per second at least, with a percentage budget.
    pub min_rate: f64,
    /// Allowed evictions per replacement cycle at least, as a share of a count budget.
    pub min_per_cycle: f64,
    /// p99 of the answers at most (ms).
    pub p99_ms: f64,
    /// maxUnavailable values of the native PodDisruptionBudget storms.
    pub native: Vec<String>,
    /// The ZDB's allowed rate over the native one's, at least.
    pub native_factor: f64,
}

pub fn values(setting_name: &str, default: &str) -> Vec<String> {
    let list: String = setting(setting_name, default.to_string());
    let values: Vec<String> = list
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    for value in &values {
        assert!(
            limit(value, 100).is_some(),
            "{setting_name}: {value:?} is neither a count nor a percentage"
        );
    }
    values
}

impl StormSettings {
    pub fn from_env(rate: u32) -> StormSettings {
        StormSettings {
            seconds: setting("ZDB_PERF_STORM_SECONDS", 30),
            pods: setting("ZDB_PERF_STORM_PODS", 300),
            rate: setting("ZDB_PERF_STORM_RATE", rate),
            max_unavailable: values("ZDB_PERF_STORM_MAX_UNAVAILABLE", "1,100%"),
            rss_mib: setting("ZDB_PERF_STORM_RSS_MIB", 64.0),
            min_rate: setting("ZDB_PERF_STORM_MIN_RATE", 50.0),
            min_per_cycle: setting("ZDB_PERF_STORM_MIN_PER_CYCLE", 0.7),
            p99_ms: setting("ZDB_PERF_STORM_P99_MS", 250.0),
            native: values("ZDB_PERF_STORM_NATIVE", "100%"),
            native_factor: setting("ZDB_PERF_STORM_NATIVE_FACTOR", 2.0),
        }
    }
}

/// maxUnavailable as the budget's spec takes it: a count, or a percentage ("100%").
pub fn spec_value(value: &str) -> Value {
    value
        .parse::<u64>()
        .map_or_else(|_| json!(value), |n| json!(n))
}

/// The pods one zone may have unavailable: a count, or a percentage of every expected pod of
/// the budget, rounded up (as the controller resolves it).
pub fn limit(value: &str, expected: usize) -> Option<usize> {
    match value.strip_suffix('%') {
        Some(percent) => Some((percent.parse::<usize>().ok()? * expected).div_ceil(100)),
        None => value.parse().ok(),
    }
}
