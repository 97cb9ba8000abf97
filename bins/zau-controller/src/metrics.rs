//! Rollout metrics, labelled by ZoneAwareUpdate namespace and name (bounded: one series per CR,
//! and per zone for old replicas). Reconcile duration and errors are the runtime's shared metrics.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use zone_api::ZoneAwareUpdateStatus;
use zone_api::zau::pause_source;
use zone_operator::metrics::{MetricsError, create};

const PREFIX: &str = "zone_aware_zau";

#[derive(Clone)]
pub struct ZauMetrics {
    step: IntGaugeVec,
    deleted: IntGaugeVec,
    removed_total: IntCounterVec,
    old_replicas: IntGaugeVec,
    paused: IntGaugeVec,
    gate_polls: IntCounterVec,
}

fn gauge(
    registry: &Registry,
    name: &'static str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, MetricsError> {
    create(
        registry,
        name,
        IntGaugeVec::new(Opts::new(name, help).namespace(PREFIX), labels),
    )
}

impl ZauMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let object = ["namespace", "name"];
        let removed_total = create(
            registry,
            "removed_pods_total",
            IntCounterVec::new(
                Opts::new(
                    "removed_pods_total",
                    "Old-revision pods removed (evicted or deleted) by rollouts.",
                )
                .namespace(PREFIX),
                &object,
            ),
        )?;
        Ok(Self {
            step: gauge(
                registry,
                "update_step",
                "Batches removed so far in the current rollout (sizes the next batch).",
                &object,
            )?,
            deleted: gauge(
                registry,
                "deleted_replicas",
                "Pods removed by the last batch.",
                &object,
            )?,
            removed_total,
            old_replicas: gauge(
                registry,
                "old_replicas",
                "Old-revision pods per zone.",
                &["namespace", "name", "zone"],
            )?,
            paused: gauge(
                registry,
                "paused",
                "1 while the rollout is held by this source (Alarm, Alert, Manual, Bake), as \
                 status.pausedBy lists them.",
                &["namespace", "name", "source"],
            )?,
            gate_polls: create(
                registry,
                "alert_gate_polls_total",
                IntCounterVec::new(
                    Opts::new(
                        "alert_gate_polls_total",
                        "Requests to alert gate endpoints, by endpoint URL and result (ok, \
                         timeout, connect, status, bad_json, error_answer, too_large, tls, url).",
                    )
                    .namespace(PREFIX),
                    &["endpoint", "result"],
                ),
            )?,
        })
    }

    /// The counter the alert gate's poller increments.
    pub fn gate_polls(&self) -> IntCounterVec {
        self.gate_polls.clone()
    }

    /// Publishes the status of one ZoneAwareUpdate.
    pub fn observe(&self, namespace: &str, name: &str, status: &ZoneAwareUpdateStatus) {
        let object = [namespace, name];
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

    pub fn removed(&self, namespace: &str, name: &str, pods: usize) {
        self.removed_total
            .with_label_values(&[namespace, name])
            .inc_by(u64::try_from(pods).unwrap_or(u64::MAX));
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
        for zone in zones {
            let _ = self
                .old_replicas
                .remove_label_values(&[namespace, name, zone.as_str()]);
        }
    }
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
        metrics.observe("apps", "web", &status);
        metrics.removed("apps", "web", 4);
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
}
