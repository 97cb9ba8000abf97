//! ShardedPrometheus metrics, one series per resource (namespace/name) and state, shard or
//! zone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Registry};
use zone_api::ShardedPrometheusStatus;
use zone_operator::metrics::{Families, MetricsError};

const PREFIX: &str = "zone_aware_sprom";

/// The values of `scrape_bytes_total`'s `traffic` label: where a target is from the pod that
/// scrapes it.
pub const TRAFFIC_CLASSES: [&str; 3] = ["same-zone", "cross-zone", "zoneless"];

#[derive(Clone)]
pub struct SpromMetrics {
    shards: IntGaugeVec,
    next_deletion: IntGaugeVec,
    config_loaded: IntGaugeVec,
    zone_shards: IntGaugeVec,
    unready_zones: IntGaugeVec,
    failover_after: IntGaugeVec,
    scrape_bytes: IntCounterVec,
    traffic_measured: GaugeVec,
    /// The shards each resource has `scrape_bytes` series for.
    traffic_exported: Arc<Mutex<ShardsOf>>,
    /// The zones each resource has `unready_zones` series for.
    unready_exported: Arc<Mutex<ZonesOf>>,
    /// The zones each resource has `zone_shards` series for, to drop those of a zone that lost
    /// its nodes, of a resource switched to Classic, or deleted.
    zones_exported: Arc<Mutex<ZonesOf>>,
}

/// Per resource (namespace, name), zones.
type ZonesOf = BTreeMap<(String, String), BTreeSet<String>>;
/// Per resource (namespace, name), shard indexes.
type ShardsOf = BTreeMap<(String, String), BTreeSet<u32>>;

impl SpromMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let family = Families::new(registry, PREFIX);
        Ok(Self {
            shards: family.add(
                "shards",
                "Shards of a ShardedPrometheus by state: active (its StatefulSet exists), ready (every replica ready), retained (scaled down, kept for queries), uploading (scaled down and kept until their final upload to the object store is done).",
                |o| IntGaugeVec::new(o, &["namespace", "name", "state"]),
            )?,
            next_deletion: family.add(
                "next_shard_deletion_timestamp_seconds",
                "When the next retained shard of a ShardedPrometheus is deleted (Unix time); absent when no retained shard has a deadline.",
                |o| IntGaugeVec::new(o, &["namespace", "name"]),
            )?,
            config_loaded: family.add(
                "shard_config_loaded",
                "Whether the Prometheus pods of an active shard run the configuration applied to it: 1 yes (or still within the grace after a change), 0 one refused it or runs another past the grace (ConfigLoaded False); absent when no pod of the shard answered.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "shard"]),
            )?,
            zone_shards: family.add(
                "zone_shards",
                "Active shards of a ShardedPrometheus (Topology sharding) pinned to each zone that has nodes; 0: the zone's targets have no shard of their own. Not served in Classic sharding.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "zone"]),
            )?,
            unready_zones: family.add(
                "zone_unready_since_timestamp_seconds",
                "When every shard of a zone of a ShardedPrometheus (Topology sharding) was first seen unready (Unix time), with failed_over=\"true\" once its zoneless targets are scraped by the other zones' shards; absent while a shard of the zone is ready.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "zone", "failed_over"]),
            )?,
            failover_after: family.add(
                "zone_failover_after_seconds",
                "How long every shard of a zone is unready before its zoneless targets fail over to the other zones' shards (spec.shardingStrategy.zoneFailoverAfter); served for Topology sharding with Spread zoneless targets only.",
                |o| IntGaugeVec::new(o, &["namespace", "name"]),
            )?,
            scrape_bytes: family.add(
                "scrape_bytes_total",
                "Bytes of the targets' answers (bodies, uncompressed) the Prometheus pods of a shard scraped, by where the target is from the pod: same-zone, cross-zone, zoneless (no zone on either side). Measured every minute from Prometheus's scrape_body_size_bytes; docs/sharding.md.",
                |o| IntCounterVec::new(o, &["namespace", "name", "shard", "traffic"]),
            )?,
            traffic_measured: family.add(
                "traffic_measured_timestamp_seconds",
                "The end of the last window whose scrapes scrape_bytes_total counts (Unix time).",
                |o| GaugeVec::new(o, &["namespace", "name"]),
            )?,
            traffic_exported: Arc::default(),
            zones_exported: Arc::default(),
            unready_exported: Arc::default(),
        })
    }

    /// The active shards (`status.shardStatuses`) of each zone of `zones_with_nodes`; `None`
    /// (Classic sharding) leaves none. Zones no longer given lose their series.
    pub fn zone_shards(
        &self,
        namespace: &str,
        name: &str,
        zones_with_nodes: Option<&BTreeSet<String>>,
        status: &ShardedPrometheusStatus,
    ) {
        let shards: BTreeMap<&str, usize> = zones_with_nodes
            .into_iter()
            .flatten()
            .map(|zone| {
                let pinned = status
                    .shard_statuses
                    .iter()
                    .filter(|shard| shard.zone == *zone)
                    .count();
                (zone.as_str(), pinned)
            })
            .collect();
        let mut exported = self
            .zones_exported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (namespace.to_owned(), name.to_owned());
        for zone in exported.get(&key).into_iter().flatten() {
            if !shards.contains_key(zone.as_str()) {
                let _ = self
                    .zone_shards
                    .remove_label_values(&[namespace, name, zone]);
            }
        }
        for (zone, count) in &shards {
            self.zone_shards
                .with_label_values(&[namespace, name, zone])
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        let zones: BTreeSet<String> = shards.into_keys().map(str::to_owned).collect();
        if zones.is_empty() {
            exported.remove(&key);
        } else {
            exported.insert(key, zones);
        }
    }

    /// Whether shard `index` runs its applied configuration; `None` drops the series.
    pub fn config_loaded(&self, namespace: &str, name: &str, index: u32, loaded: Option<bool>) {
        let shard = index.to_string();
        let labels = [namespace, name, shard.as_str()];
        match loaded {
            Some(loaded) => self
                .config_loaded
                .with_label_values(&labels)
                .set(i64::from(loaded)),
            None => {
                let _ = self.config_loaded.remove_label_values(&labels);
            }
        }
    }

    pub fn observe(
        &self,
        namespace: &str,
        name: &str,
        status: &ShardedPrometheusStatus,
        next_deletion: Option<Timestamp>,
        uploading: usize,
    ) {
        let set = |state: &str, value: usize| {
            self.shards
                .with_label_values(&[namespace, name, state])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set("active", usize::try_from(status.shards).unwrap_or(0));
        set("ready", usize::try_from(status.ready_shards).unwrap_or(0));
        set("retained", status.retained_shards.len());
        set("uploading", uploading);
        match next_deletion {
            Some(at) => self
                .next_deletion
                .with_label_values(&[namespace, name])
                .set(at.as_second()),
            None => {
                let _ = self.next_deletion.remove_label_values(&[namespace, name]);
            }
        }
    }

    /// The zones of `status.unreadyZones`, replacing those served before; and the grace of a
    /// failover (`None`: the resource has no failover, Classic or Drop).
    pub fn failover(
        &self,
        namespace: &str,
        name: &str,
        status: &ShardedPrometheusStatus,
        after: Option<std::time::Duration>,
    ) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut exported = self
            .unready_exported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for zone in exported.remove(&key).into_iter().flatten() {
            for failed_over in ["true", "false"] {
                let _ =
                    self.unready_zones
                        .remove_label_values(&[namespace, name, &zone, failed_over]);
            }
        }
        let zones: BTreeSet<String> = status
            .unready_zones
            .iter()
            .map(|zone| zone.zone.clone())
            .collect();
        if !zones.is_empty() {
            exported.insert(key, zones);
        }
        for zone in &status.unready_zones {
            let since = zone
                .since
                .parse::<Timestamp>()
                .map_or(0, |since| since.as_second());
            let failed_over = if zone.failed_over { "true" } else { "false" };
            self.unready_zones
                .with_label_values(&[namespace, name, zone.zone.as_str(), failed_over])
                .set(since);
        }
        match after {
            Some(after) => self
                .failover_after
                .with_label_values(&[namespace, name])
                .set(i64::try_from(after.as_secs()).unwrap_or(i64::MAX)),
            None => {
                let _ = self.failover_after.remove_label_values(&[namespace, name]);
            }
        }
    }

    /// Counts a round of the traffic ledger that ended at `end` (Unix seconds): per shard, the
    /// bytes of each class of [`TRAFFIC_CLASSES`], in its order.
    pub fn traffic(
        &self,
        namespace: &str,
        name: &str,
        end: f64,
        shards_bytes: &BTreeMap<u32, [f64; 3]>,
    ) {
        let mut exported = self
            .traffic_exported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let exported_shards = exported
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default();
        for (index, bytes) in shards_bytes {
            exported_shards.insert(*index);
            let shard = index.to_string();
            for (class, value) in TRAFFIC_CLASSES.iter().zip(bytes) {
                // Whole bytes: a sum of whole body sizes.
                let value = if value.is_finite() && *value > 0.0 {
                    value.round() as u64
                } else {
                    0
                };
                self.scrape_bytes
                    .with_label_values(&[namespace, name, &shard, class])
                    .inc_by(value);
            }
        }
        self.traffic_measured
            .with_label_values(&[namespace, name])
            .set(end);
    }

    /// Drops the traffic series of a resource that is gone.
    pub fn forget_traffic(&self, namespace: &str, name: &str) {
        let mut exported = self
            .traffic_exported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (namespace.to_owned(), name.to_owned());
        for index in exported.remove(&key).into_iter().flatten() {
            let shard = index.to_string();
            for class in TRAFFIC_CLASSES {
                let _ = self
                    .scrape_bytes
                    .remove_label_values(&[namespace, name, &shard, class]);
            }
        }
        let _ = self
            .traffic_measured
            .remove_label_values(&[namespace, name]);
    }

    /// Drops the series of a deleted resource.
    pub fn forget(&self, namespace: &str, name: &str) {
        for state in ["active", "ready", "retained", "uploading"] {
            let _ = self.shards.remove_label_values(&[namespace, name, state]);
        }
        let _ = self.next_deletion.remove_label_values(&[namespace, name]);
        self.zone_shards(namespace, name, None, &ShardedPrometheusStatus::default());
        self.failover(namespace, name, &ShardedPrometheusStatus::default(), None);
        self.forget_traffic(namespace, name);
    }
}

/// The metric families this binary's `/metrics` serves: the runtime's common families and
/// [`SpromMetrics`], registered as `main` registers them, every labelled family with one sample
/// series (a family without a series is not served), read over HTTP from the runtime's server.
/// For tests that compare them with the names dashboards and alerts use.
#[cfg(test)]
#[allow(clippy::expect_used)]
pub(crate) fn served_metric_families() -> BTreeSet<String> {
    let registry = zone_operator::testing::controller_registry(crate::NAME);
    zone_operator::testing::register_zone_nodes(&registry);
    let metrics =
        SpromMetrics::register(&registry).expect("the ShardedPrometheus metrics register");
    let status = ShardedPrometheusStatus::default();
    metrics.observe("monitoring", "k8s", &status, Some(Timestamp::UNIX_EPOCH), 0);
    metrics.config_loaded("monitoring", "k8s", 0, Some(true));
    let zones = BTreeSet::from(["zone-a".to_owned()]);
    metrics.zone_shards("monitoring", "k8s", Some(&zones), &status);
    let down = ShardedPrometheusStatus {
        unready_zones: vec![zone_api::sprom::UnreadyZone {
            zone: "zone-b".into(),
            since: "2026-01-01T00:00:00Z".into(),
            failed_over: true,
        }],
        ..ShardedPrometheusStatus::default()
    };
    let after = Some(std::time::Duration::from_secs(300));
    metrics.failover("monitoring", "k8s", &down, after);
    metrics.traffic(
        "monitoring",
        "k8s",
        1.0,
        &BTreeMap::from([(0, [1.0, 0.0, 0.0])]),
    );
    zone_operator::testing::served_metric_families(&registry).expect("/metrics answers")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_api::sprom::ShardStatus;

    fn shard(index: i32, zone: &str) -> ShardStatus {
        ShardStatus {
            index,
            zone: zone.into(),
            ..ShardStatus::default()
        }
    }

    #[test]
    fn zone_shards_count_the_active_shards_of_each_zone_with_nodes() {
        let registry = Registry::new();
        let metrics = SpromMetrics::register(&registry).unwrap();
        let status = ShardedPrometheusStatus {
            shard_statuses: vec![shard(0, "a"), shard(1, "b"), shard(2, "a")],
            ..ShardedPrometheusStatus::default()
        };
        let with_nodes = BTreeSet::from(["a", "b", "c"].map(String::from));
        metrics.zone_shards("mon", "k8s", Some(&with_nodes), &status);
        let text = zone_operator::metrics::exposition(&registry);
        for (zone, shards) in [("a", 2), ("b", 1), ("c", 0)] {
            assert!(
                text.contains(&format!(
                    r#"zone_aware_sprom_zone_shards{{name="k8s",namespace="mon",zone="{zone}"}} {shards}"#
                )),
                "{text}"
            );
        }

        // Zone c lost its nodes: its series goes.
        let with_nodes = BTreeSet::from(["a", "b"].map(String::from));
        metrics.zone_shards("mon", "k8s", Some(&with_nodes), &status);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(r#"zone="c""#), "{text}");
        assert!(text.contains(r#"zone="b""#));

        // Classic sharding: none.
        metrics.zone_shards("mon", "k8s", None, &status);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains("zone_aware_sprom_zone_shards{"), "{text}");

        // A deleted resource loses them too.
        metrics.zone_shards("mon", "k8s", Some(&with_nodes), &status);
        metrics.forget("mon", "k8s");
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(r#"namespace="mon""#), "{text}");
    }

    #[test]
    fn an_unready_zone_has_one_series_until_it_is_back() {
        let registry = prometheus::Registry::new();
        let metrics = SpromMetrics::register(&registry).unwrap();
        let zone = |failed_over| zone_api::sprom::UnreadyZone {
            zone: "b".into(),
            since: "2026-01-01T00:00:00Z".into(),
            failed_over,
        };
        let with = |zones| ShardedPrometheusStatus {
            unready_zones: zones,
            ..ShardedPrometheusStatus::default()
        };
        let after = Some(std::time::Duration::from_secs(300));
        metrics.failover("mon", "k8s", &with(vec![zone(false)]), after);
        metrics.failover("mon", "k8s", &with(vec![zone(true)]), after);
        let text = zone_operator::metrics::exposition(&registry);
        let series = r#"zone_aware_sprom_zone_unready_since_timestamp_seconds{failed_over="true",name="k8s",namespace="mon",zone="b"} 1767225600"#;
        assert!(text.contains(series), "{text}");
        assert!(
            !text.contains(r#"failed_over="false""#),
            "one series per zone: {text}"
        );
        assert!(
            text.contains(
                r#"zone_aware_sprom_zone_failover_after_seconds{name="k8s",namespace="mon"} 300"#
            ),
            "{text}"
        );
        metrics.failover("mon", "k8s", &with(Vec::new()), None);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains("zone_aware_sprom_zone_"), "{text}");
    }

    #[test]
    fn the_binary_serves_the_runtime_s_families_and_its_own() {
        zone_operator::testing::assert_controller_serves(
            &served_metric_families(),
            &[
                "shard_controller_build_info",
                "zone_aware_sprom_zone_shards",
                "zone_aware_sprom_shards",
                "zone_aware_sprom_shard_config_loaded",
                "zone_aware_sprom_zone_unready_since_timestamp_seconds",
                "zone_aware_sprom_zone_failover_after_seconds",
            ],
        );
    }
}

#[cfg(test)]
zone_monitoring::every_metric_the_mixin_reads_is_served!(crate::NAME, served_metric_families());
