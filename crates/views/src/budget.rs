//! A ZoneDisruptionBudget's decisions, from the API server's objects: the status as the budget
//! math sees it ([`view`]), a pod as the budget sees it ([`pods`]), the budget that selects a pod
//! ([`selecting`]), and evictions decided in order on one version of the budget ([`batch`]), with
//! the webhook's words ([`reason`], [`batch::denial_message`]). The zdb-controller's reconcile and
//! webhook decide with them, and `kubectl zone budget --drain` predicts with the same code.

pub mod batch;
pub mod pods;
pub mod view;

use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use zone_api::ZoneDisruptionBudget;

/// Why an eviction was answered as it was: the webhook's `reason` metric label, and the reason
/// `kubectl zone budget --drain` prints.
pub mod reason {
    pub const NO_BUDGET: &str = "NoBudget";
    pub const POD_NOT_FOUND: &str = "PodNotFound";
    pub const POD_UNAVAILABLE: &str = "PodUnavailable";
    pub const ALREADY_RECORDED: &str = "AlreadyRecorded";
    pub const RECORDED: &str = "Recorded";
    pub const DRY_RUN: &str = "DryRun";
    pub const SHADOW: &str = "ShadowMode";
    pub const INVALID_BUDGET: &str = "InvalidBudget";
    pub const OVERLAPPING_BUDGETS: &str = "OverlappingBudgets";
    pub const NOT_OBSERVED: &str = "StatusNotObserved";
    pub const OTHER_ZONE_DISRUPTED: &str = "OtherZoneDisrupted";
    pub const ZONE_BUDGET_EXHAUSTED: &str = "ZoneBudgetExhausted";
    /// The budget's maxUnavailable is 0 or 0%: every eviction of a running pod is refused.
    pub const FROZEN: &str = "Frozen";
    pub const CONFLICTS: &str = "TooManyConflicts";
    pub const DEADLINE: &str = "DeadlineExceeded";
    pub const API_ERROR: &str = "ApiError";
    pub const NOT_AN_EVICTION: &str = "NotAnEviction";
    /// Not judged: the caller presented no client certificate of `--webhook-client-ca-file`
    /// (not the API server).
    pub const UNAUTHENTICATED: &str = "Unauthenticated";
    /// Refused at once under overload: too many decisions in flight, a full queue for the
    /// budget, or a queue that would not be through before the deadline.
    pub const SHED: &str = "Shed";
}

/// Which of a namespace's budgets selects a pod.
#[derive(Debug)]
pub enum Selecting<'a> {
    /// None: its evictions are allowed.
    None,
    One(&'a ZoneDisruptionBudget),
    /// Several: its evictions are refused (a pod may have one budget).
    Several(Vec<String>),
}

/// The valid budgets of `budgets` whose selector matches `labels` (an invalid budget is reported
/// by the controller and selects nothing).
pub fn selecting<'a, I>(
    budgets: I,
    labels: &std::collections::BTreeMap<String, String>,
) -> Selecting<'a>
where
    I: IntoIterator<Item = &'a ZoneDisruptionBudget>,
{
    let mut selecting: Vec<&ZoneDisruptionBudget> = budgets
        .into_iter()
        .filter(|zdb| {
            zdb.spec
                .validate()
                .ok()
                .and_then(|valid| Selector::try_from(valid.selector).ok())
                .is_some_and(|selector| selector.matches(labels))
        })
        .collect();
    match selecting.len() {
        0 => Selecting::None,
        1 => Selecting::One(selecting.remove(0)),
        _ => Selecting::Several(selecting.iter().map(|z| z.name_any()).collect()),
    }
}

/// The refusal of an eviction of `pod`, selected by the budgets `names`.
pub fn overlapping_message(pod: &str, names: &[String]) -> String {
    format!(
        "cannot evict pod {pod}: it is selected by several ZoneDisruptionBudgets ({}); a pod may have one",
        names.join(", ")
    )
}
