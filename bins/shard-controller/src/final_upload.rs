//! The final upload of a shard a scale-down removed, in one place: what each of its pods shows
//! of it and what comes next ([`pods`], pure), the reconcile's part of it ([`plan`], pure), the
//! ephemeral container that uploads a snapshot ([`container`]), and the effects ([`snapshot`]:
//! the TSDB snapshot through Prometheus's admin API, then that container added to the pod).

pub mod container;
pub mod plan;
pub mod pods;
pub mod snapshot;
