//! The children of a ShardedPrometheus's shards: how they are built (StatefulSet, Services,
//! configuration Secret, rule ConfigMaps), the Prometheus configuration they carry, and the
//! retention of shards scaled away.

pub mod build;
pub mod config;
pub mod retention;
