use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

fn zdb(selector: Option<LabelSelector>) -> ZoneDisruptionBudgetSpec {
    ZoneDisruptionBudgetSpec {
        selector,
        max_unavailable: Some(IntOrString::String("10%".into())),
        dry_run: false,
    }
}

fn expression(operator: &str, values: Option<Vec<String>>) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: operator.into(),
            values,
        }]),
        match_labels: None,
    }
}

#[test]
fn zdb_selectors() {
    let labels = LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
        match_expressions: None,
    };
    let valid = zdb(Some(labels)).validate().unwrap();
    assert_eq!(valid.max_unavailable, IntOrPercent::Percent(10));
    assert!(
        zdb(Some(expression("In", Some(vec!["web".into()]))))
            .validate()
            .is_ok()
    );
    assert!(zdb(Some(expression("Exists", None))).validate().is_ok());
    assert_eq!(zdb(None).validate().unwrap_err(), ZdbError::EmptySelector);
    assert_eq!(
        zdb(Some(LabelSelector::default())).validate().unwrap_err(),
        ZdbError::EmptySelector
    );
    assert!(matches!(
        zdb(Some(expression("Like", None))).validate().unwrap_err(),
        ZdbError::Selector(SelectorError::Operator { .. })
    ));
    assert!(matches!(
        zdb(Some(expression("In", None))).validate().unwrap_err(),
        ZdbError::Selector(SelectorError::Values { .. })
    ));
    assert!(matches!(
        zdb(Some(expression("Exists", Some(vec!["x".into()]))))
            .validate()
            .unwrap_err(),
        ZdbError::Selector(SelectorError::Values { .. })
    ));
}

/// 0 is a freeze, not an error: no running selected pod may be evicted.
#[test]
fn zdb_max_unavailable_zero_is_valid() {
    let labels = LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
        match_expressions: None,
    };
    for (zero, expected) in [
        (IntOrString::Int(0), IntOrPercent::Int(0)),
        (IntOrString::String("0%".into()), IntOrPercent::Percent(0)),
        (IntOrString::String("0".into()), IntOrPercent::Int(0)),
    ] {
        let spec = ZoneDisruptionBudgetSpec {
            max_unavailable: Some(zero),
            ..zdb(Some(labels.clone()))
        };
        assert_eq!(spec.validate().unwrap().max_unavailable, expected);
    }
    let negative = ZoneDisruptionBudgetSpec {
        max_unavailable: Some(IntOrString::Int(-1)),
        ..zdb(Some(labels))
    };
    assert!(matches!(
        negative.validate().unwrap_err(),
        ZdbError::MaxUnavailable(_)
    ));
}

/// The message the check shares with its CRD rule reads in full as the controller writes it.
#[test]
fn message_shared_with_the_crd_rule() {
    assert_eq!(
        ZdbError::EmptySelector.to_string(),
        "spec.selector is missing or empty: it would select every pod of the namespace"
    );
}
