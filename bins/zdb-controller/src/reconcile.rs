//! One reconcile of a ZoneDisruptionBudget, as a pipeline:
//!
//! 1. **observe**: validate the spec, select its pods from the cache, refuse overlapping budgets
//!    ([`Context::observe`]);
//! 2. **expected pods**: the owners' replica counts, read from the API ([`expected`]);
//! 3. **compute** (pure): prune the disruption records, the per-zone budget
//!    (`zone_topology::budget`), conditions and events ([`compute`]);
//! 4. **status**: written with the resourceVersion read; when the webhook wrote first (409) the
//!    budget is re-read and everything recomputed, so no record it made is lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::conditions::Conditions;
use zone_api::zdb::{condition, reason};
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};
use zone_operator::controller::{Failure, ReconcileContext};
use zone_operator::metrics::ObjectSeries;
use zone_operator::status::{self, ReplaceError, StatusError, Update};
use zone_operator::{
    Blocked, ControllerMetrics, EventPublisher, Invalid, NodeZones, PendingEvents,
};
use zone_topology::budget::{
    self, BudgetInput, BudgetPod, CONFIRMATION_WINDOW_MS, DISRUPTION_TTL_MS, Policy, ZoneBudget,
};

use crate::expected::{self, ApiLookup, LookupError};
use crate::metrics::ZdbMetrics;
use zone_views::budget::{pods, view};

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);

/// Status writes that lose to another writer are recomputed from a fresh read this many times
/// before the reconcile fails (and is retried later).
const WRITE_ATTEMPTS: usize = 5;

pub struct Context {
    pub client: Client,
    pub zdbs: Store<ZoneDisruptionBudget>,
    pub pods: Store<Pod>,
    pub zones: NodeZones,
    pub events: EventPublisher,
    pub metrics: ControllerMetrics,
    pub zdb_metrics: ZdbMetrics,
    /// The field manager of the status writes (`--field-manager`).
    pub field_manager: String,
    /// The budgets (and zones) with metric series, to drop those of deleted ones.
    pub series: ObjectSeries,
}

impl ReconcileContext for Context {
    fn failure_policy(&self) -> (&ControllerMetrics, Duration) {
        (&self.metrics, ERROR_RETRY)
    }
}

impl Context {
    fn forget_deleted(&self) {
        let live = self
            .zdbs
            .state()
            .iter()
            .map(|z| (z.namespace().unwrap_or_default(), z.name_any()))
            .collect();
        self.series.forget_deleted(&live, |namespace, name, zones| {
            self.zdb_metrics.forget(namespace, name, zones);
        });
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("ZoneDisruptionBudget {0} has no namespace")]
    Incomplete(String),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error(transparent)]
    Owners(#[from] LookupError),
}

impl Failure for ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Status(StatusError::Reread { .. }) => "Reread",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::Owners(_) => "ReadOwners",
        }
    }
}

/// The status one computation wants, and what goes with it.
pub struct Computed {
    /// The status it started from (the object's, as read).
    pub previous: ZoneDisruptionBudgetStatus,
    pub status: ZoneDisruptionBudgetStatus,
    pub events: PendingEvents,
    pub action: Action,
    /// The pods whose records a fresh read found not carried out (see `Context::unconfirmed`).
    pub unconfirmed: Vec<String>,
}

/// The selector of a valid budget, for matching pods.
pub fn selector_of(zdb: &ZoneDisruptionBudget) -> Option<Selector> {
    let valid = zdb.spec.validate().ok()?;
    Selector::try_from(valid.selector).ok()
}

/// Entry point for the kube Controller.
pub async fn reconcile(
    zdb: Arc<ZoneDisruptionBudget>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let _timer = ctx.metrics.reconcile_timer();
    let Some(namespace) = zdb.namespace() else {
        return Err(ReconcileError::Incomplete(zdb.name_any()));
    };
    let name = zdb.name_any();
    ctx.forget_deleted();
    let api: Api<ZoneDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);

    let update = |mut object: ZoneDisruptionBudget| {
        let ctx = ctx.clone();
        async move {
            let computed = ctx.compute_for(&object).await?;
            if computed.status == computed.previous {
                return Ok::<_, ReconcileError>(Update::Keep(computed));
            }
            object.status = Some(computed.status.clone());
            Ok(Update::Write(object, computed))
        }
    };
    let first = (*zdb).clone();
    let replaced = status::replace_status(&api, first, &ctx.field_manager, WRITE_ATTEMPTS, update)
        .await
        .map_err(|error| match error {
            ReplaceError::Update(error) => error,
            ReplaceError::Status(error) => error.into(),
        })?;
    let computed = replaced.value;
    let written = replaced.stored.is_some();
    ctx.zdb_metrics.observe(
        &namespace,
        &name,
        written.then_some(&computed.previous),
        &computed.status,
    );
    if written {
        let dropped = computed
            .unconfirmed
            .iter()
            .filter(|pod| {
                computed.previous.disrupted_pods.contains_key(*pod)
                    && !computed.status.disrupted_pods.contains_key(*pod)
            })
            .count();
        ctx.zdb_metrics.unconfirmed(&namespace, &name, dropped);
    }
    ctx.series
        .note(&namespace, &name, ZdbMetrics::zones(&computed.status));
    if let Some(stored) = replaced.stored {
        computed
            .events
            .publish(&ctx.events, &stored.object_ref(&()))
            .await;
    }
    Ok(computed.action)
}

/// What observing found: a valid budget's pods.
struct Observed {
    selected: Vec<Arc<Pod>>,
    policy: Policy,
}

impl Context {
    /// Observe → expected pods → compute, from `zdb` as read.
    async fn compute_for(&self, zdb: &ZoneDisruptionBudget) -> Result<Computed, ReconcileError> {
        let namespace = zdb.namespace().unwrap_or_default();
        let previous = zdb.status.clone().unwrap_or_default();
        let mut draft = Draft::new(ZoneDisruptionBudgetStatus {
            observed_generation: zdb.metadata.generation.unwrap_or(0),
            ..previous.clone()
        });
        let mut unconfirmed = Vec::new();
        let action = match self.observe(zdb, &namespace) {
            Err(invalid) => draft.refuse(invalid, BLOCKED),
            Ok(observed) => {
                let refs: Vec<&Pod> = observed.selected.iter().map(AsRef::as_ref).collect();
                let lookup = ApiLookup {
                    client: self.client.clone(),
                };
                let expected_total = expected::expected_pods(&lookup, &namespace, &refs).await?;
                let budget_pod = |pod: &Arc<Pod>| pods::budget_pod(pod, self.zones.zone_of(pod));
                let pods: Vec<BudgetPod> = observed.selected.iter().map(budget_pod).collect();
                let standing: Vec<BudgetPod> = observed
                    .selected
                    .iter()
                    .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                    .map(budget_pod)
                    .collect();
                let now_ms = Timestamp::now().as_millisecond();
                let records = view::records(&previous);
                let candidates = budget::unconfirmed(&records, &standing, now_ms);
                unconfirmed = self.unconfirmed(&namespace, &candidates).await;
                compute(
                    &BudgetView {
                        pods: &pods,
                        standing: &standing,
                        unconfirmed: &unconfirmed,
                        expected_total,
                        policy: observed.policy,
                        now_ms,
                    },
                    &mut draft,
                )
            }
        };
        log_ended_records(zdb, &previous, &draft.status);
        Ok(Computed {
            previous,
            status: draft.status,
            events: draft.events,
            action,
            unconfirmed,
        })
    }

    /// Of the records whose pod the cache shows still standing past the confirmation window,
    /// the pods a fresh read confirms: there, not terminating, created before the record. The
    /// cache may lag the eviction by a moment; a record is dropped only on what the API server
    /// says now. A failed read keeps the record (it counts until it expires, as before).
    async fn unconfirmed(
        &self,
        namespace: &str,
        candidates: &[&budget::Disruption],
    ) -> Vec<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut confirmed = Vec::new();
        for record in candidates {
            match api.get_opt(&record.pod).await {
                Ok(Some(pod)) if pod.metadata.deletion_timestamp.is_none() => {
                    let fresh = pods::budget_pod(&pod, self.zones.zone_of(&pod));
                    if budget::confirmation_deadline(record, &fresh).is_some() {
                        confirmed.push(record.pod.clone());
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%namespace, pod = %record.pod, %error, "cannot read the pod of an eviction record; the record stays");
                }
            }
        }
        confirmed
    }

    /// The budget's pods from the cache; the spec must be valid and no other budget of the
    /// namespace may select one of them.
    fn observe(&self, zdb: &ZoneDisruptionBudget, namespace: &str) -> Result<Observed, Invalid> {
        let valid = zdb.spec.validate().map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: error.to_string(),
        })?;
        let selector = Selector::try_from(valid.selector.clone()).map_err(|error| Invalid {
            reason: reason::INVALID_SPEC,
            message: format!("spec.selector: {error}"),
        })?;
        let selected = self.pods.state_filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(namespace) && selector.matches(pod.labels())
        });
        if let Some((other, pod)) = overlapping(zdb, &self.zdbs, &selected) {
            return Err(Invalid {
                reason: reason::OVERLAPPING,
                message: format!(
                    "pod {pod} is also selected by ZoneDisruptionBudget {other}: a pod may have one budget; the webhook refuses evictions of such pods"
                ),
            });
        }
        Ok(Observed {
            selected,
            policy: valid.policy,
        })
    }
}

/// Logs each eviction record the computation ended (its pod recreated and scheduled, replaced,
/// or expired): when a budget counts an evicted pod again is otherwise visible only as a number.
fn log_ended_records(
    zdb: &ZoneDisruptionBudget,
    previous: &ZoneDisruptionBudgetStatus,
    next: &ZoneDisruptionBudgetStatus,
) {
    for (pod, at) in &previous.disrupted_pods {
        if !next.disrupted_pods.contains_key(pod) {
            let zone = previous.disrupted_pod_zones.get(pod).map(String::as_str);
            tracing::info!(namespace = ?zdb.namespace(), budget = %zdb.name_any(), pod = %pod, zone = ?zone, recorded = %at.0, "eviction record ended");
        }
    }
}

/// The status being built and the events it will publish once written.
pub type Draft = zone_operator::Draft<ZoneDisruptionBudgetStatus>;

/// What an invalid spec stops: the budget is not enforced, and nothing else changes until the
/// spec does (no requeue).
const BLOCKED: Blocked = Blocked {
    condition: condition::READY,
    consequence: "the webhook does not enforce this budget until the spec is fixed",
};

/// The other valid budgets of the namespace that select one of `selected`: (budget, pod).
fn overlapping(
    zdb: &ZoneDisruptionBudget,
    zdbs: &Store<ZoneDisruptionBudget>,
    selected: &[Arc<Pod>],
) -> Option<(String, String)> {
    let namespace = zdb.namespace();
    zdbs.state().iter().find_map(|other| {
        if other.namespace() != namespace || other.name_any() == zdb.name_any() {
            return None;
        }
        let selector = selector_of(other)?;
        selected
            .iter()
            .find(|pod| selector.matches(pod.labels()))
            .map(|pod| (other.name_any(), pod.name_any()))
    })
}

/// What blocks a zone, for the Disrupted condition: `web-1, web-4; 1 missing`.
fn blocking(budget: &ZoneBudget) -> String {
    let mut parts = Vec::new();
    if !budget.blocking_pods.is_empty() {
        parts.push(budget.blocking_pods.join(", "));
    }
    if budget.missing > 0 {
        parts.push(format!("{} missing", budget.missing));
    }
    parts.join("; ")
}

/// The inputs of [`compute`]: plain values.
#[derive(Debug, Clone)]
pub struct BudgetView<'a> {
    /// The selected pods with their zones.
    pub pods: &'a [BudgetPod],
    /// Those of `pods` that are not terminating: a record of one of them waits for its eviction
    /// to be seen (`budget::confirmation_deadline`).
    pub standing: &'a [BudgetPod],
    /// The pods of records whose eviction was not carried out: standing past the confirmation
    /// window, by a fresh read (see [`Context::unconfirmed`]). Their records are dropped.
    pub unconfirmed: &'a [String],
    /// Pods the owners want (their replica counts).
    pub expected_total: u32,
    pub policy: Policy,
    pub now_ms: i64,
}

/// The budget of a valid spec (pure): records pruned (expired, or their pod recreated),
/// disruptions allowed per zone, the Disrupted and Ready conditions, an event when the disrupted
/// zones change, and when to come back (the first record's expiry).
pub fn compute(view: &BudgetView<'_>, draft: &mut Draft) -> Action {
    let next = &mut draft.status;
    next.set_condition(condition::INVALID, false, reason::VALID, "");
    let previous_expected = view::remembered_expected(next);
    let settled = view::settle_records(
        budget::prune(&view::records(next), view.pods, view.now_ms),
        view.pods,
        view::replaced(view.expected_total, &previous_expected, view.pods.len()),
    );
    let records = drop_unconfirmed(settled, view.unconfirmed, &mut draft.events);
    let budget = budget::compute(&BudgetInput {
        expected_total: view.expected_total,
        pods: view.pods,
        healthy_unnamed: &BTreeMap::new(),
        previous_expected: &previous_expected,
        disruptions: &records,
        policy: view.policy,
    });
    let disrupted_before = next.disrupted_zones.clone();
    view::apply(&budget, &records, next);

    view::set_disrupted(next, view.policy);
    let was_frozen = next.true_reason(condition::READY) == Some(reason::FROZEN);
    let limit = view.policy.limit;
    if budget.frozen {
        next.set_condition(
            condition::READY,
            true,
            reason::FROZEN,
            format!(
                "frozen: {limit}, every eviction of the {} expected pod(s) is denied",
                view.expected_total
            ),
        );
        if !was_frozen {
            let field = limit.thawed_when();
            draft.events.normal(
                reason::FROZEN,
                "Reconcile",
                format!(
                    "{limit}: the budget is frozen, every eviction of its running pods is denied until {field}"
                ),
            );
        }
    } else {
        let per_zone = match budget.max_unavailable() {
            Some(max) => format!("maxUnavailable {max}"),
            None => limit.to_string(),
        };
        next.set_condition(
            condition::READY,
            true,
            reason::COMPUTED,
            format!(
                "{} expected pod(s), {per_zone} per zone",
                view.expected_total
            ),
        );
    }
    if next.disrupted_zones != disrupted_before {
        // The event names the unavailable pods, which the controller sees (the condition,
        // written by the webhook too, counts them).
        let description = view::unavailable_zones(&budget, blocking);
        let message = if next.disrupted_zones.is_empty() {
            "no zone is disrupted: evictions are allowed in every zone".to_string()
        } else {
            format!(
                "disrupted zone(s): {}; evictions in other zones wait",
                description.join("; ")
            )
        };
        draft
            .events
            .normal("DisruptedZonesChanged", "Reconcile", message);
    }

    next_deadline(&records, view.standing, view.now_ms)
}

/// `records` without those of the pods in `unconfirmed` (their evictions were not carried out),
/// each dropped with a warning.
fn drop_unconfirmed(
    records: Vec<budget::Disruption>,
    unconfirmed: &[String],
    events: &mut PendingEvents,
) -> Vec<budget::Disruption> {
    let (kept, dropped): (Vec<_>, Vec<_>) = records
        .into_iter()
        .partition(|record| !unconfirmed.contains(&record.pod));
    for record in &dropped {
        events.warning(
            reason::EVICTION_UNCONFIRMED,
            "Reconcile",
            format!(
                "the eviction of pod {} ({}) recorded at {} was not carried out: the pod still runs {} s later, so its record no longer holds the other zones (the API server refused the eviction after the webhook allowed it, or the review did not come from the API server)",
                record.pod,
                record.zone,
                view::time_of_ms(record.at_ms).0,
                CONFIRMATION_WINDOW_MS / 1000
            ),
        );
    }
    kept
}

/// Records expire, and a record whose pod still stands must see it go within the confirmation
/// window: come back when the first of these deadlines passes (a second after, so it has),
/// nothing else needs a timer.
fn next_deadline(records: &[budget::Disruption], standing: &[BudgetPod], now_ms: i64) -> Action {
    let next_expiry = records
        .iter()
        .flat_map(|r| {
            let confirmation = standing
                .iter()
                .filter_map(|pod| budget::confirmation_deadline(r, pod));
            std::iter::once(r.at_ms.saturating_add(DISRUPTION_TTL_MS)).chain(confirmation)
        })
        .map(|deadline| deadline.saturating_sub(now_ms))
        .min();
    match next_expiry {
        Some(ms) => Action::requeue(Duration::from_millis(
            u64::try_from(ms.max(0)).unwrap_or(0) + 1000,
        )),
        None => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_topology::{IntOrPercent, Zone};

    const NOW_MS: i64 = 1_800_000_000_000;

    fn pod(name: &str, zone: &str, healthy: bool) -> BudgetPod {
        BudgetPod {
            name: name.into(),
            zone: Zone::known(zone),
            healthy,
            created_ms: NOW_MS - 3_600_000,
        }
    }

    fn recorded(pod: &str, zone: &str, ago_ms: i64) -> ZoneDisruptionBudgetStatus {
        ZoneDisruptionBudgetStatus {
            disrupted_pods: [(pod.to_string(), view::time_of_ms(NOW_MS - ago_ms))].into(),
            disrupted_pod_zones: [(pod.to_string(), zone.to_string())].into(),
            ..Default::default()
        }
    }

    /// What the webhook writes when it records an eviction is what the controller computes next
    /// from its cache (the pod still Ready there): the record costs one status write, not two.
    /// Also with a zone already holding an unready pod, which the condition counts.
    #[test]
    fn a_recorded_eviction_needs_no_second_write() {
        let compute_from = |pods: &[BudgetPod], status: ZoneDisruptionBudgetStatus| {
            let mut draft = Draft {
                status,
                ..Draft::default()
            };
            compute(
                &BudgetView {
                    standing: &[],
                    unconfirmed: &[],
                    pods,
                    expected_total: 6,
                    policy: Policy::max_unavailable(IntOrPercent::Int(2)),
                    now_ms: NOW_MS,
                },
                &mut draft,
            );
            draft.status
        };
        for unready in [false, true] {
            let pods = [
                pod("web-0", "a", true),
                pod("web-1", "b", true),
                pod("web-2", "c", true),
                pod("web-3", "a", !unready),
                pod("web-4", "b", true),
                pod("web-5", "c", true),
            ];
            let before = compute_from(&pods, ZoneDisruptionBudgetStatus::default());
            let mut recorded = before.clone();
            view::record(
                &mut recorded,
                "web-0",
                &Zone::known("a"),
                view::time_of_ms(NOW_MS),
                Policy::max_unavailable(IntOrPercent::Int(2)),
            );
            let condition = |s: &ZoneDisruptionBudgetStatus| {
                s.condition(condition::DISRUPTED)
                    .map(|c| (c.status.clone(), c.message.clone()))
            };
            let message = if unready {
                "a: web-0 evicted; 1 other pod(s) unavailable or missing"
            } else {
                "a: web-0 evicted"
            };
            assert_eq!(
                condition(&recorded),
                Some(("True".to_string(), message.to_string()))
            );
            let next = compute_from(&pods, recorded.clone());
            assert_eq!(next, recorded, "unready pod in a: {unready}");
        }
    }

    #[test]
    fn the_budget_follows_pods_and_records() {
        let all_healthy = [pod("web-0", "a", true), pod("web-1", "b", true)];
        let b_unhealthy = [pod("web-0", "a", true), pod("web-1", "b", false)];
        let b_missing = [pod("web-0", "a", true)];
        // (case, pods, status before, allowed in a, allowed in b, disrupted zones, events, requeues,
        // pods the owners want)
        type Case<'a> = (
            &'a str,
            &'a [BudgetPod],
            ZoneDisruptionBudgetStatus,
            i32,
            i32,
            &'a [&'a str],
            &'a [&'a str],
            bool,
            u32,
        );
        // After a computation that placed a pod in each zone.
        let placed = |status: ZoneDisruptionBudgetStatus| ZoneDisruptionBudgetStatus {
            expected_pods: [("a".to_string(), 1), ("b".to_string(), 1)].into(),
            ..status
        };
        let cases: [Case; 5] = [
            (
                "healthy",
                &all_healthy,
                Default::default(),
                1,
                1,
                &[],
                &[],
                false,
                2,
            ),
            (
                "an unhealthy pod holds its zone",
                &b_unhealthy,
                Default::default(),
                0,
                0,
                &["b"],
                &["DisruptedZonesChanged"],
                false,
                2,
            ),
            (
                "a gone pod's record stays while its owner misses a pod",
                &b_missing,
                placed(recorded("web-1", "b", 1_000)),
                0,
                0,
                &["b"],
                &["DisruptedZonesChanged"],
                true,
                2,
            ),
            (
                "an expired record is dropped",
                &all_healthy,
                recorded("web-1", "b", DISRUPTION_TTL_MS + 1),
                1,
                1,
                &[],
                &[],
                false,
                2,
            ),
            (
                "a recreated pod ends its record",
                &all_healthy,
                recorded("web-1", "b", 3_600_001),
                1,
                1,
                &[],
                &[],
                false,
                2,
            ),
        ];
        for (name, pods, before, allowed_a, allowed_b, disrupted, events, requeues, expected) in
            cases
        {
            let mut draft = Draft {
                status: before,
                ..Draft::default()
            };
            let action = compute(
                &BudgetView {
                    standing: &[],
                    unconfirmed: &[],
                    pods,
                    expected_total: expected,
                    policy: Policy::max_unavailable(IntOrPercent::Int(1)),
                    now_ms: NOW_MS,
                },
                &mut draft,
            );
            let status = &draft.status;
            assert_eq!(
                status.disruptions_allowed.get("a"),
                Some(&allowed_a),
                "{name}: a"
            );
            assert_eq!(
                status.disruptions_allowed.get("b"),
                Some(&allowed_b),
                "{name}: b"
            );
            assert_eq!(status.disrupted_zones, disrupted, "{name}");
            assert_eq!(
                status.disrupted_pods.is_empty(),
                !requeues,
                "{name}: records"
            );
            assert_eq!(
                status.true_reason(condition::DISRUPTED),
                (!disrupted.is_empty()).then_some(reason::ZONE_DISRUPTED),
                "{name}"
            );
            assert_eq!(
                status.true_reason(condition::READY),
                Some(reason::COMPUTED),
                "{name}"
            );
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, events, "{name}: events");
            assert_eq!(
                action == Action::await_change(),
                !requeues,
                "{name}: {action:?}"
            );
        }
    }

    #[test]
    fn zero_and_zero_percent_are_a_frozen_budget_not_an_invalid_one() {
        let pods: Vec<BudgetPod> = vec![pod("web-0", "a", true), pod("web-1", "b", true)];
        for zero in [IntOrPercent::Int(0), IntOrPercent::Percent(0)] {
            let view = BudgetView {
                standing: &[],
                unconfirmed: &[],
                pods: &pods,
                expected_total: 2,
                policy: Policy::max_unavailable(zero),
                now_ms: NOW_MS,
            };
            let mut draft = Draft::default();
            compute(&view, &mut draft);
            let status = &draft.status;
            assert_eq!(
                status.true_reason(condition::READY),
                Some(reason::FROZEN),
                "{zero}"
            );
            assert_eq!(status.true_reason(condition::INVALID), None, "{zero}");
            let ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == condition::READY)
                .unwrap();
            assert!(
                ready.message.starts_with("frozen: maxUnavailable"),
                "{ready:?}"
            );
            assert!(status.disruptions_allowed.values().all(|n| *n == 0));
            assert_eq!(status.desired_healthy.get("a"), Some(&1));
            let reasons: Vec<_> = draft.events.events().iter().map(|e| e.reason).collect();
            assert_eq!(reasons, [reason::FROZEN], "{zero}: one event as it freezes");

            // Once frozen, the next computation says nothing new; raised, it is a budget again.
            let mut again = Draft {
                status: draft.status.clone(),
                ..Draft::default()
            };
            compute(&view, &mut again);
            assert!(again.events.is_empty());
            let mut thawed = Draft {
                status: draft.status.clone(),
                ..Draft::default()
            };
            compute(
                &BudgetView {
                    policy: Policy::max_unavailable(IntOrPercent::Int(1)),
                    ..view
                },
                &mut thawed,
            );
            assert_eq!(
                thawed.status.true_reason(condition::READY),
                Some(reason::COMPUTED)
            );
            assert_eq!(thawed.status.disruptions_allowed.get("a"), Some(&1));
        }
    }

    /// minAvailable: per zone, the healthy pods it keeps (a percentage of the zone's pods) and
    /// the ones above it allowed; 100% is a freeze, said as such.
    #[test]
    fn min_available_is_computed_per_zone_and_100_percent_freezes() {
        let pods: Vec<BudgetPod> = vec![
            pod("web-0", "a", true),
            pod("web-1", "a", true),
            pod("web-2", "a", true),
            pod("web-3", "b", true),
        ];
        let view = BudgetView {
            standing: &[],
            unconfirmed: &[],
            pods: &pods,
            expected_total: 4,
            policy: Policy::min_available(IntOrPercent::Percent(50)),
            now_ms: NOW_MS,
        };
        let mut draft = Draft::default();
        compute(&view, &mut draft);
        let status = &draft.status;
        assert_eq!(status.true_reason(condition::READY), Some(reason::COMPUTED));
        let ready = status.condition(condition::READY).unwrap();
        assert_eq!(
            ready.message,
            "4 expected pod(s), minAvailable 50% per zone"
        );
        // zone a: 2 of 3 kept, 1 may go; zone b: its 1 pod kept.
        assert_eq!(
            (
                status.desired_healthy.get("a"),
                status.desired_healthy.get("b")
            ),
            (Some(&2), Some(&1))
        );
        assert_eq!(
            (
                status.disruptions_allowed.get("a"),
                status.disruptions_allowed.get("b")
            ),
            (Some(&1), Some(&0))
        );

        let mut frozen = Draft::default();
        compute(
            &BudgetView {
                standing: &[],
                unconfirmed: &[],
                policy: Policy::min_available(IntOrPercent::Percent(100)),
                ..view
            },
            &mut frozen,
        );
        assert_eq!(
            frozen.status.true_reason(condition::READY),
            Some(reason::FROZEN)
        );
        let ready = frozen.status.condition(condition::READY).unwrap();
        assert_eq!(
            ready.message,
            "frozen: minAvailable 100%, every eviction of the 4 expected pod(s) is denied"
        );
        let messages: Vec<_> = frozen
            .events
            .events()
            .iter()
            .map(|e| e.note.clone())
            .collect();
        assert_eq!(
            messages,
            [
                "minAvailable 100%: the budget is frozen, every eviction of its running pods is denied until minAvailable is lowered"
            ]
        );
    }

    #[test]
    fn an_invalid_budget_is_reported_once_per_generation() {
        let invalid = Invalid {
            reason: reason::INVALID_SPEC,
            message: "spec.selector: bad".into(),
        };
        let mut draft = Draft::default();
        assert_eq!(
            draft.refuse(invalid.clone(), BLOCKED),
            Action::await_change()
        );
        assert_eq!(draft.events.events().len(), 1);
        assert_eq!(draft.events.events()[0].action, "Validate");
        assert_eq!(
            draft.status.true_reason(condition::INVALID),
            Some(reason::INVALID_SPEC)
        );
        assert_eq!(draft.status.true_reason(condition::READY), None);
        let mut again = Draft {
            status: draft.status.clone(),
            ..Draft::default()
        };
        again.refuse(invalid, BLOCKED);
        assert!(
            again.events.is_empty(),
            "the same complaint is not repeated"
        );
    }

    /// A record whose pod still stands is looked at again when its confirmation window ends;
    /// once a fresh read finds the pod still there, the record is dropped with a warning, and
    /// the zones it held are free.
    #[test]
    fn a_record_whose_eviction_was_not_carried_out_is_dropped_after_the_window() {
        let pods = [pod("web-0", "a", true), pod("web-1", "b", true)];
        let view = BudgetView {
            pods: &pods,
            standing: &pods,
            unconfirmed: &[],
            expected_total: 2,
            policy: Policy::max_unavailable(IntOrPercent::Int(1)),
            now_ms: NOW_MS,
        };
        let mut waiting = Draft {
            status: recorded("web-0", "a", 2_000),
            ..Draft::default()
        };
        let action = compute(&view, &mut waiting);
        assert_eq!(waiting.status.disrupted_zones, ["a"]);
        // Recorded 2 s ago: back when the window ends, 8 s from now (and a second after).
        assert_eq!(
            action,
            Action::requeue(Duration::from_millis(
                u64::try_from(CONFIRMATION_WINDOW_MS - 2_000 + 1_000).unwrap()
            ))
        );
        assert!(
            waiting
                .events
                .events()
                .iter()
                .all(|e| e.reason != reason::EVICTION_UNCONFIRMED),
            "{:?}",
            waiting.events.events()
        );

        let unconfirmed = ["web-0".to_string()];
        let mut dropped = Draft {
            status: recorded("web-0", "a", CONFIRMATION_WINDOW_MS + 1_000),
            ..Draft::default()
        };
        let action = compute(
            &BudgetView {
                unconfirmed: &unconfirmed,
                ..view
            },
            &mut dropped,
        );
        assert!(
            dropped.status.disrupted_pods.is_empty(),
            "{:?}",
            dropped.status
        );
        assert!(dropped.status.disrupted_zones.is_empty());
        assert_eq!(dropped.status.disruptions_allowed.get("b"), Some(&1));
        assert_eq!(action, Action::await_change());
        let events = dropped.events.events();
        let warning = events
            .iter()
            .find(|e| e.reason == reason::EVICTION_UNCONFIRMED)
            .expect("a warning for the dropped record");
        assert!(warning.note.contains("web-0"), "{warning:?}");
    }
}
