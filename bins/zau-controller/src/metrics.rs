//! Rollout metrics, labelled by ZoneAwareUpdate namespace and name (bounded: one series per CR,
//! and per zone for old replicas). Reconcile duration and errors are the runtime's shared metrics.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};
use zone_api::ZoneAwareUpdateStatus;
use zone_api::zau::pause_source;
use zone_operator::metrics::{Families, MetricsError};

const PREFIX: &str = "zone_aware_zau";

#[derive(Clone)]
pub struct ZauMetrics {
    step: IntGaugeVec,
    deleted: IntGaugeVec,
    removed_total: IntCounterVec,
    old_replicas: IntGaugeVec,
    paused: IntGaugeVec,
    gate_polls: IntCounterVec,
    in_progress: IntGaugeVec,
    last_progress: IntGaugeVec,
}

impl ZauMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let family = Families::new(registry, PREFIX);
        let object = ["namespace", "name"];
        Ok(Self {
            step: family.add(
                "update_step",
                "Batches removed so far in the current rollout (sizes the next batch).",
                |o| IntGaugeVec::new(o, &object),
            )?,
            deleted: family.add("deleted_replicas", "Pods removed by the last batch.", |o| {
                IntGaugeVec::new(o, &object)
            })?,
            removed_total: family.add(
                "removed_pods_total",
                "Old-revision pods removed (evicted or deleted) by rollouts.",
                |o| IntCounterVec::new(o, &object),
            )?,
            old_replicas: family.add("old_replicas", "Old-revision pods per zone.", |o| {
                IntGaugeVec::new(o, &["namespace", "name", "zone"])
            })?,
            paused: family.add(
                "paused",
                "1 while the rollout is held by this source (Alarm, Alert, Manual, Bake), as \
                 status.pausedBy lists them.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "source"]),
            )?,
            gate_polls: family.add(
                "alert_gate_polls_total",
                "Requests to alert gate endpoints, by endpoint URL and result (ok, timeout, \
                 connect, status, bad_json, error_answer, too_large, tls, url).",
                |o| IntCounterVec::new(o, &["endpoint", "result"]),
            )?,
            in_progress: family.add(
                "rollout_in_progress",
                "1 while old-revision pods remain (status.totalOldReplicas above 0), paused or \
                 not; 0 once every pod runs the update revision.",
                |o| IntGaugeVec::new(o, &object),
            )?,
            last_progress: family.add(
                "last_progress_timestamp_seconds",
                "When the rollout last progressed (Unix time): it started, a batch was removed, \
                 or fewer old-revision pods remain. Until then, when this replica first \
                 reconciled it (after a restart or a leader change).",
                |o| IntGaugeVec::new(o, &object),
            )?,
        })
    }

    /// The counter the alert gate's poller increments.
    pub fn gate_polls(&self) -> IntCounterVec {
        self.gate_polls.clone()
    }

    /// Publishes the status of one ZoneAwareUpdate, written by a reconcile that started from
    /// `previous`, at `now` (Unix seconds).
    pub fn observe(
        &self,
        namespace: &str,
        name: &str,
        previous: &ZoneAwareUpdateStatus,
        status: &ZoneAwareUpdateStatus,
        now: i64,
    ) {
        let object = [namespace, name];
        self.in_progress
            .with_label_values(&object)
            .set(i64::from(status.total_old_replicas > 0));
        let last_progress = self.last_progress.with_label_values(&object);
        // 0: a series new to this process, whose last progress it cannot know.
        if progressed(previous, status) || last_progress.get() == 0 {
            last_progress.set(now);
        }
        self.step
            .with_label_values(&object)
            .set(i64::from(status.update_step));
        self.deleted
            .with_label_values(&object)
            .set(i64::from(status.deleted_replicas));
        for source in pause_source::ORDER {
            let held = status.paused_by.split(',').any(|s| s == source);
            self.paused
                .with_label_values(&[namespace, name, source])
                .set(i64::from(held));
        }
        for (zone, old) in &status.old_replicas {
            self.old_replicas
                .with_label_values(&[namespace, name, zone.as_str()])
                .set(i64::from(*old));
        }
    }

    /// A batch of `pods` removed at `now` (Unix seconds): progress.
    pub fn removed(&self, namespace: &str, name: &str, pods: usize, now: i64) {
        self.removed_total
            .with_label_values(&[namespace, name])
            .inc_by(u64::try_from(pods).unwrap_or(u64::MAX));
        self.last_progress
            .with_label_values(&[namespace, name])
            .set(now);
    }

    /// Drops the series of a deleted ZoneAwareUpdate.
    pub fn forget(&self, namespace: &str, name: &str, zones: &[String]) {
        let object = [namespace, name];
        let _ = self.step.remove_label_values(&object);
        let _ = self.deleted.remove_label_values(&object);
        for source in pause_source::ORDER {
            let _ = self.paused.remove_label_values(&[namespace, name, source]);
        }
        let _ = self.removed_total.remove_label_values(&object);
        let _ = self.in_progress.remove_label_values(&object);
        let _ = self.last_progress.remove_label_values(&object);
        for zone in zones {
            let _ = self
                .old_replicas
                .remove_label_values(&[namespace, name, zone.as_str()]);
        }
    }
}

/// Whether a reconcile from `previous` to `next` moved the rollout on: it started (old-revision
/// pods where there were none, or a new update revision with old pods) or fewer old pods remain.
fn progressed(previous: &ZoneAwareUpdateStatus, next: &ZoneAwareUpdateStatus) -> bool {
    let started = next.total_old_replicas > 0
        && (previous.total_old_replicas == 0 || previous.update_revision != next.update_revision);
    started || next.total_old_replicas < previous.total_old_replicas
}

/// The metric families this binary's `/metrics` serves: the runtime's common families and
/// [`ZauMetrics`], registered as `main` registers them, every labelled family with one sample
/// series (a family without a series is not served), read over HTTP from the runtime's server.
/// For tests that compare them with the names dashboards and alerts use.
#[cfg(test)]
#[allow(clippy::expect_used)]
pub(crate) fn served_metric_families() -> std::collections::BTreeSet<String> {
    let registry = zone_operator::testing::controller_registry(crate::NAME);
    zone_operator::testing::register_zone_nodes(&registry);
    let metrics = ZauMetrics::register(&registry).expect("the rollout metrics register");
    let status = ZoneAwareUpdateStatus {
        old_replicas: [("zone-a".to_owned(), 1)].into(),
        total_old_replicas: 1,
        ..ZoneAwareUpdateStatus::default()
    };
    metrics.observe("apps", "web", &ZoneAwareUpdateStatus::default(), &status, 1);
    metrics.removed("apps", "web", 1, 2);
    metrics
        .gate_polls()
        .with_label_values(&["http://federator:9090/api/v1/alerts", "ok"])
        .inc();
    zone_operator::testing::served_metric_families(&registry).expect("/metrics answers")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn status_becomes_series() {
        let (registry, metrics) = {
            let registry = Registry::new();
            let metrics = ZauMetrics::register(&registry).unwrap();
            (registry, metrics)
        };
        let status = ZoneAwareUpdateStatus {
            update_step: 3,
            deleted_replicas: 4,
            paused_rollout: true,
            paused_by: "Alert,Bake".to_string(),
            old_replicas: [("zone-a".to_string(), 2), ("zone-b".to_string(), 4)].into(),
            ..ZoneAwareUpdateStatus::default()
        };
        metrics.observe(
            "apps",
            "web",
            &ZoneAwareUpdateStatus::default(),
            &status,
            100,
        );
        metrics.removed("apps", "web", 4, 200);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(r#"zone_aware_zau_update_step{name="web",namespace="apps"} 3"#));
        assert!(
            text.contains(r#"zone_aware_zau_paused{name="web",namespace="apps",source="Alert"} 1"#)
        );
        assert!(
            text.contains(r#"zone_aware_zau_paused{name="web",namespace="apps",source="Bake"} 1"#)
        );
        assert!(
            text.contains(r#"zone_aware_zau_paused{name="web",namespace="apps",source="Alarm"} 0"#)
        );
        assert!(
            text.contains(
                r#"zone_aware_zau_paused{name="web",namespace="apps",source="Manual"} 0"#
            )
        );
        metrics
            .gate_polls()
            .with_label_values(&["http://f:9090/api/v1/alerts", "ok"])
            .inc();
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(
            r#"zone_aware_zau_alert_gate_polls_total{endpoint="http://f:9090/api/v1/alerts",result="ok"} 1"#
        ));
        assert!(text.contains(
            r#"zone_aware_zau_old_replicas{name="web",namespace="apps",zone="zone-b"} 4"#
        ));
        assert!(
            text.contains(r#"zone_aware_zau_removed_pods_total{name="web",namespace="apps"} 4"#)
        );
        metrics.forget("apps", "web", &["zone-a".to_string(), "zone-b".to_string()]);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(r#"namespace="apps""#));
    }

    fn status(revision: &str, old: i32) -> ZoneAwareUpdateStatus {
        ZoneAwareUpdateStatus {
            update_revision: revision.into(),
            total_old_replicas: old,
            ..ZoneAwareUpdateStatus::default()
        }
    }

    #[test]
    fn progress_is_a_start_or_fewer_old_pods() {
        // (case, previous, next, progressed)
        let cases = [
            ("started", status("web-1", 0), status("web-2", 6), true),
            (
                "a new revision mid-rollout",
                status("web-2", 4),
                status("web-3", 6),
                true,
            ),
            (
                "fewer old pods",
                status("web-2", 6),
                status("web-2", 4),
                true,
            ),
            ("finished", status("web-2", 1), status("web-2", 0), true),
            ("stuck", status("web-2", 4), status("web-2", 4), false),
            (
                "more old pods (a scale-up)",
                status("web-2", 4),
                status("web-2", 5),
                false,
            ),
            (
                "nothing to do",
                status("web-2", 0),
                status("web-2", 0),
                false,
            ),
        ];
        for (case, previous, next, expected) in cases {
            assert_eq!(progressed(&previous, &next), expected, "{case}");
        }
    }

    #[test]
    fn last_progress_moves_only_on_progress_and_rollout_in_progress_follows_old_pods() {
        let registry = Registry::new();
        let metrics = ZauMetrics::register(&registry).unwrap();
        let series = |text: &str, family: &str| {
            let prefix = format!(r#"zone_aware_zau_{family}{{name="web",namespace="apps"}} "#);
            text.lines()
                .find_map(|line| line.strip_prefix(prefix.as_str()))
                .map(str::to_owned)
        };
        // First seen mid-rollout, nothing moved: the time it was first seen.
        metrics.observe("apps", "web", &status("web-2", 4), &status("web-2", 4), 100);
        let text = zone_operator::metrics::exposition(&registry);
        assert_eq!(series(&text, "rollout_in_progress").as_deref(), Some("1"));
        assert_eq!(
            series(&text, "last_progress_timestamp_seconds").as_deref(),
            Some("100")
        );
        // Stuck: the time stays.
        metrics.observe("apps", "web", &status("web-2", 4), &status("web-2", 4), 160);
        let text = zone_operator::metrics::exposition(&registry);
        assert_eq!(
            series(&text, "last_progress_timestamp_seconds").as_deref(),
            Some("100")
        );
        // A batch removed.
        metrics.removed("apps", "web", 2, 170);
        let text = zone_operator::metrics::exposition(&registry);
        assert_eq!(
            series(&text, "last_progress_timestamp_seconds").as_deref(),
            Some("170")
        );
        // The last old pod replaced.
        metrics.observe("apps", "web", &status("web-2", 1), &status("web-2", 0), 230);
        let text = zone_operator::metrics::exposition(&registry);
        assert_eq!(series(&text, "rollout_in_progress").as_deref(), Some("0"));
        assert_eq!(
            series(&text, "last_progress_timestamp_seconds").as_deref(),
            Some("230")
        );
        metrics.forget("apps", "web", &[]);
        let text = zone_operator::metrics::exposition(&registry);
        assert_eq!(series(&text, "rollout_in_progress"), None);
        assert_eq!(series(&text, "last_progress_timestamp_seconds"), None);
    }

    #[test]
    fn the_binary_serves_the_runtime_s_families_and_its_own() {
        zone_operator::testing::assert_controller_serves(
            &served_metric_families(),
            &[
                "zau_controller_build_info",
                "zone_aware_zau_rollout_in_progress",
                "zone_aware_zau_last_progress_timestamp_seconds",
                "zone_aware_zau_paused",
                "zone_aware_zau_old_replicas",
            ],
        );
    }
}

#[cfg(test)]
zone_monitoring::every_metric_the_mixin_reads_is_served!(crate::NAME, served_metric_families());
