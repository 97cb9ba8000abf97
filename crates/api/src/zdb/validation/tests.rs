use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use zone_topology::IntOrPercent;

fn zdb(selector: Option<LabelSelector>) -> ZoneDisruptionBudgetSpec {
    ZoneDisruptionBudgetSpec {
        selector,
        max_unavailable: Some(IntOrString::String("10%".into())),
        ..ZoneDisruptionBudgetSpec::default()
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
    assert_eq!(
        valid.policy,
        Policy::max_unavailable(IntOrPercent::Percent(10))
    );
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
        assert_eq!(
            spec.validate().unwrap().policy,
            Policy::max_unavailable(expected)
        );
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
    assert_eq!(
        ZdbError::BothLimits.to_string(),
        "spec.minAvailable and spec.maxUnavailable are exclusive: set one"
    );
}

fn web() -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
        match_expressions: None,
    })
}

/// minAvailable or maxUnavailable (1 when neither), never both; the unhealthy pod policy as
/// given, unset when not.
#[test]
fn zdb_limits_and_unhealthy_pod_policy() {
    let spec = |min: Option<IntOrString>, max: Option<IntOrString>| ZoneDisruptionBudgetSpec {
        selector: web(),
        min_available: min,
        max_unavailable: max,
        ..ZoneDisruptionBudgetSpec::default()
    };
    let limit = |min, max| spec(min, max).validate().map(|v| v.policy.limit);
    assert_eq!(
        limit(None, None),
        Ok(Limit::MaxUnavailable(IntOrPercent::Int(1)))
    );
    assert_eq!(
        limit(Some(IntOrString::String("50%".into())), None),
        Ok(Limit::MinAvailable(IntOrPercent::Percent(50)))
    );
    assert_eq!(
        limit(Some(IntOrString::Int(2)), Some(IntOrString::Int(1))),
        Err(ZdbError::BothLimits)
    );
    assert!(matches!(
        limit(Some(IntOrString::String("half".into())), None),
        Err(ZdbError::MinAvailable(_))
    ));
    assert!(matches!(
        limit(Some(IntOrString::Int(-1)), None),
        Err(ZdbError::MinAvailable(_))
    ));

    for (given, expected) in [
        (None, UnhealthyPods::Unset),
        (
            Some(UnhealthyPodEvictionPolicy::IfHealthyBudget),
            UnhealthyPods::IfHealthyBudget,
        ),
        (
            Some(UnhealthyPodEvictionPolicy::AlwaysAllow),
            UnhealthyPods::AlwaysAllow,
        ),
    ] {
        let spec = ZoneDisruptionBudgetSpec {
            selector: web(),
            unhealthy_pod_eviction_policy: given,
            ..ZoneDisruptionBudgetSpec::default()
        };
        assert_eq!(spec.validate().unwrap().policy.unhealthy_pods, expected);
    }
    for (given, expected) in [
        (None, budget::RolloutsWhenFrozen::Hold),
        (
            Some(RolloutsWhenFrozen::Hold),
            budget::RolloutsWhenFrozen::Hold,
        ),
        (
            Some(RolloutsWhenFrozen::Proceed),
            budget::RolloutsWhenFrozen::Proceed,
        ),
    ] {
        let spec = ZoneDisruptionBudgetSpec {
            selector: web(),
            rollouts_when_frozen: given,
            ..ZoneDisruptionBudgetSpec::default()
        };
        assert_eq!(
            spec.validate().unwrap().policy.rollouts_when_frozen,
            expected
        );
    }
}
