//! The children of a ShardedPrometheus's shards: how they are built (StatefulSet, Services,
//! configuration Secret, rule ConfigMaps), the Prometheus configuration they carry, the Thanos
//! sidecar, and the retention of shards scaled away.

pub mod build;
pub mod config;
pub mod retention;
pub mod thanos;
