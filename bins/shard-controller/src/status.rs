//! The status step (pure): what the shards' StatefulSets show, the conditions that follow, and
//! the events a change deserves. Status observes; it never copies the spec.

use std::collections::{BTreeMap, BTreeSet};

use zone_api::conditions::Conditions;
use zone_api::sprom::{
    RetainedShard, ShardStatus, ShardedPrometheusStatus, UnreadyZone, condition, reason,
};
use zone_operator::PendingEvents;
use zone_topology::sharding::{ShardLayout, ZonelessTargets};

use zone_api::sprom::contract;

use k8s_openapi::api::core::v1::ObjectReference;
use zone_monitoring::Rejection;

use crate::health::verdict::{self, ShardConfig};
use crate::monitoring::Monitoring;
use crate::reconcile::plan::failover;

/// What one shard's StatefulSet shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedShard {
    pub ready_replicas: i32,
    /// Why the API server refuses its pods, when it does (the StatefulSet's latest
    /// `FailedCreate` event).
    pub pods_refused: Option<String>,
}

/// Everything the status is computed from.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub name: &'a str,
    pub generation: i64,
    pub layout: &'a ShardLayout,
    pub replicas: u32,
    /// Shard index → its StatefulSet, for the active shards whose StatefulSet exists.
    pub shards: BTreeMap<u32, ObservedShard>,
    /// Zones with at least one node (`None`: the node cache is not there to ask).
    pub zones_with_nodes: Option<BTreeSet<String>>,
    /// Scrape jobs where the user turned node metadata off.
    pub node_metadata_disabled: &'a [String],
    /// What the Prometheus ServiceAccount may not do (empty: it may do all it needs).
    pub forbidden: &'a [String],
    /// The retained shards, by index (see [`crate::children::retention`]).
    pub retained: Vec<RetainedShard>,
    /// What the selected monitoring objects add to every active shard, and what was left out.
    pub monitoring: &'a Monitoring,
    /// The verdicts on the active shards' Prometheus pods (`None`: not asked yet since the
    /// controller started; `ConfigLoaded` stays as it was).
    pub config: Option<Vec<ShardConfig>>,
    /// With the final upload of removed shards: those still uploading (`None`: no final
    /// upload; the condition is left out).
    pub uploads: Option<Vec<UploadingShard>>,
    /// The zones whose shards are all unready, and whether they failed over.
    pub unready_zones: Vec<UnreadyZone>,
}

/// A removed shard kept until its final upload is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadingShard {
    pub index: u32,
    /// What each pod not done waits on.
    pub waiting_on: Vec<String>,
    /// An attempt failed.
    pub failing: bool,
}

/// How many rule file problems Degraded names; the rest are counted.
pub const RULE_FILE_PROBLEMS_LISTED: usize = 5;

/// How many rejected objects the condition names; the rest are counted.
pub const REJECTED_LISTED: usize = 10;

/// The status `observation` gives, starting from `previous` (whose condition times carry over),
/// and the events its changes deserve.
pub fn compute(
    previous: &ShardedPrometheusStatus,
    observation: &Observation<'_>,
) -> (ShardedPrometheusStatus, PendingEvents) {
    let mut events = PendingEvents::default();
    let mut status = ShardedPrometheusStatus {
        observed_generation: observation.generation,
        conditions: previous.conditions.clone(),
        retained_shards: observation.retained.clone(),
        ..ShardedPrometheusStatus::default()
    };
    shard_counts(observation, &mut status);
    status.unready_zones = observation.unready_zones.clone();
    status.set_condition(
        condition::INVALID,
        false,
        reason::VALID,
        "the spec is valid",
    );
    available_condition(observation, &mut status);
    monitoring_condition(previous, observation.monitoring, &mut status, &mut events);
    if let Some(shards) = &observation.config {
        config_condition(
            previous,
            shards,
            observation.layout,
            &mut status,
            &mut events,
        );
    }
    degraded_condition(previous, observation, &mut status, &mut events);
    upload_condition(observation.uploads.as_deref(), &mut status);
    (status, events)
}

/// RemovedShardsUploaded, from the shards still uploading; removed without the final upload.
fn upload_condition(uploads: Option<&[UploadingShard]>, status: &mut ShardedPrometheusStatus) {
    let Some(uploads) = uploads else {
        status
            .conditions
            .retain(|c| c.type_ != condition::REMOVED_SHARDS_UPLOADED);
        return;
    };
    if uploads.is_empty() {
        status.set_condition(
            condition::REMOVED_SHARDS_UPLOADED,
            true,
            reason::NONE_PENDING,
            "no removed shard waits for its final upload",
        );
        return;
    }
    let failing = uploads.iter().any(|shard| shard.failing);
    let message = uploads
        .iter()
        .map(|shard| {
            format!(
                "shard {} is kept until its final upload is done: {}",
                shard.index,
                shard.waiting_on.join("; ")
            )
        })
        .collect::<Vec<_>>()
        .join(". ");
    let why = if failing {
        reason::UPLOAD_FAILED
    } else {
        reason::UPLOAD_IN_PROGRESS
    };
    status.set_condition(condition::REMOVED_SHARDS_UPLOADED, false, why, message);
}

/// Each shard's status, the counts of shards and ready shards, and the scale selector.
fn shard_counts(observation: &Observation<'_>, status: &mut ShardedPrometheusStatus) {
    let layout = observation.layout;
    for (index, observed) in &observation.shards {
        status.shard_statuses.push(ShardStatus {
            index: to_i32(*index),
            zone: layout.zone(*index).unwrap_or_default().to_string(),
            in_zone: to_i32(layout.in_zone(*index)),
            ready_replicas: observed.ready_replicas,
            stateful_set: contract::shard_name(observation.name, *index),
            monitors: to_i32(observation.monitoring.monitors),
            rule_groups: to_i32(observation.monitoring.rule_groups()),
            rejected_objects: to_i32(
                u32::try_from(observation.monitoring.rejected.len()).unwrap_or(u32::MAX),
            ),
        });
    }
    status.shards = to_i32(observation.shards.len() as u32);
    status.global_rule_groups = to_i32(observation.monitoring.global_rule_groups());
    status.ready_shards = to_i32(
        observation
            .shards
            .values()
            .filter(|s| s.ready_replicas >= to_i32(observation.replicas))
            .count() as u32,
    );
    status.selector =
        contract::scale_selector(observation.name, observation.shards.keys().copied());
}

/// Available: True when every wanted shard has a ready Prometheus.
fn available_condition(observation: &Observation<'_>, status: &mut ShardedPrometheusStatus) {
    let wanted = observation.layout.shards();
    let serving = observation
        .shards
        .values()
        .filter(|s| s.ready_replicas > 0)
        .count();
    if serving == wanted as usize {
        status.set_condition(
            condition::AVAILABLE,
            true,
            reason::SHARDS_READY,
            format!("all {wanted} shards have a ready Prometheus"),
        );
    } else if let Some(refused) = pods_refused(observation) {
        status.set_condition(
            condition::AVAILABLE,
            false,
            reason::PODS_NOT_CREATED,
            format!("{serving} of {wanted} shards have a ready Prometheus; {refused}"),
        );
    } else {
        status.set_condition(
            condition::AVAILABLE,
            false,
            reason::SHARDS_NOT_READY,
            format!("{serving} of {wanted} shards have a ready Prometheus"),
        );
    }
}

/// Degraded: True with every reason (the first one the condition's), a Warning event when the
/// message changes.
fn degraded_condition(
    previous: &ShardedPrometheusStatus,
    observation: &Observation<'_>,
    status: &mut ShardedPrometheusStatus,
    events: &mut PendingEvents,
) {
    let degraded = degraded_reasons(observation);
    match degraded.first() {
        None => status.set_condition(
            condition::DEGRADED,
            false,
            reason::AS_EXPECTED,
            "every target is scraped in its own zone",
        ),
        Some((first, _)) => {
            let message: Vec<&str> = degraded.iter().map(|(_, m)| m.as_str()).collect();
            let message = message.join("; ");
            if !previous.already_reported(condition::DEGRADED, first, &message) {
                events.warning(first, "Reconcile", message.clone());
            }
            status.set_condition(condition::DEGRADED, true, first, message);
        }
    }
}

/// The message of MonitoringObjectsAccepted when every selected object is in: what the shards
/// load, and what the Thanos Ruler gets (with `spec.thanos` and global rules).
fn accepted_message(monitoring: &Monitoring) -> String {
    let shards = format!(
        "{} monitors and {} rule groups in every shard's configuration",
        monitoring.monitors,
        monitoring.rule_groups()
    );
    match monitoring.global_rule_groups() {
        0 => shards,
        global => format!("{shards}; {global} global rule groups for the Thanos Ruler"),
    }
}

/// MonitoringObjectsAccepted: True when every selected object is in the configuration; False
/// naming (up to [`REJECTED_LISTED`]) those left out, with a Warning event per object when the
/// list changes, or the kinds the API server does not serve.
fn monitoring_condition(
    previous: &ShardedPrometheusStatus,
    monitoring: &Monitoring,
    status: &mut ShardedPrometheusStatus,
    events: &mut PendingEvents,
) {
    let type_ = condition::MONITORING_OBJECTS_ACCEPTED;
    let unchanged = |reason: &str, message: &str| {
        previous
            .condition(type_)
            .is_some_and(|c| c.reason == reason && c.message == message)
    };
    if monitoring.rejected.is_empty() && monitoring.not_served.is_empty() {
        status.set_condition(
            type_,
            true,
            reason::ALL_ACCEPTED,
            accepted_message(monitoring),
        );
        return;
    }
    if monitoring.rejected.is_empty() {
        let message = format!(
            "the API server does not serve {}: install prometheus-operator's CRDs to use their \
             selectors (the other selectors work)",
            monitoring.not_served.join(", ")
        );
        if !unchanged(reason::KINDS_NOT_SERVED, &message) {
            events.warning(reason::KINDS_NOT_SERVED, "Select", message.clone());
        }
        status.set_condition(type_, false, reason::KINDS_NOT_SERVED, message);
        return;
    }
    let listed: Vec<(String, &Rejection)> = monitoring
        .rejected
        .iter()
        .take(REJECTED_LISTED)
        .map(|r| {
            (
                format!("{} {}/{}: {}", r.kind, r.namespace, r.name, r.reason),
                r,
            )
        })
        .collect();
    let mut message = format!(
        "{} selected object(s) left out of the configuration: {}",
        monitoring.rejected.len(),
        listed
            .iter()
            .map(|(text, _)| text.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
    if monitoring.rejected.len() > REJECTED_LISTED {
        message.push_str(&format!(
            "; and {} more",
            monitoring.rejected.len() - REJECTED_LISTED
        ));
    }
    if !monitoring.not_served.is_empty() {
        message.push_str(&format!(
            "; not served by the API server: {}",
            monitoring.not_served.join(", ")
        ));
    }
    if !unchanged(reason::OBJECTS_REJECTED, &message) {
        for (text, rejected) in listed {
            events.warning_about(
                object_reference(rejected),
                reason::OBJECTS_REJECTED,
                "Translate",
                text,
            );
        }
    }
    status.set_condition(type_, false, reason::OBJECTS_REJECTED, message);
}

/// ConfigLoaded ([`verdict::config_loaded`]), with a Warning event when it turns False or
/// changes its reason while False (not for every new message: pods refuse one after another as
/// the kubelets copy the Secret).
fn config_condition(
    previous: &ShardedPrometheusStatus,
    shards: &[ShardConfig],
    layout: &ShardLayout,
    status: &mut ShardedPrometheusStatus,
    events: &mut PendingEvents,
) {
    let type_ = condition::CONFIG_LOADED;
    let loaded = verdict::config_loaded(shards, |index| layout.zone(index));
    let value = match loaded.status {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    };
    let was_reported = previous
        .condition(type_)
        .is_some_and(|c| c.status == value && c.reason == loaded.reason);
    if loaded.status == Some(false) && !was_reported {
        events.warning(loaded.reason, "LoadConfig", loaded.message.clone());
    }
    let mut new = zone_api::conditions::new(
        type_,
        loaded.status.unwrap_or(false),
        loaded.reason,
        loaded.message,
        status.generation(),
        zone_api::conditions::now(),
    );
    new.status = value.to_string();
    zone_api::conditions::set(status.conditions_mut(), new);
}

/// A reference to a rejected monitoring object, for its event's `related`.
fn object_reference(rejected: &Rejection) -> ObjectReference {
    let version = match rejected.kind {
        "ScrapeConfig" => "v1alpha1",
        _ => "v1",
    };
    ObjectReference {
        api_version: Some(format!("{}/{version}", zone_api::sprom::MONITORING_GROUP)),
        kind: Some(rejected.kind.to_string()),
        namespace: Some(rejected.namespace.clone()),
        name: Some(rejected.name.clone()),
        ..ObjectReference::default()
    }
}

/// The shards whose pods the API server refuses, each with the refusal it quotes.
fn pods_refused(observation: &Observation<'_>) -> Option<String> {
    let refused: Vec<String> = observation
        .shards
        .iter()
        .filter_map(|(index, shard)| {
            let why = shard.pods_refused.as_deref()?;
            Some(format!(
                "shard {index} ({}): its pods cannot be created: {why}",
                contract::shard_name(observation.name, *index)
            ))
        })
        .collect();
    (!refused.is_empty()).then(|| refused.join("; "))
}

/// Why the shards do less than they should, most serious first: (reason, message).
fn degraded_reasons(observation: &Observation<'_>) -> Vec<(&'static str, String)> {
    let layout = observation.layout;
    [
        failover::degraded(layout, &observation.unready_zones),
        pods_refused(observation).map(|refused| (reason::PODS_NOT_CREATED, refused)),
        rule_files_refused(&observation.monitoring.rule_file_problems),
        (!observation.forbidden.is_empty()).then(|| {
            (
                reason::SERVICE_ACCOUNT_FORBIDDEN,
                format!(
                    "the Prometheus ServiceAccount cannot {}: its discovery finds no targets",
                    observation.forbidden.join(", ")
                ),
            )
        }),
        zones_without_nodes(observation),
        zones_without_shard(layout),
        (!observation.node_metadata_disabled.is_empty()).then(|| {
            (
                reason::NODE_METADATA_DISABLED,
                format!(
                    "attach_metadata.node is false in {}: those targets' zones come from endpoint slices or pod labels only",
                    observation.node_metadata_disabled.join(", ")
                ),
            )
        }),
        layout
            .uneven()
            .map(|uneven| (reason::UNEVEN_ZONES, uneven.to_string())),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Rule files of `spec.ruleFiles` Prometheus would refuse (up to [`RULE_FILE_PROBLEMS_LISTED`]
/// named).
fn rule_files_refused(problems: &[String]) -> Option<(&'static str, String)> {
    if problems.is_empty() {
        return None;
    }
    let listed: Vec<&str> = problems
        .iter()
        .take(RULE_FILE_PROBLEMS_LISTED)
        .map(String::as_str)
        .collect();
    let more = problems.len().saturating_sub(RULE_FILE_PROBLEMS_LISTED);
    Some((
        reason::INVALID_RULE_FILES,
        format!(
            "Prometheus would refuse these rule files, and with them the whole configuration \
             (the shards keep running their previous one): {}{}",
            listed.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        ),
    ))
}

/// Zones of the layout with no node (known only in topology mode).
fn zones_without_nodes(observation: &Observation<'_>) -> Option<(&'static str, String)> {
    let with_nodes = observation.zones_with_nodes.as_ref()?;
    let empty: Vec<&str> = observation
        .layout
        .zones()
        .iter()
        .filter(|zone| !with_nodes.contains(*zone))
        .map(String::as_str)
        .collect();
    (!empty.is_empty()).then(|| {
        (
            reason::ZONES_WITHOUT_NODES,
            format!(
                "no node in zone(s) {}: their shards cannot be scheduled",
                empty.join(", ")
            ),
        )
    })
}

/// Zones the layout gives no shard (fewer shards than zones), and what becomes of their
/// targets.
fn zones_without_shard(layout: &ShardLayout) -> Option<(&'static str, String)> {
    let without_shard = layout.zones_without_shard();
    (!without_shard.is_empty()).then(|| {
        (
            reason::ZONES_WITHOUT_SHARD,
            format!(
                "{} shard(s) for {} zones: zone(s) {} have no shard; {}",
                layout.shards(),
                layout.zones().len(),
                without_shard.join(", "),
                match layout.zoneless() {
                    ZonelessTargets::Spread => "their targets are scraped from other zones",
                    ZonelessTargets::Drop =>
                        "their targets are not scraped (zonelessTargets: Drop)",
                }
            ),
        )
    })
}

fn to_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use zone_topology::sharding::ZonelessTargets;

    fn zones(names: &[&str]) -> Vec<String> {
        names.iter().map(|z| z.to_string()).collect()
    }

    fn observation<'a>(
        layout: &'a ShardLayout,
        shards: &[(u32, i32)],
        zones_with_nodes: &[&str],
    ) -> Observation<'a> {
        Observation {
            name: "prom",
            generation: 3,
            layout,
            replicas: 2,
            shards: shards
                .iter()
                .map(|(i, ready)| {
                    (
                        *i,
                        ObservedShard {
                            ready_replicas: *ready,
                            pods_refused: None,
                        },
                    )
                })
                .collect(),
            zones_with_nodes: Some(zones_with_nodes.iter().map(|z| z.to_string()).collect()),
            node_metadata_disabled: &[],
            forbidden: &[],
            retained: Vec::new(),
            monitoring: &NO_MONITORING,
            unready_zones: Vec::new(),
            config: None,
            uploads: None,
        }
    }

    static NO_MONITORING: Monitoring = Monitoring::NONE;

    fn rejection(name: &str) -> zone_monitoring::Rejection {
        zone_monitoring::Rejection {
            kind: "ServiceMonitor",
            namespace: "team".into(),
            name: name.into(),
            reason: "spec.endpoints[0].tlsConfig.ca: Secret team/ca key \"ca.crt\": not found"
                .into(),
        }
    }

    #[test]
    fn rejected_objects_are_named_bounded_counted_and_warned_once() {
        let layout = ShardLayout::classic(2).unwrap();
        let monitoring = Monitoring {
            monitors: 3,
            rejected: (0..12).map(|i| rejection(&format!("m{i:02}"))).collect(),
            ..Monitoring::default()
        };
        let obs = Observation {
            monitoring: &monitoring,
            ..observation(&layout, &[(0, 2), (1, 2)], &[])
        };
        let (status, events) = compute(&ShardedPrometheusStatus::default(), &obs);
        let accepted = status
            .condition(condition::MONITORING_OBJECTS_ACCEPTED)
            .unwrap();
        assert_eq!(
            (accepted.status.as_str(), accepted.reason.as_str()),
            ("False", reason::OBJECTS_REJECTED)
        );
        assert!(
            accepted
                .message
                .starts_with("12 selected object(s) left out")
        );
        assert!(
            accepted
                .message
                .contains("ServiceMonitor team/m00: spec.endpoints[0]")
        );
        assert!(accepted.message.contains("team/m09") && !accepted.message.contains("team/m10"));
        assert!(
            accepted.message.contains("and 2 more"),
            "{}",
            accepted.message
        );
        assert_eq!(events.events().len(), REJECTED_LISTED);
        // One event per object, each about it: events of one reason about one resource
        // would otherwise collapse into a single series keeping the first note.
        let related: std::collections::BTreeSet<Option<String>> = events
            .events()
            .iter()
            .map(|e| e.related.as_ref().and_then(|r| r.name.clone()))
            .collect();
        assert_eq!(related.len(), REJECTED_LISTED);
        assert!(!related.contains(&None));
        assert_eq!(status.shard_statuses[1].rejected_objects, 12);
        assert_eq!(status.shard_statuses[1].monitors, 3);
        let (again, events) = compute(&status, &obs);
        assert_eq!(again, status);
        assert!(
            events.is_empty(),
            "the same rejections are not warned again"
        );
    }

    #[test]
    fn kinds_not_served_and_all_accepted() {
        let layout = ShardLayout::classic(1).unwrap();
        // The status computed after `previous` with `monitoring`, its acceptance condition and
        // the events.
        let accepted = |previous: &ShardedPrometheusStatus, monitoring: &Monitoring| {
            let obs = Observation {
                monitoring,
                ..observation(&layout, &[(0, 2)], &[])
            };
            let (status, events) = compute(previous, &obs);
            let accepted = status
                .condition(condition::MONITORING_OBJECTS_ACCEPTED)
                .unwrap()
                .clone();
            (status, accepted, events)
        };
        let monitoring = Monitoring {
            not_served: vec!["servicemonitors.monitoring.coreos.com/v1"],
            ..Monitoring::default()
        };
        let (status, condition, events) =
            accepted(&ShardedPrometheusStatus::default(), &monitoring);
        assert_eq!(condition.reason, reason::KINDS_NOT_SERVED);
        assert!(
            condition
                .message
                .contains("servicemonitors.monitoring.coreos.com/v1")
        );
        assert_eq!(events.events().len(), 1);
        let file = |groups: usize| zone_monitoring::rules::RuleFile {
            name: format!("ns-r{groups}-u.yaml"),
            content: String::new(),
            groups,
            rules: groups,
        };
        let monitoring = Monitoring {
            monitors: 2,
            rule_files: vec![file(2), file(3)],
            ..Monitoring::default()
        };
        let (status, condition, _) = accepted(&status, &monitoring);
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", reason::ALL_ACCEPTED)
        );
        assert_eq!(status.shard_statuses[0].rule_groups, 5);
        assert_eq!(
            condition.message,
            "2 monitors and 5 rule groups in every shard's configuration"
        );
        assert_eq!(status.global_rule_groups, 0);

        let monitoring = Monitoring {
            global_rule_files: Some(vec![file(1), file(2)]),
            ..monitoring
        };
        let (status, condition, _) = accepted(&status, &monitoring);
        assert_eq!(
            condition.message,
            "2 monitors and 5 rule groups in every shard's configuration; 3 global rule groups \
             for the Thanos Ruler"
        );
        assert_eq!(status.global_rule_groups, 3);
    }

    #[test]
    fn status_observes_the_stateful_sets_not_the_spec() {
        let layout =
            ShardLayout::topology(3, zones(&["a", "b", "c"]), ZonelessTargets::Spread).unwrap();
        // Shard 2's StatefulSet does not exist yet: 2 shards observed, not 3 wanted.
        let obs = observation(&layout, &[(0, 2), (1, 0)], &["a", "b", "c"]);
        let (status, events) = compute(&ShardedPrometheusStatus::default(), &obs);
        assert_eq!(status.shards, 2);
        assert_eq!(status.ready_shards, 1);
        assert_eq!(status.observed_generation, 3);
        assert_eq!(
            status.selector,
            "app.kubernetes.io/instance=prom,app.kubernetes.io/managed-by=shard-controller,apps.kubernetes.io/pod-index=0,zonecontrol.k8s.aws/shard in (0,1)"
        );
        let shard1 = &status.shard_statuses[1];
        assert_eq!(
            (
                shard1.index,
                shard1.zone.as_str(),
                shard1.in_zone,
                shard1.ready_replicas
            ),
            (1, "b", 0, 0)
        );
        assert_eq!(status.true_reason(condition::AVAILABLE), None);
        assert_eq!(
            status.condition(condition::AVAILABLE).unwrap().message,
            "1 of 3 shards have a ready Prometheus"
        );
        assert_eq!(
            status.condition(condition::DEGRADED).unwrap().status,
            "False"
        );
        assert!(events.is_empty());
    }

    #[test]
    fn refused_pods_are_named_with_the_refusal_in_available_and_degraded() {
        let layout = ShardLayout::classic(2).unwrap();
        let refusal = "create Pod prom-shard-1-0 in StatefulSet prom-shard-1 failed error: pods \
                       \"prom-shard-1-0\" is forbidden: error looking up service account \
                       team/prometheus: serviceaccount \"prometheus\" not found";
        let mut obs = observation(&layout, &[(0, 2), (1, 0)], &["a"]);
        if let Some(shard) = obs.shards.get_mut(&1) {
            shard.pods_refused = Some(refusal.to_string());
        }
        let (status, events) = compute(&ShardedPrometheusStatus::default(), &obs);
        let available = status.condition(condition::AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("False", reason::PODS_NOT_CREATED)
        );
        assert_eq!(
            available.message,
            format!(
                "1 of 2 shards have a ready Prometheus; shard 1 (prom-shard-1): its pods cannot \
                 be created: {refusal}"
            )
        );
        let degraded = status.condition(condition::DEGRADED).unwrap();
        assert_eq!(degraded.reason, reason::PODS_NOT_CREATED);
        assert!(
            degraded
                .message
                .contains("serviceaccount \"prometheus\" not found")
        );
        assert_eq!(events.events().len(), 1, "a Warning event");
    }

    #[test]
    fn degraded_names_every_reason_and_warns_once() {
        let layout =
            ShardLayout::topology(2, zones(&["a", "b", "c"]), ZonelessTargets::Spread).unwrap();
        let disabled = ["slices (endpointslice)".to_string()];
        let forbidden = ["list nodes".to_string()];
        let obs = Observation {
            node_metadata_disabled: &disabled,
            forbidden: &forbidden,
            ..observation(&layout, &[(0, 2), (1, 2)], &["a", "c"])
        };
        let (status, events) = compute(&ShardedPrometheusStatus::default(), &obs);
        let degraded = status.condition(condition::DEGRADED).unwrap();
        assert_eq!(degraded.reason, reason::SERVICE_ACCOUNT_FORBIDDEN);
        for part in [
            "cannot list nodes",
            "no node in zone(s) b",
            "zone(s) c have no shard",
            "slices (endpointslice)",
        ] {
            assert!(
                degraded.message.contains(part),
                "{part} in {}",
                degraded.message
            );
        }
        assert_eq!(
            status.true_reason(condition::AVAILABLE),
            Some(reason::SHARDS_READY)
        );
        assert_eq!(events.events().len(), 1);
        // The same complaint again: no second event.
        let (again, events) = compute(&status, &obs);
        assert_eq!(again, status);
        assert!(events.is_empty());
    }

    #[test]
    fn zones_without_a_shard_say_what_happens_to_their_targets() {
        let drop =
            ShardLayout::topology(2, zones(&["a", "b", "c"]), ZonelessTargets::Drop).unwrap();
        let (status, _) = compute(
            &ShardedPrometheusStatus::default(),
            &observation(&drop, &[(0, 2), (1, 2)], &["a", "b", "c"]),
        );
        let message = &status.condition(condition::DEGRADED).unwrap().message;
        assert!(
            message.contains("zone(s) c have no shard; their targets are not scraped"),
            "{message}"
        );
    }

    #[test]
    fn uneven_zones_are_a_warning_with_the_counts() {
        let layout =
            ShardLayout::topology(4, zones(&["a", "b", "c"]), ZonelessTargets::Spread).unwrap();
        let obs = observation(&layout, &[(0, 2), (1, 2), (2, 2), (3, 2)], &["a", "b", "c"]);
        let (status, _) = compute(&ShardedPrometheusStatus::default(), &obs);
        let degraded = status.condition(condition::DEGRADED).unwrap();
        assert_eq!(degraded.reason, reason::UNEVEN_ZONES);
        assert_eq!(
            degraded.message,
            "shards per zone differ (a: 2, b: 1, c: 1); 3 or 6 shards would be even"
        );
    }

    #[test]
    fn rule_files_prometheus_would_refuse_come_first_and_are_bounded() {
        let layout =
            ShardLayout::topology(3, zones(&["a", "b", "c"]), ZonelessTargets::Spread).unwrap();
        let monitoring = Monitoring {
            rule_file_problems: (0..7)
                .map(|i| format!("ConfigMap rules key r{i}.yaml: group \"g\", rule 1: expr"))
                .collect(),
            ..Monitoring::default()
        };
        let forbidden = ["list nodes".to_string()];
        let obs = Observation {
            monitoring: &monitoring,
            forbidden: &forbidden,
            ..observation(&layout, &[(0, 1), (1, 1), (2, 1)], &["a", "b", "c"])
        };
        let (status, events) = compute(&ShardedPrometheusStatus::default(), &obs);
        let degraded = status.condition(condition::DEGRADED).unwrap();
        assert_eq!(degraded.reason, reason::INVALID_RULE_FILES);
        assert!(
            degraded.message.contains("key r4.yaml") && !degraded.message.contains("key r5.yaml"),
            "{}",
            degraded.message
        );
        assert!(
            degraded.message.contains("; and 2 more"),
            "{}",
            degraded.message
        );
        assert!(
            degraded.message.contains("cannot list nodes"),
            "{}",
            degraded.message
        );
        assert_eq!(events.events().len(), 1);
    }
}
