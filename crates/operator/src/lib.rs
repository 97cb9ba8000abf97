//! The runtime every controller binary of zone-aware-controllers shares: command-line flags, the
//! Kubernetes client, logging, the `/healthz` + `/readyz` + `/metrics` server, reconcile metrics,
//! Events, Lease-based leader election and graceful shutdown. A binary's `main` parses its args
//! (with [`RuntimeArgs`] flattened in), calls [`Runtime::start`], builds its controllers from
//! [`RuntimeParts`] and hands them to [`Runtime::run`].
//!
//! Why these crates:
//! - **kube 5 + k8s-openapi**: the maintained Rust client, typed objects for every built-in kind,
//!   and a runtime (watchers, reflectors, controller loop, event recorder) so controllers stay
//!   event-driven without writing caches by hand.
//! - **axum**: a small HTTP server on hyper/tokio, already in the tree; three routes need no more.
//! - **prometheus**: the text exposition format Prometheus scrapes, with a `Registry` per process.
//! - **tracing** (+ tracing-subscriber): structured fields (`zone = %zone`), JSON or plain output,
//!   and the same instrumentation kube uses.
//! - **clap**: derive-based flags with env fallbacks and `--help` text.
//! - **rustls with aws-lc-rs**: one TLS stack and one crypto provider for the whole process,
//!   shared with the AWS SDK (CloudWatch), so `ring` is not built and rustls never has to guess
//!   which provider to use.
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod duration;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod readiness;
pub mod runtime;
pub mod server;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod watch;

pub use cli::{LogFormat, RuntimeArgs};
pub use events::EventPublisher;
pub use kube::runtime::events::EventType;
pub use leader::{LeaderElector, LeaderError, LeaderHandle, LeaderStatus, LeaseConfig};
pub use metrics::{ControllerMetrics, ReconcileMetrics, ReconcileTimer};
pub use readiness::Readiness;
pub use runtime::{Runtime, RuntimeError, RuntimeParts, report_exit};
pub use shutdown::Shutdown;
pub use watch::InitialList;
