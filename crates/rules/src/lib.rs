//! zone-rules: the rules-federator's core, pure (no I/O, no async).
//!
//! - [`model`]: the JSON of Prometheus's `/api/v1/rules` and `/api/v1/alerts`;
//! - [`merge`]: many backends' answers into one, replicas deduplicated, shards kept apart;
//! - [`query`]: the request parameters, read, checked and applied as Prometheus does;
//! - [`json`]: the merged answer written as JSON.

pub mod json;
pub mod labels;
pub mod merge;
pub mod model;
pub mod query;
pub mod stamp;

pub use json::WriteJson;
pub use merge::{MergeOptions, Merger, Source, merge, shared_label};
pub use model::{Alert, AlertDiscovery, Rule, RuleDiscovery, RuleGroup, Stamp, Text};
pub use query::{BadData, RulesQuery, alerts, group_token, into_alerts, parse_rules_query};
