//! Helpers for the end-to-end tests and the perf drivers: the cluster under test, temporary
//! namespaces, dry-run applies, polling with a timeout, pods, nodes and zones, the API server's
//! audit log, controller processes, TLS (a test CA, a server for webhooks), a proxy in front of
//! webhook replicas, the perf drivers' shared measurements, and the real Prometheus (promtool, and
//! a process per shard) run on the configs the shard controller renders, and a real Alertmanager
//! with a webhook receiver in the test process, and the monitoring mixin rendered by jsonnet, and
//! Thanos (its image on the real nodes, a Querier on the host), and cert-manager (its CRDs, its
//! controller and CA injector on the host).
//!
//! Tests are `#[ignore = "needs the local zonal cluster (make e2e)"]`, so `cargo test --workspace`
//! stays cluster-free; `make e2e` starts the cluster and runs them with `--ignored`.
#![forbid(unsafe_code)]
// Test support: a failed set-up step should stop the test with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod alertmanager;
pub mod apply;
pub mod audit;
pub mod cert_manager;
pub mod cluster;
pub mod config_thanos;
pub mod deploy;
pub mod disruption;
pub mod dns;
pub mod fixture;
pub mod helm;
pub mod identity;
pub mod installed;
pub mod kstatus;
pub mod kubectl_zone;
pub mod localstack;
pub mod mixin;
pub mod namespace;
pub mod nodes;
pub mod operator;
pub mod outage;
pub mod perf;
pub mod pods;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod quota;
pub mod real;
pub mod rules_grpc;
pub mod thanos;
pub mod tls;
pub mod upgrade;
pub mod wait;
pub mod webhook;
pub mod workload;

pub use cluster::Cluster;
pub use namespace::{TestNamespace, wait_until_no_namespace_terminates};
pub use wait::wait_for;
