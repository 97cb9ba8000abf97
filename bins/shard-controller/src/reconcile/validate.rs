//! The validate step (pure): the spec, its shard layout and the user's scrape configs. A spec
//! that fails here changes no child; the reason becomes the `Invalid` condition.

use kube::ResourceExt;
use zone_api::ShardedPrometheus;
use zone_api::ValidSprom;
use zone_api::sprom::reason;
use zone_monitoring::select::{Kind, Selection};
use zone_operator::Invalid;

use crate::children::config;

/// A scrape config the sharding rules cannot be appended to.
pub fn invalid_scrape_config(error: &config::ConfigError) -> Invalid {
    Invalid::new(reason::INVALID_SCRAPE_CONFIG, error.to_string())
}

/// Validates `sprom`; targets' zones are read from nodes and pods labelled `zone_label`.
pub fn validate(sprom: &ShardedPrometheus, zone_label: &str) -> Result<ValidSprom, Invalid> {
    let valid = sprom
        .spec
        .validate(zone_label)
        .map_err(|error| Invalid::new(reason::INVALID_SPEC, error.to_string()))?;
    config::check_scrape_configs(
        &valid.scrape_configs,
        &config::Global::of(&valid.monitoring),
    )
    .map_err(|error| invalid_scrape_config(&error))?;
    check_selectors(&valid, &sprom.namespace().unwrap_or_default())?;
    Ok(valid)
}

/// The monitor and rule selectors as Kubernetes would parse them (label keys and values, not
/// only operators): a bad key must be refused, not select nothing in silence.
fn check_selectors(valid: &ValidSprom, namespace: &str) -> Result<(), Invalid> {
    let monitoring = &valid.monitoring;
    for (kind, selectors) in [
        (Kind::ServiceMonitor, &monitoring.service_monitors),
        (Kind::PodMonitor, &monitoring.pod_monitors),
        (Kind::ScrapeConfig, &monitoring.scrape_configs),
        (Kind::PrometheusRule, &monitoring.rules),
    ] {
        let selection = Selection {
            kind,
            selector: selectors.selector.as_ref(),
            namespace_selector: selectors.namespaces.as_ref(),
            own_namespace: namespace,
        };
        selection
            .validate()
            .map_err(|error| Invalid::new(reason::INVALID_SPEC, error.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn sprom_with(spec: serde_json::Value) -> ShardedPrometheus {
        serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "generation": 2},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn bad_specs_are_invalid_with_the_reason() {
        let cases = [
            (
                json!({"shards": 3, "shardingStrategy": {"mode": "Topology", "topology": {"values": []}}}),
                reason::INVALID_SPEC,
                "zone",
            ),
            (
                json!({"shards": 3, "shardingStrategy": {"topology": {"values": ["a", "a"]}}}),
                reason::INVALID_SPEC,
                "\"a\"",
            ),
            (
                json!({"shards": 1025, "shardingStrategy": {"mode": "Classic"}}),
                reason::INVALID_SPEC,
                "spec.shards is 1025: it must be between 1 and 1024",
            ),
            (
                json!({"shards": -1, "shardingStrategy": {"topology": {"values": ["a"]}}}),
                reason::INVALID_SPEC,
                "spec.shards is -1",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": [{"regex": "(", "action": "keep"}]}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": relabel_configs[0]",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": {"action": "keep"}}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "must be a list",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "relabel_configs": [{"action": "explode"}]}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "explode",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "metric_relabel_configs": [{"regex": "(", "action": "drop"}]}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": metric_relabel_configs[0]",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "metric_relabel_configs": {"action": "drop"}}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": metric_relabel_configs must be a list",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "scrape_interval": "1.5s"}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": scrape_interval \"1.5s\"",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "scrape_timeout": 30}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": scrape_timeout 30: not a duration",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "scrapeConfigs": [{"job_name": "x", "scrape_interval": "10s", "scrape_timeout": "20s"}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "job \"x\": scrape_timeout \"20s\" is longer than the scrape interval \"10s\";",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}}, "scrapeInterval": "15s",
                       "scrapeConfigs": [{"job_name": "x", "scrape_timeout": "1m"}]}),
                reason::INVALID_SCRAPE_CONFIG,
                "interval \"15s\" (the global one)",
            ),
            (
                json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                       "podMonitorNamespaceSelector": {"matchLabels": {"bad key!": "x"}}}),
                reason::INVALID_SPEC,
                "spec.podMonitorNamespaceSelector",
            ),
        ];
        for (spec, reason, needle) in cases {
            let invalid = validate(&sprom_with(spec.clone()), ZONE).unwrap_err();
            assert_eq!(invalid.reason, reason, "{spec}");
            assert!(
                invalid.message.contains(needle),
                "{needle:?} in {}",
                invalid.message
            );
        }
    }

    #[test]
    fn what_prometheus_accepts_passes_unknown_keys_included() {
        for job in [
            // A job interval below the global timeout: Prometheus lowers the timeout.
            json!({"job_name": "x", "scrape_interval": "5s"}),
            json!({"job_name": "x", "scrape_interval": "1m", "scrape_timeout": "1m"}),
            json!({"job_name": "x", "scrape_interval": "0s", "scrape_timeout": "10s"}),
            json!({"job_name": "x", "scrape_interval": null}),
            json!({"job_name": "x", "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": "go_.*", "action": "drop"}]}),
            // Prometheus refuses it; the controller cannot know every key of every version.
            json!({"job_name": "x", "scrape_intervall": "5s"}),
        ] {
            let spec = json!({"shardingStrategy": {"topology": {"values": ["a"]}},
                              "scrapeConfigs": [job.clone()]});
            assert!(validate(&sprom_with(spec), ZONE).is_ok(), "{job}");
        }
    }

    #[test]
    fn valid_specs_give_the_layout_of_their_mode() {
        let valid = validate(
            &sprom_with(json!({"shards": 5, "shardingStrategy": {"mode": "Classic"}})),
            ZONE,
        )
        .unwrap();
        assert!(!valid.layout.is_topology());
        let valid = validate(&sprom_with(json!({"shards": 5, "shardingStrategy": {"topology": {"values": ["a", "b"]}, "zonelessTargets": "Drop"}})), ZONE).unwrap();
        assert_eq!(
            valid.layout.per_zone(),
            vec![("a".into(), 3), ("b".into(), 2)]
        );
        let selector = valid.layout.node_selector(1, &Default::default());
        assert_eq!(
            selector[ZONE], "b",
            "shards are pinned by the node zone label"
        );
    }
}
