//! Which configuration a Prometheus runs, in terms that survive its re-marshalling (pure).
//!
//! Prometheus serves the configuration it runs on `/api/v1/status/config`, but not as it read
//! it: it prints every default (`honor_timestamps`, `scrape_protocols`, the remote write queue,
//! …), writes durations in its own units (`60s` comes back as `1m`), lower-cases relabel actions,
//! expands `${POD_NAME}` in external labels, redacts passwords (`<secret>`, `user:xxxxx@` in
//! URLs) and copies the global intervals into jobs that did not set theirs. A byte or
//! whole-document comparison with the Secret therefore always fails, and a general
//! normalisation would have to follow every default of every Prometheus version: one missed
//! default would report a configuration as not loaded forever.
//!
//! The fingerprint keeps only what Prometheus prints back exactly, or in a form with one
//! obvious normal form, so that the fingerprint of a rendered file and that of what a Prometheus
//! serves after loading it are equal (the `served.yaml` fixture is Prometheus 3.16's answer to
//! `applied.yaml`, and a test holds them together):
//!
//! - the scrape jobs, in order: name, and where the file sets them, `scrape_interval`,
//!   `scrape_timeout` (as durations) and `metrics_path`; the number of `relabel_configs` and of
//!   `metric_relabel_configs` (Prometheus neither adds nor merges rules, and the shard's own
//!   rules are part of the count);
//! - `rule_files`, as written (absolute paths are not rewritten);
//! - the Alertmanagers: how many, the static targets of each and their number of relabel rules,
//!   and the number of `alert_relabel_configs`;
//! - the number of `remote_write` entries;
//! - the global `scrape_interval`, `scrape_timeout` and `evaluation_interval` (as durations,
//!   where the file sets them) and the external labels: the same names, and the same values
//!   except where the file's value holds a `$` (Prometheus expands environment variables
//!   there: the replica label is the pod's name).
//!
//! What it does not see: the content of relabel rules, discovery and credentials. A change of
//! only those is not told apart from the previous configuration; the reload itself is still
//! watched (`reloadConfigSuccess`), so a refused one is reported whatever it changed.
//! `lastConfigTime` could tell whether a pod reloaded since the Secret changed, but not reliably:
//! node clocks may be skewed, a change reverted before the kubelet copied it leaves the file as
//! it was (no reload), and a change of the Secret's metadata alone is not one of the file.

use std::collections::BTreeMap;

use serde_json::Value;

/// The part of a Prometheus configuration that survives Prometheus's re-marshalling.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint {
    scrape_interval: Option<u64>,
    scrape_timeout: Option<u64>,
    evaluation_interval: Option<u64>,
    external_labels: BTreeMap<String, String>,
    jobs: Vec<Job>,
    rule_files: Vec<String>,
    alertmanagers: Vec<Alertmanagers>,
    alert_relabel_configs: usize,
    remote_write: usize,
}

/// One scrape job: durations in milliseconds, `None` where the file leaves them to the global
/// ones (or sets 0, which means the same).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Job {
    name: String,
    scrape_interval: Option<u64>,
    scrape_timeout: Option<u64>,
    metrics_path: Option<String>,
    relabel_configs: usize,
    metric_relabel_configs: usize,
}

/// One `alerting.alertmanagers` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Alertmanagers {
    static_targets: Vec<String>,
    relabel_configs: usize,
}

impl Fingerprint {
    /// The fingerprint of a `prometheus.yml`.
    pub fn of_yaml(yaml: &str) -> Result<Fingerprint, String> {
        // A pod's answer: bounded before the parser, whose time grows with its nesting.
        zone_topology::yaml_depth::check(yaml, zone_topology::yaml_depth::MAX_DEPTH)?;
        let root: Value = serde_norway::from_str(yaml).map_err(|error| error.to_string())?;
        Ok(Fingerprint::of(&root))
    }

    fn of(root: &Value) -> Fingerprint {
        let global = &root["global"];
        let alerting = &root["alerting"];
        Fingerprint {
            scrape_interval: duration_ms(&global["scrape_interval"]),
            scrape_timeout: duration_ms(&global["scrape_timeout"]),
            evaluation_interval: duration_ms(&global["evaluation_interval"]),
            external_labels: global["external_labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, value)| (name.clone(), scalar(value)))
                .collect(),
            jobs: items(&root["scrape_configs"]).map(Job::of).collect(),
            rule_files: items(&root["rule_files"]).map(scalar).collect(),
            alertmanagers: items(&alerting["alertmanagers"])
                .map(|entry| Alertmanagers {
                    static_targets: items(&entry["static_configs"])
                        .flat_map(|group| items(&group["targets"]))
                        .map(scalar)
                        .collect(),
                    relabel_configs: items(&entry["relabel_configs"]).count(),
                })
                .collect(),
            alert_relabel_configs: items(&alerting["alert_relabel_configs"]).count(),
            remote_write: items(&root["remote_write"]).count(),
        }
    }

    /// What differs between the configuration the controller applied (`self`) and the one a
    /// Prometheus serves, if anything: the name of the first part that differs.
    pub fn differs_from(&self, served: &Fingerprint) -> Option<&'static str> {
        if !same_names(&self.jobs, &served.jobs) {
            return Some("scrape jobs");
        }
        if !self
            .jobs
            .iter()
            .zip(&served.jobs)
            .all(|(a, s)| a.runs_as(s))
        {
            return Some("scrape job settings");
        }
        if self.rule_files != served.rule_files {
            return Some("rule files");
        }
        if self.alertmanagers != served.alertmanagers
            || self.alert_relabel_configs != served.alert_relabel_configs
        {
            return Some("alerting");
        }
        if self.remote_write != served.remote_write {
            return Some("remote write");
        }
        let intervals = [
            (self.scrape_interval, served.scrape_interval),
            (self.scrape_timeout, served.scrape_timeout),
            (self.evaluation_interval, served.evaluation_interval),
        ];
        if !intervals.iter().all(|(a, s)| set_and_equal(a, s)) {
            return Some("global intervals");
        }
        let labels_match = self.external_labels.len() == served.external_labels.len()
            && self.external_labels.iter().all(|(name, value)| {
                served
                    .external_labels
                    .get(name)
                    .is_some_and(|served| value.contains('$') || served == value)
            });
        if !labels_match {
            return Some("external labels");
        }
        None
    }
}

impl Job {
    fn of(job: &Value) -> Job {
        Job {
            name: scalar(&job["job_name"]),
            scrape_interval: duration_ms(&job["scrape_interval"]),
            scrape_timeout: duration_ms(&job["scrape_timeout"]),
            metrics_path: job["metrics_path"].as_str().map(str::to_string),
            relabel_configs: items(&job["relabel_configs"]).count(),
            metric_relabel_configs: items(&job["metric_relabel_configs"]).count(),
        }
    }

    /// Whether a served job runs this applied one: what the file sets is served as set
    /// (Prometheus fills in what it leaves out).
    fn runs_as(&self, served: &Job) -> bool {
        set_and_equal(&self.scrape_interval, &served.scrape_interval)
            && set_and_equal(&self.scrape_timeout, &served.scrape_timeout)
            && (self.metrics_path.is_none() || self.metrics_path == served.metrics_path)
            && self.relabel_configs == served.relabel_configs
            && self.metric_relabel_configs == served.metric_relabel_configs
    }
}

fn same_names(applied: &[Job], served: &[Job]) -> bool {
    applied.len() == served.len() && applied.iter().zip(served).all(|(a, s)| a.name == s.name)
}

/// Unset in the applied file (Prometheus chose), or the same.
fn set_and_equal(applied: &Option<u64>, served: &Option<u64>) -> bool {
    applied.is_none() || applied == served
}

/// The elements of a YAML list (none for anything else, missing included).
fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

/// A scalar as text (external label values and targets are strings, but a hand-written file
/// may leave a number unquoted).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A Prometheus duration in milliseconds; `None` when unset, zero (Prometheus then uses the
/// global one) or not a duration (Prometheus would have refused the file).
fn duration_ms(value: &Value) -> Option<u64> {
    let duration = zone_api::parse_prometheus_duration(value.as_str()?).ok()?;
    u64::try_from(duration.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/config-health")
            .join(name);
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn what_prometheus_serves_after_loading_a_file_has_the_fingerprint_of_the_file() {
        let applied = Fingerprint::of_yaml(&fixture("applied.yaml")).unwrap();
        let served = Fingerprint::of_yaml(&fixture("served.yaml")).unwrap();
        assert_eq!(applied.differs_from(&served), None);
        // Not by emptiness: each part was read from both.
        assert_eq!(applied.jobs.len(), 2);
        assert_eq!(
            (
                applied.jobs[0].relabel_configs,
                applied.jobs[0].metric_relabel_configs
            ),
            (5, 1)
        );
        assert_eq!(applied.jobs[0].scrape_interval, Some(120_000));
        assert_eq!(applied.jobs[1].scrape_interval, None, "0s leaves it global");
        assert_eq!(served.jobs[1].metrics_path.as_deref(), Some("/federate"));
        assert_eq!(applied.rule_files.len(), 2);
        assert_eq!(served.alertmanagers[1].static_targets.len(), 2);
        assert_eq!((served.alert_relabel_configs, served.remote_write), (1, 2));
        assert_eq!(served.scrape_timeout, Some(10_000));
        assert_eq!(
            served.external_labels["prometheus_replica"],
            "prom-shard-0-1"
        );
    }

    #[test]
    fn each_part_of_the_fingerprint_tells_another_configuration_apart() {
        let served = Fingerprint::of_yaml(&fixture("served.yaml")).unwrap();
        let applied = fixture("applied.yaml");
        let cases = [
            (
                "- job_name: static",
                "- job_name: statics",
                Some("scrape jobs"),
            ),
            (
                "  scrape_interval: 120s",
                "  scrape_interval: 90s",
                Some("scrape job settings"),
            ),
            (
                "  metrics_path: /federate",
                "  metrics_path: /metrics",
                Some("scrape job settings"),
            ),
            (
                "- /etc/prometheus/rules/alerts/[^.]*\n",
                "",
                Some("rule files"),
            ),
            (
                "      - alertmanager-2.example.com:9093\n",
                "",
                Some("alerting"),
            ),
            (
                "- url: https://writer:secret@metrics.example/api/v1/write\n",
                "",
                Some("remote write"),
            ),
            (
                "  evaluation_interval: 30s",
                "  evaluation_interval: 1m",
                Some("global intervals"),
            ),
            (
                "    zone: zone-a",
                "    zone: zone-b",
                Some("external labels"),
            ),
            // The content of a rule is not part of it (see the module's comment).
            ("  - action: drop\n", "  - action: keep\n", None),
        ];
        for (from, to, expected) in cases {
            assert!(applied.contains(from), "{from:?} in the fixture");
            let changed = Fingerprint::of_yaml(&applied.replacen(from, to, 1)).unwrap();
            assert_eq!(changed.differs_from(&served), expected, "{from:?} → {to:?}");
        }
        let fewer_metric_rules = applied.replacen(
            "  metric_relabel_configs:\n  - action: drop\n    regex: go_.*\n    source_labels:\n    - __name__\n",
            "",
            1,
        );
        assert_eq!(
            Fingerprint::of_yaml(&fewer_metric_rules)
                .unwrap()
                .differs_from(&served),
            Some("scrape job settings")
        );
    }

    #[test]
    fn the_replica_label_is_compared_by_name_only() {
        let applied = Fingerprint::of_yaml(
            "global:\n  external_labels:\n    prometheus_replica: ${POD_NAME}\n    shard: '1'\n",
        )
        .unwrap();
        let served = |labels: &str| {
            Fingerprint::of_yaml(&format!("global:\n  external_labels:\n{labels}")).unwrap()
        };
        assert_eq!(
            applied.differs_from(&served("    prometheus_replica: p-1-0\n    shard: \"1\"\n")),
            None
        );
        assert_eq!(
            applied.differs_from(&served("    shard: \"1\"\n")),
            Some("external labels")
        );
        assert_eq!(
            applied.differs_from(&served("    prometheus_replica: p-1-0\n    shard: \"2\"\n")),
            Some("external labels")
        );
    }

    #[test]
    fn a_document_that_is_not_yaml_has_no_fingerprint() {
        assert!(Fingerprint::of_yaml("global: [").is_err());
        assert_eq!(
            Fingerprint::of_yaml("").unwrap(),
            Fingerprint::default(),
            "an empty file is an empty configuration"
        );
    }
}
