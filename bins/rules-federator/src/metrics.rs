//! The federator's own metrics. Failures come as their reason label
//! (`zone_operator::prom_api::ApiError::kind`), so this module needs nothing of the fetch that
//! records into it.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Registry};
use zone_operator::metrics::{Families, MetricsError};

const PREFIX: &str = "zone_aware_federator";

/// The API handlers (the `handler` label).
pub const HANDLERS: [&str; 2] = ["rules", "alerts"];

/// One backend's answer, and the merge of all of them.
const BACKEND_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// An API answer takes one backend round-trip and a merge: tens of milliseconds, seconds for
/// hundreds of backends; past the clients' timeouts (30 s) nobody waits for it.
const REQUEST_BUCKETS: [f64; 11] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Clone)]
pub struct FederatorMetrics {
    endpoint_seconds: HistogramVec,
    endpoint_errors: IntCounterVec,
    merge_seconds: Histogram,
    served: IntGaugeVec,
    requests: IntCounterVec,
    request_seconds: HistogramVec,
    partial: IntCounterVec,
    shared: IntCounterVec,
    received: IntCounterVec,
}

impl FederatorMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let family = Families::new(registry, PREFIX);
        let metrics = Self {
            endpoint_seconds: family.add(
                                "endpoint_request_duration_seconds",
                "Time to get one backend's rules, by backend.",
                |o| {
                    HistogramVec::new(
                        HistogramOpts::from(o).buckets(BACKEND_BUCKETS.to_vec()),
                        &["endpoint"],
                    )
                },
            )?,
            endpoint_errors: family.add(
                                "endpoint_errors_total",
                "Backend requests that gave nothing, by backend and reason (timeout, connect, status, bad_json, error_answer, url, too_large).",
                |o| IntCounterVec::new(o, &["endpoint", "reason"]),
            )?,
            merge_seconds: family.add(
                                "merge_duration_seconds",
                "Time to merge, deduplicate and filter the backends' answers.",
                |o| Histogram::with_opts(HistogramOpts::from(o).buckets(BACKEND_BUCKETS.to_vec())),
            )?,
            served: family.add(
                                "served",
                "Groups and rules in the last answer, by kind (groups, rules, alerts).",
                |o| IntGaugeVec::new(o, &["kind"]),
            )?,
            requests: family.add(
                                "requests_total",
                "API requests by handler and HTTP status.",
                |o| IntCounterVec::new(o, &["handler", "code"]),
            )?,
            request_seconds: family.add(
                                "request_duration_seconds",
                "Time to answer one API request, by handler, until the answer starts.",
                |o| {
                    HistogramVec::new(
                        HistogramOpts::from(o).buckets(REQUEST_BUCKETS.to_vec()),
                        &["handler"],
                    )
                },
            )?,
            partial: family.add(
                                "partial_responses_total",
                "Successful API answers missing at least one backend (it gave nothing; the answer's warnings name it), by handler.",
                |o| IntCounterVec::new(o, &["handler"]),
            )?,
            shared: family.add(
                                "shared_requests_total",
                "API requests answered by a merge another identical request started, by handler.",
                |o| IntCounterVec::new(o, &["handler"]),
            )?,
            received: family.add(
                "backend_received_bytes_total",
                "Bytes of the backends' answers as received (compressed when the backend compressed them), by the backend's zone: a discovered shard pod's label zonecontrol.k8s.aws/zone (Topology sharding), a static endpoint's zone= fragment, else unknown. The fan-out's traffic per zone (docs/sharding.md).",
                |o| IntCounterVec::new(o, &["zone"]),
            )?,
        };
        // Every handler's series exist before its first request.
        for handler in HANDLERS {
            metrics.request_seconds.with_label_values(&[handler]);
            metrics.partial.with_label_values(&[handler]);
        }
        Ok(metrics)
    }

    /// One backend request, and why it gave nothing when it did not.
    pub fn endpoint_request(&self, endpoint: &str, took: Duration, failed: Option<&str>) {
        self.endpoint_seconds
            .with_label_values(&[endpoint])
            .observe(took.as_secs_f64());
        if let Some(reason) = failed {
            self.endpoint_error(endpoint, reason);
        }
    }

    /// `bytes` received from a backend of `zone` (empty: unknown).
    pub fn received(&self, zone: &str, bytes: usize) {
        let zone = if zone.is_empty() { "unknown" } else { zone };
        self.received
            .with_label_values(&[zone])
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// An answer that came but could not be read.
    pub fn endpoint_error(&self, endpoint: &str, reason: &str) {
        self.endpoint_errors
            .with_label_values(&[endpoint, reason])
            .inc();
    }

    pub fn merged(&self, took: Duration) {
        self.merge_seconds.observe(took.as_secs_f64());
    }

    pub fn served(&self, kind: &str, count: usize) {
        self.served
            .with_label_values(&[kind])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// How long an API request took until its answer started.
    pub fn request_duration(&self, handler: &str, took: Duration) {
        self.request_seconds
            .with_label_values(&[handler])
            .observe(took.as_secs_f64());
    }

    /// A successful answer without what at least one backend should have given.
    pub fn partial_response(&self, handler: &str) {
        self.partial.with_label_values(&[handler]).inc();
    }

    pub fn request(&self, handler: &str, code: u16) {
        self.requests
            .with_label_values(&[handler, &code.to_string()])
            .inc();
    }

    /// A request that joined the merge of an identical one under way.
    pub fn shared(&self, handler: &str) {
        self.shared.with_label_values(&[handler]).inc();
    }
}

/// The metric families this binary's `/metrics` serves: the runtime's common families (of a
/// server: no leader) and [`FederatorMetrics`], registered as `main` registers them, every
/// labelled family with one sample series (a family without a series is not served), read over
/// HTTP from the runtime's server. The reconcile families are registered but, the federator
/// reconciling nothing, never served. For tests that compare them with the names dashboards and
/// alerts use.
#[cfg(test)]
#[allow(clippy::expect_used)]
pub(crate) fn served_metric_families() -> std::collections::BTreeSet<String> {
    use zone_operator::metrics::{Profile, register_common};
    let registry = Registry::new();
    register_common(&registry, crate::NAME, Profile::Server)
        .expect("the runtime's metrics register");
    let metrics = FederatorMetrics::register(&registry).expect("the federator metrics register");
    let endpoint = "http://prometheus-0.prometheus:9090";
    metrics.endpoint_request(endpoint, Duration::from_millis(5), Some("timeout"));
    metrics.merged(Duration::from_millis(1));
    metrics.served("rules", 1);
    metrics.request("rules", 200);
    metrics.shared("rules");
    metrics.received("zone-a", 100);
    zone_operator::testing::served_metric_families(&registry).expect("/metrics answers")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_handler_has_its_series_from_the_start() {
        let registry = Registry::new();
        FederatorMetrics::register(&registry).unwrap();
        let text = zone_operator::metrics::exposition(&registry);
        for handler in HANDLERS {
            assert!(
                text.contains(&format!(
                    r#"zone_aware_federator_partial_responses_total{{handler="{handler}"}} 0"#
                )),
                "{text}"
            );
            assert!(text.contains(&format!(
                r#"zone_aware_federator_request_duration_seconds_count{{handler="{handler}"}} 0"#
            )));
        }
    }

    #[test]
    fn the_binary_serves_the_runtime_s_families_and_its_own() {
        let served = served_metric_families();
        zone_operator::testing::assert_serves(
            &served,
            &[
                "rules_federator_build_info",
                "zone_aware_federator_request_duration_seconds",
                "zone_aware_federator_partial_responses_total",
                "zone_aware_federator_requests_total",
                "zone_aware_federator_endpoint_errors_total",
            ],
        );
        assert!(
            !served.contains("zone_aware_leader"),
            "a server reports no leadership"
        );
        assert!(!served.contains("zone_aware_reconciliations_total"));
    }
}

#[cfg(test)]
zone_monitoring::every_metric_the_mixin_reads_is_served!(crate::NAME, served_metric_families());
