//! PrometheusRule objects turned into the rule files Prometheus loads, one file per object, as
//! prometheus-operator does.
//!
//! Every object is validated first, as Prometheus would at load time (rulefmt and the PromQL
//! parser): Prometheus refuses a whole reload when one file is bad, so one team's typo would
//! otherwise freeze every team's rules. An invalid object is left out whole, with a
//! [`Rejection`] naming the group and the rule to fix; the others load.

use crate::{Object, Rejection};

mod duration;
mod render;
mod spec;
mod validate;

#[cfg(test)]
mod tests;

pub use spec::{PrometheusRuleSpec, Rule, RuleGroup};

/// The kind named in rejections.
pub const KIND: &str = "PrometheusRule";

/// The largest rule file accepted, and the default budget of one ConfigMap's rule files
/// ([`chunks`]): half of a ConfigMap's 1 MiB, as upstream, leaving room for keys and metadata.
pub const MAX_RULE_FILE_BYTES: usize = 512 * 1024;

/// One object's rules as a Prometheus rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFile {
    /// `<namespace>-<name>-<uid>.yaml`, upstream's name: unique, and a new object under an old
    /// name gets a new file.
    pub name: String,
    /// The YAML Prometheus loads (`groups:` with snake_case keys).
    pub content: String,
    /// How many groups and rules the file holds (for the status).
    pub groups: usize,
    pub rules: usize,
}

impl RuleFile {
    /// The bytes this file takes in a ConfigMap: its key and its value.
    pub fn size(&self) -> usize {
        self.name.len() + self.content.len()
    }
}

/// Who loads a rule file: the formats differ in one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluator {
    /// A shard's Prometheus: `partial_response_strategy` is dropped, as upstream does (Prometheus
    /// refuses a file holding it).
    Prometheus,
    /// A Thanos Ruler (global rules): `partial_response_strategy` is kept, and must be `warn` or
    /// `abort` (the Ruler refuses anything else at load time).
    ThanosRuler,
}

/// The rule file of one PrometheusRule for `evaluator`, or why it is left out. An empty
/// `interval` or `for` means unset, as upstream.
pub fn rule_file(
    obj: &Object<PrometheusRuleSpec>,
    evaluator: Evaluator,
) -> Result<RuleFile, Rejection> {
    let reject = |reason: String| Rejection {
        kind: KIND,
        namespace: obj.namespace.clone(),
        name: obj.name.clone(),
        reason,
    };
    validate::spec(&obj.spec).map_err(reject)?;
    if evaluator == Evaluator::ThanosRuler {
        validate::partial_response(&obj.spec).map_err(reject)?;
    }
    let content = render::yaml(&obj.spec, evaluator).map_err(reject)?;
    if content.len() > MAX_RULE_FILE_BYTES {
        return Err(reject(format!(
            "the rendered rule file is {} bytes, above the limit of {MAX_RULE_FILE_BYTES} bytes; \
             split the object",
            content.len()
        )));
    }
    Ok(RuleFile {
        name: format!("{}-{}-{}.yaml", obj.namespace, obj.name, obj.uid),
        content,
        groups: obj.spec.groups.len(),
        rules: obj.spec.groups.iter().map(|group| group.rules.len()).sum(),
    })
}

/// Ok, or why Prometheus would refuse `text` as a rule file (the file's YAML shape, then the
/// checks a PrometheusRule gets: rulefmt and PromQL): for the rule files users keep in
/// ConfigMaps, which reach the pods without the controller writing them.
pub fn check_rule_file(text: &str) -> Result<(), String> {
    zone_topology::yaml_depth::check(text, zone_topology::yaml_depth::MAX_DEPTH)
        .map_err(|error| format!("not a Prometheus rule file: {error}"))?;
    let spec: PrometheusRuleSpec = serde_norway::from_str(text).map_err(|error| {
        format!(
            "not a Prometheus rule file: {}",
            crate::redact::serde_error(&error)
        )
    })?;
    validate::spec(&spec)
}

/// The rule files of `objects` for `evaluator` and the rejected objects, both ordered by
/// namespace, then name (then uid), whatever order the objects were listed in, so the generated
/// ConfigMaps only change when the rules do.
pub fn rule_files(
    objects: &[Object<PrometheusRuleSpec>],
    evaluator: Evaluator,
) -> (Vec<RuleFile>, Vec<Rejection>) {
    let mut ordered: Vec<&Object<PrometheusRuleSpec>> = objects.iter().collect();
    ordered.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
    let mut files = Vec::new();
    let mut rejections = Vec::new();
    for obj in ordered {
        match rule_file(obj, evaluator) {
            Ok(file) => files.push(file),
            Err(rejection) => rejections.push(rejection),
        }
    }
    (files, rejections)
}

/// `files`, in their order, split into consecutive chunks (one ConfigMap each) whose total
/// [`RuleFile::size`] stays within `budget` bytes: a file that does not fit in the current
/// chunk starts the next one (upstream's packing).
///
/// There is always at least one chunk, empty when there are no files, so the Prometheus pods
/// always have their rules volume (as upstream: adding the first rule then changes a ConfigMap,
/// not the pod template).
///
/// A single file larger than `budget` gets a chunk of its own rather than being dropped: it
/// has already passed [`rule_file`], which rejects files over [`MAX_RULE_FILE_BYTES`], so with
/// that budget this never happens; with a smaller one the ConfigMap is still well under the
/// API server's 1 MiB, and dropping a valid object's rules silently would be worse.
pub fn chunks(files: &[RuleFile], budget: usize) -> Vec<Vec<&RuleFile>> {
    let mut chunks: Vec<Vec<&RuleFile>> = vec![Vec::new()];
    let mut used = 0;
    for file in files {
        let size = file.size();
        let current_is_empty = chunks.last().is_none_or(Vec::is_empty);
        if !current_is_empty && used + size > budget {
            chunks.push(Vec::new());
            used = 0;
        }
        if let Some(current) = chunks.last_mut() {
            current.push(file);
        }
        used += size;
    }
    chunks
}
