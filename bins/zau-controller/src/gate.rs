//! The alert gate (`spec.alertGate`): a Prometheus-compatible `GET /api/v1/alerts` (Prometheus,
//! the rules-federator) whose matching alerts pause a rollout, like the CloudWatch alarm does.
//!
//! - [`resolve`]: the spec to an endpoint (a Service's ready address, the token and CA from
//!   Secrets);
//! - [`polls`]: one cached answer per endpoint, shared by every rollout reading it, refreshed at
//!   the smallest poll interval of its readers, and a reconcile of every reader when it changes;
//! - [`fetch`]: one request and its answer decoded;
//! - [`selector`] (pure): which alerts of an answer pause a rollout.
//!
//! Fail safe: anything but a clear answer (no connection, a non-2xx status, a timeout, JSON
//! that does not parse, `"status":"error"`, a Secret or Service that cannot be read) pauses.

pub mod fetch;
pub mod polls;
pub mod resolve;
pub mod selector;
#[cfg(test)]
pub mod test_server;

pub use fetch::{Endpoint, GateError};
pub use polls::GatePolls;
pub use selector::{Rules, Selector, Verdict, alert_list};
#[cfg(test)]
mod tests;
