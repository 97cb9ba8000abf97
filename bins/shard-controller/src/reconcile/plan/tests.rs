#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use zone_api::ValidSprom;
use zone_api::conditions::Conditions;
use zone_api::sprom::{ShardedPrometheusStatus, WhenScaled, condition, reason};
use zone_api::{ShardedPrometheus, ZoneAwareUpdate};

use super::*;
use crate::final_upload::pods as upload;
use crate::health::Fingerprint;
use crate::reconcile::observe::{ChildKind, Observed, ObservedRollout, ObservedStatefulSet};

const NOW: &str = "2026-01-01T12:00:00Z";

fn valid(spec: serde_json::Value) -> ValidSprom {
    let sprom: ShardedPrometheus = serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "generation": 2},
        "spec": spec,
    }))
    .unwrap();
    crate::reconcile::validate::validate(&sprom, "topology.kubernetes.io/zone").unwrap()
}

fn three_zones(shards: u32, when_scaled: &str) -> ValidSprom {
    valid(json!({
        "shards": shards,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
        "shardRetentionPolicy": {"whenScaled": when_scaled},
    }))
}

fn target(previous: &ShardedPrometheusStatus) -> Target<'_> {
    Target {
        name: "p",
        namespace: "n",
        generation: 2,
        previous,
    }
}

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// What the caches show after `plan`'s children were all applied: every child with its hash,
/// every StatefulSet ready.
fn applied(plan: &Plan) -> Observed {
    let mut observed = Observed {
        zones_with_nodes: ["a", "b", "c"].map(String::from).into(),
        ..Observed::default()
    };
    for write in &plan.writes {
        if let Write::Apply(child) = write {
            if let Child::ZoneAwareUpdate(zau) = child {
                observed.rollout = ObservedRollout::Found(zau.clone());
                continue;
            }
            let hash = child.hash().map(str::to_string);
            observed
                .children
                .insert((child.kind(), child.name().to_string()), hash);
            if let Child::StatefulSet(sts) = child {
                let index =
                    zone_api::sprom::contract::shard_of(sts.metadata.labels.as_ref().unwrap())
                        .unwrap();
                let zone = sts
                    .metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .get(crate::children::build::ZONE_ANNOTATION)
                    .cloned();
                observed.stateful_sets.insert(
                    index,
                    ObservedStatefulSet {
                        ready_replicas: 1,
                        zone,
                        ..ObservedStatefulSet::default()
                    },
                );
            }
        }
    }
    observed
}

fn applies(plan: &Plan) -> Vec<(ChildKind, String)> {
    plan.writes
        .iter()
        .filter_map(|write| match write {
            Write::Apply(child) => Some((child.kind(), child.name().to_string())),
            Write::Mark { .. } | Write::Strategy { .. } | Write::StartUpload { .. } => None,
        })
        .collect()
}

/// The plan of `spec` from no previous status, given `observed`.
fn planned(spec: &ValidSprom, observed: &Observed) -> Plan {
    plan(
        &target(&ShardedPrometheusStatus::default()),
        spec,
        observed,
        now(),
    )
    .unwrap()
}

/// The plan after a scale from `from` to `to` shards under `when_scaled`, the children of
/// `from` applied and cached.
fn scaled(from: u32, to: u32, when_scaled: &str) -> Plan {
    let before = planned(&three_zones(from, when_scaled), &full());
    planned(&three_zones(to, when_scaled), &applied(&before))
}

fn full() -> Observed {
    Observed {
        full_apply: true,
        zones_with_nodes: ["a", "b", "c"].map(String::from).into(),
        ..Observed::default()
    }
}

#[test]
fn a_full_apply_writes_every_child_config_first_and_prunes_every_kind() {
    let previous = ShardedPrometheusStatus::default();
    let plan = plan(
        &target(&previous),
        &three_zones(3, "Delete"),
        &full(),
        now(),
    )
    .unwrap();
    let kinds: Vec<ChildKind> = applies(&plan).into_iter().map(|(kind, _)| kind).collect();
    let mut want = [
        ChildKind::Secret,
        ChildKind::Service,
        ChildKind::StatefulSet,
    ]
    .repeat(3);
    // The rollout before the first StatefulSet (OnDelete only with a ZoneAwareUpdate to roll
    // it); one replica: the zone budget, no shard budget.
    want.insert(2, ChildKind::ZoneAwareUpdate);
    want.push(ChildKind::ZoneDisruptionBudget);
    assert_eq!(kinds, want);
    assert_eq!(plan.prune, ChildKind::PRUNE_ORDER);
    assert_eq!(
        plan.wanted,
        ["p-shard-0", "p-shard-1", "p-shard-2"]
            .map(String::from)
            .into()
    );
    assert!(plan.full_apply);
}

#[test]
fn unchanged_children_are_not_written_again_until_the_resync() {
    let previous = ShardedPrometheusStatus::default();
    let spec = three_zones(3, "Delete");
    let first = plan(&target(&previous), &spec, &full(), now()).unwrap();
    let observed = applied(&first);
    let again = plan(&target(&previous), &spec, &observed, now()).unwrap();
    assert!(again.writes.is_empty(), "{:?}", applies(&again));
    assert!(again.prune.is_empty());

    // A hand-edited StatefulSet (another hash) is the one child written.
    let mut edited = observed.clone();
    edited.children.insert(
        (ChildKind::StatefulSet, "p-shard-1".into()),
        Some("x".into()),
    );
    let fix = plan(&target(&previous), &spec, &edited, now()).unwrap();
    assert_eq!(
        applies(&fix),
        [(ChildKind::StatefulSet, "p-shard-1".to_string())]
    );

    // The resync writes them all.
    let resync = Observed {
        full_apply: true,
        ..observed
    };
    assert_eq!(
        plan(&target(&previous), &spec, &resync, now())
            .unwrap()
            .writes
            .len(),
        11
    );
}

/// The disruption budgets: written on full applies only (no cache shows them), a
/// PodDisruptionBudget per active and retained shard of two replicas besides the zone budget;
/// turned off, none is wanted, so the next full apply prunes them.
#[test]
fn budgets_are_written_on_full_applies_and_pruned_when_turned_off() {
    let spec = |budgets: serde_json::Value| {
        valid(json!({
            "shards": 2, "replicas": 2,
            "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
            "disruptionBudgets": budgets,
        }))
    };
    let budgets = |plan: &Plan| -> Vec<(ChildKind, String)> {
        applies(plan)
            .into_iter()
            .filter(|(kind, _)| kind.uncached() && *kind != ChildKind::ZoneAwareUpdate)
            .collect()
    };
    let first = planned(&spec(json!({})), &full());
    assert_eq!(
        budgets(&first),
        [
            (ChildKind::ZoneDisruptionBudget, "p-shards".to_string()),
            (ChildKind::PodDisruptionBudget, "p-shard-0".to_string()),
            (ChildKind::PodDisruptionBudget, "p-shard-1".to_string()),
        ]
    );
    assert_eq!(
        first.wanted_budgets,
        ["p-shards", "p-shard-0", "p-shard-1"]
            .map(String::from)
            .into()
    );
    let again = planned(&spec(json!({})), &applied(&first));
    assert!(again.writes.is_empty(), "{:?}", applies(&again));
    assert!(again.prune.is_empty(), "{:?}", again.prune);

    let off = spec(json!({"zones": false, "shards": false}));
    let turned_off = planned(
        &off,
        &Observed {
            full_apply: true,
            ..applied(&first)
        },
    );
    assert!(budgets(&turned_off).is_empty());
    assert!(turned_off.wanted_budgets.is_empty());
    assert!(turned_off.prune.contains(&ChildKind::PodDisruptionBudget));
    assert!(turned_off.prune.contains(&ChildKind::ZoneDisruptionBudget));
}

#[test]
fn a_delete_scale_down_prunes_the_shards_beyond_the_new_count() {
    let after = scaled(5, 3, "Delete");
    assert!(after.writes.is_empty(), "shards 0-2 are unchanged");
    // No rule ConfigMap was ever written: no ConfigMap to prune.
    assert_eq!(
        after.prune,
        [
            ChildKind::StatefulSet,
            ChildKind::Service,
            ChildKind::Secret
        ]
    );
    assert_eq!(
        after.wanted,
        ["p-shard-0", "p-shard-1", "p-shard-2"]
            .map(String::from)
            .into()
    );
    assert_eq!(after.status.shards, 3, "shards 3 and 4 are not active");
}

#[test]
fn a_retain_scale_down_marks_and_empties_the_removed_shards() {
    let after = scaled(4, 3, "Retain");
    assert_eq!(
        applies(&after),
        [(ChildKind::Secret, "p-shard-3".to_string())]
    );
    let Some(Write::Mark {
        stateful_set,
        retained: Some(retained),
    }) = after.writes.last()
    else {
        panic!("{:?}", after.writes);
    };
    assert_eq!((stateful_set.as_str(), retained.index), ("p-shard-3", 3));
    assert!(
        after.wanted.contains("p-shard-3"),
        "a retained shard is kept"
    );
    assert!(after.prune.is_empty());
    assert_eq!(after.status.retained_shards.len(), 1);
    assert!(
        after
            .events
            .events()
            .iter()
            .any(|e| e.reason == reason::SHARDS_RETAINED)
    );
    assert_eq!(
        after.requeue_after,
        RESYNC.min(Duration::from_secs(24 * 3600))
    );
}

#[test]
fn a_reused_retained_shard_loses_its_marks() {
    let previous = ShardedPrometheusStatus::default();
    let spec = three_zones(4, "Retain");
    let mut observed = applied(&plan(&target(&previous), &spec, &full(), now()).unwrap());
    let sts = observed.stateful_sets.get_mut(&3).unwrap();
    sts.retained_since = Some("2026-01-01T11:00:00Z".into());
    sts.deletion_deadline = Some("2026-01-02T11:00:00Z".into());
    let plan = plan(&target(&previous), &spec, &observed, now()).unwrap();
    assert_eq!(
        plan.writes,
        [Write::Mark {
            stateful_set: "p-shard-3".into(),
            retained: None
        }]
    );
    assert!(
        plan.events
            .events()
            .iter()
            .any(|e| e.reason == reason::RETAINED_SHARDS_REUSED)
    );
}

#[test]
fn a_forbidden_service_account_degrades_and_looks_again_soon() {
    let previous = ShardedPrometheusStatus::default();
    let observed = Observed {
        forbidden: vec!["list pods".into()],
        ..full()
    };
    let plan = plan(
        &target(&previous),
        &three_zones(3, "Delete"),
        &observed,
        now(),
    )
    .unwrap();
    assert_eq!(
        plan.status.true_reason(condition::DEGRADED),
        Some(reason::SERVICE_ACCOUNT_FORBIDDEN)
    );
    assert_eq!(
        plan.requeue_after,
        crate::reconcile::access::CACHE_FOR + Duration::from_secs(1)
    );
}

/// Objects of another namespace in use by its consent (a Role granting the shards'
/// ServiceAccount): looked at again when the review's answer expires, so a revoked consent takes
/// them out within that bound; without any, the long resync.
#[test]
fn a_consent_in_use_is_looked_at_again_when_its_review_expires() {
    let previous = ShardedPrometheusStatus::default();
    let requeue = |consented| {
        let mut observed = full();
        observed.monitoring.consented = consented;
        plan(
            &target(&previous),
            &three_zones(3, "Delete"),
            &observed,
            now(),
        )
        .unwrap()
        .requeue_after
    };
    assert_eq!(
        requeue(true),
        crate::reconcile::access::CACHE_FOR + Duration::from_secs(1)
    );
    assert_eq!(requeue(false), crate::context::RESYNC);
}

#[test]
fn retention_events_say_what_happened_to_which_shards() {
    let at = now();
    let retained = |index, mark, deadline: Option<&str>| retention::Retained {
        index,
        since: at,
        deadline: deadline.map(|d| d.parse().unwrap()),
        mark,
    };
    let fate = retention::Plan {
        retained: vec![
            retained(3, true, Some("2026-01-02T12:00:00Z")),
            retained(4, true, Some("2026-01-02T12:00:00Z")),
            retained(5, false, None),
        ],
        reused: vec![1],
        deleted: vec![
            (6, retention::Deletion::Due),
            (7, retention::Deletion::Scaled),
        ],
        requeue_after: None,
    };
    let policy = |when_scaled| retention::Policy {
        when_scaled,
        period: None,
    };
    let mut events = PendingEvents::default();
    events::retention(&fate, policy(WhenScaled::Delete), true, &mut events);
    let notes: BTreeMap<&str, Vec<&str>> =
        events
            .events()
            .iter()
            .fold(BTreeMap::new(), |mut notes, event| {
                notes
                    .entry(event.action)
                    .or_default()
                    .push(event.note.as_str());
                notes
            });
    assert_eq!(
        notes["ScaleDown"],
        [
            "shard(s) 3, 4 retained until 2026-01-02T12:00:00Z: they scrape, evaluate and alert nothing and keep serving their data"
        ]
    );
    assert_eq!(
        notes["ScaleUp"],
        ["retained shard(s) 1 active again, with their data"]
    );
    assert_eq!(
        notes["Delete"],
        ["retained shard(s) 6 deleted: their deadline passed"]
    );
    assert_eq!(
        notes["PolicyChange"],
        [
            "whenScaled is Delete, but retained shard(s) 5 keep their deadline: deleted only when you delete them; delete their StatefulSets to remove them sooner"
        ]
    );

    // The policy change is told once, on the new generation, and only under Delete.
    for (when_scaled, new_generation) in [(WhenScaled::Delete, false), (WhenScaled::Retain, true)] {
        let mut events = PendingEvents::default();
        events::retention(&fate, policy(when_scaled), new_generation, &mut events);
        assert!(events.events().iter().all(|e| e.action != "PolicyChange"));
    }
}

/// What the prober saw: each shard's applied configuration changed `age` ago, its one pod
/// answered `answers[i]`.
fn probed(
    plan: &Plan,
    age: Duration,
    answers: [crate::health::verdict::Answer; 3],
) -> crate::health::ConfigObservation {
    use crate::health::verdict::PodProbe;
    let applied = plan
        .configs
        .iter()
        .map(|(index, config)| (*index, (config.fingerprint.clone().unwrap(), Some(age))))
        .collect();
    let pods = answers
        .into_iter()
        .enumerate()
        .map(|(index, answer)| {
            let index = index as u32;
            let pod = format!("p-shard-{index}-0");
            (index, vec![PodProbe { pod, answer }])
        })
        .collect();
    crate::health::ConfigObservation {
        probed: true,
        grace: Duration::from_secs(150),
        applied,
        pods,
    }
}

#[test]
fn config_loaded_follows_the_pods_answers_and_the_grace_of_a_change() {
    use crate::health::verdict::Answer;
    let spec = three_zones(3, "Delete");
    let first = planned(&spec, &full());
    assert_eq!(
        first.status.condition(condition::CONFIG_LOADED),
        None,
        "left as it was until the prober asked the pods once"
    );
    // Each shard's configuration is its own (its shard label, its share of the targets).
    let runs = |shard: u32| Answer::Running {
        served: first.configs[&shard].fingerprint.clone().unwrap(),
    };
    let other = || Answer::Running {
        served: Fingerprint::of_yaml("scrape_configs:\n- job_name: old\n").unwrap(),
    };
    let refused = || Answer::Refused {
        last_config_time: Some("2026-01-01T11:00:00Z".into()),
    };
    let mut observed = applied(&first);

    // Shard 1 still runs another configuration, 10 s after the change: loading, True, and a
    // look again when its grace ends.
    observed.config = probed(&first, Duration::from_secs(10), [runs(0), other(), runs(2)]);
    let loading = planned(&spec, &observed);
    let loaded = loading.status.condition(condition::CONFIG_LOADED).unwrap();
    assert_eq!(
        (loaded.status.as_str(), loaded.reason.as_str()),
        ("True", reason::CONFIG_LOADED)
    );
    assert!(loaded.message.starts_with("2 of 3"), "{}", loaded.message);
    assert_eq!(loading.requeue_after, Duration::from_secs(141));
    assert!(loading.events.is_empty());

    // Past the grace: ConfigNotLoaded, with one Warning.
    observed.config = probed(
        &first,
        Duration::from_secs(600),
        [runs(0), other(), runs(2)],
    );
    let stale = planned(&spec, &observed);
    let not_loaded = stale.status.condition(condition::CONFIG_LOADED).unwrap();
    assert_eq!(
        (not_loaded.status.as_str(), not_loaded.reason.as_str()),
        ("False", reason::CONFIG_NOT_LOADED)
    );
    assert!(
        not_loaded
            .message
            .starts_with("shard 1 (b): pod p-shard-1-0 still run(s) another configuration"),
        "{}",
        not_loaded.message
    );
    assert_eq!(stale.requeue_after, RESYNC);

    // Refused by two shards: ReloadFailed naming both, one Warning; the same again, none.
    observed.config = probed(
        &first,
        Duration::from_secs(10),
        [refused(), runs(1), refused()],
    );
    let failed = planned(&spec, &observed);
    let reload = failed.status.condition(condition::CONFIG_LOADED).unwrap();
    assert_eq!(
        (reload.status.as_str(), reload.reason.as_str()),
        ("False", reason::RELOAD_FAILED)
    );
    assert!(
        reload
            .message
            .contains("shard 0 (a): pod p-shard-0-0 refused")
    );
    assert!(
        reload
            .message
            .contains("shard 2 (c): pod p-shard-2-0 refused")
    );
    let warnings: Vec<_> = failed
        .events
        .events()
        .iter()
        .filter(|e| e.reason == reason::RELOAD_FAILED)
        .collect();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].warning);
    let again = plan(&target(&failed.status), &spec, &observed, now()).unwrap();
    assert!(
        again
            .events
            .events()
            .iter()
            .all(|e| e.reason != reason::RELOAD_FAILED),
        "no second event while it stays ReloadFailed"
    );
    // Available is about serving: the shards keep theirs.
    assert_eq!(
        failed.status.true_reason(condition::AVAILABLE),
        Some(reason::SHARDS_READY)
    );
}

/// The sidecars' headless Service is a child like the shards': written with `spec.thanos`,
/// wanted while it stays, pruned once `spec.thanos` is removed.
#[test]
fn the_sidecar_service_comes_with_spec_thanos_and_goes_with_it() {
    let with = valid(json!({
        "shards": 2,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
        "thanos": {},
    }));
    let first = planned(&with, &full());
    assert!(
        applies(&first).contains(&(ChildKind::Service, "p-thanos-sidecar".to_string())),
        "{:?}",
        applies(&first)
    );
    let observed = applied(&first);
    let again = planned(&with, &observed);
    assert!(again.wanted.contains("p-thanos-sidecar"));
    assert!(again.prune.is_empty(), "{:?}", again.prune);

    let without = valid(json!({
        "shards": 2,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
    }));
    let removed = planned(&without, &observed);
    assert!(!removed.wanted.contains("p-thanos-sidecar"));
    assert_eq!(removed.prune, [ChildKind::Service]);
}

fn uploading(shards: u32, upload_before_deletion: bool) -> ValidSprom {
    valid(json!({
        "shards": shards,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
        "shardRetentionPolicy": {"whenScaled": "Delete"},
        "thanos": {
            "objectStorageConfig": {"name": "bucket", "key": "objstore.yml"},
            "uploadBeforeDeletion": upload_before_deletion,
        },
    }))
}

/// A pod of `shard` running at 10.0.0.9, with attempt 1 of the final upload ended with `exit`
/// (None: no attempt yet).
fn pod_upload(shard: u32, exit: Option<i32>) -> (u32, Vec<upload::PodUpload>) {
    let attempts = exit
        .map(|code| upload::Attempt {
            number: 1,
            path: Some("/prometheus/snapshots/s".into()),
            outcome: match code {
                0 => upload::Outcome::Succeeded,
                _ => upload::Outcome::Failed {
                    message: "dial tcp: connection refused".into(),
                    at: Some(now()),
                },
            },
        })
        .into_iter()
        .collect();
    let pod = upload::PodUpload {
        name: format!("p-shard-{shard}-0"),
        ip: Some("10.0.0.9".into()),
        attempts,
        // Made by an earlier controller, whose default Thanos image was another.
        sidecar_image: Some("quay.io/thanos/thanos:v0.1.0-earlier".into()),
    };
    (shard, vec![pod])
}

/// Under Delete with an uploading sidecar, a removed shard stays, retired, until every pod's
/// final upload is done; then it is pruned, with an event; a failed attempt is in the status.
#[test]
fn a_removed_shard_stays_until_its_final_upload_is_done() {
    let before = planned(&uploading(3, true), &full());
    let mut observed = applied(&before);
    for sts in observed.stateful_sets.values_mut() {
        sts.replicas = Some(1);
    }
    observed.uploads = [pod_upload(2, None)].into();
    let after = planned(&uploading(2, true), &observed);
    assert!(after.wanted.contains("p-shard-2"), "{:?}", after.wanted);
    assert_eq!(after.uploading, 1);
    let starts: Vec<&Write> = after
        .writes
        .iter()
        .filter(|write| matches!(write, Write::StartUpload { .. }))
        .collect();
    let [
        Write::StartUpload {
            pod,
            ip,
            path: None,
            container,
        },
    ] = starts.as_slice()
    else {
        panic!("{starts:?}");
    };
    assert_eq!((pod.as_str(), ip.as_str()), ("p-shard-2-0", "10.0.0.9"));
    // The pod's sidecar's image, which the admission policy requires, not today's default.
    assert_eq!(
        container.image.as_deref(),
        Some("quay.io/thanos/thanos:v0.1.0-earlier")
    );
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.contains(&"--label=shard=\"2\"".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--label=prometheus_replica=\"p-shard-2-0\"".to_string()),
        "{args:?}"
    );
    assert_eq!(
        args[..4],
        [
            "tools",
            "bucket",
            "upload-blocks",
            "--shipper.upload-compacted"
        ],
        "every block of the snapshot, compacted ones too"
    );
    assert!(
        applies(&after).contains(&(ChildKind::Secret, "p-shard-2".to_string())),
        "the shard is retired while it uploads: {:?}",
        applies(&after)
    );
    let condition = after
        .status
        .condition(condition::REMOVED_SHARDS_UPLOADED)
        .unwrap();
    assert_eq!(condition.reason, reason::UPLOAD_IN_PROGRESS);

    observed.uploads = [pod_upload(2, Some(1))].into();
    let failed = planned(&uploading(2, true), &observed);
    assert!(failed.wanted.contains("p-shard-2"));
    let condition = failed
        .status
        .condition(condition::REMOVED_SHARDS_UPLOADED)
        .unwrap();
    assert_eq!(condition.reason, reason::UPLOAD_FAILED);
    assert!(
        condition.message.contains("connection refused"),
        "{}",
        condition.message
    );
    assert!(failed.requeue_after <= Duration::from_secs(11));

    observed.uploads = [pod_upload(2, Some(0))].into();
    let done = planned(&uploading(2, true), &observed);
    assert!(!done.wanted.contains("p-shard-2"), "{:?}", done.wanted);
    assert_eq!(done.uploading, 0);
    let condition = done
        .status
        .condition(condition::REMOVED_SHARDS_UPLOADED)
        .unwrap();
    assert_eq!(condition.reason, reason::NONE_PENDING);
    assert!(format!("{:?}", done.events).contains(reason::SHARDS_UPLOADED));

    // Opted out: pruned at once, no condition.
    observed.uploads = [pod_upload(2, None)].into();
    let skipped = planned(&uploading(2, false), &observed);
    assert!(!skipped.wanted.contains("p-shard-2"));
    assert!(
        skipped
            .status
            .condition(condition::REMOVED_SHARDS_UPLOADED)
            .is_none()
    );
}

/// The Thanos Ruler's ConfigMap is applied with the rules (empty without global rules) and is
/// no shard's volume; it is pruned when the rules no longer go to a Ruler.
#[test]
fn the_rulers_rule_files_are_applied_mounted_by_no_shard_and_pruned() {
    let with = valid(json!({
        "shards": 1,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
        "thanos": {},
    }));
    let mut observed = full();
    observed.monitoring.global_rule_files = Some(Vec::new());
    let first = planned(&with, &observed);
    let config_maps: Vec<String> = applies(&first)
        .into_iter()
        .filter(|(kind, _)| *kind == ChildKind::ConfigMap)
        .map(|(_, name)| name)
        .collect();
    assert_eq!(config_maps, ["p-global-rulefiles-0"]);
    let mounted = first.writes.iter().any(|write| {
        matches!(write, Write::Apply(Child::StatefulSet(sts))
            if serde_json::to_string(sts).unwrap().contains("global-rulefiles"))
    });
    assert!(!mounted, "a shard mounts the Ruler's rule files");

    let mut cached = applied(&first);
    cached.monitoring.global_rule_files = Some(Vec::new());
    assert!(planned(&with, &cached).prune.is_empty());
    cached.monitoring.global_rule_files = None;
    assert_eq!(planned(&with, &cached).prune, [ChildKind::ConfigMap]);
}

/// The rollout: the StatefulSets `OnDelete` and a ZoneAwareUpdate over them, written when
/// missing, when the hold changes and on full applies; paused, with why, while a shard of the
/// zone being rolled refuses its configuration; mirrored in the status; none, and the
/// StatefulSets rolling themselves, with RollingUpdate or where the API server has no
/// ZoneAwareUpdate.
#[test]
fn the_rollout_is_held_while_a_shard_of_the_rolled_zone_refuses_its_configuration() {
    let spec = three_zones(3, "Delete");
    let strategy = |plan: &Plan| -> Vec<Option<String>> {
        plan.writes
            .iter()
            .filter_map(|write| match write {
                Write::Apply(Child::StatefulSet(sts)) => Some(
                    sts.spec
                        .as_ref()
                        .and_then(|s| s.update_strategy.as_ref())
                        .and_then(|u| u.type_.clone()),
                ),
                _ => None,
            })
            .collect()
    };
    let rollout = |plan: &Plan| -> Option<ZoneAwareUpdate> {
        plan.writes.iter().find_map(|write| match write {
            Write::Apply(Child::ZoneAwareUpdate(zau)) => Some((**zau).clone()),
            _ => None,
        })
    };
    let first = planned(&spec, &full());
    assert_eq!(strategy(&first), vec![Some("OnDelete".to_string()); 3]);
    assert!(
        !first
            .writes
            .iter()
            .any(|w| matches!(w, Write::Strategy { .. }))
    );
    // A shard whose cached StatefulSet still has the defaulted `rollingUpdate` of its
    // RollingUpdate days: its strategy is patched first, then it is applied.
    let mut rolled = applied(&first);
    rolled.full_apply = true;
    if let Some(set) = rolled.stateful_sets.get_mut(&1) {
        set.rolling_update = true;
    }
    let switched = planned(&spec, &rolled);
    let at = switched
        .writes
        .iter()
        .position(|w| {
            *w == Write::Strategy {
                stateful_set: "p-shard-1".into(),
                on_delete: true,
            }
        })
        .expect("the strategy patched");
    assert!(
        matches!(&switched.writes[at + 1], Write::Apply(Child::StatefulSet(s)) if s.metadata.name.as_deref() == Some("p-shard-1")),
        "then applied: {:?}",
        switched.writes[at + 1]
    );
    // The ZoneAwareUpdate first: one the API server refuses (a CRD not yet upgraded) stops
    // the reconcile before a StatefulSet turns OnDelete with nothing to roll it.
    for plan in [&first, &switched] {
        let zau = plan
            .writes
            .iter()
            .position(|w| matches!(w, Write::Apply(Child::ZoneAwareUpdate(_))));
        let set = plan.writes.iter().position(Write::is_stateful_set);
        assert!(
            zau.is_some() && zau < set,
            "the ZoneAwareUpdate at {zau:?}, a StatefulSet at {set:?}"
        );
    }
    let patched = switched
        .writes
        .iter()
        .filter(|w| matches!(w, Write::Strategy { .. }));
    assert_eq!(patched.count(), 1, "only the shard whose copy needs it");
    let zau = rollout(&first).unwrap();
    assert!(!zau.spec.paused);
    assert_eq!(first.wanted_rollout, ["p-shards".to_string()].into());

    // Between full applies an unchanged one is not written again.
    let mut observed = applied(&first);
    let mut rolling = zau.clone();
    rolling.status = Some(zone_api::ZoneAwareUpdateStatus {
        current_zone: Some("b".into()),
        total_old_replicas: 2,
        ..Default::default()
    });
    observed.rollout = ObservedRollout::Found(Box::new(rolling));
    let again = planned(&spec, &observed);
    assert_eq!(rollout(&again), None);
    let status = again.status.rollout.clone().unwrap();
    assert_eq!(
        (
            status.current_zone.as_deref(),
            status.old_replicas,
            status.held_by
        ),
        (Some("b"), 2, None)
    );
    assert_eq!(again.requeue_after, rollout::ROLLING_LOOK);

    // Shard 1 (zone b) refuses its configuration: the rollout is paused, saying why.
    use crate::health::verdict::Answer;
    let runs = |shard: u32| Answer::Running {
        served: first.configs[&shard].fingerprint.clone().unwrap(),
    };
    let refused = Answer::Refused {
        last_config_time: None,
    };
    observed.config = probed(
        &first,
        Duration::from_secs(600),
        [runs(0), refused, runs(2)],
    );
    let held = planned(&spec, &observed);
    let zau = rollout(&held).expect("the hold is written at once");
    assert!(zau.spec.paused);
    let why = &zau.metadata.annotations.as_ref().unwrap()[zone_api::zau::PAUSED_BECAUSE_ANNOTATION];
    assert!(why.contains("shard 1 (b): p-shard-1-0 refused it"), "{why}");
    assert_eq!(
        held.status.rollout.as_ref().unwrap().held_by.as_deref(),
        Some(why.as_str())
    );
    let reasons: Vec<_> = held.events.events().iter().map(|e| e.reason).collect();
    assert!(reasons.contains(&reason::ROLLOUT_HELD), "{reasons:?}");

    // Zone a being rolled, or nothing left to roll, the same refusal holds nothing.
    let progress = |observed: &mut Observed, zone: &str, old: i32| {
        if let ObservedRollout::Found(zau) = &mut observed.rollout {
            let status = zau.status.as_mut().unwrap();
            status.current_zone = Some(zone.into());
            status.total_old_replicas = old;
        }
    };
    let mut zau = zau;
    zau.status = Some(zone_api::ZoneAwareUpdateStatus::default());
    observed.rollout = ObservedRollout::Found(Box::new(zau));
    progress(&mut observed, "a", 2);
    let other_zone = planned(&spec, &observed);
    assert!(
        rollout(&other_zone).is_some_and(|zau| !zau.spec.paused),
        "the hold lifted"
    );
    progress(&mut observed, "b", 0);
    assert_eq!(
        planned(&spec, &observed).status.rollout.unwrap().held_by,
        None
    );

    // RollingUpdate, or no ZoneAwareUpdate API: the StatefulSets roll themselves, none wanted.
    let rolling_update = valid(json!({
        "shards": 3,
        "shardingStrategy": {"topology": {"values": ["a", "b", "c"]}},
        "rollout": {"strategy": "RollingUpdate"},
    }));
    let off = planned(&rolling_update, &full());
    assert_eq!(strategy(&off), vec![None; 3]);
    assert_eq!((rollout(&off), off.wanted_rollout.len()), (None, 0));
    assert!(off.prune.contains(&ChildKind::ZoneAwareUpdate));
    // Shards that were `OnDelete` are patched back to `RollingUpdate` before their apply: the
    // merge patch that made them `OnDelete` owns the type, an apply leaving it out keeps it.
    let mut zone_aware = applied(&first);
    zone_aware.full_apply = true;
    for set in zone_aware.stateful_sets.values_mut() {
        set.on_delete = true;
    }
    let back = planned(&rolling_update, &zone_aware);
    let patched: Vec<&Write> = back
        .writes
        .iter()
        .filter(|w| matches!(w, Write::Strategy { .. }))
        .collect();
    assert_eq!(patched.len(), 3, "{patched:?}");
    assert!(patched.iter().all(|w| matches!(
        w,
        Write::Strategy {
            on_delete: false,
            ..
        }
    )));
    // Not when the API answered 404 for a moment (a CRD replaced during an upgrade): the
    // zone-aware rollout may be replacing pods; the StatefulSets stay OnDelete.
    zone_aware.rollout = ObservedRollout::NoApi;
    let unread = planned(&spec, &zone_aware);
    assert!(
        !unread
            .writes
            .iter()
            .any(|w| matches!(w, Write::Strategy { .. }))
    );
    let no_api = Observed {
        rollout: ObservedRollout::NoApi,
        ..full()
    };
    let without = planned(&spec, &no_api);
    assert_eq!(strategy(&without), vec![None; 3]);
    assert_eq!(rollout(&without), None);
    let disabled = Observed {
        rollout: ObservedRollout::Disabled,
        ..full()
    };
    let without = planned(&spec, &disabled);
    assert_eq!(strategy(&without), vec![None; 3]);
    assert_eq!((rollout(&without), without.wanted_rollout.len()), (None, 0));
}
