//! Reconcile metrics shared by every controller, labelled by controller name, and the other
//! metrics every binary serves ([`register_common`]).
//!
//! Labels stay bounded: `controller` is one of a handful of names and `reason` must be an error
//! *kind* (a variant name), never an object or pod name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use prometheus::{
    Histogram, HistogramOpts, HistogramTimer, IntCounter, IntCounterVec, Opts, Registry,
    core::Collector,
};

mod common;

pub use common::{
    CommonMetrics, LeaderMetrics, Profile, REVISION, VERSION, build_info_name, register_common,
};

/// Prefix of every metric this crate registers.
pub const METRIC_PREFIX: &str = "zone_aware";

/// Reconciles are API round-trips: mostly tens of milliseconds, a slow apiserver or an alarm
/// lookup takes seconds.
const DURATION_BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0];

/// Why the metrics could not be created or registered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot create the reconciliations counter")]
    Reconciliations(#[source] prometheus::Error),
    #[error("cannot create the reconcile failures counter")]
    Failures(#[source] prometheus::Error),
    #[error("cannot create the reconcile duration histogram")]
    Duration(#[source] prometheus::Error),
    #[error("cannot create metric {metric}")]
    Create {
        metric: &'static str,
        #[source]
        source: prometheus::Error,
    },
    #[error("cannot register {metric} (registered twice in one registry?)")]
    Register {
        metric: &'static str,
        #[source]
        source: prometheus::Error,
    },
}

/// The metric families, registered once per registry; hand out one [`ControllerMetrics`] per
/// controller with [`ReconcileMetrics::controller`].
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    reconciliations: IntCounterVec,
    failures: IntCounterVec,
    duration: prometheus::HistogramVec,
}

impl ReconcileMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let reconciliations = IntCounterVec::new(
            Opts::new("reconciliations_total", "Reconciliations started.").namespace(METRIC_PREFIX),
            &["controller"],
        )
        .map_err(MetricsError::Reconciliations)?;
        let failures = IntCounterVec::new(
            Opts::new(
                "reconcile_failures_total",
                "Reconciliations that returned an error, by error kind.",
            )
            .namespace(METRIC_PREFIX),
            &["controller", "reason"],
        )
        .map_err(MetricsError::Failures)?;
        let duration = prometheus::HistogramVec::new(
            HistogramOpts::new(
                "reconcile_duration_seconds",
                "Time spent in one reconciliation.",
            )
            .namespace(METRIC_PREFIX)
            .buckets(DURATION_BUCKETS.to_vec()),
            &["controller"],
        )
        .map_err(MetricsError::Duration)?;
        register(registry, "reconciliations_total", &reconciliations)?;
        register(registry, "reconcile_failures_total", &failures)?;
        register(registry, "reconcile_duration_seconds", &duration)?;
        Ok(Self {
            reconciliations,
            failures,
            duration,
        })
    }

    /// The handle one controller records with.
    pub fn controller(&self, controller: &str) -> ControllerMetrics {
        ControllerMetrics {
            controller: controller.to_owned(),
            reconciliations: self.reconciliations.with_label_values(&[controller]),
            failures: self.failures.clone(),
            duration: self.duration.with_label_values(&[controller]),
        }
    }
}

fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    metric: &'static str,
    collector: &C,
) -> Result<(), MetricsError> {
    registry
        .register(Box::new(collector.clone()))
        .map_err(|source| MetricsError::Register { metric, source })
}

/// Creates a binary's own metric and registers it: `collector` is the result of its
/// constructor (e.g. `IntGaugeVec::new(opts, labels)`), `metric` its name for the error.
pub fn create<C: Collector + Clone + 'static>(
    registry: &Registry,
    metric: &'static str,
    collector: Result<C, prometheus::Error>,
) -> Result<C, MetricsError> {
    let collector = collector.map_err(|source| MetricsError::Create { metric, source })?;
    register(registry, metric, &collector)?;
    Ok(collector)
}

/// A binary's own metrics under one prefix: each one's name and help, stated once, become its
/// options; the constructor given makes the metric of them (with its labels or buckets).
#[derive(Clone, Copy)]
pub struct Families<'a> {
    registry: &'a Registry,
    prefix: &'static str,
}

impl<'a> Families<'a> {
    pub fn new(registry: &'a Registry, prefix: &'static str) -> Self {
        Self { registry, prefix }
    }

    /// Creates and registers `<prefix>_<name>`.
    pub fn add<C: Collector + Clone + 'static>(
        &self,
        name: &'static str,
        help: &str,
        new: impl FnOnce(Opts) -> prometheus::Result<C>,
    ) -> Result<C, MetricsError> {
        create(
            self.registry,
            name,
            new(Opts::new(name, help).namespace(self.prefix)),
        )
    }
}

/// Every metric of `registry` in the text exposition format, as `/metrics` serves it (tests read
/// series from it); empty when a metric cannot be encoded.
pub fn exposition(registry: &Registry) -> String {
    prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap_or_default()
}

/// The series a binary publishes per object (namespace/name) and per zone, remembered so the
/// series of a deleted object can be dropped: a deleted object's gauges would otherwise report
/// its last values forever.
#[derive(Debug, Default)]
pub struct ObjectSeries {
    seen: Mutex<BTreeMap<(String, String), BTreeSet<String>>>,
}

impl ObjectSeries {
    /// Records that `namespace/name` has series, for these zones (among others seen before).
    pub fn note<'a>(&self, namespace: &str, name: &str, zones: impl IntoIterator<Item = &'a str>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.entry((namespace.to_owned(), name.to_owned()))
            .or_default()
            .extend(zones.into_iter().map(str::to_owned));
    }

    /// Calls `forget(namespace, name, zones)` for every object noted and not `live`, and
    /// forgets it.
    pub fn forget_deleted(
        &self,
        live: &BTreeSet<(String, String)>,
        mut forget: impl FnMut(&str, &str, &[String]),
    ) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|(namespace, name), zones| {
            let keep = live.contains(&(namespace.clone(), name.clone()));
            if !keep {
                let zones: Vec<String> = zones.iter().cloned().collect();
                forget(namespace, name, &zones);
            }
            keep
        });
    }
}

/// Per-controller handle, cheap to clone into the reconcile context.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    controller: String,
    reconciliations: IntCounter,
    failures: IntCounterVec,
    duration: Histogram,
}

impl ControllerMetrics {
    /// Convenience for a binary with a single controller.
    pub fn new(registry: &Registry, controller: &str) -> Result<Self, MetricsError> {
        Ok(ReconcileMetrics::register(registry)?.controller(controller))
    }

    /// Counts one reconciliation and times it until the returned guard drops:
    /// `let _timer = metrics.reconcile_timer();` at the top of `reconcile`. A guard (rather than
    /// an explicit stop) also records reconciliations that return early through `?`.
    pub fn reconcile_timer(&self) -> ReconcileTimer {
        self.reconciliations.inc();
        ReconcileTimer {
            _timer: self.duration.start_timer(),
        }
    }

    /// Counts a failed reconciliation. `reason` must be bounded: an error variant name.
    pub fn reconcile_failure(&self, reason: &str) {
        self.failures
            .with_label_values(&[self.controller.as_str(), reason])
            .inc();
    }
}

/// Observes the elapsed time into the duration histogram when dropped.
#[must_use = "the duration is recorded when the timer drops; bind it with `let _timer = ...`"]
pub struct ReconcileTimer {
    _timer: HistogramTimer,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use prometheus::proto::MetricFamily;

    fn family<'a>(families: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
        families
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("{name} not registered"))
    }

    fn label<'a>(metric: &'a prometheus::proto::Metric, name: &str) -> &'a str {
        metric
            .get_label()
            .iter()
            .find(|l| l.name() == name)
            .map(|l| l.value())
            .unwrap_or_default()
    }

    #[test]
    fn timer_records_one_observation_when_dropped() {
        let registry = Registry::new();
        let metrics = ControllerMetrics::new(&registry, "zau").unwrap();
        {
            let _timer = metrics.reconcile_timer();
            let families = registry.gather();
            let histogram = family(&families, "zone_aware_reconcile_duration_seconds");
            assert_eq!(
                histogram.get_metric()[0].get_histogram().get_sample_count(),
                0,
                "nothing observed while the reconcile runs"
            );
        }
        let families = registry.gather();
        let histogram = family(&families, "zone_aware_reconcile_duration_seconds");
        let metric = &histogram.get_metric()[0];
        assert_eq!(label(metric, "controller"), "zau");
        assert_eq!(metric.get_histogram().get_sample_count(), 1);
        let count = family(&families, "zone_aware_reconciliations_total");
        assert_eq!(count.get_metric()[0].get_counter().get_value(), 1.0);
    }

    #[test]
    fn failures_are_labelled_by_controller_and_reason() {
        let registry = Registry::new();
        let families = ReconcileMetrics::register(&registry).unwrap();
        let zau = families.controller("zau");
        let zdb = families.controller("zdb");
        zau.reconcile_failure("AlarmUnavailable");
        zau.reconcile_failure("AlarmUnavailable");
        zdb.reconcile_failure("Conflict");

        let gathered = registry.gather();
        let failures = family(&gathered, "zone_aware_reconcile_failures_total");
        let value = |controller: &str, reason: &str| {
            failures
                .get_metric()
                .iter()
                .find(|m| label(m, "controller") == controller && label(m, "reason") == reason)
                .map(|m| m.get_counter().get_value())
        };
        assert_eq!(value("zau", "AlarmUnavailable"), Some(2.0));
        assert_eq!(value("zdb", "Conflict"), Some(1.0));
        assert_eq!(value("zau", "Conflict"), None);
    }

    #[test]
    fn series_of_deleted_objects_are_forgotten_once() {
        let series = ObjectSeries::default();
        series.note("apps", "web", ["zone-a"]);
        series.note("apps", "web", ["zone-b"]);
        series.note("apps", "db", []);
        let live = BTreeSet::from([("apps".to_string(), "db".to_string())]);
        let mut forgotten = Vec::new();
        series.forget_deleted(&live, |namespace, name, zones| {
            forgotten.push(format!("{namespace}/{name} {}", zones.join(",")));
        });
        assert_eq!(forgotten, ["apps/web zone-a,zone-b"]);
        series.forget_deleted(&live, |_, name, _| panic!("{name} forgotten twice"));
    }

    #[test]
    fn registering_twice_in_one_registry_is_an_error() {
        let registry = Registry::new();
        ReconcileMetrics::register(&registry).unwrap();
        assert!(matches!(
            ReconcileMetrics::register(&registry),
            Err(MetricsError::Register { .. })
        ));
    }
}
