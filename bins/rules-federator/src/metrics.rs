//! The federator's own metrics. Failures come as their reason label (`FetchError::kind`), so
//! this module needs nothing of the fetch that records into it.

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};
use zone_operator::metrics::{MetricsError, create};

const PREFIX: &str = "zone_aware_federator";

#[derive(Clone)]
pub struct FederatorMetrics {
    endpoint_seconds: HistogramVec,
    endpoint_errors: IntCounterVec,
    merge_seconds: Histogram,
    served: IntGaugeVec,
    requests: IntCounterVec,
}

impl FederatorMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let buckets = vec![
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ];
        Ok(Self {
            endpoint_seconds: create(
                registry,
                "endpoint_request_duration_seconds",
                HistogramVec::new(
                    HistogramOpts::new(
                        "endpoint_request_duration_seconds",
                        "Time to get one backend's rules, by backend.",
                    )
                    .namespace(PREFIX)
                    .buckets(buckets.clone()),
                    &["endpoint"],
                ),
            )?,
            endpoint_errors: create(
                registry,
                "endpoint_errors_total",
                IntCounterVec::new(
                    Opts::new(
                        "endpoint_errors_total",
                        "Backend requests that gave nothing, by backend and reason (timeout, connect, status, bad_json, backend_error, url).",
                    )
                    .namespace(PREFIX),
                    &["endpoint", "reason"],
                ),
            )?,
            merge_seconds: create(
                registry,
                "merge_duration_seconds",
                Histogram::with_opts(
                    HistogramOpts::new(
                        "merge_duration_seconds",
                        "Time to merge, deduplicate and filter the backends' answers.",
                    )
                    .namespace(PREFIX)
                    .buckets(buckets),
                ),
            )?,
            served: create(
                registry,
                "served",
                IntGaugeVec::new(
                    Opts::new(
                        "served",
                        "Groups and rules in the last answer, by kind (groups, rules, alerts).",
                    )
                    .namespace(PREFIX),
                    &["kind"],
                ),
            )?,
            requests: create(
                registry,
                "requests_total",
                IntCounterVec::new(
                    Opts::new("requests_total", "API requests by handler and HTTP status.")
                        .namespace(PREFIX),
                    &["handler", "code"],
                ),
            )?,
        })
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

    pub fn request(&self, handler: &str, code: u16) {
        self.requests
            .with_label_values(&[handler, &code.to_string()])
            .inc();
    }
}
