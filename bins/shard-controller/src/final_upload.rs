//! The final upload of a shard a scale-down removed, in one place: what each of its pods shows
//! of it and what comes next ([`pods`], pure), the reconcile's part of it ([`plan`], pure), and
//! its effects ([`snapshot`]: the TSDB snapshot through Prometheus's admin API, then the
//! ephemeral container that uploads it). The ephemeral container itself is built with the
//! shards' other children (`children::build::upload_container`).

pub mod plan;
pub mod pods;
pub mod snapshot;
