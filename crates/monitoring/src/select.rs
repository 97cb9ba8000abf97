//! Which monitoring.coreos.com objects a ShardedPrometheus takes, decided exactly as
//! prometheus-operator's `Prometheus` resource decides it, so a team migrates by changing the
//! kind and nothing else.
//!
//! Two layers:
//! - [`matches`]: Kubernetes label-selector semantics (`metav1.LabelSelector`): every
//!   `matchLabels` pair AND every `matchExpressions` requirement; `{}` matches everything.
//! - [`Selection`]: the `Prometheus` resource's pairing of a resource selector with a namespace
//!   selector. Unset resource selector: nothing; unset namespace selector: the resource's own
//!   namespace only; `{}`: everything.
//!
//! A selector is validated as a whole before it is evaluated (as `LabelSelectorAsSelector`
//! does upstream), so an invalid selector is an error whatever objects exist, never an error
//! that comes and goes with the labels being looked at.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

mod syntax;

#[cfg(test)]
mod tests;

/// The label every Namespace carries with its own name (set by the API server since
/// Kubernetes 1.22, immutable), so that a namespace selector can pick namespaces by name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The kinds a ShardedPrometheus selects, each with the spec fields that select it (the
/// `Prometheus` resource's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ServiceMonitor,
    PodMonitor,
    ScrapeConfig,
    PrometheusRule,
}

impl Kind {
    /// The Kubernetes kind, as [`crate::Rejection::kind`] names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ServiceMonitor => "ServiceMonitor",
            Kind::PodMonitor => "PodMonitor",
            Kind::ScrapeConfig => "ScrapeConfig",
            Kind::PrometheusRule => "PrometheusRule",
        }
    }

    /// The spec field holding the resource selector, e.g. `spec.serviceMonitorSelector`.
    pub fn selector_field(self) -> &'static str {
        match self {
            Kind::ServiceMonitor => "spec.serviceMonitorSelector",
            Kind::PodMonitor => "spec.podMonitorSelector",
            Kind::ScrapeConfig => "spec.scrapeConfigSelector",
            Kind::PrometheusRule => "spec.ruleSelector",
        }
    }

    /// The spec field holding the namespace selector, e.g. `spec.ruleNamespaceSelector`.
    pub fn namespace_selector_field(self) -> &'static str {
        match self {
            Kind::ServiceMonitor => "spec.serviceMonitorNamespaceSelector",
            Kind::PodMonitor => "spec.podMonitorNamespaceSelector",
            Kind::ScrapeConfig => "spec.scrapeConfigNamespaceSelector",
            Kind::PrometheusRule => "spec.ruleNamespaceSelector",
        }
    }
}

/// An invalid label selector: where (a field path, from the spec field when known) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SelectorError {
    /// E.g. `spec.ruleSelector.matchExpressions[1].values`, or `matchLabels["app"]` when the
    /// selector was evaluated on its own by [`matches`].
    pub field: String,
    pub problem: Problem,
}

impl SelectorError {
    fn new(field: String, problem: Problem) -> SelectorError {
        SelectorError { field, problem }
    }

    /// The same error, its field path rooted at `root` (a spec field name).
    fn under(self, root: &str) -> SelectorError {
        SelectorError {
            field: format!("{root}.{}", self.field),
            problem: self.problem,
        }
    }
}

/// What is wrong with one part of a selector (the messages of Kubernetes' own validation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("operator {0:?} is not one of In, NotIn, Exists, DoesNotExist")]
    UnknownOperator(String),
    #[error("operator {0} needs at least one value")]
    NoValues(&'static str),
    #[error("operator {0} takes no values")]
    UnexpectedValues(&'static str),
    #[error("key {key:?} is not a qualified label name: {why}")]
    InvalidKey { key: String, why: String },
    #[error("value {value:?} is not a valid label value: {why}")]
    InvalidValue { value: String, why: String },
}

/// One requirement of a selector, validated.
enum Requirement<'a> {
    /// From `matchLabels`: the key is present with this value.
    Equals(&'a str, &'a str),
    In(&'a str, &'a [String]),
    NotIn(&'a str, &'a [String]),
    Exists(&'a str),
    DoesNotExist(&'a str),
}

impl Requirement<'_> {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(key, value) => labels.get(*key).is_some_and(|v| v == value),
            Requirement::In(key, values) => labels.get(*key).is_some_and(|v| values.contains(v)),
            // Kubernetes: NotIn matches an object without the key at all.
            Requirement::NotIn(key, values) => labels.get(*key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(*key),
            Requirement::DoesNotExist(key) => !labels.contains_key(*key),
        }
    }
}

/// The requirements of `selector`, or the first thing wrong with it (matchLabels in key
/// order, then matchExpressions in order). Field paths are relative to the selector.
fn requirements(selector: &LabelSelector) -> Result<Vec<Requirement<'_>>, SelectorError> {
    let mut requirements = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        let field = || format!("matchLabels[{key:?}]");
        syntax::check_key(key).map_err(|problem| SelectorError::new(field(), problem))?;
        syntax::check_value(value).map_err(|problem| SelectorError::new(field(), problem))?;
        requirements.push(Requirement::Equals(key, value));
    }
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        requirements.push(requirement(expression).map_err(|(part, problem)| {
            SelectorError::new(format!("matchExpressions[{index}]{part}"), problem)
        })?);
    }
    Ok(requirements)
}

/// One `matchExpressions` entry, or the part of it (`.key`, `.operator`, `.values[i]`) that
/// is wrong.
fn requirement(
    expression: &LabelSelectorRequirement,
) -> Result<Requirement<'_>, (String, Problem)> {
    let key = expression.key.as_str();
    let values = expression.values.as_deref().unwrap_or_default();
    syntax::check_key(key).map_err(|problem| (".key".to_string(), problem))?;
    let (requirement, operator, needs_values) = match expression.operator.as_str() {
        "In" => (Requirement::In(key, values), "In", true),
        "NotIn" => (Requirement::NotIn(key, values), "NotIn", true),
        "Exists" => (Requirement::Exists(key), "Exists", false),
        "DoesNotExist" => (Requirement::DoesNotExist(key), "DoesNotExist", false),
        other => {
            return Err((
                ".operator".to_string(),
                Problem::UnknownOperator(other.to_string()),
            ));
        }
    };
    match (needs_values, values.is_empty()) {
        (true, true) => return Err((".values".to_string(), Problem::NoValues(operator))),
        (false, false) => {
            return Err((".values".to_string(), Problem::UnexpectedValues(operator)));
        }
        _ => {}
    }
    for (index, value) in values.iter().enumerate() {
        syntax::check_value(value).map_err(|problem| (format!(".values[{index}]"), problem))?;
    }
    Ok(requirement)
}

/// Whether `labels` satisfy `selector`: every `matchLabels` pair and every `matchExpressions`
/// requirement. `{}` matches everything. The selector is validated first, whole: an unknown
/// operator, In/NotIn without values, Exists/DoesNotExist with values, or a key or value that
/// Kubernetes would refuse is an error, whatever `labels` hold.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    Ok(requirements(selector)?
        .iter()
        .all(|requirement| requirement.matches(labels)))
}

/// A resource selector paired with its namespace selector, as in the `Prometheus` resource.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// What is selected; names the spec fields in errors.
    pub kind: Kind,
    /// Unset selects nothing; `{}` selects every object (of the selected namespaces).
    pub selector: Option<&'a LabelSelector>,
    /// Unset: only `own_namespace`; `{}`: every namespace; else the namespaces whose labels
    /// match.
    pub namespace_selector: Option<&'a LabelSelector>,
    /// The namespace of the ShardedPrometheus.
    pub own_namespace: &'a str,
}

impl Selection<'_> {
    /// Both selectors are valid. [`Selection::selects`] checks this on every call; the
    /// controller may call it once up front to report a bad spec even when nothing is listed.
    pub fn validate(&self) -> Result<(), SelectorError> {
        self.checked_selector()?;
        self.checked_namespace_selector()?;
        Ok(())
    }

    /// Whether an object of `namespace` with `labels` is selected. `namespaces` looks up a
    /// namespace's labels by name; a namespace it does not know is selected by no non-empty
    /// namespace selector (upstream lists namespaces from its cache: an unknown one is not
    /// there). Both selectors are validated first, even when one of them decides alone.
    pub fn selects(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        namespaces: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
    ) -> Result<bool, SelectorError> {
        let selector = self.checked_selector()?;
        let in_namespace = self.namespace_selected(namespace, namespaces)?;
        Ok(in_namespace
            && selector.is_some_and(|requirements| {
                requirements
                    .iter()
                    .all(|requirement| requirement.matches(labels))
            }))
    }

    /// Whether objects of `namespace` can be selected at all (the namespace half of
    /// [`Selection::selects`]), for a controller that lists per namespace.
    pub fn selects_namespace(
        &self,
        namespace: &str,
        namespaces: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
    ) -> Result<bool, SelectorError> {
        self.checked_selector()?;
        self.namespace_selected(namespace, namespaces)
    }

    fn namespace_selected(
        &self,
        namespace: &str,
        namespaces: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
    ) -> Result<bool, SelectorError> {
        let Some(requirements) = self.checked_namespace_selector()? else {
            return Ok(namespace == self.own_namespace);
        };
        if requirements.is_empty() {
            // `{}`: every namespace, known or not (upstream lists every namespace it sees).
            return Ok(true);
        }
        let Some(mut labels) = namespaces(namespace) else {
            return Ok(false);
        };
        // The API server sets this label on every namespace; a lookup built from a source that
        // lacks it (a cache of partial objects, a fixture) still selects by name.
        labels
            .entry(NAMESPACE_NAME_LABEL.to_string())
            .or_insert_with(|| namespace.to_string());
        Ok(requirements
            .iter()
            .all(|requirement| requirement.matches(&labels)))
    }

    /// The resource selector's requirements, None when unset (selects nothing).
    fn checked_selector(&self) -> Result<Option<Vec<Requirement<'_>>>, SelectorError> {
        self.selector
            .map(|selector| {
                requirements(selector).map_err(|error| error.under(self.kind.selector_field()))
            })
            .transpose()
    }

    /// The namespace selector's requirements, None when unset (own namespace only).
    fn checked_namespace_selector(&self) -> Result<Option<Vec<Requirement<'_>>>, SelectorError> {
        self.namespace_selector
            .map(|selector| {
                requirements(selector)
                    .map_err(|error| error.under(self.kind.namespace_selector_field()))
            })
            .transpose()
    }
}
