//! Pure zone math shared by every controller: no I/O, no async, no Kubernetes client.
//!
//! Binaries fetch objects, turn them into the plain data types of this crate, call into it, and
//! write the result back. Everything here is a pure function of its inputs, so it is unit- and
//! property-tested in isolation.
#![forbid(unsafe_code)]

pub mod budget;
pub mod hashmod;
pub mod int_or_percent;
pub mod promql_depth;
pub mod relabel;
pub mod rollout;
pub mod sharding;
pub mod units;
pub mod yaml_depth;
pub mod zone;

pub use int_or_percent::{IntOrPercent, IntOrPercentError};
pub use zone::{ZONE_LABEL, Zone};
