//! The `prometheus.yml` of one shard (pure): the user's scrape configs, each with the shard's
//! sharding rules appended after the user's own relabel_configs, and the external labels that
//! tell shards and replicas apart.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use zone_api::sprom::contract;
use zone_operator::controller::ErrorChain;
use zone_topology::relabel::{CompiledRules, RelabelConfig};
use zone_topology::sharding::{ShardLayout, attach_node_metadata};

/// Where the shard's own ConfigMap is mounted in the Prometheus container.
pub const CONFIG_DIR: &str = "/etc/prometheus/config";
/// The key of the rendered configuration in the shard's ConfigMap.
pub const CONFIG_KEY: &str = "prometheus.yml";
/// Where the user's rule ConfigMaps are mounted, one directory each.
pub const RULES_DIR: &str = "/etc/prometheus/rules";
/// Environment variable holding the pod name; Prometheus 3 expands `${POD_NAME}` in external
/// labels, so every replica labels its series with its own name from one shared file.
pub const POD_NAME_ENV: &str = "POD_NAME";

/// One shard's configuration, as the controller renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardConfig<'a> {
    pub layout: &'a ShardLayout,
    pub shard: u32,
    pub scrape_configs: &'a [Map<String, Value>],
    /// Jobs made from monitors, after the user's: the sharding rules are appended to them too.
    pub monitor_jobs: &'a [Map<String, Value>],
    pub global: Global<'a>,
    pub external_labels: &'a BTreeMap<String, String>,
    /// The external label carrying the zone (None: not added).
    pub zone_external_label: Option<&'a str>,
    pub remote_write: &'a [Map<String, Value>],
    /// The `alerting` section; left out of a retained shard's file.
    pub alerting: Option<&'a Map<String, Value>>,
    /// ConfigMap name → keys to load (empty: every key), mounted under [`RULES_DIR`].
    pub rule_files: &'a [(String, Option<String>)],
    /// A retained shard: it serves queries over its data and drains its WAL through
    /// remote_write, but scrapes, evaluates and alerts nothing.
    pub retained: bool,
    /// A retained shard's zone before the scale-down (the layout no longer has the shard): its
    /// series keep the zone label they were stored with.
    pub retained_zone: Option<&'a str>,
}

/// The `global` intervals, as prometheus-operator writes them for a `Prometheus`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Global<'a> {
    pub scrape_interval: &'a str,
    pub scrape_timeout: Option<&'a str>,
    pub evaluation_interval: &'a str,
}

impl<'a> Global<'a> {
    pub fn of(monitoring: &'a zone_api::sprom::ValidMonitoring) -> Global<'a> {
        Global {
            scrape_interval: &monitoring.scrape_interval,
            scrape_timeout: monitoring.jobs.scrape_timeout.as_deref(),
            evaluation_interval: &monitoring.evaluation_interval,
        }
    }

    fn to_json(self, external_labels: BTreeMap<String, String>) -> Value {
        let mut global = Map::new();
        global.insert("scrape_interval".into(), json!(self.scrape_interval));
        if let Some(timeout) = self.scrape_timeout {
            global.insert("scrape_timeout".into(), json!(timeout));
        }
        global.insert(
            "evaluation_interval".into(),
            json!(self.evaluation_interval),
        );
        global.insert("external_labels".into(), json!(external_labels));
        Value::Object(global)
    }
}

/// The rendered file and what rendering found out about the user's configs.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub yaml: String,
    /// `job (role)` entries whose `attach_metadata.node: false` the user set explicitly: their
    /// targets' zone comes from the other sources only.
    pub node_metadata_disabled: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("spec.scrapeConfigs job {job:?}: {field} must be a list of relabel rules")]
    RelabelNotAList { job: String, field: &'static str },
    #[error("spec.scrapeConfigs job {job:?}: {field}[{index}]: {message}")]
    BadRelabel {
        job: String,
        field: &'static str,
        index: usize,
        message: String,
    },
    #[error("spec.scrapeConfigs job {job:?}: kubernetes_sd_configs must be a list")]
    SdNotAList { job: String },
    #[error("spec.scrapeConfigs job {job:?}: {field} {value}: {message}")]
    BadDuration {
        job: String,
        field: &'static str,
        value: String,
        message: String,
    },
    #[error(
        "spec.scrapeConfigs job {job:?}: scrape_timeout {timeout:?} is longer than the scrape \
         interval {interval:?}{global}; Prometheus refuses that",
        global = if *global_interval { " (the global one)" } else { "" }
    )]
    TimeoutAboveInterval {
        job: String,
        timeout: String,
        interval: String,
        global_interval: bool,
    },
    #[error("cannot write the Prometheus configuration: {0}")]
    Yaml(String),
}

/// Where the rules of a scrape job live: before the scrape (the controller appends the shard's
/// rules there) and after it, on each sample.
const RELABEL: &str = "relabel_configs";
const METRIC_RELABEL: &str = "metric_relabel_configs";

/// Checks in the user's scrape configs what the controller touches and what Prometheus would
/// refuse that can be decided without Prometheus: relabel and metric relabel rules that parse
/// with Prometheus's semantics (actions, regexes), discovery lists that are lists, and
/// `scrape_interval` / `scrape_timeout` that are Prometheus durations, the timeout no longer
/// than the interval (the job's, else `global`'s). The error names the job and the field, so the
/// `Invalid` condition says what to fix. Unknown keys pass: newer Prometheus versions (the image
/// is the user's choice) know keys this controller does not, and a refused reload is reported by
/// `ConfigLoaded`.
pub fn check_scrape_configs(
    configs: &[Map<String, Value>],
    global: &Global<'_>,
) -> Result<(), ConfigError> {
    for config in configs {
        let job = job_name(config);
        relabel_rules(config, &job, RELABEL)?;
        relabel_rules(config, &job, METRIC_RELABEL)?;
        if config
            .get("kubernetes_sd_configs")
            .is_some_and(|sd| !sd.is_array())
        {
            return Err(ConfigError::SdNotAList { job });
        }
        check_intervals(config, &job, global)?;
    }
    Ok(())
}

/// A job's `scrape_interval` and `scrape_timeout`, as Prometheus checks them: durations, and an
/// explicit timeout no longer than the interval in effect. A timeout left out is lowered by
/// Prometheus to a shorter interval, so only an explicit one is compared.
fn check_intervals(
    config: &Map<String, Value>,
    job: &str,
    global: &Global<'_>,
) -> Result<(), ConfigError> {
    let interval = job_duration(config, job, "scrape_interval")?;
    let timeout = job_duration(config, job, "scrape_timeout")?;
    let (Some((timeout_text, timeout)), global_interval) = (timeout, interval.is_none()) else {
        return Ok(());
    };
    let (interval_text, interval) = match interval {
        Some(interval) => interval,
        // The global interval was checked with the spec.
        None => match zone_api::parse_prometheus_duration(global.scrape_interval) {
            Ok(parsed) => (global.scrape_interval.to_string(), parsed),
            Err(_) => return Ok(()),
        },
    };
    if timeout > interval {
        return Err(ConfigError::TimeoutAboveInterval {
            job: job.to_string(),
            timeout: timeout_text,
            interval: interval_text,
            global_interval,
        });
    }
    Ok(())
}

/// The job's `field` as a duration: `None` when unset, null or zero (Prometheus then uses the
/// global one).
fn job_duration(
    config: &Map<String, Value>,
    job: &str,
    field: &'static str,
) -> Result<Option<(String, std::time::Duration)>, ConfigError> {
    let bad = |value: &Value, message: String| ConfigError::BadDuration {
        job: job.to_string(),
        field,
        value: value.to_string(),
        message,
    };
    let text = match config.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text,
        Some(other) => {
            return Err(bad(
                other,
                "not a duration: write it with a unit, as a string (\"30s\")".to_string(),
            ));
        }
    };
    let duration = zone_api::parse_prometheus_duration(text)
        .map_err(|error| bad(&Value::String(text.clone()), error.to_string()))?;
    Ok((!duration.is_zero()).then(|| (text.clone(), duration)))
}

fn job_name(config: &Map<String, Value>) -> String {
    config
        .get("job_name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The job's rules under `field` (`relabel_configs` or `metric_relabel_configs`), each checked.
fn relabel_rules(
    config: &Map<String, Value>,
    job: &str,
    field: &'static str,
) -> Result<Vec<Value>, ConfigError> {
    let rules = match config.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(rules)) => rules.clone(),
        Some(_) => {
            return Err(ConfigError::RelabelNotAList {
                job: job.to_string(),
                field,
            });
        }
    };
    for (index, rule) in rules.iter().enumerate() {
        let bad = |message: String| ConfigError::BadRelabel {
            job: job.to_string(),
            field,
            index,
            message,
        };
        let parsed: RelabelConfig =
            serde_json::from_value(rule.clone()).map_err(|error| bad(error.to_string()))?;
        CompiledRules::new(&[parsed]).map_err(|error| bad(ErrorChain(&error).to_string()))?;
    }
    Ok(rules)
}

/// Renders the shard's `prometheus.yml`.
pub fn render(input: &ShardConfig<'_>) -> Result<Rendered, ConfigError> {
    let mut node_metadata_disabled = Vec::new();
    let mut root = Map::new();
    root.insert(
        "global".into(),
        input.global.to_json(external_labels(input)),
    );
    if !input.retained {
        let (scrape_configs, disabled) = scrape_configs(input)?;
        node_metadata_disabled = disabled;
        root.insert("scrape_configs".into(), Value::Array(scrape_configs));
        if !input.rule_files.is_empty() {
            root.insert(
                "rule_files".into(),
                json!(rule_file_globs(input.rule_files)),
            );
        }
        if let Some(alerting) = input.alerting {
            root.insert("alerting".into(), Value::Object(alerting.clone()));
        }
    }
    if !input.remote_write.is_empty() {
        let remote_write = input.remote_write.iter().cloned().map(Value::Object);
        root.insert("remote_write".into(), Value::Array(remote_write.collect()));
    }
    let yaml = serde_norway::to_string(&Value::Object(root))
        .map_err(|error| ConfigError::Yaml(error.to_string()))?;
    Ok(Rendered {
        yaml,
        node_metadata_disabled,
    })
}

/// The external labels pod `pod` of the shard of `input` stores its blocks with.
pub fn external_labels_of(input: &ShardConfig<'_>, pod: &str) -> BTreeMap<String, String> {
    let mut labels = external_labels(input);
    labels.insert(
        contract::REPLICA_EXTERNAL_LABEL.to_string(),
        pod.to_string(),
    );
    labels
}

/// The user's external labels with the shard's, its zone's and the replica's.
fn external_labels(input: &ShardConfig<'_>) -> BTreeMap<String, String> {
    let mut external_labels: BTreeMap<String, String> = input.external_labels.clone();
    if input.retained {
        external_labels.insert(
            contract::SHARD_EXTERNAL_LABEL.to_string(),
            input.shard.to_string(),
        );
        if let (Some(zone), Some(name)) = (input.retained_zone, input.zone_external_label)
            && !name.is_empty()
        {
            external_labels.insert(name.to_string(), zone.to_string());
        }
    } else {
        external_labels.extend(
            input
                .layout
                .external_labels(input.shard, input.zone_external_label),
        );
    }
    external_labels.insert(
        contract::REPLICA_EXTERNAL_LABEL.to_string(),
        format!("${{{POD_NAME_ENV}}}"),
    );
    external_labels
}

/// The user's scrape configs, each with node metadata attached and the shard's rules after its
/// own relabel_configs; and the `job (role)` entries where the user turned node metadata off.
fn scrape_configs(input: &ShardConfig<'_>) -> Result<(Vec<Value>, Vec<String>), ConfigError> {
    let sharding: Vec<Value> = input
        .layout
        .rules(input.shard)
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|error| ConfigError::Yaml(error.to_string()))?;
    let mut node_metadata_disabled = Vec::new();
    let mut scrape_configs =
        Vec::with_capacity(input.scrape_configs.len() + input.monitor_jobs.len());
    for config in input.scrape_configs.iter().chain(input.monitor_jobs) {
        let job = job_name(config);
        let mut config = Value::Object(config.clone());
        let metadata = attach_node_metadata(&mut config);
        node_metadata_disabled.extend(
            metadata
                .disabled_by_user
                .into_iter()
                .map(|role| format!("{job} ({role})")),
        );
        let Value::Object(mut config) = config else {
            continue;
        };
        let mut relabel = relabel_rules(&config, &job, RELABEL)?;
        relabel.extend(sharding.iter().cloned());
        config.insert(RELABEL.into(), Value::Array(relabel));
        scrape_configs.push(Value::Object(config));
    }
    Ok((scrape_configs, node_metadata_disabled))
}

/// The `rule_files` globs: one per ConfigMap (every key) or per named key. "Every key" is
/// `[^.]*`, not `*`: Go's glob matches leading dots, and a ConfigMap volume holds `..data` and a
/// timestamped directory next to the keys, which Prometheus would try to load as rule files.
pub fn rule_file_globs(rule_files: &[(String, Option<String>)]) -> Vec<String> {
    rule_files
        .iter()
        .map(|(config_map, key)| match key {
            Some(key) => format!("{RULES_DIR}/{config_map}/{key}"),
            None => format!("{RULES_DIR}/{config_map}/[^.]*"),
        })
        .collect()
}
