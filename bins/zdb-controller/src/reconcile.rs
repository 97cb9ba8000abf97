//! One reconcile of a ZoneDisruptionBudget: validate → select its pods (from the cache) → expected
//! pods (owners, read from the API) → prune records → budget (`zone_topology::budget`) → status,
//! written only when it changed, re-read and recomputed when the webhook wrote first.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::core::{PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use zone_api::zdb::condition;
use zone_api::{ZoneDisruptionBudget, ZoneDisruptionBudgetStatus};
use zone_operator::{ControllerMetrics, EventPublisher};
use zone_topology::budget::{self, BudgetInput, BudgetPod, DISRUPTION_TTL_MS, ZoneBudget};

use crate::expected::{self, ApiLookup, LookupError};
use crate::metrics::ZdbMetrics;
use crate::pods;
use crate::status::{self, StatusError, reason};
use crate::view;

/// After a failed reconcile (API error), retry after this long.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);

/// Status writes that lose to another writer are recomputed from a fresh read this many times
/// before the reconcile fails (and is retried later).
const WRITE_ATTEMPTS: usize = 5;

/// The API server stores times to the second.
const STORED_TIME_RESOLUTION_MS: i64 = 1000;

pub struct Context {
    pub client: Client,
    pub zdbs: Store<ZoneDisruptionBudget>,
    pub pods: Store<Pod>,
    pub nodes: Store<PartialObjectMeta<Node>>,
    pub events: EventPublisher,
    pub metrics: ControllerMetrics,
    pub zdb_metrics: ZdbMetrics,
    pub zone_label: String,
    /// namespace/name → zones of the budgets seen, to drop the metric series of deleted ones.
    seen: Mutex<BTreeMap<(String, String), Vec<String>>>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        zdbs: Store<ZoneDisruptionBudget>,
        pods: Store<Pod>,
        nodes: Store<PartialObjectMeta<Node>>,
        events: EventPublisher,
        metrics: ControllerMetrics,
        zdb_metrics: ZdbMetrics,
        zone_label: String,
    ) -> Self {
        Self {
            client,
            zdbs,
            pods,
            nodes,
            events,
            metrics,
            zdb_metrics,
            zone_label,
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    fn forget_deleted(&self) {
        let live: HashSet<(String, String)> = self
            .zdbs
            .state()
            .iter()
            .map(|z| (z.namespace().unwrap_or_default(), z.name_any()))
            .collect();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.retain(|(namespace, name), zones| {
            let keep = live.contains(&(namespace.clone(), name.clone()));
            if !keep {
                self.zdb_metrics.forget(namespace, name, zones);
            }
            keep
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
    #[error("cannot re-read ZoneDisruptionBudget {namespace}/{name} after a write conflict")]
    Reread {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError {
    /// Bounded label for the failures metric.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Incomplete(_) => "Incomplete",
            ReconcileError::Status(_) => "WriteStatus",
            ReconcileError::Owners(_) => "ReadOwners",
            ReconcileError::Reread { .. } => "Reread",
        }
    }
}

/// An event to publish once the status is written.
struct Note {
    warning: bool,
    reason: &'static str,
    message: String,
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

    let mut object = (*zdb).clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let previous = object.status.clone().unwrap_or_default();
        let mut next = previous.clone();
        let mut notes = Vec::new();
        let action = compute(&object, &ctx, &mut next, &mut notes).await?;
        if next == previous {
            ctx.zdb_metrics.observe(&namespace, &name, None, &next);
            remember(&ctx, &namespace, &name, &next);
            return Ok(action);
        }
        match status::replace(&api, &object, next.clone()).await {
            Ok(_) => {
                ctx.zdb_metrics
                    .observe(&namespace, &name, Some(&previous), &next);
                remember(&ctx, &namespace, &name, &next);
                let regarding = object.object_ref(&());
                for note in notes {
                    if note.warning {
                        ctx.events
                            .warning(&regarding, note.reason, "Reconcile", &note.message)
                            .await;
                    } else {
                        ctx.events
                            .normal(&regarding, note.reason, "Reconcile", &note.message)
                            .await;
                    }
                }
                return Ok(action);
            }
            Err(error) if error.is_conflict() && attempt < WRITE_ATTEMPTS => {
                // The webhook recorded a disruption (or the spec changed) since our read: start
                // again from the stored object so no record is lost.
                tracing::debug!(namespace = %namespace, name = %name, attempt, "status write conflict; re-reading");
                object = api
                    .get(&name)
                    .await
                    .map_err(|source| ReconcileError::Reread {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

fn remember(ctx: &Context, namespace: &str, name: &str, status: &ZoneDisruptionBudgetStatus) {
    let mut seen = ctx
        .seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let zones = seen
        .entry((namespace.to_string(), name.to_string()))
        .or_default();
    for zone in status.disruptions_allowed.keys() {
        if !zones.contains(zone) {
            zones.push(zone.clone());
        }
    }
}

pub fn error_policy(
    zdb: Arc<ZoneDisruptionBudget>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.reconcile_failure(error.kind());
    tracing::warn!(
        namespace = %zdb.namespace().unwrap_or_default(),
        name = %zdb.name_any(),
        error = %error,
        source = ?std::error::Error::source(error),
        "reconcile failed"
    );
    Action::requeue(ERROR_RETRY)
}

/// Marks the budget as not enforceable: Invalid condition, one Warning event per generation and
/// message; nothing else changes until the spec does (no requeue).
fn invalid(
    next: &mut ZoneDisruptionBudgetStatus,
    notes: &mut Vec<Note>,
    why: &'static str,
    message: String,
) -> Action {
    if !status::already_reported(next, condition::INVALID, why, &message) {
        notes.push(Note {
            warning: true,
            reason: why,
            message: message.clone(),
        });
    }
    status::set(next, condition::INVALID, true, why, message.clone());
    status::set(
        next,
        condition::READY,
        false,
        why,
        "the webhook does not enforce this budget until the spec is fixed",
    );
    Action::await_change()
}

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

async fn compute(
    zdb: &ZoneDisruptionBudget,
    ctx: &Context,
    next: &mut ZoneDisruptionBudgetStatus,
    notes: &mut Vec<Note>,
) -> Result<Action, ReconcileError> {
    let namespace = zdb.namespace().unwrap_or_default();
    next.observed_generation = zdb.metadata.generation.unwrap_or(0);
    let valid = match zdb.spec.validate() {
        Ok(valid) => valid,
        Err(error) => {
            return Ok(invalid(
                next,
                notes,
                reason::INVALID_SPEC,
                error.to_string(),
            ));
        }
    };
    let selector = match Selector::try_from(valid.selector.clone()) {
        Ok(selector) => selector,
        Err(error) => {
            let message = format!("spec.selector: {error}");
            return Ok(invalid(next, notes, reason::INVALID_SPEC, message));
        }
    };
    let selected: Vec<Arc<Pod>> = ctx.pods.state_filter(|pod| {
        pod.metadata.namespace.as_deref() == Some(namespace.as_str())
            && selector.matches(pod.labels())
    });
    if let Some((other, pod)) = overlapping(zdb, &ctx.zdbs, &selected) {
        let message = format!(
            "pod {pod} is also selected by ZoneDisruptionBudget {other}: a pod may have one budget; the webhook refuses evictions of such pods"
        );
        return Ok(invalid(next, notes, reason::OVERLAPPING, message));
    }
    status::set(next, condition::INVALID, false, reason::VALID, "");

    let refs: Vec<&Pod> = selected.iter().map(AsRef::as_ref).collect();
    let lookup = ApiLookup {
        client: ctx.client.clone(),
    };
    let expected_total = expected::expected_pods(&lookup, &namespace, &refs).await?;
    let budget_pods: Vec<_> = selected
        .iter()
        .map(|pod| pods::budget_pod(pod, pods::zone_of(pod, &ctx.nodes, &ctx.zone_label)))
        .collect();
    let now_ms = Timestamp::now().as_millisecond();
    // Times are stored to the second (truncated): a pod recreated within the second of its
    // record has the record's creation second, and must still count as recreated.
    let recreation_view: Vec<_> = budget_pods
        .iter()
        .map(|pod| BudgetPod {
            created_ms: pod.created_ms.saturating_add(STORED_TIME_RESOLUTION_MS - 1),
            ..pod.clone()
        })
        .collect();
    let records = view::settle_records(
        budget::prune(&view::records(next), &recreation_view, now_ms),
        &budget_pods,
    );
    let previous_expected = view::remembered_expected(next);
    let budget = budget::compute(&BudgetInput {
        expected_total,
        pods: &budget_pods,
        healthy_unnamed: &BTreeMap::new(),
        previous_expected: &previous_expected,
        disruptions: &records,
        max_unavailable: valid.max_unavailable,
    });
    let disrupted_before = next.disrupted_zones.clone();
    view::apply(&budget, &records, next);

    let description: Vec<String> = budget
        .zones
        .iter()
        .filter(|(_, b)| b.unhealthy > 0)
        .map(|(zone, b)| format!("{zone}: {}", blocking(b)))
        .collect();
    if description.is_empty() {
        status::set(next, condition::DISRUPTED, false, reason::NOT_DISRUPTED, "");
    } else {
        status::set(
            next,
            condition::DISRUPTED,
            true,
            reason::ZONE_DISRUPTED,
            description.join("; "),
        );
    }
    status::set(
        next,
        condition::READY,
        true,
        reason::COMPUTED,
        format!(
            "{expected_total} expected pod(s), maxUnavailable {} per zone",
            budget.max_unavailable
        ),
    );
    if next.disrupted_zones != disrupted_before {
        let message = if next.disrupted_zones.is_empty() {
            "no zone is disrupted: evictions are allowed in every zone".to_string()
        } else {
            format!(
                "disrupted zone(s): {}; evictions in other zones wait",
                description.join("; ")
            )
        };
        notes.push(Note {
            warning: false,
            reason: "DisruptedZonesChanged",
            message,
        });
    }

    // Records expire: come back when the first one does, nothing else needs a timer.
    let next_expiry = records
        .iter()
        .map(|r| {
            r.at_ms
                .saturating_add(DISRUPTION_TTL_MS)
                .saturating_sub(now_ms)
        })
        .min();
    Ok(match next_expiry {
        Some(ms) => Action::requeue(Duration::from_millis(
            u64::try_from(ms.max(0)).unwrap_or(0) + 1000,
        )),
        None => Action::await_change(),
    })
}
