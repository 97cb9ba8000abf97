//! The translate step (pure): the selected monitoring objects and the Secret and ConfigMap
//! values they reference become [`Monitoring`]: jobs, rule files, counts and rejections.
//!
//! A monitor that cannot be translated (a malformed spec, a Secret deleted) keeps the jobs it
//! last had, when it had any: a Secret being rotated, or a typo in one team's monitor, must not
//! stop the scraping of its targets. It is reported either way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;
use zone_api::ShardedPrometheus;
use zone_api::ValidSprom;
use zone_api::sprom::{contract, reason};
use zone_monitoring::monitors::{PodMonitorSpec, ScrapeConfigSpec, ServiceMonitorSpec};
use zone_monitoring::resolve::{KeyRef, Resolver, Source, Values};
use zone_monitoring::rules::PrometheusRuleSpec;
use zone_monitoring::translate::{self as upstream, Job, Settings};
use zone_monitoring::{Object, Rejection};
use zone_operator::Invalid;

use super::Monitoring;
use super::kinds::{
    Kind, PodMonitorKind, PrometheusRuleKind, Raw, ScrapeConfigKind, ServiceMonitorKind,
};

/// The objects a ShardedPrometheus selects, each list sorted by namespace and name (the order
/// of the jobs in the configuration, as upstream's).
#[derive(Debug, Clone, Default)]
pub struct Selected {
    pub service_monitors: Vec<Arc<Raw<ServiceMonitorKind>>>,
    pub pod_monitors: Vec<Arc<Raw<PodMonitorKind>>>,
    pub scrape_configs: Vec<Arc<Raw<ScrapeConfigKind>>>,
    pub rules: Vec<Arc<Raw<PrometheusRuleKind>>>,
    /// Kinds selected that the API server does not serve.
    pub not_served: Vec<&'static str>,
}

/// A monitor: its kind, namespace and name.
pub type MonitorKey = (&'static str, String, String);

/// The jobs each monitor last translated to.
pub type LastGood = BTreeMap<MonitorKey, Vec<Job>>;

/// A kind that becomes scrape jobs.
trait Monitor: Kind {
    type Spec: DeserializeOwned;
    fn references(object: &Object<Self::Spec>) -> Vec<KeyRef>;
    fn jobs(
        object: &Object<Self::Spec>,
        settings: &Settings,
        values: &dyn Resolver,
    ) -> Result<Vec<Job>, String>;
}

impl Monitor for ServiceMonitorKind {
    type Spec = ServiceMonitorSpec;
    fn references(object: &Object<Self::Spec>) -> Vec<KeyRef> {
        upstream::references_of_service_monitor(object)
    }
    fn jobs(o: &Object<Self::Spec>, s: &Settings, v: &dyn Resolver) -> Result<Vec<Job>, String> {
        upstream::service_monitor(o, s, v)
    }
}

impl Monitor for PodMonitorKind {
    type Spec = PodMonitorSpec;
    fn references(object: &Object<Self::Spec>) -> Vec<KeyRef> {
        upstream::references_of_pod_monitor(object)
    }
    fn jobs(o: &Object<Self::Spec>, s: &Settings, v: &dyn Resolver) -> Result<Vec<Job>, String> {
        upstream::pod_monitor(o, s, v)
    }
}

impl Monitor for ScrapeConfigKind {
    type Spec = ScrapeConfigSpec;
    fn references(object: &Object<Self::Spec>) -> Vec<KeyRef> {
        upstream::references_of_scrape_config(object)
    }
    fn jobs(o: &Object<Self::Spec>, s: &Settings, v: &dyn Resolver) -> Result<Vec<Job>, String> {
        upstream::scrape_config(o, s, v)
    }
}

/// `raw` with its spec parsed; the error names the kind's spec.
fn parse<K: Kind, S: DeserializeOwned>(raw: &Raw<K>) -> Result<Object<S>, Rejection> {
    let meta = &raw.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    match serde_json::from_value(raw.spec.clone()) {
        Ok(spec) => Ok(Object {
            namespace,
            name,
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            spec,
        }),
        Err(error) => Err(Rejection {
            kind: K::KIND,
            namespace,
            name,
            reason: format!("spec: {}", zone_monitoring::redact::serde_error(&error)),
        }),
    }
}

/// A parsed object, or why its spec does not parse.
type ParsedObject<S> = Result<Object<S>, Rejection>;

/// The selected objects with their specs parsed, once per reconcile: what they reference is
/// read from them, then they are translated.
pub struct Parsed {
    service_monitors: Vec<ParsedObject<ServiceMonitorSpec>>,
    pod_monitors: Vec<ParsedObject<PodMonitorSpec>>,
    scrape_configs: Vec<ParsedObject<ScrapeConfigSpec>>,
    rules: Vec<ParsedObject<PrometheusRuleSpec>>,
    not_served: Vec<&'static str>,
}

impl Parsed {
    pub fn of(selected: &Selected) -> Parsed {
        fn all<K: Kind, S: DeserializeOwned>(objects: &[Arc<Raw<K>>]) -> Vec<ParsedObject<S>> {
            objects.iter().map(|raw| parse::<K, S>(raw)).collect()
        }
        Parsed {
            service_monitors: all(&selected.service_monitors),
            pod_monitors: all(&selected.pod_monitors),
            scrape_configs: all(&selected.scrape_configs),
            rules: all(&selected.rules),
            not_served: selected.not_served.clone(),
        }
    }

    /// Every Secret and ConfigMap key the monitors reference (to read before [`translate`]).
    pub fn references(&self) -> BTreeSet<KeyRef> {
        fn of<K: Monitor>(objects: &[ParsedObject<K::Spec>], into: &mut BTreeSet<KeyRef>) {
            for object in objects.iter().flatten() {
                into.extend(K::references(object));
            }
        }
        let mut references = BTreeSet::new();
        of::<ServiceMonitorKind>(&self.service_monitors, &mut references);
        of::<PodMonitorKind>(&self.pod_monitors, &mut references);
        of::<ScrapeConfigKind>(&self.scrape_configs, &mut references);
        references
    }

    /// The Secret and ConfigMap keys outside `own_namespace` that each monitor references.
    pub fn references_outside(&self, own_namespace: &str) -> Vec<(MonitorKey, KeyRef)> {
        fn of<K: Monitor>(
            objects: &[ParsedObject<K::Spec>],
            own_namespace: &str,
            into: &mut Vec<(MonitorKey, KeyRef)>,
        ) {
            for object in objects.iter().flatten() {
                let key = (K::KIND, object.namespace.clone(), object.name.clone());
                let outside = K::references(object)
                    .into_iter()
                    .filter(|reference| reference.namespace != own_namespace);
                into.extend(outside.map(|reference| (key.clone(), reference)));
            }
        }
        let mut references = Vec::new();
        of::<ServiceMonitorKind>(&self.service_monitors, own_namespace, &mut references);
        of::<PodMonitorKind>(&self.pod_monitors, own_namespace, &mut references);
        of::<ScrapeConfigKind>(&self.scrape_configs, own_namespace, &mut references);
        references
    }

    /// Leaves out the monitors of `keys`: they are neither read from nor translated, and keep
    /// no last good jobs.
    pub fn remove(&mut self, keys: &BTreeSet<MonitorKey>) {
        fn from<K: Kind, S>(objects: &mut Vec<ParsedObject<S>>, keys: &BTreeSet<MonitorKey>) {
            objects.retain(|parsed| {
                let (namespace, name) = match parsed {
                    Ok(object) => (&object.namespace, &object.name),
                    Err(rejection) => (&rejection.namespace, &rejection.name),
                };
                !keys.contains(&(K::KIND, namespace.clone(), name.clone()))
            });
        }
        from::<ServiceMonitorKind, _>(&mut self.service_monitors, keys);
        from::<PodMonitorKind, _>(&mut self.pod_monitors, keys);
        from::<ScrapeConfigKind, _>(&mut self.scrape_configs, keys);
    }
}

/// The ConfigMaps of `spec.ruleFiles` (one reference each, whatever keys are listed), read so
/// their rule files are checked before Prometheus loads them.
pub fn rule_file_references(valid: &ValidSprom, namespace: &str) -> BTreeSet<KeyRef> {
    valid
        .rule_files
        .iter()
        .map(|rule| KeyRef {
            source: zone_monitoring::resolve::Source::ConfigMap,
            namespace: namespace.to_string(),
            name: rule.config_map.clone(),
            key: rule.key.clone().unwrap_or_default(),
        })
        .collect()
}

/// What Prometheus would refuse in the rule files of `spec.ruleFiles`, one line per file:
/// `ConfigMap <name> key <key>: <problem>`. A missing ConfigMap or key is a problem too (the
/// pods cannot mount it). Keys starting with a dot are not rule files (the mount's glob skips
/// them).
pub fn rule_file_problems(valid: &ValidSprom, namespace: &str, values: &Values) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in &valid.rule_files {
        let name = &rule.config_map;
        let Some(data) = values.data(zone_monitoring::resolve::Source::ConfigMap, namespace, name)
        else {
            problems.push(format!("ConfigMap {name}: not found"));
            continue;
        };
        let keys: Vec<&String> = match &rule.key {
            Some(key) if !data.contains_key(key) => {
                problems.push(format!("ConfigMap {name} key {key}: not found"));
                continue;
            }
            Some(key) => vec![key],
            None => data.keys().filter(|key| !key.starts_with('.')).collect(),
        };
        for key in keys {
            let Some(bytes) = data.get(key) else {
                continue;
            };
            let checked = std::str::from_utf8(bytes)
                .map_err(|_| "not UTF-8 text".to_string())
                .and_then(zone_monitoring::rules::check_rule_file);
            if let Err(problem) = checked {
                problems.push(format!("ConfigMap {name} key {key}: {problem}"));
            }
        }
    }
    problems
}

/// Every Secret and ConfigMap key the spec's remoteWrite entries reference, in the
/// ShardedPrometheus's `namespace`.
pub fn remote_write_references(valid: &ValidSprom, namespace: &str) -> BTreeSet<KeyRef> {
    valid
        .remote_write
        .iter()
        .flat_map(|entry| upstream::references_of_remote_write(namespace, entry))
        .collect()
}

/// The spec's remoteWrite entries with their credential references resolved in `namespace`;
/// the error names the entry and the field (the shards keep their configuration).
pub fn remote_write(
    valid: &ValidSprom,
    namespace: &str,
    values: &Values,
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, String> {
    valid
        .remote_write
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let field = format!("spec.remoteWrite[{index}]");
            upstream::remote_write(&field, namespace, entry, values)
        })
        .collect()
}

/// Every Secret and ConfigMap key the spec's Alertmanager entries reference, in the
/// ShardedPrometheus's `namespace`.
pub fn alerting_references(valid: &ValidSprom, namespace: &str) -> BTreeSet<KeyRef> {
    match &valid.alerting {
        Some(spec) => upstream::references_of_alerting(namespace, spec)
            .into_iter()
            .collect(),
        None => BTreeSet::new(),
    }
}

/// The shards' `alerting` section: the spec's Alertmanagers with their credential references
/// resolved in `namespace`, the replica label dropped from alerts; None without
/// `spec.alerting`. The error names the entry and the field (the shards keep their
/// configuration).
pub fn alerting(
    valid: &ValidSprom,
    namespace: &str,
    values: &Values,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    let Some(spec) = &valid.alerting else {
        return Ok(None);
    };
    let settings = upstream::AlertingSettings {
        namespace,
        service_discovery_role: valid.monitoring.jobs.service_discovery_role,
        replica_label: contract::REPLICA_EXTERNAL_LABEL,
    };
    upstream::alerting(spec, &settings, values).map(Some)
}

/// What `selected` adds to the shards of `valid`, given the referenced `values` and the jobs
/// each monitor had last time; and the jobs each monitor has now (kept for next time). The
/// remoteWrite entries are left as the spec has them (see [`remote_write`]), and there is no
/// alerting section (see [`alerting`]).
pub fn translate(
    valid: &ValidSprom,
    selected: &Parsed,
    values: &Values,
    last_good: &LastGood,
) -> (Monitoring, LastGood) {
    let settings = &valid.monitoring.jobs;
    let mut monitoring = Monitoring::of_spec(valid);
    monitoring.not_served = selected.not_served.clone();
    let mut good = LastGood::new();
    let mut run = Translation {
        user_jobs: valid
            .scrape_configs
            .iter()
            .filter_map(|config| config.get("job_name")?.as_str().map(str::to_string))
            .collect(),
        settings,
        values,
        last_good,
        monitoring: &mut monitoring,
        good: &mut good,
    };
    run.monitors::<ServiceMonitorKind>(&selected.service_monitors);
    run.monitors::<PodMonitorKind>(&selected.pod_monitors);
    run.monitors::<ScrapeConfigKind>(&selected.scrape_configs);
    rule_files(valid, &selected.rules, &mut monitoring);
    (monitoring, good)
}

/// The shards' rule files and, with `spec.thanos`, the Thanos Ruler's: the PrometheusRules
/// labelled [`contract::RULE_SCOPE_LABEL`]` = `[`contract::GLOBAL_SCOPE`] go to the Ruler and
/// to no shard. Without `spec.thanos` nothing queries every shard, so they stay on the shards
/// (evaluated on each shard's share, as before) rather than vanish.
fn rule_files(
    valid: &ValidSprom,
    parsed: &[ParsedObject<PrometheusRuleSpec>],
    monitoring: &mut Monitoring,
) {
    use zone_monitoring::rules::Evaluator;
    let split = valid.thanos.is_some();
    let (mut shards, mut global) = (Vec::new(), Vec::new());
    for parsed in parsed {
        match parsed {
            Ok(object) if split && is_global(object) => global.push(object.clone()),
            Ok(object) => shards.push(object.clone()),
            Err(rejection) => monitoring.rejected.push(rejection.clone()),
        }
    }
    let (files, rejected) = zone_monitoring::rules::rule_files(&shards, Evaluator::Prometheus);
    monitoring.rule_files = files;
    monitoring.rejected.extend(rejected);
    if split {
        let (files, rejected) = zone_monitoring::rules::rule_files(&global, Evaluator::ThanosRuler);
        monitoring.global_rule_files = Some(files);
        monitoring.rejected.extend(rejected);
    }
}

/// Whether a PrometheusRule is marked global.
fn is_global<S>(object: &Object<S>) -> bool {
    object
        .labels
        .get(contract::RULE_SCOPE_LABEL)
        .map(String::as_str)
        == Some(contract::GLOBAL_SCOPE)
}

struct Translation<'a> {
    /// The job names of the spec's own scrape configs: a monitor's job of the same name would
    /// make Prometheus refuse the whole configuration.
    user_jobs: BTreeSet<String>,
    settings: &'a Settings,
    values: &'a Values,
    last_good: &'a LastGood,
    monitoring: &'a mut Monitoring,
    good: &'a mut LastGood,
}

impl Translation<'_> {
    fn monitors<K: Monitor>(&mut self, objects: &[ParsedObject<K::Spec>]) {
        for parsed in objects {
            let (namespace, name) = match parsed {
                Ok(object) => (object.namespace.clone(), object.name.clone()),
                Err(rejection) => (rejection.namespace.clone(), rejection.name.clone()),
            };
            let key = (K::KIND, namespace.clone(), name.clone());
            let jobs = parsed
                .as_ref()
                .map_err(Rejection::clone)
                .and_then(|object| {
                    let reject = |reason| Rejection {
                        kind: K::KIND,
                        namespace: namespace.clone(),
                        name: name.clone(),
                        reason,
                    };
                    let jobs = K::jobs(object, self.settings, self.values).map_err(reject)?;
                    match jobs.iter().find_map(|job| {
                        let job = job.get("job_name")?.as_str()?;
                        self.user_jobs.contains(job).then_some(job)
                    }) {
                        Some(clash) => Err(reject(format!(
                            "job {clash:?} is also one of spec.scrapeConfigs: rename that one"
                        ))),
                        None => Ok(jobs),
                    }
                });
            match jobs {
                Ok(jobs) => self.keep(key, jobs),
                Err(mut rejection) => {
                    if let Some(jobs) = self.last_good.get(&key) {
                        rejection
                            .reason
                            .push_str(" (its last good jobs stay in the configuration)");
                        self.keep(key, jobs.clone());
                    }
                    self.monitoring.rejected.push(rejection);
                }
            }
        }
    }

    fn keep(&mut self, key: MonitorKey, jobs: Vec<Job>) {
        self.monitoring.monitors += 1;
        self.monitoring.jobs.extend(jobs.iter().cloned());
        self.good.insert(key, jobs);
    }
}

/// What a reconcile read for its monitoring half ([`super::observe::observe`]): the input of
/// [`run`].
pub struct MonitoringRead {
    pub sprom: ObjectRef<ShardedPrometheus>,
    pub own_namespace: String,
    /// The objects selected that the shards' ServiceAccount may read.
    pub selected: Selected,
    pub parsed: Parsed,
    /// The objects and references refused because that ServiceAccount may not read them.
    pub refused: Vec<Rejection>,
    /// Every Secret and ConfigMap key referenced, by the monitors and by the spec.
    pub references: BTreeSet<KeyRef>,
    pub values: Values,
    /// The jobs each monitor last translated to.
    pub previous: LastGood,
}

/// What one translation leaves for the next reconciles, committed by the reconcile once the
/// translation ran (a refused spec included: a change of what it referenced must reconcile it
/// again).
#[derive(Debug)]
pub struct Memories {
    pub sprom: ObjectRef<ShardedPrometheus>,
    /// The monitoring objects it selected.
    pub selected: BTreeSet<MonitorKey>,
    /// The Secrets and ConfigMaps they and the spec referenced.
    pub referenced: BTreeSet<(Source, String, String)>,
    /// The jobs each monitor translated to, or kept.
    pub good: LastGood,
}

/// The translation of what was `read` for `valid` (pure): the monitoring part of every shard,
/// or the refusal of a remoteWrite or alerting entry that cannot be resolved; and the memories
/// either way.
pub fn run(valid: &ValidSprom, read: MonitoringRead) -> (Result<Monitoring, Invalid>, Memories) {
    let namespace = &read.own_namespace;
    let (mut monitoring, good) = translate(valid, &read.parsed, &read.values, &read.previous);
    let remote_write = remote_write(valid, namespace, &read.values);
    let alerting = alerting(valid, namespace, &read.values);
    monitoring.rule_file_problems = rule_file_problems(valid, namespace, &read.values);
    monitoring.access_denied = !read.refused.is_empty();
    monitoring.rejected.splice(0..0, read.refused);
    let mut selected = BTreeSet::new();
    selected.extend(keys(&read.selected.service_monitors));
    selected.extend(keys(&read.selected.pod_monitors));
    selected.extend(keys(&read.selected.scrape_configs));
    selected.extend(keys(&read.selected.rules));
    monitoring.consented = selected.iter().any(|(_, ns, _)| ns != namespace)
        || read.references.iter().any(|r| &r.namespace != namespace);
    let memories = Memories {
        sprom: read.sprom,
        selected,
        referenced: read
            .references
            .into_iter()
            .map(|r| (r.source, r.namespace, r.name))
            .collect(),
        good,
    };
    let monitoring = match (remote_write, alerting) {
        (Err(message), _) => Err(Invalid::new(reason::INVALID_REMOTE_WRITE, message)),
        (Ok(_), Err(message)) => Err(Invalid::new(reason::INVALID_ALERTING, message)),
        (Ok(remote_write), Ok(alerting)) => {
            monitoring.remote_write = remote_write;
            monitoring.alerting = alerting;
            Ok(monitoring)
        }
    };
    (monitoring, memories)
}

fn keys<K: Kind>(objects: &[Arc<Raw<K>>]) -> impl Iterator<Item = MonitorKey> + '_ {
    objects.iter().map(|object| {
        (
            K::KIND,
            object.namespace().unwrap_or_default(),
            object.name_any(),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use serde_json::json;
    use zone_api::ShardedPrometheus;
    use zone_monitoring::resolve::Source;

    use super::*;

    fn valid() -> ValidSprom {
        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "p", "namespace": "mon"},
            "spec": {"shardingStrategy": {"mode": "Classic"}, "serviceMonitorSelector": {},
                     "ruleSelector": {}},
        }))
        .unwrap();
        sprom.spec.validate("zone").unwrap()
    }

    fn raw<K: Kind>(name: &str, spec: serde_json::Value) -> Arc<Raw<K>> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    fn with_basic_auth(name: &str) -> Arc<Raw<ServiceMonitorKind>> {
        raw(
            name,
            json!({
                "selector": {"matchLabels": {"app": "api"}},
                "endpoints": [{"port": "web", "basicAuth": {
                    "username": {"name": "creds", "key": "user"},
                    "password": {"name": "creds", "key": "pass"},
                }}],
            }),
        )
    }

    fn creds() -> Values {
        let mut values = Values::default();
        let data = BTreeMap::from([
            ("user".to_string(), b"scraper".to_vec()),
            ("pass".to_string(), b"hunter2".to_vec()),
        ]);
        values.insert(Source::Secret, "team", "creds", Some(data));
        values
    }

    #[test]
    fn a_monitor_becomes_jobs_with_its_credentials_inlined() {
        let selected = Selected {
            service_monitors: vec![with_basic_auth("api")],
            ..Selected::default()
        };
        let references = Parsed::of(&selected).references();
        assert_eq!(
            references
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "Secret team/creds key \"pass\"",
                "Secret team/creds key \"user\""
            ]
        );
        let (monitoring, good) =
            translate(&valid(), &Parsed::of(&selected), &creds(), &LastGood::new());
        assert_eq!((monitoring.monitors, monitoring.rejected.len()), (1, 0));
        let job = &monitoring.jobs[0];
        assert_eq!(job["job_name"], "serviceMonitor/team/api/0");
        assert_eq!(job["basic_auth"]["password"], "hunter2");
        assert_eq!(good.len(), 1);
    }

    #[test]
    fn a_monitor_that_fails_keeps_its_last_good_jobs_and_is_reported() {
        let selected = Selected {
            service_monitors: vec![with_basic_auth("api"), with_basic_auth("new")],
            ..Selected::default()
        };
        let (_, good) = translate(
            &valid(),
            &Parsed::of(&Selected {
                service_monitors: vec![with_basic_auth("api")],
                ..Selected::default()
            }),
            &creds(),
            &LastGood::new(),
        );
        // The Secret is deleted: "api" keeps what it had, "new" never had anything.
        let (monitoring, still_good) =
            translate(&valid(), &Parsed::of(&selected), &Values::default(), &good);
        assert_eq!(monitoring.monitors, 1);
        assert_eq!(monitoring.jobs.len(), 1);
        assert_eq!(monitoring.jobs[0]["basic_auth"]["password"], "hunter2");
        let reasons: Vec<&str> = monitoring
            .rejected
            .iter()
            .map(|r| r.reason.as_str())
            .collect();
        assert_eq!(reasons.len(), 2);
        assert!(reasons[0].contains("not found") && reasons[0].contains("last good jobs stay"));
        assert!(!reasons[1].contains("last good"), "{}", reasons[1]);
        assert!(reasons.iter().all(|r| !r.contains("hunter2")));
        assert_eq!(still_good.len(), 1);
    }

    #[test]
    fn a_monitor_whose_job_the_spec_already_has_is_rejected() {
        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "p", "namespace": "mon"},
            "spec": {"shardingStrategy": {"mode": "Classic"}, "serviceMonitorSelector": {},
                     "scrapeConfigs": [{"job_name": "serviceMonitor/team/api/0"}]},
        }))
        .unwrap();
        let valid = sprom.spec.validate("zone").unwrap();
        let selected = Selected {
            service_monitors: vec![with_basic_auth("api")],
            ..Selected::default()
        };
        let (monitoring, _) = translate(&valid, &Parsed::of(&selected), &creds(), &LastGood::new());
        assert!(monitoring.jobs.is_empty());
        assert_eq!(monitoring.rejected.len(), 1);
        assert!(
            monitoring.rejected[0]
                .reason
                .contains("\"serviceMonitor/team/api/0\" is also one of spec.scrapeConfigs"),
            "{:?}",
            monitoring.rejected
        );
    }

    #[test]
    fn malformed_specs_and_invalid_rules_are_rejected_the_others_kept() {
        let selected = Selected {
            service_monitors: vec![raw("broken", json!({"endpoints": "not a list"}))],
            rules: vec![
                raw(
                    "good",
                    json!({"groups": [{"name": "g", "rules": [{"alert": "Up", "expr": "up == 0"}]}]}),
                ),
                raw(
                    "bad",
                    json!({"groups": [{"name": "g", "rules": [{"alert": "Up", "expr": "up =="}]}]}),
                ),
            ],
            not_served: vec![ScrapeConfigKind::RESOURCE],
            ..Selected::default()
        };
        let (monitoring, _) = translate(
            &valid(),
            &Parsed::of(&selected),
            &Values::default(),
            &LastGood::new(),
        );
        let rejected: Vec<(&str, &str)> = monitoring
            .rejected
            .iter()
            .map(|r| (r.kind, r.name.as_str()))
            .collect();
        assert_eq!(
            rejected,
            [("ServiceMonitor", "broken"), ("PrometheusRule", "bad")]
        );
        assert!(monitoring.rejected[0].reason.starts_with("spec: "));
        assert_eq!(monitoring.rule_files.len(), 1);
        assert_eq!(monitoring.rule_groups(), 1);
        assert_eq!(monitoring.not_served, [ScrapeConfigKind::RESOURCE]);
        assert!(monitoring.jobs.is_empty());
    }

    /// A global PrometheusRule goes to the Thanos Ruler's files (with its
    /// partial_response_strategy) and to no shard's; without `spec.thanos` it stays on the
    /// shards, since nothing else would evaluate it. A global rule the Ruler would refuse is
    /// rejected like any other.
    #[test]
    fn global_rules_go_to_the_ruler_only_with_thanos() {
        let rule = |name: &str, global: bool, strategy: &str| -> Arc<Raw<PrometheusRuleKind>> {
            let labels = if global {
                json!({contract::RULE_SCOPE_LABEL: contract::GLOBAL_SCOPE})
            } else {
                json!({contract::RULE_SCOPE_LABEL: "shard"})
            };
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "team", "uid": "u", "labels": labels},
                    "spec": {"groups": [{"name": name, "partial_response_strategy": strategy,
                        "rules": [{"alert": "XGone", "expr": "absent(up{job=\"x\"})"}]}]},
                }))
                .unwrap(),
            )
        };
        let selected = Parsed::of(&Selected {
            rules: vec![
                rule("local", false, "warn"),
                rule("global", true, "warn"),
                rule("bad-global", true, "sometimes"),
            ],
            ..Selected::default()
        });
        let names = |files: &[zone_monitoring::rules::RuleFile]| -> Vec<String> {
            files.iter().map(|file| file.name.clone()).collect()
        };

        let (plain, _) = translate(&valid(), &selected, &Values::default(), &LastGood::new());
        assert_eq!(plain.global_rule_files, None);
        assert_eq!(
            names(&plain.rule_files),
            [
                "team-bad-global-u.yaml",
                "team-global-u.yaml",
                "team-local-u.yaml"
            ]
        );
        assert_eq!((plain.rule_groups(), plain.global_rule_groups()), (3, 0));

        let sprom: ShardedPrometheus = serde_json::from_value(json!({
            "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
            "metadata": {"name": "p", "namespace": "mon"},
            "spec": {"shardingStrategy": {"mode": "Classic"}, "ruleSelector": {}, "thanos": {}},
        }))
        .unwrap();
        let thanos = sprom.spec.validate("zone").unwrap();
        let (split, _) = translate(&thanos, &selected, &Values::default(), &LastGood::new());
        assert_eq!(names(&split.rule_files), ["team-local-u.yaml"]);
        assert!(!split.rule_files[0].content.contains("partial_response"));
        let global = split
            .global_rule_files
            .as_deref()
            .expect("the Ruler's files");
        assert_eq!(names(global), ["team-global-u.yaml"]);
        assert!(
            global[0]
                .content
                .contains("partial_response_strategy: warn")
        );
        assert_eq!((split.rule_groups(), split.global_rule_groups()), (1, 1));
        let rejected: Vec<&str> = split.rejected.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(rejected, ["bad-global"]);
    }

    /// `fixtures/alerting.yaml`: the ShardedPrometheus, valid, and the Secrets and ConfigMaps
    /// that follow it, as the controller reads them.
    fn alerting_fixture() -> (ValidSprom, String, Values) {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        use serde::Deserialize;
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/alerting.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut documents = serde_norway::Deserializer::from_str(&text)
            .map(|document| serde_json::Value::deserialize(document).unwrap());
        let sprom: ShardedPrometheus = serde_json::from_value(documents.next().unwrap()).unwrap();
        let namespace = sprom.metadata.namespace.clone().unwrap();
        let mut values = Values::default();
        for document in documents {
            match document["kind"].as_str() {
                Some("Secret") => {
                    let secret: Secret = serde_json::from_value(document).unwrap();
                    let data = secret.string_data.unwrap_or_default().into_iter();
                    let data = data.map(|(key, value)| (key, value.into_bytes())).collect();
                    let name = secret.metadata.name.unwrap();
                    values.insert(Source::Secret, &namespace, &name, Some(data));
                }
                Some("ConfigMap") => {
                    let config_map: ConfigMap = serde_json::from_value(document).unwrap();
                    let data = config_map.data.unwrap_or_default().into_iter();
                    let data = data.map(|(key, value)| (key, value.into_bytes())).collect();
                    let name = config_map.metadata.name.unwrap();
                    values.insert(Source::ConfigMap, &namespace, &name, Some(data));
                }
                other => panic!("unexpected kind {other:?}"),
            }
        }
        let valid =
            crate::reconcile::validate::validate(&sprom, "topology.kubernetes.io/zone").unwrap();
        (valid, namespace, values)
    }

    /// The `prometheus.yml` of a config Secret.
    fn prometheus_yml(secret: &k8s_openapi::api::core::v1::Secret) -> String {
        let data = secret.data.as_ref().unwrap();
        String::from_utf8(data[crate::children::config::CONFIG_KEY].0.clone()).unwrap()
    }

    /// The rendered configuration of every active shard of `fixtures/alerting.yaml`, and of its
    /// shard 2 once retained, compared with `fixtures/alerting.golden.yaml`
    /// (`UPDATE_GOLDEN=1` rewrites it; review the diff).
    #[test]
    fn alerting_renders_into_every_active_shard_as_reviewed() {
        let (valid, namespace, values) = alerting_fixture();
        let mut monitoring = Monitoring::of_spec(&valid);
        monitoring.alerting = alerting(&valid, &namespace, &values).unwrap();
        let input = crate::children::build::BuildInput {
            name: "alerting",
            namespace: &namespace,
            valid: &valid,
            monitoring: &monitoring,
        };
        let built = crate::children::build::build(&input).unwrap();
        let mut documents: Vec<String> = built
            .shards
            .iter()
            .map(|shard| {
                format!(
                    "# shard {} {}\n{}",
                    shard.index,
                    crate::children::config::CONFIG_KEY,
                    prometheus_yml(&shard.config)
                )
            })
            .collect();
        let retained = crate::children::build::retained_config(&input, 2, Some("zone-a")).unwrap();
        documents.push(format!(
            "# retained shard 2 {}\n{}",
            crate::children::config::CONFIG_KEY,
            prometheus_yml(&retained)
        ));
        let actual = documents.join("---\n");
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/alerting.golden.yaml");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(golden, &actual).unwrap();
        }
        let expected = std::fs::read_to_string(golden).unwrap_or_default();
        assert!(
            actual == expected,
            "{golden} differs (run with UPDATE_GOLDEN=1 and review the diff):\n{actual}"
        );

        for shard in &built.shards {
            let config: serde_json::Value =
                serde_norway::from_str(&prometheus_yml(&shard.config)).unwrap();
            assert_eq!(
                config["alerting"],
                serde_json::Value::Object(monitoring.alerting.clone().unwrap()),
                "every active shard sends the same alerts"
            );
        }
        let retained: serde_json::Value =
            serde_norway::from_str(&prometheus_yml(&retained)).unwrap();
        assert!(retained.get("alerting").is_none(), "{retained}");
    }

    #[test]
    fn alerting_references_are_read_and_resolved_in_the_sharded_prometheus_namespace() {
        let (valid, namespace, values) = alerting_fixture();
        let references: Vec<String> = alerting_references(&valid, &namespace)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            references,
            [
                "Secret observability/alertmanager-auth key \"password\"",
                "Secret observability/alertmanager-auth key \"username\"",
                "ConfigMap observability/alertmanager-ca key \"ca.crt\"",
            ]
        );
        let section = alerting(&valid, &namespace, &values).unwrap().unwrap();
        let service = &section["alertmanagers"][0];
        assert_eq!(service["basic_auth"]["password"], "example-password");
        assert_eq!(
            service["kubernetes_sd_configs"],
            json!([{"role": "endpointslice", "namespaces": {"names": ["monitoring"]}}])
        );
        assert_eq!(
            section["alert_relabel_configs"][0],
            json!({"action": "labeldrop", "regex": "prometheus_replica"})
        );
    }

    #[test]
    fn an_unresolvable_alerting_reference_is_an_error_naming_the_field_and_no_spec_no_section() {
        let (fixture, namespace, _) = alerting_fixture();
        let error = alerting(&fixture, &namespace, &Values::default()).unwrap_err();
        assert_eq!(
            error,
            "spec.alerting.alertmanagers[0].basicAuth.username: Secret \
             observability/alertmanager-auth key \"username\": not found"
        );
        assert_eq!(alerting(&valid(), "mon", &Values::default()), Ok(None));
        assert!(alerting_references(&valid(), "mon").is_empty());
    }

    #[test]
    fn rule_files_of_config_maps_are_checked_file_by_file() {
        let mut valid = valid();
        valid.rule_files = serde_json::from_value(json!([
            {"configMap": "alerts"},
            {"configMap": "recording", "key": "rules.yaml"},
            {"configMap": "recording", "key": "gone.yaml"},
            {"configMap": "missing"},
        ]))
        .unwrap();
        let refs = rule_file_references(&valid, "mon");
        assert_eq!(
            refs.iter()
                .map(|r| r.name.as_str())
                .collect::<BTreeSet<_>>(),
            BTreeSet::from(["alerts", "missing", "recording"])
        );
        let good = b"groups:\n- name: g\n  rules:\n  - record: a:b\n    expr: sum(up)\n".to_vec();
        let bad = b"groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(up\n".to_vec();
        let mut values = Values::default();
        values.insert(
            Source::ConfigMap,
            "mon",
            "alerts",
            Some(BTreeMap::from([
                ("good.yaml".to_string(), good.clone()),
                ("bad.yaml".to_string(), bad),
                ("..data".to_string(), b"not rules".to_vec()),
            ])),
        );
        values.insert(
            Source::ConfigMap,
            "mon",
            "recording",
            Some(BTreeMap::from([("rules.yaml".to_string(), good)])),
        );
        values.insert(Source::ConfigMap, "mon", "missing", None);
        let problems = rule_file_problems(&valid, "mon", &values);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with("ConfigMap alerts key bad.yaml: group \"g\", rule 1"),
            "{problems:?}"
        );
        assert_eq!(problems[1], "ConfigMap recording key gone.yaml: not found");
        assert_eq!(problems[2], "ConfigMap missing: not found");
    }
}
