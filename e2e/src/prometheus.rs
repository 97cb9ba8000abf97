//! The real Prometheus, for proving the configs the shard controller renders: `promtool check
//! config` on a rendered `prometheus.yml`, and the config pointed at the test cluster by
//! [`with_kubeconfig`] for a Prometheus run on the host. A model of Prometheus's config checks
//! could agree with our renderer and still be wrong; the binary cannot.
//!
//! The binaries are Prometheus 3.16 built by `e2e/cluster/build.sh` into its cache (the version
//! and cache directory are those of `e2e/cluster/versions.sh`), or those in `PROMETHEUS_BIN_DIR`.
//! Tests that run them are `#[ignore]`d like the other e2e tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `prometheus` and `promtool` binaries the tests run.
#[derive(Clone, Debug)]
pub struct PrometheusBinaries {
    /// The server, run per shard by the tests.
    pub prometheus: PathBuf,
    /// The config checker behind [`check_config`].
    pub promtool: PathBuf,
}

/// The Prometheus binaries: those in `PROMETHEUS_BIN_DIR` when set, else the ones
/// `e2e/cluster/build.sh` caches (`$ZAC_CACHE/prometheus-$PROMETHEUS_VERSION`). Panics, naming
/// the path, when one is missing: a test cannot prove a config without them.
pub fn binaries() -> PrometheusBinaries {
    let dir = match std::env::var_os("PROMETHEUS_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => cached_binaries_dir(std::env::var("XDG_CACHE_HOME").ok().as_deref()),
    };
    let binaries = PrometheusBinaries {
        prometheus: dir.join("prometheus"),
        promtool: dir.join("promtool"),
    };
    for path in [&binaries.prometheus, &binaries.promtool] {
        assert!(
            path.is_file(),
            "{} is missing: run e2e/cluster/build.sh (or set PROMETHEUS_BIN_DIR)",
            path.display()
        );
    }
    binaries
}

/// The directory `e2e/cluster/build.sh` builds Prometheus into, for the cache home `xdg` (the
/// value of `XDG_CACHE_HOME`, `None` when unset). `versions.sh` is sourced rather than parsed:
/// the directory is whatever its shell expression makes it, exactly as for build.sh.
fn cached_binaries_dir(xdg: Option<&str>) -> PathBuf {
    let versions = crate::cluster::e2e_dir().join("cluster/versions.sh");
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(r#"source "$1" && printf %s "$ZAC_CACHE/prometheus-$PROMETHEUS_VERSION""#)
        .arg("bash")
        .arg(&versions);
    match xdg {
        Some(xdg) => bash.env("XDG_CACHE_HOME", xdg),
        None => bash.env_remove("XDG_CACHE_HOME"),
    };
    let output = bash
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

/// Distinguishes the temporary directories of several Prometheus runs (and checks) of one test
/// process.
static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A new, empty temporary directory for `what`.
fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "e2e-prometheus-{what}-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Whether Prometheus accepts `yaml` as a config: `promtool check config --syntax-only`, which
/// checks everything in the file itself (relabel rules, service discovery settings) but not the
/// files it names (rule files, credentials), which a rendered config may reference by paths that
/// only exist in the pod. `Err` carries promtool's output.
pub fn check_config(yaml: &str) -> Result<(), String> {
    let dir = temp_dir("check");
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, yaml).expect("writing the config to check");
    let output = Command::new(binaries().promtool)
        .args(["check", "config", "--syntax-only"])
        .arg(&file)
        .output()
        .expect("running promtool");
    let _ = std::fs::remove_dir_all(&dir);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `yaml` (a Prometheus config) with `kubeconfig_file: <kubeconfig>` in every entry of every
/// scrape config's `kubernetes_sd_configs`, and nothing else changed: a rendered config assumes
/// it runs in a pod (in-cluster credentials), while the tests' Prometheus runs on the host and
/// reaches the test cluster's API server through its kubeconfig.
pub fn with_kubeconfig(yaml: &str, kubeconfig: &Path) -> String {
    let mut config: serde_norway::Value =
        serde_norway::from_str(yaml).expect("a Prometheus config in YAML");
    let kubeconfig = serde_norway::Value::String(kubeconfig.display().to_string());
    let scrape_configs = config
        .get_mut("scrape_configs")
        .and_then(serde_norway::Value::as_sequence_mut);
    for scrape_config in scrape_configs.into_iter().flatten() {
        let sd_configs = scrape_config
            .get_mut("kubernetes_sd_configs")
            .and_then(serde_norway::Value::as_sequence_mut);
        for sd_config in sd_configs.into_iter().flatten() {
            if let Some(sd_config) = sd_config.as_mapping_mut() {
                sd_config.insert("kubeconfig_file".into(), kubeconfig.clone());
            }
        }
    }
    serde_norway::to_string(&config).expect("a config serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_is_added_to_every_kubernetes_sd_config_and_nothing_else_changes() {
        let yaml = r#"
global:
  scrape_interval: 30s
scrape_configs:
  - job_name: pods
    kubernetes_sd_configs:
      - role: pod
        attach_metadata: {node: true}
      - role: pod
        namespaces: {names: [a, b]}
    relabel_configs:
      - {source_labels: [__address__], modulus: 12, target_label: __tmp_hash, action: hashmod}
  - job_name: static
    static_configs: [{targets: ["127.0.0.1:9100"]}]
  - job_name: endpoints
    kubernetes_sd_configs: [{role: endpoints}]
"#;
        let out = with_kubeconfig(yaml, Path::new("/tmp/kube config"));
        let mut out: serde_norway::Value = serde_norway::from_str(&out).unwrap();
        let mut added = 0;
        for scrape_config in out["scrape_configs"].as_sequence_mut().unwrap() {
            let Some(sds) = scrape_config
                .get_mut("kubernetes_sd_configs")
                .and_then(serde_norway::Value::as_sequence_mut)
            else {
                continue;
            };
            for sd in sds {
                let sd = sd.as_mapping_mut().unwrap();
                let file = sd.remove("kubeconfig_file").unwrap();
                assert_eq!(file.as_str(), Some("/tmp/kube config"));
                added += 1;
            }
        }
        assert_eq!(added, 3);
        let input: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        assert_eq!(out, input, "only kubeconfig_file was added");
    }

    #[test]
    fn a_config_without_scrape_configs_is_left_alone() {
        let yaml = "global: {scrape_interval: 15s}\n";
        let out: serde_norway::Value =
            serde_norway::from_str(&with_kubeconfig(yaml, Path::new("/k"))).unwrap();
        assert_eq!(
            out,
            serde_norway::from_str::<serde_norway::Value>(yaml).unwrap()
        );
    }

    #[test]
    fn the_cached_binaries_follow_xdg_cache_home() {
        let dir = cached_binaries_dir(Some("/xdg"));
        let dir = dir.to_str().unwrap();
        assert!(
            dir.starts_with("/xdg/zone-aware-controllers/prometheus-3."),
            "{dir}"
        );
    }
}
