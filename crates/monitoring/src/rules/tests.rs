use std::collections::BTreeMap;

use serde::Deserialize;

use super::spec::IntOrString;
use super::{
    Evaluator, MAX_RULE_FILE_BYTES, PrometheusRuleSpec, Rule, RuleFile, RuleGroup, chunks,
    rule_file, rule_files,
};
use crate::Object;

/// A PrometheusRule manifest, as far as rule files need it.
#[derive(Deserialize)]
struct Manifest {
    metadata: Metadata,
    spec: PrometheusRuleSpec,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    namespace: String,
    uid: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn fixture(text: &str) -> Object<PrometheusRuleSpec> {
    let manifest: Manifest = serde_norway::from_str(text).expect("fixture parses");
    Object {
        namespace: manifest.metadata.namespace,
        name: manifest.metadata.name,
        uid: manifest.metadata.uid,
        labels: manifest.metadata.labels,
        spec: manifest.spec,
    }
}

fn object(namespace: &str, name: &str, spec: PrometheusRuleSpec) -> Object<PrometheusRuleSpec> {
    Object {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: format!("uid-{namespace}-{name}"),
        labels: BTreeMap::new(),
        spec,
    }
}

fn one_rule(group: &str, rule: Rule) -> PrometheusRuleSpec {
    PrometheusRuleSpec {
        groups: vec![RuleGroup {
            name: group.to_string(),
            rules: vec![rule],
            ..RuleGroup::default()
        }],
    }
}

fn record(name: &str, expr: &str) -> Rule {
    Rule {
        record: name.to_string(),
        expr: IntOrString::String(expr.to_string()),
        ..Rule::default()
    }
}

const API: &str = include_str!("../../fixtures/rules/api.yaml");

/// What Prometheus loads for `fixtures/rules/api.yaml`: snake_case keys, sorted maps, the
/// numeric expr as a string, no `partial_response_strategy`, no empty `interval` or `for`.
const API_RULES: &str = r#"groups:
- name: api.recording
  interval: 1m
  rules:
  - record: job:http_requests:rate5m
    expr: sum by (job) (rate(http_requests_total[5m]))
  - record: job:http_errors:ratio_rate5m
    expr: |
      sum by (job) (rate(http_requests_total{code=~"5.."}[5m]))
        /
      sum by (job) (rate(http_requests_total[5m]))
    labels:
      team: shop
- name: api.alerts
  query_offset: 30s
  limit: 10
  labels:
    severity_floor: warning
  rules:
  - alert: HighErrors
    expr: job:http_errors:ratio_rate5m > 0.05
    for: 10m
    keep_firing_for: 5m
    labels:
      severity: page
    annotations:
      runbook_url: https://runbooks.example.com/shop/high-errors
      summary: '{{ $labels.job }} fails {{ $value | humanizePercentage }} of requests'
  - alert: Watchdog
    expr: '1'
"#;

#[test]
fn realistic_object_renders_the_file_prometheus_loads() {
    let object = fixture(API);
    assert_eq!(
        object.spec.groups[0].partial_response_strategy.as_deref(),
        Some("warn"),
        "the fixture sets it, so dropping it is tested"
    );
    assert_eq!(object.spec.groups[1].rules[1].expr, IntOrString::Int(1));
    let file = rule_file(&object, Evaluator::Prometheus).expect("valid");
    assert_eq!(
        file.name,
        "shop-api-6f1c2a9e-0b7d-4c1e-9a53-2d8e4f0b7c11.yaml"
    );
    assert_eq!((file.groups, file.rules), (2, 4));
    assert_eq!(file.content, API_RULES);
    assert_eq!(file.size(), file.name.len() + API_RULES.len());
}

#[test]
fn rendered_file_reads_back_as_the_same_rules() {
    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct File {
        groups: Vec<BTreeMap<String, serde_json::Value>>,
    }
    let file = rule_file(&fixture(API), Evaluator::Prometheus).expect("valid");
    let read: File = serde_norway::from_str(&file.content).expect("YAML");
    let keys: Vec<Vec<&str>> = read
        .groups
        .iter()
        .map(|group| group.keys().map(String::as_str).collect())
        .collect();
    assert_eq!(
        keys,
        [
            vec!["interval", "name", "rules"],
            vec!["labels", "limit", "name", "query_offset", "rules"],
        ]
    );
    let second_expr = &read.groups[0]["rules"][1]["expr"];
    assert_eq!(
        second_expr.as_str(),
        Some(
            "sum by (job) (rate(http_requests_total{code=~\"5..\"}[5m]))\n  /\nsum by (job) \
             (rate(http_requests_total[5m]))\n"
        )
    );
}

#[test]
fn numeric_expr_from_the_api_server() {
    let json = serde_json::json!({
        "groups": [{"name": "g", "rules": [
            {"alert": "Always", "expr": 1},
            {"record": "one", "expr": "1"},
        ]}]
    });
    let spec: PrometheusRuleSpec = serde_json::from_value(json).expect("CRD JSON");
    assert_eq!(spec.groups[0].rules[0].expr, IntOrString::Int(1));
    assert_eq!(
        spec.groups[0].rules[1].expr,
        IntOrString::String("1".into())
    );
    let file = rule_file(&object("ns", "n", spec), Evaluator::Prometheus).expect("valid");
    assert_eq!(
        file.content,
        "groups:\n- name: g\n  rules:\n  - alert: Always\n    expr: '1'\n  - record: one\n    \
         expr: '1'\n"
    );
}

#[test]
fn crd_field_names() {
    let json = serde_json::json!({
        "groups": [{
            "name": "g",
            "interval": "1m",
            "query_offset": "10s",
            "limit": 5,
            "partial_response_strategy": "abort",
            "labels": {"a": "b"},
            "rules": [{
                "alert": "A",
                "expr": "up == 0",
                "for": "1m",
                "keep_firing_for": "2m",
                "labels": {"severity": "page"},
                "annotations": {"summary": "s"},
            }],
        }]
    });
    let spec: PrometheusRuleSpec = serde_json::from_value(json.clone()).expect("CRD JSON");
    let group = &spec.groups[0];
    assert_eq!(group.query_offset.as_deref(), Some("10s"));
    assert_eq!(group.partial_response_strategy.as_deref(), Some("abort"));
    assert_eq!(group.limit, Some(5));
    assert_eq!(group.rules[0].for_.as_deref(), Some("1m"));
    assert_eq!(group.rules[0].keep_firing_for.as_deref(), Some("2m"));
    // Written back unchanged (the controller may patch or compare objects).
    assert_eq!(serde_json::to_value(&spec).expect("JSON"), json);
    let file = rule_file(&object("ns", "n", spec), Evaluator::Prometheus).expect("valid");
    assert!(
        !file.content.contains("partial_response"),
        "{}",
        file.content
    );
    assert!(
        file.content.contains("query_offset: 10s"),
        "{}",
        file.content
    );
    assert!(
        file.content.contains("keep_firing_for: 2m"),
        "{}",
        file.content
    );
}

#[test]
fn invalid_object_is_rejected_whole() {
    let mut spec = one_rule("api", record("job:up:sum", "sum by (job) (up)"));
    spec.groups.push(RuleGroup {
        name: "alerts".to_string(),
        rules: vec![
            record("job:up:max", "max by (job) (up)"),
            Rule {
                alert: "HighErrors".to_string(),
                expr: IntOrString::String("rate(errors_total[5m] > 1".to_string()),
                ..Rule::default()
            },
        ],
        ..RuleGroup::default()
    });
    let rejection =
        rule_file(&object("shop", "api", spec), Evaluator::Prometheus).expect_err("invalid");
    assert_eq!(
        (
            rejection.kind,
            rejection.namespace.as_str(),
            rejection.name.as_str()
        ),
        ("PrometheusRule", "shop", "api")
    );
    assert!(
        rejection
            .reason
            .starts_with("group \"alerts\", rule 2 (alert \"HighErrors\"): expr: "),
        "{}",
        rejection.reason
    );
}

#[test]
fn oversized_file_is_rejected() {
    // Valid rules, but more than a ConfigMap can hold with upstream's margin.
    let rules: Vec<Rule> = (0..6000)
        .map(|index| {
            record(
                &format!("job:metric_{index}:rate5m"),
                &format!("sum by (job) (rate(metric_{index}_total{{env=\"production\"}}[5m]))"),
            )
        })
        .collect();
    let spec = PrometheusRuleSpec {
        groups: vec![RuleGroup {
            name: "big".to_string(),
            rules,
            ..RuleGroup::default()
        }],
    };
    let rejection =
        rule_file(&object("ns", "big", spec), Evaluator::Prometheus).expect_err("too big");
    assert!(
        rejection
            .reason
            .contains(&format!("above the limit of {MAX_RULE_FILE_BYTES} bytes")),
        "{}",
        rejection.reason
    );
}

#[test]
fn rule_files_are_ordered_by_namespace_then_name() {
    let good = || one_rule("g", record("job:up:sum", "sum by (job) (up)"));
    let bad = || one_rule("g", record("job-up", "up"));
    let objects = vec![
        object("team-b", "a", good()),
        object("team-a", "z", bad()),
        object("team-a", "b", good()),
        object("monitoring", "x", bad()),
        object("team-a", "a", good()),
    ];
    let names = |objects: &[Object<PrometheusRuleSpec>]| {
        let (files, rejections) = rule_files(objects, Evaluator::Prometheus);
        let files: Vec<String> = files.into_iter().map(|file| file.name).collect();
        let rejected: Vec<String> = rejections
            .into_iter()
            .map(|rejection| format!("{}/{}", rejection.namespace, rejection.name))
            .collect();
        (files, rejected)
    };
    let expected = (
        vec![
            "team-a-a-uid-team-a-a.yaml".to_string(),
            "team-a-b-uid-team-a-b.yaml".to_string(),
            "team-b-a-uid-team-b-a.yaml".to_string(),
        ],
        vec!["monitoring/x".to_string(), "team-a/z".to_string()],
    );
    assert_eq!(names(&objects), expected);
    let mut reversed = objects;
    reversed.reverse();
    assert_eq!(
        names(&reversed),
        expected,
        "the listing order does not matter"
    );
}

fn file(name: &str, content_len: usize) -> RuleFile {
    RuleFile {
        name: name.to_string(),
        content: "x".repeat(content_len),
        groups: 1,
        rules: 1,
    }
}

fn chunk_names(chunks: Vec<Vec<&RuleFile>>) -> Vec<Vec<&str>> {
    chunks
        .into_iter()
        .map(|chunk| chunk.into_iter().map(|file| file.name.as_str()).collect())
        .collect()
}

#[test]
fn chunks_stay_within_the_budget_in_order() {
    // Names are 1 byte: each file's size is its content plus 1.
    let files = vec![
        file("a", 39),
        file("b", 59),
        file("c", 19),
        file("d", 9),
        file("e", 99),
        file("f", 0),
    ];
    assert_eq!(
        chunk_names(chunks(&files, 100)),
        [vec!["a", "b"], vec!["c", "d"], vec!["e"], vec!["f"]]
    );
    // Exactly the budget fits.
    assert_eq!(chunk_names(chunks(&files[..2], 100)), [vec!["a", "b"]]);
    assert_eq!(chunk_names(chunks(&files[..2], 99)), [vec!["a"], vec!["b"]]);
    assert_eq!(
        chunk_names(chunks(&files, MAX_RULE_FILE_BYTES)),
        [vec!["a", "b", "c", "d", "e", "f"]]
    );
}

#[test]
fn a_file_over_the_budget_gets_its_own_chunk() {
    let files = vec![
        file("a", 10),
        file("huge", 500),
        file("b", 10),
        file("c", 10),
    ];
    assert_eq!(
        chunk_names(chunks(&files, 100)),
        [vec!["a"], vec!["huge"], vec!["b", "c"]]
    );
    assert_eq!(chunk_names(chunks(&files[1..2], 100)), [vec!["huge"]]);
}

#[test]
fn no_files_is_one_empty_chunk() {
    assert_eq!(chunk_names(chunks(&[], 100)), [Vec::<&str>::new()]);
}

/// A Thanos Ruler's file keeps `partial_response_strategy` (Prometheus's drops it), and a value
/// the Ruler would refuse at load time leaves the object out with the group named.
#[test]
fn a_thanos_ruler_file_keeps_the_partial_response_strategy_and_checks_it() {
    let spec = |strategy: &str| -> PrometheusRuleSpec {
        serde_json::from_value(serde_json::json!({"groups": [{
            "name": "global",
            "partial_response_strategy": strategy,
            "rules": [{"alert": "A", "expr": "absent(up{job=\"x\"})"}],
        }]}))
        .expect("CRD JSON")
    };
    let file = rule_file(&object("ns", "n", spec("warn")), Evaluator::ThanosRuler).expect("valid");
    assert!(
        file.content.contains("partial_response_strategy: warn"),
        "{}",
        file.content
    );
    let file = rule_file(&object("ns", "n", spec("ABORT")), Evaluator::ThanosRuler).expect("valid");
    assert!(file.content.contains("partial_response_strategy: ABORT"));
    let file = rule_file(&object("ns", "n", spec("maybe")), Evaluator::Prometheus).expect("valid");
    assert!(
        !file.content.contains("partial_response"),
        "{}",
        file.content
    );

    let rejection =
        rule_file(&object("ns", "n", spec("maybe")), Evaluator::ThanosRuler).expect_err("refused");
    assert_eq!(
        rejection.reason,
        "group \"global\": partial_response_strategy: \"maybe\" is not warn or abort"
    );
}
