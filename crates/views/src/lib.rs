//! What a ZoneDisruptionBudget and a ZoneAwareUpdate decide, read from the API server's objects:
//!
//! - a budget's decisions ([`budget`]): its status as the budget math sees it, a pod as the
//!   budget sees it, the budget that selects a pod, evictions decided in order on one version of
//!   the budget, with the webhook's words;
//! - a rollout as its planner sees it ([`rollout`]): the StatefulSets of a target, their pods,
//!   the next batch;
//! - the zones that are dark ([`nodes`]): no Ready node left.
//!
//! The zdb-controller and the zau-controller decide with them and `kubectl zone` predicts with
//! the same code, without the controllers' runtime (its server, leader election and metrics).
#![forbid(unsafe_code)]

pub mod budget;
pub mod nodes;
pub mod rollout;
