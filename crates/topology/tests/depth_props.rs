//! The nesting bounds read before PromQL and YAML are parsed: never below the nesting an input
//! really has (so nothing deep gets past them), and any text at all is measured without a panic.
//! `PROPTEST_CASES` raises the budget when run by hand.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use zone_topology::{promql_depth, yaml_depth};

/// A PromQL expression and how deep its tree is.
fn promql() -> impl Strategy<Value = (String, usize)> {
    let leaf = prop_oneof![
        Just(("up".to_string(), 1)),
        Just(("rate(x[5m])".to_string(), 2)),
        Just(("{job=\"a(b\"}".to_string(), 1)),
        Just(("'[{('".to_string(), 1)),
    ];
    leaf.prop_recursive(64, 512, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|(e, d)| (format!("({e})"), d + 1)),
            inner
                .clone()
                .prop_map(|(e, d)| (format!("sum by (job) ({e})"), d + 1)),
            inner.clone().prop_map(|(e, d)| (format!("-{e}"), d + 1)),
            (inner.clone(), inner.clone())
                .prop_map(|((a, x), (b, y))| (format!("{a} + {b}"), x.max(y) + 1)),
            (inner.clone(), inner.clone())
                .prop_map(|((a, x), (b, y))| (format!("{a} unless {b}"), x.max(y) + 1)),
            inner.prop_map(|(e, d)| (format!("{e} # a comment )))\n"), d)),
        ]
    })
}

/// A YAML document and how deep it nests: flow collections inside block ones (YAML allows no
/// block collection inside a flow one).
fn yaml() -> impl Strategy<Value = (String, usize)> {
    let leaf = prop_oneof![
        Just(("a".to_string(), 0)),
        Just(("\"x: [\"".to_string(), 0)),
        Just(("'it''s {'".to_string(), 0)),
    ];
    let flow = leaf.prop_recursive(48, 256, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|(v, d)| (format!("[{v}]"), d + 1)),
            inner
                .clone()
                .prop_map(|(v, d)| (format!("{{k: {v}}}"), d + 1)),
            (inner.clone(), inner)
                .prop_map(|((a, x), (b, y))| (format!("[{a}, {b}]"), x.max(y) + 1)),
        ]
    });
    (flow, proptest::collection::vec(any::<bool>(), 0..40)).prop_map(
        |((mut text, mut depth), blocks)| {
            for sequence in blocks {
                text = block(if sequence { "-" } else { "k:" }, &text);
                depth += 1;
            }
            (text, depth)
        },
    )
}

/// `value` under `head` as a block: on the next lines, indented by two.
fn block(head: &str, value: &str) -> String {
    let indented: Vec<String> = value.lines().map(|line| format!("  {line}")).collect();
    format!("{head}\n{}", indented.join("\n"))
}

proptest! {
    #[test]
    fn the_promql_bound_is_never_below_the_tree_depth((text, nesting) in promql()) {
        prop_assert!(promql_depth::depth(&text) >= nesting, "{text:?}: {nesting}");
    }

    #[test]
    fn the_yaml_bound_is_never_below_the_nesting((text, nesting) in yaml()) {
        prop_assert!(yaml_depth::depth(&text) >= nesting, "{text:?}: {nesting}");
    }

    #[test]
    fn any_text_is_measured(text in ".{0,400}") {
        let _ = promql_depth::check(&text, promql_depth::MAX_DEPTH);
        let _ = yaml_depth::check(&text, yaml_depth::MAX_DEPTH);
    }
}
