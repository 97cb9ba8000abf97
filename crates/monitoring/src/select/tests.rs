use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::{Kind, Problem, Selection, SelectorError, matches};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn selector(
    match_labels: &[(&str, &str)],
    match_expressions: Vec<LabelSelectorRequirement>,
) -> LabelSelector {
    LabelSelector {
        match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
        match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
    }
}

/// A case name, a selector, an object's labels, whether they match.
type MatchCase<'a> = (&'a str, LabelSelector, &'a [(&'a str, &'a str)], bool);

/// A case name, the resource selector, the namespace selector, the namespaces selected.
type SelectionCase<'a> = (
    &'a str,
    Option<&'a LabelSelector>,
    Option<&'a LabelSelector>,
    Vec<&'a str>,
);

/// Each case: its name, the selector, the labels and whether they match.
fn check_matches(cases: Vec<MatchCase<'_>>) {
    for (name, selector, object, expected) in cases {
        assert_eq!(matches(&selector, &labels(object)), Ok(expected), "{name}");
    }
}

#[test]
fn empty_selectors_and_match_labels() {
    let app_web = &[("app", "web"), ("tier", "front")][..];
    check_matches(vec![
        (
            "empty selector, labels",
            selector(&[], vec![]),
            app_web,
            true,
        ),
        (
            "empty selector, no labels",
            selector(&[], vec![]),
            &[],
            true,
        ),
        (
            "explicitly empty lists",
            LabelSelector {
                match_labels: Some(BTreeMap::new()),
                match_expressions: Some(vec![]),
            },
            &[],
            true,
        ),
        (
            "matchLabels equal",
            selector(&[("app", "web")], vec![]),
            app_web,
            true,
        ),
        (
            "matchLabels other value",
            selector(&[("app", "db")], vec![]),
            app_web,
            false,
        ),
        (
            "matchLabels key absent",
            selector(&[("team", "a")], vec![]),
            app_web,
            false,
        ),
        (
            "matchLabels empty value vs absent",
            selector(&[("team", "")], vec![]),
            app_web,
            false,
        ),
        (
            "matchLabels empty value present",
            selector(&[("team", "")], vec![]),
            &[("team", "")],
            true,
        ),
        (
            "matchLabels all pairs",
            selector(&[("app", "web"), ("tier", "back")], vec![]),
            app_web,
            false,
        ),
    ]);
}

#[test]
fn set_based_operators() {
    let app_web = &[("app", "web"), ("tier", "front")][..];
    check_matches(vec![
        (
            "In hit",
            selector(&[], vec![expression("app", "In", &["db", "web"])]),
            app_web,
            true,
        ),
        (
            "In miss",
            selector(&[], vec![expression("app", "In", &["db"])]),
            app_web,
            false,
        ),
        (
            "In key absent",
            selector(&[], vec![expression("team", "In", &["a"])]),
            app_web,
            false,
        ),
        (
            "NotIn hit",
            selector(&[], vec![expression("app", "NotIn", &["web"])]),
            app_web,
            false,
        ),
        (
            "NotIn miss",
            selector(&[], vec![expression("app", "NotIn", &["db"])]),
            app_web,
            true,
        ),
        (
            "NotIn key absent",
            selector(&[], vec![expression("team", "NotIn", &["a"])]),
            app_web,
            true,
        ),
        (
            "Exists present",
            selector(&[], vec![expression("tier", "Exists", &[])]),
            app_web,
            true,
        ),
        (
            "Exists absent",
            selector(&[], vec![expression("team", "Exists", &[])]),
            app_web,
            false,
        ),
        (
            "DoesNotExist present",
            selector(&[], vec![expression("tier", "DoesNotExist", &[])]),
            app_web,
            false,
        ),
        (
            "DoesNotExist absent",
            selector(&[], vec![expression("team", "DoesNotExist", &[])]),
            app_web,
            true,
        ),
    ]);
}

#[test]
fn combined_requirements_and_prefixed_keys() {
    let app_web = &[("app", "web"), ("tier", "front")][..];
    check_matches(vec![
        (
            "labels AND expressions, both hold",
            selector(
                &[("app", "web")],
                vec![expression("tier", "In", &["front"])],
            ),
            app_web,
            true,
        ),
        (
            "labels AND expressions, expression fails",
            selector(
                &[("app", "web")],
                vec![expression("tier", "NotIn", &["front"])],
            ),
            app_web,
            false,
        ),
        (
            "expressions AND each other",
            selector(
                &[],
                vec![
                    expression("app", "Exists", &[]),
                    expression("team", "Exists", &[]),
                ],
            ),
            app_web,
            false,
        ),
        (
            "prefixed key",
            selector(&[("example.com/team", "a")], vec![]),
            &[("example.com/team", "a")],
            true,
        ),
    ]);
}

/// Each case: its name, the selector, the field the error names and a part of its message.
fn check_invalid(cases: Vec<(&str, LabelSelector, &str, &str)>) {
    for (name, selector, field, message) in cases {
        // Whatever the labels: validation does not depend on them.
        for object in [labels(&[]), labels(&[("app", "web")])] {
            let error = matches(&selector, &object).expect_err(name);
            assert_eq!(error.field, field, "{name}");
            assert!(
                error.to_string().contains(message),
                "{name}: {error} lacks {message:?}"
            );
        }
    }
}

#[test]
fn invalid_operators_and_values_counts_are_errors_naming_the_field() {
    check_invalid(vec![
        (
            "unknown operator",
            selector(&[], vec![expression("app", "Equals", &["web"])]),
            "matchExpressions[0].operator",
            "operator \"Equals\" is not one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            "operators are case-sensitive",
            selector(&[], vec![expression("app", "in", &["web"])]),
            "matchExpressions[0].operator",
            "operator \"in\" is not one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            "In without values",
            selector(
                &[],
                vec![
                    expression("app", "Exists", &[]),
                    expression("app", "In", &[]),
                ],
            ),
            "matchExpressions[1].values",
            "operator In needs at least one value",
        ),
        (
            "NotIn without values",
            selector(&[], vec![expression("app", "NotIn", &[])]),
            "matchExpressions[0].values",
            "operator NotIn needs at least one value",
        ),
        (
            "Exists with values",
            selector(&[], vec![expression("app", "Exists", &["web"])]),
            "matchExpressions[0].values",
            "operator Exists takes no values",
        ),
        (
            "DoesNotExist with values",
            selector(&[], vec![expression("app", "DoesNotExist", &["web"])]),
            "matchExpressions[0].values",
            "operator DoesNotExist takes no values",
        ),
    ]);
}

#[test]
fn invalid_keys_are_errors_naming_the_field() {
    check_invalid(vec![
        (
            "empty key",
            selector(&[], vec![expression("", "Exists", &[])]),
            "matchExpressions[0].key",
            "key \"\" is not a qualified label name: the name is empty",
        ),
        (
            "key with a space",
            selector(&[("my app", "web")], vec![]),
            "matchLabels[\"my app\"]",
            "key \"my app\" is not a qualified label name: the name must be alphanumerics, '-', \
             '_' or '.', starting and ending alphanumeric",
        ),
        (
            "key with two slashes",
            selector(&[], vec![expression("a/b/c", "Exists", &[])]),
            "matchExpressions[0].key",
            "key \"a/b/c\" is not a qualified label name: more than one '/'",
        ),
        (
            "key with an empty prefix",
            selector(&[], vec![expression("/app", "Exists", &[])]),
            "matchExpressions[0].key",
            "key \"/app\" is not a qualified label name: the prefix before '/' is empty",
        ),
        (
            "key with an uppercase prefix",
            selector(&[], vec![expression("Example.com/app", "Exists", &[])]),
            "matchExpressions[0].key",
            "key \"Example.com/app\" is not a qualified label name: the prefix is not a lowercase \
             DNS subdomain (lowercase alphanumerics, '-' and '.', each part starting and ending \
             alphanumeric)",
        ),
        (
            "key name too long",
            selector(&[], vec![expression(&"a".repeat(64), "Exists", &[])]),
            "matchExpressions[0].key",
            "the name is longer than 63 characters",
        ),
    ]);
}

#[test]
fn invalid_values_are_errors_naming_the_field() {
    check_invalid(vec![
        (
            "invalid matchLabels value",
            selector(&[("app", "-web")], vec![]),
            "matchLabels[\"app\"]",
            "value \"-web\" is not a valid label value: must be empty or alphanumerics, '-', '_' \
             or '.', starting and ending alphanumeric",
        ),
        (
            "invalid expression value",
            selector(&[], vec![expression("app", "In", &["web", "a b"])]),
            "matchExpressions[0].values[1]",
            "value \"a b\" is not a valid label value",
        ),
        (
            "value too long",
            selector(&[], vec![expression("app", "NotIn", &[&"v".repeat(64)])]),
            "matchExpressions[0].values[0]",
            "longer than 63 characters",
        ),
    ]);
}

#[test]
fn accepted_keys_and_values() {
    let keys = [
        "app",
        "a",
        "app.kubernetes.io/name",
        "example.com/Team_Name-1",
        "1abc",
        &"k".repeat(63),
    ];
    for key in keys {
        let selector = selector(&[(key, "")], vec![expression(key, "In", &["x.y_z-1", "A"])]);
        assert!(matches(&selector, &labels(&[])).is_ok(), "{key}");
    }
    let long = "v".repeat(63);
    assert_eq!(
        matches(
            &selector(&[("app", &long)], vec![]),
            &labels(&[("app", &long)])
        ),
        Ok(true)
    );
}

/// Namespaces of a small cluster: `monitoring` (own), `team-a` (team=a), `team-b` (team=b)
/// and `bare` (no labels besides the one the API server sets, left out here on purpose).
fn cluster(name: &str) -> Option<BTreeMap<String, String>> {
    match name {
        "monitoring" => Some(labels(&[("kubernetes.io/metadata.name", "monitoring")])),
        "team-a" => Some(labels(&[
            ("team", "a"),
            ("kubernetes.io/metadata.name", "team-a"),
        ])),
        "team-b" => Some(labels(&[
            ("team", "b"),
            ("kubernetes.io/metadata.name", "team-b"),
        ])),
        "bare" => Some(BTreeMap::new()),
        _ => None,
    }
}

const NAMESPACES: [&str; 5] = ["monitoring", "team-a", "team-b", "bare", "unknown"];

/// The namespaces (of [`NAMESPACES`]) whose object labelled `object` is selected.
fn selected_in(selection: &Selection<'_>, object: &[(&str, &str)]) -> Vec<&'static str> {
    NAMESPACES
        .into_iter()
        .filter(|namespace| {
            selection
                .selects(namespace, &labels(object), &cluster)
                .expect("valid selection")
        })
        .collect()
}

#[test]
fn prometheus_resource_semantics() {
    let everything = LabelSelector::default();
    let app_web = selector(&[("app", "web")], vec![]);
    let team_a = selector(&[("team", "a")], vec![]);
    let no_team = selector(&[], vec![expression("team", "DoesNotExist", &[])]);
    let by_name = selector(&[("kubernetes.io/metadata.name", "bare")], vec![]);
    let by_name_in = selector(
        &[],
        vec![expression(
            "kubernetes.io/metadata.name",
            "In",
            &["team-b", "unknown"],
        )],
    );
    let all = NAMESPACES.to_vec();
    let cases: Vec<SelectionCase<'_>> = vec![
        ("unset selector selects nothing", None, None, vec![]),
        (
            "unset selector, even with {} namespaces",
            None,
            Some(&everything),
            vec![],
        ),
        (
            "{} selector, unset namespaces: own namespace",
            Some(&everything),
            None,
            vec!["monitoring"],
        ),
        (
            "{} selector, {} namespaces: every namespace, even unknown",
            Some(&everything),
            Some(&everything),
            all,
        ),
        (
            "matching selector, own namespace",
            Some(&app_web),
            None,
            vec!["monitoring"],
        ),
        (
            "namespaces by label",
            Some(&everything),
            Some(&team_a),
            vec!["team-a"],
        ),
        (
            "namespaces without a label; unknown namespaces are not selected",
            Some(&everything),
            Some(&no_team),
            vec!["monitoring", "bare"],
        ),
        (
            "namespace by its name label, even when the lookup lacks it",
            Some(&everything),
            Some(&by_name),
            vec!["bare"],
        ),
        (
            "namespaces by name, In",
            Some(&app_web),
            Some(&by_name_in),
            vec!["team-b"],
        ),
    ];
    for (name, selector, namespace_selector, expected) in cases {
        let selection = Selection {
            kind: Kind::ServiceMonitor,
            selector,
            namespace_selector,
            own_namespace: "monitoring",
        };
        assert_eq!(
            selected_in(&selection, &[("app", "web")]),
            expected,
            "{name}"
        );
    }
}

#[test]
fn resource_selector_applies_within_selected_namespaces() {
    let app_web = selector(&[("app", "web")], vec![]);
    let everything = LabelSelector::default();
    let selection = Selection {
        kind: Kind::PodMonitor,
        selector: Some(&app_web),
        namespace_selector: Some(&everything),
        own_namespace: "monitoring",
    };
    assert_eq!(
        selected_in(&selection, &[("app", "db")]),
        Vec::<&str>::new()
    );
    assert_eq!(selected_in(&selection, &[]), Vec::<&str>::new());
    assert_eq!(
        selected_in(&selection, &[("app", "web")]),
        NAMESPACES.to_vec()
    );
}

#[test]
fn selects_namespace_is_the_namespace_half() {
    let team_a = selector(&[("team", "a")], vec![]);
    let selection = Selection {
        kind: Kind::PrometheusRule,
        selector: None,
        namespace_selector: Some(&team_a),
        own_namespace: "monitoring",
    };
    let selected: Vec<bool> = NAMESPACES
        .iter()
        .map(|namespace| {
            selection
                .selects_namespace(namespace, &cluster)
                .expect("valid")
        })
        .collect();
    assert_eq!(selected, [false, true, false, false, false]);
    let own = Selection {
        namespace_selector: None,
        ..selection
    };
    assert_eq!(own.selects_namespace("monitoring", &cluster), Ok(true));
    assert_eq!(own.selects_namespace("team-a", &cluster), Ok(false));
}

#[test]
fn selection_errors_name_the_spec_field() {
    let bad = selector(&[], vec![expression("team", "Exists", &["a"])]);
    let good = selector(&[("app", "web")], vec![]);
    let cases: Vec<(Kind, Option<&LabelSelector>, Option<&LabelSelector>, &str)> = vec![
        (
            Kind::ServiceMonitor,
            Some(&bad),
            None,
            "spec.serviceMonitorSelector.matchExpressions[0].values",
        ),
        (
            Kind::PodMonitor,
            Some(&bad),
            Some(&good),
            "spec.podMonitorSelector.matchExpressions[0].values",
        ),
        (
            Kind::ScrapeConfig,
            Some(&good),
            Some(&bad),
            "spec.scrapeConfigNamespaceSelector.matchExpressions[0].values",
        ),
        // An invalid namespace selector is an error even though the unset selector selects
        // nothing: upstream converts both selectors before listing anything.
        (
            Kind::PrometheusRule,
            None,
            Some(&bad),
            "spec.ruleNamespaceSelector.matchExpressions[0].values",
        ),
        (
            Kind::ServiceMonitor,
            Some(&bad),
            Some(&bad),
            "spec.serviceMonitorSelector.matchExpressions[0].values",
        ),
    ];
    for (kind, selector, namespace_selector, field) in cases {
        let selection = Selection {
            kind,
            selector,
            namespace_selector,
            own_namespace: "monitoring",
        };
        let expected = SelectorError {
            field: field.to_string(),
            problem: Problem::UnexpectedValues("Exists"),
        };
        assert_eq!(selection.validate(), Err(expected.clone()), "{field}");
        // Whatever the namespace or the object: in or out of the selected namespaces.
        for namespace in NAMESPACES {
            assert_eq!(
                selection.selects(namespace, &labels(&[("app", "web")]), &cluster),
                Err(expected.clone()),
                "{field} in {namespace}"
            );
            assert_eq!(
                selection.selects_namespace(namespace, &cluster),
                Err(expected.clone()),
                "{field} in {namespace}"
            );
        }
        assert_eq!(
            expected.to_string(),
            format!("{field}: operator Exists takes no values")
        );
    }
}

#[test]
fn kind_names() {
    let kinds = [
        Kind::ServiceMonitor,
        Kind::PodMonitor,
        Kind::ScrapeConfig,
        Kind::PrometheusRule,
    ];
    let names: Vec<_> = kinds
        .iter()
        .map(|kind| {
            (
                kind.name(),
                kind.selector_field(),
                kind.namespace_selector_field(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (
                "ServiceMonitor",
                "spec.serviceMonitorSelector",
                "spec.serviceMonitorNamespaceSelector"
            ),
            (
                "PodMonitor",
                "spec.podMonitorSelector",
                "spec.podMonitorNamespaceSelector"
            ),
            (
                "ScrapeConfig",
                "spec.scrapeConfigSelector",
                "spec.scrapeConfigNamespaceSelector"
            ),
            (
                "PrometheusRule",
                "spec.ruleSelector",
                "spec.ruleNamespaceSelector"
            ),
        ]
    );
}
