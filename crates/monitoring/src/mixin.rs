//! The metric names the monitoring mixin (`monitoring/`, rendered to `monitoring/generated/`)
//! reads, and which binary serves each: the check that a renamed metric fails the build rather
//! than silencing an alert or emptying a dashboard panel.
//!
//! Every name an alert, a recording rule or a dashboard query reads is one of: recorded by the
//! mixin's own rules, [`EXTERNAL`] (Prometheus's, the API server's), or served by one of the
//! binaries ([`owners`]); each binary's tests compare the names it owns with the families its
//! `/metrics` serves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde::Deserialize;

/// Names the mixin reads that none of the binaries serves, and what serves them.
pub const EXTERNAL: &[(&str, &str)] = &[
    ("up", "Prometheus, for every target"),
    ("ALERTS", "Prometheus, for every alert of its rules"),
    (
        "apiserver_admission_webhook_rejection_count",
        "kube-apiserver",
    ),
    (
        "apiserver_admission_webhook_fail_open_count",
        "kube-apiserver",
    ),
    (
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
        "kube-apiserver",
    ),
    (
        "prometheus_target_scrape_pool_targets",
        "Prometheus (the shards' own metrics)",
    ),
];

/// The binaries, as their scrape jobs are named.
pub const BINARIES: [&str; 4] = [
    "zdb-controller",
    "zau-controller",
    "shard-controller",
    "rules-federator",
];

/// The binaries that serve `name` (a family name or a histogram's `_bucket`/`_sum`/`_count`
/// series): every binary serves `process_*`; the controllers the runtime's reconcile and leader
/// metrics; each binary its build info and its prefix. Empty for a name no binary claims.
pub fn owners(name: &str) -> Vec<&'static str> {
    if name.starts_with("process_") {
        return BINARIES.to_vec();
    }
    if name.starts_with("zone_aware_reconcil")
        || name.starts_with("zone_aware_leader")
        || name.starts_with("zone_aware_zone_")
    {
        return BINARIES[..3].to_vec();
    }
    let prefixes = [
        ("zone_aware_zdb_", "zdb-controller"),
        ("zone_aware_zau_", "zau-controller"),
        ("zone_aware_sprom_", "shard-controller"),
        ("zone_aware_federator_", "rules-federator"),
    ];
    for (prefix, binary) in prefixes {
        if name.starts_with(prefix) {
            return vec![binary];
        }
    }
    BINARIES
        .into_iter()
        .filter(|binary| name == build_info(binary))
        .collect()
}

/// `<binary>_build_info`, the binary's name with `-` as `_`.
pub fn build_info(binary: &str) -> String {
    format!("{}_build_info", binary.replace('-', "_"))
}

/// Whether `families` (names from `# TYPE` lines of `/metrics`) serve the series `name`: the
/// family itself, or the histogram or summary `name` is a series of.
pub fn served(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|family| families.contains(family))
        })
}

/// The names of `binary` ([`owners`]) the rendered mixin under `root` reads and `families` (the
/// binary's `/metrics`) does not serve, each with where it is read.
pub fn unserved(
    root: &Path,
    binary: &str,
    families: &BTreeSet<String>,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mixin = read(root)?;
    Ok(mixin
        .owned_by(binary)
        .into_iter()
        .filter(|(name, _)| !served(name, families))
        .map(|(name, places)| (name.to_owned(), places.clone()))
        .collect())
}

/// Ok, or the message naming what [`unserved`] finds (the names, where each is read, and what
/// `families` holds): each binary's test of its `/metrics` against the mixin.
pub fn check_served(root: &Path, binary: &str, families: &BTreeSet<String>) -> Result<(), String> {
    let missing =
        unserved(root, binary, families).map_err(|error| format!("reading the mixin: {error}"))?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the mixin reads metrics {binary} does not serve: {missing:#?}\nit serves: {families:#?}"
    ))
}

/// Panics with [`check_served`]'s message unless `binary` (its crate at `manifest_dir`, two
/// levels below the repository's root) serves every metric the mixin reads of it: a renamed
/// metric fails its binary's tests, not on the pager.
pub fn assert_served(manifest_dir: &str, binary: &str, families: &BTreeSet<String>) {
    let root = Path::new(manifest_dir).join("../..");
    if let Err(message) = check_served(&root, binary, families) {
        panic!("{message}");
    }
}

/// A binary's test that it serves every metric the monitoring mixin (monitoring/, rendered to
/// monitoring/generated/) reads of it in an alert, a recording rule or a dashboard, through its
/// real `/metrics` (`$binary`: its name; `$served`: the families served): a renamed metric fails
/// there, not on the pager. Expands to the test function.
#[macro_export]
macro_rules! every_metric_the_mixin_reads_is_served {
    ($binary:expr, $served:expr) => {
        #[cfg(test)]
        #[test]
        fn every_metric_the_mixin_reads_is_served() {
            let served = $served;
            $crate::mixin::assert_served(env!("CARGO_MANIFEST_DIR"), $binary, &served);
        }
    };
}

/// What the rendered mixin reads and records.
#[derive(Debug, Default)]
pub struct MixinMetrics {
    /// Each name read, with where (an alert, a rule, a dashboard panel).
    pub read: BTreeMap<String, BTreeSet<String>>,
    /// The names its recording rules write.
    pub recorded: BTreeSet<String>,
}

impl MixinMetrics {
    /// The names read that `binary` serves by [`owners`], with where they are read.
    pub fn owned_by(&self, binary: &str) -> BTreeMap<&str, &BTreeSet<String>> {
        self.read
            .iter()
            .filter(|(name, _)| owners(name).contains(&binary))
            .map(|(name, places)| (name.as_str(), places))
            .collect()
    }

    /// Names read that are neither recorded by the mixin, [`EXTERNAL`], nor owned by a binary:
    /// a typo, or a metric nothing serves.
    pub fn unclaimed(&self) -> BTreeMap<&str, &BTreeSet<String>> {
        self.read
            .iter()
            .filter(|(name, _)| {
                !self.recorded.contains(*name)
                    && !EXTERNAL.iter().any(|(external, _)| external == name)
                    && owners(name).is_empty()
            })
            .map(|(name, places)| (name.as_str(), places))
            .collect()
    }

    fn note(&mut self, expr: &str, place: &str) -> Result<(), String> {
        for name in metric_names(expr).map_err(|error| format!("{place}: {error}"))? {
            self.read.entry(name).or_default().insert(place.to_owned());
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
}

/// Reads `monitoring/generated/` under `root` (the repository): the rule files `alerts.yaml` and
/// `rules.yaml` and every dashboard of `dashboards/`.
pub fn read(root: &Path) -> Result<MixinMetrics, String> {
    let generated = root.join("monitoring/generated");
    let mut mixin = MixinMetrics::default();
    for file in ["alerts.yaml", "rules.yaml"] {
        let path = generated.join(file);
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        let rules: RuleFile = serde_norway::from_str(&text)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        for group in rules.groups {
            for rule in group.rules {
                let name = rule.alert.or(rule.record.clone()).unwrap_or_default();
                mixin.note(&rule.expr, &format!("{file}: {} / {name}", group.name))?;
                mixin.recorded.extend(rule.record);
            }
        }
    }
    let dashboards = generated.join("dashboards");
    let entries = std::fs::read_dir(&dashboards)
        .map_err(|error| format!("{}: {error}", dashboards.display()))?;
    let mut paths: Vec<_> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        let dashboard: serde_json::Value =
            serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        let file = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (place, expr) in dashboard_queries(&dashboard) {
            mixin.note(&expr, &format!("{file}: {place}"))?;
        }
    }
    Ok(mixin)
}

/// Every query of a Grafana dashboard, with Grafana's variables replaced by values of their
/// type: panel targets, and the metric of `label_values(metric, label)` variables.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let substitute = |expr: &str| {
        expr.replace("$__rate_interval", "5m")
            .replace("$namespace", ".*")
    };
    let mut queries = Vec::new();
    let panels = dashboard["panels"].as_array().into_iter().flatten();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push((format!("panel \"{title}\""), substitute(expr)));
            }
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten();
    for variable in variables {
        let definition = variable["definition"].as_str().unwrap_or_default();
        if let Some(arguments) = definition.strip_prefix("label_values(") {
            let metric = arguments.split(',').next().unwrap_or_default().trim();
            let name = variable["name"].as_str().unwrap_or_default();
            queries.push((format!("variable ${name}"), metric.to_owned()));
        }
    }
    queries
}

/// The metric names `expr` selects: each vector selector's name, or its `__name__="..."`
/// matcher. A selector by a `__name__` regex names nothing, and is refused: the check could
/// not see what it reads.
pub fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let parsed = parser::parse(expr)?;
    let mut names = Names::default();
    walk_expr(&mut names, &parsed)?;
    Ok(names.0)
}

#[derive(Default)]
struct Names(BTreeSet<String>);

impl Names {
    fn selector(&mut self, selector: &VectorSelector) -> Result<(), String> {
        if let Some(name) = &selector.name {
            self.0.insert(name.clone());
            return Ok(());
        }
        let by_name = selector
            .matchers
            .matchers
            .iter()
            .find(|matcher| matcher.name == "__name__");
        match by_name {
            Some(matcher) if matches!(matcher.op, MatchOp::Equal) => {
                self.0.insert(matcher.value.clone());
                Ok(())
            }
            _ => Err(format!(
                "{selector} selects no single metric name; name the metric"
            )),
        }
    }
}

impl ExprVisitor for Names {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        match expr {
            Expr::VectorSelector(selector) => self.selector(selector)?,
            Expr::MatrixSelector(matrix) => self.selector(&matrix.vs)?,
            _ => {}
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn repository() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    #[test]
    fn names_come_from_selectors_of_every_kind() {
        let names = metric_names(
            r#"sum(rate(a_total{job="x"}[5m])) / on (job) b and {__name__="c", job="y"} unless absent(d == 1)"#,
        )
        .unwrap();
        assert_eq!(
            names,
            ["a_total", "b", "c", "d"]
                .map(str::to_owned)
                .into_iter()
                .collect()
        );
        assert!(metric_names(r#"{__name__=~"a|b"}"#).is_err());
        assert!(metric_names("sum(").is_err());
    }

    #[test]
    fn histogram_series_are_served_by_their_family() {
        let families: BTreeSet<String> = ["h_seconds".to_owned()].into();
        assert!(served("h_seconds_bucket", &families));
        assert!(served("h_seconds_count", &families));
        assert!(!served("h_total", &families));
    }

    #[test]
    fn owners_follow_the_prefixes() {
        assert_eq!(
            owners("zone_aware_zdb_webhook_decisions_total"),
            ["zdb-controller"]
        );
        assert_eq!(owners("rules_federator_build_info"), ["rules-federator"]);
        assert_eq!(owners("process_resident_memory_bytes").len(), 4);
        assert_eq!(owners("zone_aware_leader").len(), 3);
        assert!(owners("zone_aware_zbd_typo").is_empty());
    }

    /// A name the mixin reads that nothing would serve (a typo, a metric of a binary that
    /// lost it without a prefix) fails here; the binaries' own tests check the names they own.
    #[test]
    fn every_name_the_mixin_reads_has_a_source() {
        let mixin = read(repository()).unwrap();
        assert!(
            mixin.read.len() > 30,
            "the mixin reads only {:?}",
            mixin.read.keys()
        );
        assert!(
            mixin.unclaimed().is_empty(),
            "names the mixin reads that no binary serves, no rule records and are not external: {:#?}",
            mixin.unclaimed()
        );
        for binary in BINARIES {
            assert!(
                !mixin.owned_by(binary).is_empty(),
                "the mixin reads nothing of {binary}"
            );
        }
    }

    /// Every alert's runbook_url leads to a section of docs/runbooks.md with the four parts.
    #[test]
    fn every_alert_has_a_runbook_section() {
        let text =
            std::fs::read_to_string(repository().join("monitoring/generated/alerts.yaml")).unwrap();
        let alerts: RuleFile = serde_norway::from_str(&text).unwrap();
        let runbooks = std::fs::read_to_string(repository().join("docs/runbooks.md")).unwrap();
        let names: BTreeSet<String> = alerts
            .groups
            .into_iter()
            .flat_map(|group| group.rules)
            .filter_map(|rule| rule.alert)
            .collect();
        assert!(names.len() > 15, "{names:?}");
        for name in names {
            let heading = format!("\n## {name}\n");
            let start = runbooks
                .find(&heading)
                .unwrap_or_else(|| panic!("docs/runbooks.md has no section `## {name}`"));
            let body = &runbooks[start + heading.len()..];
            let section = &body[..body.find("\n## ").unwrap_or(body.len())];
            for part in ["**Symptom.**", "**Impact.**", "**Diagnosis.**", "**Fix.**"] {
                assert!(section.contains(part), "the runbook of {name} lacks {part}");
            }
        }
    }

    /// The shard controller accepts the mixin's rules as a user's rule file.
    #[test]
    fn the_rendered_rules_pass_the_rule_file_checks() {
        for file in ["alerts.yaml", "rules.yaml"] {
            let path = repository().join("monitoring/generated").join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            crate::rules::check_rule_file(&text).unwrap();
        }
    }
}
