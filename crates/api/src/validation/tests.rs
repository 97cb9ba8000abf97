use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use super::*;

fn zau(factor: &str, max_unavailable: Option<IntOrString>) -> ZoneAwareUpdateSpec {
    ZoneAwareUpdateSpec {
        statefulset: "web".into(),
        max_unavailable,
        exponential_factor: factor.into(),
        ..ZoneAwareUpdateSpec::default()
    }
}

#[test]
fn valid_zau_specs() {
    let valid = zau("2.0", Some(IntOrString::String("25%".into())))
        .validate()
        .unwrap();
    assert_eq!(valid.exponential_factor, 2.0);
    assert_eq!(valid.max_unavailable, IntOrPercent::Percent(25));
    let valid = zau("0", None).validate().unwrap();
    assert_eq!(
        (valid.exponential_factor, valid.max_unavailable),
        (0.0, IntOrPercent::Int(1))
    );
}

#[test]
fn invalid_zau_specs_name_the_field() {
    let err = zau("0.5", Some(IntOrString::Int(4)))
        .validate()
        .unwrap_err();
    assert!(
        err.to_string().starts_with("spec.exponentialFactor"),
        "{err}"
    );
    let err = zau("2", Some(IntOrString::Int(0))).validate().unwrap_err();
    assert_eq!(err, SpecError::MaxUnavailableZero);
    let err = zau("2", Some(IntOrString::String("x%".into())))
        .validate()
        .unwrap_err();
    assert!(matches!(err, SpecError::MaxUnavailable(_)), "{err}");
    let err = ZoneAwareUpdateSpec::default().validate().unwrap_err();
    assert_eq!(err, SpecError::MissingStatefulSet);
}

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
    assert_eq!(zdb(None).validate().unwrap_err(), SpecError::EmptySelector);
    assert_eq!(
        zdb(Some(LabelSelector::default())).validate().unwrap_err(),
        SpecError::EmptySelector
    );
    assert!(matches!(
        zdb(Some(expression("Like", None))).validate().unwrap_err(),
        SpecError::SelectorOperator { .. }
    ));
    assert!(matches!(
        zdb(Some(expression("In", None))).validate().unwrap_err(),
        SpecError::SelectorValues { .. }
    ));
    assert!(matches!(
        zdb(Some(expression("Exists", Some(vec!["x".into()]))))
            .validate()
            .unwrap_err(),
        SpecError::SelectorValues { .. }
    ));
}
