//! ShardedPrometheus metrics, one series per resource (namespace/name) and state.

use prometheus::{IntGaugeVec, Opts, Registry};
use zone_api::ShardedPrometheusStatus;
use zone_operator::metrics::{MetricsError, create};

const PREFIX: &str = "zone_aware_sprom";

#[derive(Clone)]
pub struct SpromMetrics {
    shards: IntGaugeVec,
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
        })
    }

    pub fn observe(&self, namespace: &str, name: &str, status: &ShardedPrometheusStatus) {
        let set = |state: &str, value: usize| {
            self.shards
                .with_label_values(&[namespace, name, state])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set("active", usize::try_from(status.shards).unwrap_or(0));
        set("ready", usize::try_from(status.ready_shards).unwrap_or(0));
        set("retained", status.retained_shards.len());
    }

    /// Drops the series of a deleted resource.
    pub fn forget(&self, namespace: &str, name: &str) {
        for state in ["active", "ready", "retained"] {
            let _ = self.shards.remove_label_values(&[namespace, name, state]);
        }
    }
}
