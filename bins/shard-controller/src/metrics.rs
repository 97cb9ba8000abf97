//! ShardedPrometheus metrics, one series per resource (namespace/name) and state.

use k8s_openapi::jiff::Timestamp;
use prometheus::{IntGaugeVec, Opts, Registry};
use zone_api::ShardedPrometheusStatus;
use zone_operator::metrics::{MetricsError, create};

const PREFIX: &str = "zone_aware_sprom";

#[derive(Clone)]
pub struct SpromMetrics {
    shards: IntGaugeVec,
    next_deletion: IntGaugeVec,
    config_loaded: IntGaugeVec,
}

impl SpromMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        Ok(Self {
            shards: create(
                registry,
                "shards",
                IntGaugeVec::new(
                    Opts::new(
                        "shards",
                        "Shards of a ShardedPrometheus by state: active (its StatefulSet exists), ready (every replica ready), retained (scaled down, kept for queries).",
                    )
                    .namespace(PREFIX),
                    &["namespace", "name", "state"],
                ),
            )?,
            next_deletion: create(
                registry,
                "next_shard_deletion_timestamp_seconds",
                IntGaugeVec::new(
                    Opts::new(
                        "next_shard_deletion_timestamp_seconds",
                        "When the next retained shard of a ShardedPrometheus is deleted (Unix time); absent when no retained shard has a deadline.",
                    )
                    .namespace(PREFIX),
                    &["namespace", "name"],
                ),
            )?,
            config_loaded: create(
                registry,
                "shard_config_loaded",
                IntGaugeVec::new(
                    Opts::new(
                        "shard_config_loaded",
                        "Whether the Prometheus pods of an active shard run the configuration applied to it: 1 yes (or still within the grace after a change), 0 one refused it or runs another past the grace (ConfigLoaded False); absent when no pod of the shard answered.",
                    )
                    .namespace(PREFIX),
                    &["namespace", "name", "shard"],
                ),
            )?,
        })
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
    ) {
        let set = |state: &str, value: usize| {
            self.shards
                .with_label_values(&[namespace, name, state])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set("active", usize::try_from(status.shards).unwrap_or(0));
        set("ready", usize::try_from(status.ready_shards).unwrap_or(0));
        set("retained", status.retained_shards.len());
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

    /// Drops the series of a deleted resource.
    pub fn forget(&self, namespace: &str, name: &str) {
        for state in ["active", "ready", "retained"] {
            let _ = self.shards.remove_label_values(&[namespace, name, state]);
        }
        let _ = self.next_deletion.remove_label_values(&[namespace, name]);
    }
}
