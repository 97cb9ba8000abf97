//! Budget and webhook metrics. Labels stay bounded: a decision's `reason` is one of a fixed set,
//! budgets are labelled by namespace/name (one series per CR and zone), never by pod.

use std::collections::BTreeMap;

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Registry};
use zone_api::ZoneDisruptionBudgetStatus;
use zone_operator::metrics::{Families, MetricsError};

const PREFIX: &str = "zone_aware_zdb";

/// An admission round-trip is one or two GETs and maybe a status write: milliseconds normally;
/// anything near the webhook's timeout (5 s) becomes a failed eviction.
const LATENCY_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0];

/// Evictions one status write records: one alone, up to a queue's worth in a storm.
const BATCH_BUCKETS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// Why an eviction was shed (the `why` label of `webhook_shed_total`), as the webhook says it.
const SHED_WHY: [&str; 3] = ["InFlight", "QueueFull", "NoTimeLeft"];

/// The `policy` label of the failure-policy gauge: a webhook's `failurePolicy`.
const FAILURE_POLICIES: [&str; 2] = ["Fail", "Ignore"];

/// Why the webhook answered as it did (the `reason` label).
pub use zone_views::budget::reason;

#[derive(Clone)]
pub struct ZdbMetrics {
    shed: IntCounterVec,
    conflict_retries: prometheus::IntCounter,
    batch_size: Histogram,
    queue_depth: IntGaugeVec,
    decisions: IntCounterVec,
    latency: Histogram,
    allowed: IntGaugeVec,
    unavailable: IntGaugeVec,
    shadow_denials: IntCounterVec,
    unconfirmed: IntCounterVec,
    failure_policy: IntGaugeVec,
    covers_evictions: IntGaugeVec,
}

impl ZdbMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let family = Families::new(registry, PREFIX);
        let metrics = Self {
            shed: family.add(
                                "webhook_shed_total",
                "Evictions refused at once under overload, by why: InFlight (too many decisions in this replica), QueueFull or NoTimeLeft (the budget's queue of evictions to record).",
                |o| IntCounterVec::new(o, &["why"]),
            )?,
            conflict_retries: family.add(
                                "webhook_conflict_retries_total",
                "Status writes of a batch of allowed evictions that lost to another writer (another replica, the status controller); the batch is decided again on the winner's version.",
                prometheus::IntCounter::with_opts,
            )?,
            batch_size: family.add(
                                "webhook_batch_size",
                "Evictions recorded by one successful status write (group commit).",
                |o| Histogram::with_opts(HistogramOpts::from(o).buckets(BATCH_BUCKETS.to_vec())),
            )?,
            queue_depth: family.add(
                                "webhook_queue_depth",
                "Evictions of a budget waiting for (or in) its next status write in this replica.",
                |o| IntGaugeVec::new(o, &["namespace", "name"]),
            )?,
            decisions: family.add(
                                "webhook_decisions_total",
                "Eviction admission decisions, by result (allowed, denied) and reason.",
                |o| IntCounterVec::new(o, &["result", "reason"]),
            )?,
            latency: family.add(
                                "webhook_duration_seconds",
                "Time to answer one eviction AdmissionReview.",
                |o| Histogram::with_opts(HistogramOpts::from(o).buckets(LATENCY_BUCKETS.to_vec())),
            )?,
            allowed: family.add(
                                "disruptions_allowed",
                "Evictions a ZoneDisruptionBudget allows now, per zone.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "zone"]),
            )?,
            shadow_denials: family.add(
                                "shadow_denials_total",
                "Evictions allowed only because the budget is in shadow mode (spec.dryRun).",
                |o| IntCounterVec::new(o, &["namespace", "name"]),
            )?,
            unconfirmed: family.add(
                "unconfirmed_evictions_total",
                "Evictions the webhook allowed and recorded whose pod still ran, the same pod, once the confirmation window passed: refused by the API server after the webhook, or reviews that did not come from the API server (forged). Their records were dropped.",
                |o| IntCounterVec::new(o, &["namespace", "name"]),
            )?,
            failure_policy: family.add(
                                "webhook_failure_policy",
                "Webhooks of the eviction webhook configuration at each failurePolicy (Fail, Ignore), as this replica last read it; Ignore above 0 for long means budgets are skipped whenever a call fails.",
                |o| IntGaugeVec::new(o, &["policy"]),
            )?,
            covers_evictions: family.add(
                "webhook_covers_evictions",
                "1 when the eviction webhook configuration, as this replica last read it, sends every CREATE of pods/eviction to this webhook; 0 when its rules, path or objectSelector let evictions bypass the budgets, or it is missing.",
                |o| IntGaugeVec::new(o, &["configuration"]),
            )?,
            unavailable: family.add(
                                "unavailable_pods",
                "Pods a ZoneDisruptionBudget counts as disrupted per zone: unhealthy, missing or evicted and not yet replaced (status.currentUnhealthy); above 0 the zone is disrupted and evictions elsewhere wait.",
                |o| IntGaugeVec::new(o, &["namespace", "name", "zone"]),
            )?,
        };
        // Closed label sets: their series exist at 0 before the first shed or configuration read.
        for why in SHED_WHY {
            metrics.shed.with_label_values(&[why]);
        }
        metrics.failure_policies(&[]);
        Ok(metrics)
    }

    /// The policies of the configuration's webhooks, as read (each `Fail` or `Ignore`, as
    /// spelled in the configuration).
    pub fn failure_policies(&self, observed: &[&str]) {
        for policy in FAILURE_POLICIES {
            let count = observed.iter().filter(|p| **p == policy).count();
            self.failure_policy
                .with_label_values(&[policy])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Whether the configuration `name` sends every eviction to this webhook.
    pub fn covers_evictions(&self, name: &str, covers: bool) {
        self.covers_evictions
            .with_label_values(&[name])
            .set(i64::from(covers));
    }

    pub fn decision(&self, allowed: bool, reason: &str) {
        let result = if allowed { "allowed" } else { "denied" };
        self.decisions.with_label_values(&[result, reason]).inc();
    }

    /// One eviction shed; `why` is one of [`SHED_WHY`].
    pub fn shed(&self, why: &'static str) {
        self.shed.with_label_values(&[why]).inc();
    }

    pub fn conflict_retry(&self) {
        self.conflict_retries.inc();
    }

    /// A status write that recorded `records` evictions at once.
    pub fn batch_written(&self, records: usize) {
        self.batch_size.observe(records as f64);
    }

    /// The depth of a budget's queue; an empty queue loses its series.
    pub fn queue_depth(&self, namespace: &str, name: &str, depth: usize) {
        if depth == 0 {
            let _ = self.queue_depth.remove_label_values(&[namespace, name]);
        } else {
            self.queue_depth
                .with_label_values(&[namespace, name])
                .set(i64::try_from(depth).unwrap_or(i64::MAX));
        }
    }

    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    pub fn shadow_denial(&self, namespace: &str, name: &str) {
        self.shadow_denials
            .with_label_values(&[namespace, name])
            .inc();
    }

    /// `records` evictions of a budget dropped as not carried out.
    pub fn unconfirmed(&self, namespace: &str, name: &str, records: usize) {
        if records > 0 {
            self.unconfirmed
                .with_label_values(&[namespace, name])
                .inc_by(u64::try_from(records).unwrap_or(u64::MAX));
        }
    }

    /// Publishes one budget's disruptionsAllowed and currentUnhealthy; zones no longer present
    /// lose their series.
    pub fn observe(
        &self,
        namespace: &str,
        name: &str,
        previous: Option<&ZoneDisruptionBudgetStatus>,
        status: &ZoneDisruptionBudgetStatus,
    ) {
        type PerZone = fn(&ZoneDisruptionBudgetStatus) -> &BTreeMap<String, i32>;
        let gauges: [(&IntGaugeVec, PerZone); 2] = [
            (&self.allowed, |s| &s.disruptions_allowed),
            (&self.unavailable, |s| &s.current_unhealthy),
        ];
        for (gauge, per_zone) in gauges {
            let now = per_zone(status);
            for zone in previous.map(per_zone).into_iter().flat_map(BTreeMap::keys) {
                if !now.contains_key(zone) {
                    let _ = gauge.remove_label_values(&[namespace, name, zone]);
                }
            }
            for (zone, value) in now {
                gauge
                    .with_label_values(&[namespace, name, zone])
                    .set(i64::from(*value));
            }
        }
    }

    /// The zones `status` has series for (to drop them with the budget).
    pub fn zones(status: &ZoneDisruptionBudgetStatus) -> impl Iterator<Item = &str> {
        status
            .disruptions_allowed
            .keys()
            .chain(status.current_unhealthy.keys())
            .map(String::as_str)
    }

    /// Drops the series of a deleted budget.
    pub fn forget(&self, namespace: &str, name: &str, zones: &[String]) {
        for zone in zones {
            let _ = self.allowed.remove_label_values(&[namespace, name, zone]);
            let _ = self
                .unavailable
                .remove_label_values(&[namespace, name, zone]);
        }
        let _ = self.shadow_denials.remove_label_values(&[namespace, name]);
        let _ = self.unconfirmed.remove_label_values(&[namespace, name]);
    }
}

/// The metric families this binary's `/metrics` serves: the runtime's common families and
/// [`ZdbMetrics`], registered as `main` registers them, every labelled family with one sample
/// series (a family without a series is not served), read over HTTP from the runtime's server.
/// For tests that compare them with the names dashboards and alerts use.
#[cfg(test)]
#[allow(clippy::expect_used)]
pub(crate) fn served_metric_families() -> std::collections::BTreeSet<String> {
    let registry = zone_operator::testing::controller_registry(crate::NAME);
    zone_operator::testing::register_zone_nodes(&registry);
    let metrics = ZdbMetrics::register(&registry).expect("the budget metrics register");
    metrics.decision(false, reason::ZONE_BUDGET_EXHAUSTED);
    metrics.queue_depth("apps", "web", 1);
    metrics.shadow_denial("apps", "web");
    metrics.unconfirmed("apps", "web", 1);
    metrics.covers_evictions("zone-aware-eviction-webhook", true);
    let status = ZoneDisruptionBudgetStatus {
        disruptions_allowed: BTreeMap::from([("zone-a".to_owned(), 1)]),
        current_unhealthy: BTreeMap::from([("zone-a".to_owned(), 0)]),
        ..Default::default()
    };
    metrics.observe("apps", "web", None, &status);
    zone_operator::testing::served_metric_families(&registry).expect("/metrics answers")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn decisions_and_budgets_become_series() {
        let registry = Registry::new();
        let metrics = ZdbMetrics::register(&registry).unwrap();
        metrics.decision(false, reason::ZONE_BUDGET_EXHAUSTED);
        metrics.decision(true, reason::RECORDED);
        metrics.latency().observe(0.01);
        let status = ZoneDisruptionBudgetStatus {
            disruptions_allowed: BTreeMap::from([("zone-a".into(), 2), ("zone-b".into(), 0)]),
            ..Default::default()
        };
        metrics.observe("apps", "web", None, &status);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(
            r#"zone_aware_zdb_webhook_decisions_total{reason="ZoneBudgetExhausted",result="denied"} 1"#
        ));
        assert!(text.contains(
            r#"zone_aware_zdb_disruptions_allowed{name="web",namespace="apps",zone="zone-a"} 2"#
        ));
        let shrunk = ZoneDisruptionBudgetStatus {
            disruptions_allowed: BTreeMap::from([("zone-a".into(), 1)]),
            ..Default::default()
        };
        metrics.observe("apps", "web", Some(&status), &shrunk);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(r#"zone="zone-b""#));
    }

    #[test]
    fn failure_policies_count_each_policy_from_zero() {
        let registry = Registry::new();
        let metrics = ZdbMetrics::register(&registry).unwrap();
        let gauge =
            |policy: &str| format!(r#"zone_aware_zdb_webhook_failure_policy{{policy="{policy}"}}"#);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(&format!("{} 0", gauge("Fail"))), "{text}");
        assert!(text.contains(&format!("{} 0", gauge("Ignore"))), "{text}");
        metrics.failure_policies(&["Fail", "Ignore", "Fail"]);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(&format!("{} 2", gauge("Fail"))), "{text}");
        assert!(text.contains(&format!("{} 1", gauge("Ignore"))), "{text}");
    }

    #[test]
    fn unavailable_pods_follow_the_status_and_go_with_the_budget() {
        let registry = Registry::new();
        let metrics = ZdbMetrics::register(&registry).unwrap();
        let status = ZoneDisruptionBudgetStatus {
            disruptions_allowed: BTreeMap::from([("zone-a".into(), 0), ("zone-b".into(), 0)]),
            current_unhealthy: BTreeMap::from([("zone-a".into(), 2), ("zone-b".into(), 0)]),
            ..Default::default()
        };
        metrics.observe("apps", "web", None, &status);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(
            r#"zone_aware_zdb_unavailable_pods{name="web",namespace="apps",zone="zone-a"} 2"#
        ));
        assert!(text.contains(
            r#"zone_aware_zdb_unavailable_pods{name="web",namespace="apps",zone="zone-b"} 0"#
        ));
        let shrunk = ZoneDisruptionBudgetStatus {
            disruptions_allowed: BTreeMap::from([("zone-a".into(), 1)]),
            current_unhealthy: BTreeMap::from([("zone-a".into(), 0)]),
            ..Default::default()
        };
        metrics.observe("apps", "web", Some(&status), &shrunk);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(text.contains(
            r#"zone_aware_zdb_unavailable_pods{name="web",namespace="apps",zone="zone-a"} 0"#
        ));
        assert!(!text.contains(r#"zone="zone-b""#), "{text}");
        let zones: Vec<String> = ZdbMetrics::zones(&shrunk).map(str::to_owned).collect();
        metrics.forget("apps", "web", &zones);
        let text = zone_operator::metrics::exposition(&registry);
        assert!(!text.contains(r#"namespace="apps""#), "{text}");
    }

    #[test]
    fn closed_label_sets_exist_at_zero_from_the_start() {
        let registry = Registry::new();
        ZdbMetrics::register(&registry).unwrap();
        let text = zone_operator::metrics::exposition(&registry);
        for why in SHED_WHY {
            assert!(
                text.contains(&format!(
                    r#"zone_aware_zdb_webhook_shed_total{{why="{why}"}} 0"#
                )),
                "{text}"
            );
        }
        for policy in ["Fail", "Ignore"] {
            assert!(text.contains(&format!(
                r#"zone_aware_zdb_webhook_failure_policy{{policy="{policy}"}} 0"#
            )));
        }
    }

    #[test]
    fn the_binary_serves_the_runtime_s_families_and_its_own() {
        zone_operator::testing::assert_controller_serves(
            &served_metric_families(),
            &[
                "zdb_controller_build_info",
                "zone_aware_zdb_unavailable_pods",
                "zone_aware_zdb_disruptions_allowed",
                "zone_aware_zdb_webhook_decisions_total",
                "zone_aware_zdb_webhook_queue_depth",
            ],
        );
    }
}

#[cfg(test)]
zone_monitoring::every_metric_the_mixin_reads_is_served!(crate::NAME, served_metric_families());
