//! The CRDs' CEL rules: each sits in the schema of the field it guards, its message names the
//! field, and its pattern accepts what the Rust validation accepts (the controllers keep
//! validating; the API server only refuses earlier). The API server's verdicts are the e2e
//! suite's (`e2e/tests/crd_validation.rs`).

#![allow(clippy::unwrap_used)]

use regex::Regex;
use serde_json::Value;
use zone_api::patterns::*;
use zone_api::shared::cel::*;
use zone_api::shared::{int_or_percent, is_label_name};
use zone_api::sprom::cel::*;
use zone_api::units::{parse_prometheus_duration, parse_prometheus_size};
use zone_api::zau::cel::*;
use zone_api::zdb::cel::*;
use zone_api::{ShardedPrometheusSpec, SpromError};
use zone_topology::IntOrPercent;
use zone_topology::rollout::parse_exponential_factor;

fn schema_of(plural: &str) -> Value {
    let crd = zone_api::crds()
        .into_iter()
        .find(|crd| crd.spec.names.plural == plural)
        .unwrap();
    serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
}

fn rules(rules: impl IntoIterator<Item = kube::core::Rule>) -> Vec<Value> {
    rules
        .into_iter()
        .map(|rule| serde_json::to_value(rule).unwrap())
        .collect()
}

/// (CRD plural, JSON pointer into its schema, the rules there, in order).
fn placements() -> Vec<(&'static str, String, Vec<Value>)> {
    const ZAU: &str = "zoneawareupdates";
    const ZDB: &str = "zonedisruptionbudgets";
    const SPROM: &str = "shardedprometheuses";
    // (plural, the field's path below spec, with `/properties/` between names; "" for spec)
    let table: Vec<(&'static str, &str, Vec<Value>)> = vec![
        (
            ZAU,
            "",
            rules([
                statefulset_named(),
                one_target(),
                group_selector_not_empty(),
            ]),
        ),
        (
            ZAU,
            "selector/properties/matchExpressions/items",
            rules([
                selector_operator(),
                selector_values_listed(),
                selector_values_absent(),
            ]),
        ),
        (
            ZAU,
            "maxUnavailable",
            rules([max_unavailable_form(), max_unavailable_not_zero()]),
        ),
        (ZAU, "exponentialFactor", rules([exponential_factor()])),
        (
            ZAU,
            "alertGate",
            rules([zone_api::zau::alert_gate_one_target()]),
        ),
        (ZDB, "", rules([selector_not_empty(), one_limit()])),
        // 0 is a valid budget (a freeze): no zero rule here.
        (ZDB, "maxUnavailable", rules([max_unavailable_form()])),
        (ZDB, "minAvailable", rules([min_available_form()])),
        (
            ZDB,
            "selector/properties/matchExpressions/items",
            rules([
                selector_operator(),
                selector_values_listed(),
                selector_values_absent(),
            ]),
        ),
        (
            SPROM,
            "",
            rules([
                zones_listed(),
                external_labels_not_reserved(),
                external_labels_leave_the_zone_label(),
                agent_remote_writes(),
                agent_has_no_rule_files(),
            ]),
        ),
        (
            SPROM,
            "externalLabels",
            rules([external_labels_are_label_names()]),
        ),
        (
            SPROM,
            "shardingStrategy",
            rules([
                zones_are_label_values(),
                zones_unique(),
                zone_label_is_label_name(),
                zone_label_not_reserved(),
            ]),
        ),
        (
            SPROM,
            "scrapeConfigs/items",
            rules([scrape_config_job_name()]),
        ),
        (SPROM, "remoteWrite/items", rules([remote_write_url()])),
        (
            SPROM,
            "ruleFiles/items/properties/configMap",
            rules([rule_file_config_map()]),
        ),
        (
            SPROM,
            "ruleFiles/items/properties/key",
            rules([rule_file_key()]),
        ),
        (
            SPROM,
            "retention/properties/time",
            rules([prometheus_duration("spec.retention.time")]),
        ),
        (
            SPROM,
            "shardingStrategy/properties/zoneFailoverAfter",
            rules([prometheus_duration(
                "spec.shardingStrategy.zoneFailoverAfter",
            )]),
        ),
        (
            SPROM,
            "retention/properties/size",
            rules([prometheus_size("spec.retention.size")]),
        ),
        (
            SPROM,
            "shardRetentionPolicy/properties/retain/properties/retentionPeriod",
            rules([prometheus_duration(
                "spec.shardRetentionPolicy.retain.retentionPeriod",
            )]),
        ),
        (
            SPROM,
            "thanos/properties/blockSize",
            rules([prometheus_duration("spec.thanos.blockSize")]),
        ),
        (SPROM, "storage", rules([storage_one_kind()])),
        (
            SPROM,
            "scrapeInterval",
            rules([prometheus_duration("spec.scrapeInterval")]),
        ),
        (
            SPROM,
            "scrapeTimeout",
            rules([prometheus_duration("spec.scrapeTimeout")]),
        ),
        (
            SPROM,
            "evaluationInterval",
            rules([prometheus_duration("spec.evaluationInterval")]),
        ),
        (
            SPROM,
            "enforcedBodySizeLimit",
            rules([prometheus_size("spec.enforcedBodySizeLimit")]),
        ),
        (
            SPROM,
            "rollout/properties/maxUnavailable",
            rules([rollout_max_unavailable_form()]),
        ),
        // A ZoneAwareUpdate's alertGate, with its rule.
        (
            SPROM,
            "rollout/properties/alertGate",
            rules([zone_api::zau::alert_gate_one_target()]),
        ),
    ];
    table
        .into_iter()
        .map(|(plural, field, rules)| {
            let pointer = match field {
                "" => "/properties/spec".to_string(),
                field => format!("/properties/spec/properties/{field}"),
            };
            (plural, pointer, rules)
        })
        .collect()
}

/// Every `x-kubernetes-validations` entry under `node`, with the pointer of its node.
fn all_rules(node: &Value, pointer: String, found: &mut Vec<(String, Value)>) {
    match node {
        Value::Object(object) => {
            for (key, value) in object {
                if key == "x-kubernetes-validations" {
                    for rule in value.as_array().unwrap() {
                        found.push((pointer.clone(), rule.clone()));
                    }
                } else {
                    all_rules(value, format!("{pointer}/{key}"), found);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                all_rules(item, format!("{pointer}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn each_rule_is_in_the_schema_of_the_field_it_guards() {
    let placements = placements();
    for (plural, pointer, expected) in &placements {
        let schema = schema_of(plural);
        let node = schema
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{plural}: no schema at {pointer}"));
        assert_eq!(
            node["x-kubernetes-validations"],
            Value::Array(expected.clone()),
            "{plural} {pointer}"
        );
    }
    // And no rule elsewhere: the table above is the whole inventory.
    for plural in [
        "zoneawareupdates",
        "zonedisruptionbudgets",
        "shardedprometheuses",
    ] {
        let mut found = Vec::new();
        all_rules(&schema_of(plural), String::new(), &mut found);
        let listed: usize = placements
            .iter()
            .filter(|(p, _, _)| *p == plural)
            .map(|(_, _, rules)| rules.len())
            .sum();
        assert_eq!(found.len(), listed, "{plural}: {found:#?}");
    }
}

#[test]
fn each_message_names_its_field() {
    for plural in [
        "zoneawareupdates",
        "zonedisruptionbudgets",
        "shardedprometheuses",
    ] {
        let mut found = Vec::new();
        all_rules(&schema_of(plural), String::new(), &mut found);
        for (pointer, rule) in found {
            let message = rule["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with("spec."),
                "{plural} {pointer}: {message:?} does not name its field"
            );
            if let Some(field_path) = rule["fieldPath"].as_str() {
                let field = field_path.rsplit('.').next().unwrap();
                assert!(
                    message.contains(field),
                    "{plural} {pointer}: {message:?} does not name {field_path}"
                );
            }
        }
    }
}

/// The bounds that keep the list rules within the API server's cost budget.
#[test]
fn lists_that_rules_iterate_are_bounded() {
    let sprom = schema_of("shardedprometheuses");
    let values = sprom
        .pointer(
            "/properties/spec/properties/shardingStrategy/properties/topology/properties/values",
        )
        .unwrap();
    assert_eq!(values["maxItems"], u64::from(MAX_ZONES));
    assert_eq!(
        values["items"]["maxLength"],
        u64::from(LABEL_VALUE_MAX_LENGTH)
    );
    // The exponentialFactor rule replaces the bare pattern: one refusal, with a message.
    let zau = schema_of("zoneawareupdates");
    let factor = zau
        .pointer("/properties/spec/properties/exponentialFactor")
        .unwrap();
    assert!(factor.get("pattern").is_none(), "{factor}");
    assert_eq!(factor["default"], "2.0");
}

fn pattern(text: &str) -> Regex {
    Regex::new(text).unwrap()
}

/// maxUnavailable as a string: the schema's pattern (on the trimmed string) accepts what
/// `IntOrPercent::parse` accepts, but for numbers too large for it.
#[test]
fn max_unavailable_pattern_agrees_with_the_parser() {
    let form = pattern(INT_OR_PERCENT);
    let zero = pattern(ZERO);
    let cases = [
        "0", "0%", "00", "+0", "000%", "1", "1%", "25%", "100%", "150%", "3", "+3", "+25%",
        " 25% ", "\t7\n", "\u{a0}5%", "25 %", "-1", "-1%", "x%", "abc", "", " ", "%", "1.5%",
        "1.5", "0x10", "1e3", "25%%", "\u{663}",
    ];
    for text in cases {
        let parsed = IntOrPercent::parse(text);
        let schema_accepts = form.is_match(text.trim());
        assert_eq!(schema_accepts, parsed.is_ok(), "{text:?}: {parsed:?}");
        if let Ok(value) = parsed {
            let is_zero = matches!(value, IntOrPercent::Int(0) | IntOrPercent::Percent(0));
            assert_eq!(zero.is_match(text.trim()), is_zero, "{text:?}");
        }
    }
    // Left to the controllers: syntax the schema accepts, numbers the parser cannot hold.
    for text in ["99999999999%", "99999999999999999999"] {
        assert!(form.is_match(text), "{text}");
        assert!(IntOrPercent::parse(text).is_err(), "{text}");
    }
    // Stricter than the parser, which reads "-0" as 0: no manifest has a reason to write it.
    assert!(!form.is_match("-0"));
    assert_eq!(IntOrPercent::parse("-0"), Ok(IntOrPercent::Int(0)));
    // The integer form goes through the same helper as the string form.
    let int = k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(-1);
    assert!(int_or_percent(&int).is_err());
}

/// The schema accepts no factor the controller refuses, and of the factors the previous schema
/// let through (`^[0-9]+(\.[0-9]+)?$`) it refuses exactly those the controller refuses.
#[test]
fn exponential_factor_pattern_agrees_with_the_parser() {
    let factor = pattern(EXPONENTIAL_FACTOR);
    let before = pattern(r"^[0-9]+(\.[0-9]+)?$");
    let cases = [
        "0", "0.0", "00", "00.000", "1", "1.0", "2", "2.0", "10", "1.5", "01.5", "0001", "0.5",
        "0.99", "0.01", "00.5", "abc", "", "-1", "+2", "2.", ".5", "1e3", " 2", "inf", "NaN", "1.",
        "1..2",
    ];
    for text in cases {
        let parsed = parse_exponential_factor(text);
        if factor.is_match(text) {
            assert!(
                parsed.is_ok(),
                "{text:?} accepted by the schema: {parsed:?}"
            );
        }
        if before.is_match(text) {
            assert_eq!(
                factor.is_match(text),
                parsed.is_ok(),
                "{text:?}: {parsed:?}"
            );
        }
    }
    // Left to the controllers: a factor beyond f64 (over 300 digits).
    let huge = format!("1{}", "0".repeat(400));
    assert!(factor.is_match(&huge));
    assert!(parse_exponential_factor(&huge).is_err());
}

#[test]
fn label_name_pattern_agrees_with_the_validation() {
    let name = pattern(LABEL_NAME);
    for text in [
        "a", "_a", "A_1", "zone", "__tmp", "1a", "a-b", "", "a.b", "é", "a b", "a:b",
    ] {
        assert_eq!(name.is_match(text), is_label_name(text), "{text:?}");
    }
}

/// What `validate` says of a Topology spec listing `zones`.
fn zones_verdict(zones: &[&str]) -> Result<(), SpromError> {
    let spec: ShardedPrometheusSpec = serde_json::from_value(serde_json::json!({
        "shards": 1,
        "shardingStrategy": {"mode": "Topology", "topology": {"values": zones}},
    }))
    .unwrap();
    spec.validate("topology.kubernetes.io/zone").map(|_| ())
}

#[test]
fn zone_pattern_and_length_agree_with_the_validation() {
    let zone = pattern(LABEL_VALUE);
    let max = usize::try_from(LABEL_VALUE_MAX_LENGTH).unwrap();
    let long_ok = "a".repeat(max);
    let too_long = "a".repeat(max + 1);
    for text in [
        "zone-a",
        "us-east-1a",
        "a",
        "A.b_c-9",
        "",
        "-a",
        "a-",
        "a b",
        "a/b",
        "_a",
        "a_",
        "é",
        long_ok.as_str(),
        too_long.as_str(),
    ] {
        let schema_accepts = text.len() <= max && zone.is_match(text);
        let verdict = zones_verdict(&[text]);
        assert_eq!(schema_accepts, verdict.is_ok(), "{text:?}: {verdict:?}");
    }
    assert_eq!(
        zones_verdict(&["zone-a", "zone-b", "zone-a"]),
        Err(SpromError::DuplicateZone("zone-a".into()))
    );
}

#[test]
fn duration_pattern_agrees_with_the_parser() {
    let duration = pattern(PROMETHEUS_DURATION);
    for text in [
        "0",
        "0s",
        "15d",
        "1d12h",
        "1y",
        "2w",
        "1h30m",
        "90s",
        "1m500ms",
        "250ms",
        "1y2w3d4h5m6s7ms",
        "",
        "15",
        "d",
        "15x",
        "1.5h",
        "-1h",
        "1h ",
        "15D",
        "12h1d",
        "1h1h",
        "1ms1s",
        "5ms",
        "5m5ms",
        "00",
    ] {
        let schema_accepts = !text.is_empty() && duration.is_match(text);
        let parsed = parse_prometheus_duration(text);
        assert_eq!(schema_accepts, parsed.is_ok(), "{text:?}: {parsed:?}");
    }
    // Left to the controllers: durations Prometheus cannot represent.
    for text in ["300y", "99999999999999999999999s"] {
        assert!(duration.is_match(text), "{text}");
        assert!(parse_prometheus_duration(text).is_err(), "{text}");
    }
}

#[test]
fn size_pattern_agrees_with_the_parser() {
    let size = pattern(PROMETHEUS_SIZE);
    for text in [
        "0", "512B", "1KB", "1KiB", "10GB", "1.5TiB", "2EB", "0.5MB", "", "10", "GB", "10gb",
        "10 GB", "1.GB", ".5GB", "1.2.3GB", "10GBB", "00",
    ] {
        let parsed = parse_prometheus_size(text);
        assert_eq!(size.is_match(text), parsed.is_ok(), "{text:?}: {parsed:?}");
    }
    // Left to the controllers: sizes Prometheus cannot represent.
    assert!(size.is_match("8EiB"));
    assert!(parse_prometheus_size("8EiB").is_err());
}

/// The rules quote these names; a renamed contract label must not leave a rule behind.
#[test]
fn reserved_names_come_from_the_contract() {
    let rule = serde_json::to_value(external_labels_not_reserved()).unwrap();
    let text = rule["rule"].as_str().unwrap();
    for reserved in [
        zone_api::sprom::contract::SHARD_EXTERNAL_LABEL,
        zone_api::sprom::contract::REPLICA_EXTERNAL_LABEL,
    ] {
        assert!(text.contains(&format!("'{reserved}' in")), "{text}");
    }
}
