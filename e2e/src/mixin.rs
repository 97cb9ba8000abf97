//! The monitoring mixin (monitoring/) rendered by jsonnet, with a test's settings: the
//! PrometheusRule `monitoring/prometheus-rule.jsonnet` makes, as JSON.
//!
//! The jsonnet binary is go-jsonnet built by `e2e/cluster/build.sh monitoring` into its cache (the
//! version and cache directory are those of `e2e/cluster/versions.sh`), or `$JSONNET` when set.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The mixin's entry point for the PrometheusRule, relative to the repository root.
pub const PROMETHEUS_RULE: &str = "monitoring/prometheus-rule.jsonnet";

/// The jsonnet binary: `$JSONNET` when set, else `$ZAC_CACHE/jsonnet-$JSONNET_VERSION/jsonnet`.
/// `versions.sh` is sourced rather than parsed, as for promtool. Panics, naming the path, when
/// it is missing.
pub fn jsonnet() -> PathBuf {
    let path = match std::env::var_os("JSONNET") {
        Some(path) => PathBuf::from(path),
        None => {
            let versions = crate::cluster::e2e_dir().join("cluster/versions.sh");
            let output = Command::new("bash")
                .arg("-c")
                .arg(
                    r#"source "$1" && printf %s "$ZAC_CACHE/jsonnet-${JSONNET_VERSION:?}/jsonnet""#,
                )
                .arg("bash")
                .arg(&versions)
                .output()
                .unwrap_or_else(|e| panic!("sourcing {}: {e}", versions.display()));
            assert!(
                output.status.success(),
                "sourcing {}: {}",
                versions.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&output.stdout).into_owned())
        }
    };
    assert!(
        path.is_file(),
        "{} is missing: run `bash e2e/cluster/build.sh monitoring` (or set JSONNET)",
        path.display()
    );
    path
}

/// The mixin's PrometheusRule with `config` (jsonnet code, e.g. `{zauPausedTooLongFor: "30s"}`)
/// over its defaults: `jsonnet --tla-code config=<config> monitoring/prometheus-rule.jsonnet`.
pub fn prometheus_rule(config: &str) -> Value {
    let root = crate::deploy::repo_root();
    let entry = root.join(PROMETHEUS_RULE);
    assert!(
        entry.is_file(),
        "{} is missing: the mixin renders the PrometheusRule from it",
        entry.display()
    );
    let output = Command::new(jsonnet())
        .current_dir(&root)
        .arg("--tla-code")
        .arg(format!("config={config}"))
        .arg(PROMETHEUS_RULE)
        .output()
        .expect("running jsonnet");
    assert!(
        output.status.success(),
        "jsonnet {PROMETHEUS_RULE} with config={config}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("jsonnet prints JSON")
}

/// The names of the rule groups of a PrometheusRule.
pub fn group_names(rule: &Value) -> Vec<String> {
    rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|group| group["name"].as_str().map(str::to_string))
        .collect()
}
