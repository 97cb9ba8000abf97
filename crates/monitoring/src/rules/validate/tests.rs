use std::collections::BTreeMap;

use crate::rules::spec::{IntOrString, PrometheusRuleSpec, Rule, RuleGroup};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn recording(name: &str, expr: &str) -> Rule {
    Rule {
        record: name.to_string(),
        expr: IntOrString::String(expr.to_string()),
        ..Rule::default()
    }
}

fn alerting(name: &str, expr: &str) -> Rule {
    Rule {
        alert: name.to_string(),
        expr: IntOrString::String(expr.to_string()),
        ..Rule::default()
    }
}

fn group(name: &str, rules: Vec<Rule>) -> RuleGroup {
    RuleGroup {
        name: name.to_string(),
        rules,
        ..RuleGroup::default()
    }
}

/// A spec of one group "api" whose second rule is `rule` (the first is a valid one, so the
/// rule numbers in reasons are checked).
fn second_rule(rule: Rule) -> PrometheusRuleSpec {
    PrometheusRuleSpec {
        groups: vec![group(
            "api",
            vec![recording("job:up:sum", "sum by (job) (up)"), rule],
        )],
    }
}

fn with_group(change: impl FnOnce(&mut RuleGroup)) -> PrometheusRuleSpec {
    let mut spec = second_rule(alerting("Down", "up == 0"));
    if let Some(group) = spec.groups.first_mut() {
        change(group);
    }
    spec
}

#[test]
fn valid_specs() {
    let cases: Vec<(&str, PrometheusRuleSpec)> = vec![
        ("no groups", PrometheusRuleSpec::default()),
        (
            "a group without rules",
            PrometheusRuleSpec {
                groups: vec![group("empty", vec![])],
            },
        ),
        (
            "recording rule, colons in the name",
            second_rule(recording(
                "job:http_requests:rate5m",
                "sum by (job) (rate(http_requests_total[5m]))",
            )),
        ),
        (
            "alerting rule with everything",
            second_rule(Rule {
                for_: Some("10m".to_string()),
                keep_firing_for: Some("5m".to_string()),
                labels: map(&[("severity", "page"), ("team", "{{ $labels.team }}")]),
                annotations: map(&[("summary", "{{ $labels.job }} is down {{/* note */}}")]),
                ..alerting("High errors, any value: é", "rate(errors_total[5m]) > 1")
            }),
        ),
        (
            "numeric expr",
            second_rule(Rule {
                expr: IntOrString::Int(1),
                ..alerting("Watchdog", "")
            }),
        ),
        (
            "empty for means unset, even on a recording rule",
            second_rule(Rule {
                for_: Some(String::new()),
                ..recording("job:up:max", "max by (job) (up)")
            }),
        ),
        (
            "zero for and keep_firing_for on a recording rule (Prometheus accepts them)",
            second_rule(Rule {
                for_: Some("0s".to_string()),
                keep_firing_for: Some("0".to_string()),
                ..recording("job:up:max", "max by (job) (up)")
            }),
        ),
        (
            "templates are not parsed in recording rules (Prometheus does not)",
            second_rule(Rule {
                labels: map(&[("note", "{{ unclosed")]),
                ..recording("job:up:max", "max by (job) (up)")
            }),
        ),
        (
            "a stable function newer than the operator's parser",
            second_rule(recording("job:up:first", "first_over_time(up[5m])")),
        ),
        (
            "group fields",
            with_group(|group| {
                group.interval = Some(String::new());
                group.query_offset = Some("1m30s".to_string());
                group.limit = Some(0);
                group.labels = map(&[("zone", "a")]);
                group.partial_response_strategy = Some("not even checked".to_string());
            }),
        ),
        (
            "same group names in different case are different",
            PrometheusRuleSpec {
                groups: vec![group("api", vec![]), group("API", vec![])],
            },
        ),
    ];
    for (name, spec) in cases {
        assert_eq!(super::spec(&spec), Ok(()), "{name}");
    }
}

/// Each case: a spec and a part of the reason it is refused for, which names the group and
/// the rule.
fn check_invalid(cases: Vec<(PrometheusRuleSpec, &str)>) {
    for (spec, expected) in cases {
        let reason = super::spec(&spec).expect_err(expected);
        assert!(
            reason.contains(expected),
            "{reason:?} does not contain {expected:?}"
        );
    }
}

#[test]
fn invalid_expressions_name_the_group_and_the_rule() {
    check_invalid(vec![
        (
            second_rule(recording("job:up:rate", "")),
            "group \"api\", rule 2 (record \"job:up:rate\"): expr: must be set",
        ),
        (
            second_rule(alerting("Broken", "sum(rate(x[5m])")),
            "group \"api\", rule 2 (alert \"Broken\"): expr: ",
        ),
        (
            second_rule(alerting("Broken", "rate(x)")),
            "group \"api\", rule 2 (alert \"Broken\"): expr: ",
        ),
        (
            second_rule(alerting("Sorted", "sort_by_label(up, \"job\")")),
            "group \"api\", rule 2 (alert \"Sorted\"): expr: sort_by_label() is experimental and \
             not enabled (Prometheus needs --enable-feature=promql-experimental-functions)",
        ),
        (
            second_rule(recording("job:up:some", "sum(limitk(2, up))")),
            "group \"api\", rule 2 (record \"job:up:some\"): expr: limitk() is experimental",
        ),
    ]);
}

#[test]
fn invalid_rule_kinds_and_record_names_name_the_group_and_the_rule() {
    check_invalid(vec![
        (
            second_rule(Rule {
                alert: "Both".to_string(),
                ..recording("job:up:both", "up")
            }),
            "group \"api\", rule 2 (alert \"Both\"): only one of record and alert may be set",
        ),
        (
            second_rule(Rule {
                expr: IntOrString::String("up".to_string()),
                ..Rule::default()
            }),
            "group \"api\", rule 2: one of record or alert must be set",
        ),
        (
            second_rule(recording("job-up", "up")),
            "group \"api\", rule 2 (record \"job-up\"): record: \"job-up\" is not a valid metric \
             name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
        ),
        (
            second_rule(recording("2xx:rate", "up")),
            "record: \"2xx:rate\" is not a valid metric name",
        ),
        (
            // UTF-8 names: refused, as prometheus-operator has Prometheus refuse them.
            second_rule(recording("http.requests", "up")),
            "record: \"http.requests\" is not a valid metric name",
        ),
        (
            second_rule(recording("up{job=\"a\"}", "up")),
            "is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) (and 1 more problem)",
        ),
    ]);
}

#[test]
fn invalid_alerting_only_fields_and_durations_name_the_group_and_the_rule() {
    check_invalid(vec![
        (
            second_rule(Rule {
                annotations: map(&[("summary", "s")]),
                ..recording("job:up:sum2", "up")
            }),
            "group \"api\", rule 2 (record \"job:up:sum2\"): annotations are only valid on \
             alerting rules",
        ),
        (
            second_rule(Rule {
                for_: Some("5m".to_string()),
                ..recording("job:up:sum2", "up")
            }),
            "rule 2 (record \"job:up:sum2\"): for is only valid on alerting rules",
        ),
        (
            second_rule(Rule {
                keep_firing_for: Some("1m".to_string()),
                ..recording("job:up:sum2", "up")
            }),
            "rule 2 (record \"job:up:sum2\"): keep_firing_for is only valid on alerting rules",
        ),
        (
            second_rule(Rule {
                for_: Some("5 minutes".to_string()),
                ..alerting("Down", "up == 0")
            }),
            "group \"api\", rule 2 (alert \"Down\"): for: \"5 minutes\" is not a Prometheus \
             duration",
        ),
        (
            second_rule(Rule {
                keep_firing_for: Some(String::new()),
                ..alerting("Down", "up == 0")
            }),
            "rule 2 (alert \"Down\"): keep_firing_for: \"\" is not a Prometheus duration: it is empty",
        ),
    ]);
}

#[test]
fn invalid_labels_and_annotations_name_the_group_and_the_rule() {
    check_invalid(vec![
        (
            second_rule(Rule {
                labels: map(&[("team-name", "a")]),
                ..alerting("Down", "up == 0")
            }),
            "rule 2 (alert \"Down\"): labels: \"team-name\" is not a valid label name \
             ([a-zA-Z_][a-zA-Z0-9_]*)",
        ),
        (
            second_rule(Rule {
                labels: map(&[("__name__", "renamed")]),
                ..recording("job:up:sum2", "up")
            }),
            "rule 2 (record \"job:up:sum2\"): labels: \"__name__\" is not allowed as a rule label",
        ),
        (
            second_rule(Rule {
                annotations: map(&[("runbook-url", "https://example.com")]),
                ..alerting("Down", "up == 0")
            }),
            "rule 2 (alert \"Down\"): annotations: \"runbook-url\" is not a valid annotation name",
        ),
        (
            second_rule(Rule {
                annotations: map(&[("summary", "{{ $labels.job } is down")]),
                ..alerting("Down", "up == 0")
            }),
            "rule 2 (alert \"Down\"): annotation \"summary\": template: unclosed action",
        ),
        (
            second_rule(Rule {
                labels: map(&[("owner", "{{ $labels.team }} and {{ $labels.owner")]),
                ..alerting("Down", "up == 0")
            }),
            "rule 2 (alert \"Down\"): label \"owner\": template: unclosed action",
        ),
    ]);
}

#[test]
fn invalid_groups_name_the_group() {
    check_invalid(vec![
        (
            with_group(|group| group.name = String::new()),
            "group 1: name is empty",
        ),
        (
            PrometheusRuleSpec {
                groups: vec![
                    group("api", vec![]),
                    group("db", vec![]),
                    group("api", vec![]),
                ],
            },
            "group \"api\": name is repeated (groups 1 and 3); group names are unique within a \
             file",
        ),
        (
            with_group(|group| group.interval = Some("1.5m".to_string())),
            "group \"api\": interval: \"1.5m\" is not a Prometheus duration",
        ),
        (
            with_group(|group| group.query_offset = Some(String::new())),
            "group \"api\": query_offset: \"\" is not a Prometheus duration: it is empty",
        ),
        (
            with_group(|group| group.query_offset = Some("-1m".to_string())),
            "group \"api\": query_offset: \"-1m\" is not a Prometheus duration",
        ),
        (
            with_group(|group| group.limit = Some(-1)),
            "group \"api\": limit: -1 is negative (0 means no limit)",
        ),
        (
            with_group(|group| group.labels = map(&[("zone-name", "a")])),
            "group \"api\": labels: \"zone-name\" is not a valid label name",
        ),
        (
            with_group(|group| group.labels = map(&[("__name__", "x")])),
            "group \"api\": labels: \"__name__\" is not allowed as a rule label",
        ),
        (
            // The first problem, and how many more.
            PrometheusRuleSpec {
                groups: vec![
                    group("a", vec![recording("bad name", "up"), alerting("", "")]),
                    group("", vec![]),
                ],
            },
            "group \"a\", rule 1 (record \"bad name\"): record: \"bad name\" is not a valid \
             metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) (and 3 more problems)",
        ),
    ]);
}

#[test]
fn parse_errors_carry_the_parser_message() {
    let reason = super::spec(&second_rule(alerting("Broken", "sum(rate(x[5m])")))
        .expect_err("unbalanced parentheses");
    let message = promql_parser::parser::parse("sum(rate(x[5m])").expect_err("invalid");
    assert!(!message.is_empty());
    assert_eq!(
        reason,
        format!("group \"api\", rule 2 (alert \"Broken\"): expr: {message}")
    );
}

#[test]
fn rule_files_from_config_maps_are_checked_as_prometheus_loads_them() {
    use crate::rules::check_rule_file;
    let good = "groups:\n- name: up\n  rules:\n  - alert: Down\n    expr: up == 0\n    for: 5m\n";
    assert_eq!(check_rule_file(good), Ok(()));
    assert_eq!(check_rule_file(""), Ok(()), "an empty file has no group");
    let bad_expr = "groups:\n- name: up\n  rules:\n  - alert: Down\n    expr: up ==\n";
    let error = check_rule_file(bad_expr).unwrap_err();
    assert!(
        error.starts_with("group \"up\", rule 1 (alert \"Down\"): expr"),
        "{error}"
    );
    let not_yaml = "groups: [\n";
    let error = check_rule_file(not_yaml).unwrap_err();
    assert!(error.starts_with("not a Prometheus rule file"), "{error}");
    let bad_for =
        "groups:\n- name: up\n  rules:\n  - alert: Down\n    expr: up == 0\n    for: soon\n";
    assert!(check_rule_file(bad_for).unwrap_err().contains("for"));
}

/// An expression nested 100,000 deep (parentheses, an operator chain, unary minus) and a rule
/// file nested as deep are refused with a reason, on a thread with a tokio worker's 2 MiB
/// stack: parsed unchecked, an expression overflows it and aborts the process, and the file
/// takes the parser a minute.
#[test]
fn deep_expressions_and_files_are_refused_not_a_crash() {
    let n = 100_000;
    let deep = [
        format!("{}up{}", "(".repeat(n), ")".repeat(n)),
        vec!["up"; n].join(" + "),
        format!("{}1", "-".repeat(n)),
    ];
    let file = format!("groups: {}{}", "[".repeat(n), "]".repeat(n));
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for expr in deep {
                let reason = crate::rules::validate::spec(&second_rule(alerting("Deep", &expr)))
                    .unwrap_err();
                assert!(reason.contains("nests 100"), "{reason}");
                assert!(reason.len() < 300, "{reason}");
            }
            let reason = crate::rules::check_rule_file(&file).unwrap_err();
            assert!(
                reason.starts_with("not a Prometheus rule file: the document nests 100"),
                "{reason}"
            );
            assert!(reason.len() < 300, "{reason}");
        })
        .unwrap()
        .join()
        .unwrap();
}

/// The deepest expressions the bound accepts (brackets, an operator chain, unary minus) are
/// parsed, walked and dropped on a thread with a tokio worker's 2 MiB stack, in a test build
/// (larger frames than a release's): the bound is below what overflows.
#[test]
fn the_deepest_accepted_expressions_parse_on_a_worker_stack() {
    let n = zone_topology::promql_depth::MAX_DEPTH - 1;
    let deepest = [
        format!("{}up{}", "(".repeat(n), ")".repeat(n)),
        vec!["up"; n].join(" + "),
        format!("{}1", "-".repeat(n - 1)),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for expr in deepest {
                let depth = zone_topology::promql_depth::depth(&expr);
                assert!(depth <= zone_topology::promql_depth::MAX_DEPTH, "{depth}");
                crate::rules::validate::spec(&second_rule(alerting("Deep", &expr))).unwrap();
            }
        })
        .unwrap()
        .join()
        .unwrap();
}
