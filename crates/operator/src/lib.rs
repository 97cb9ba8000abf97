//! The runtime every binary of zone-aware-controllers shares, so a binary is its `main`, its
//! reconcile and its pure logic:
//!
//! - start-up: command-line flags ([`RuntimeArgs`] for a leader-elected controller, [`BaseArgs`]
//!   alone for a stateless server, [`ScopeArgs`] for what it watches), the Kubernetes client,
//!   logging, the `/healthz` + `/readyz` + `/metrics` server, Lease-based leader election,
//!   graceful shutdown, tasks on every replica next to the leader-elected ones ([`runtime`]);
//! - caches: how they load ([`watch`]), the watches of one controller and the reconciles they
//!   trigger ([`watch_set`]), node zones ([`zones`]), and the controller tail: watch errors,
//!   "caches synced → ready", the `Controller` loop, the failure policy, an error's whole cause
//!   chain ([`controller`]);
//! - a reconcile's status draft and its events, and the one report of an invalid spec
//!   ([`draft`]);
//! - writes: status by server-side apply or by a PUT retried on conflict ([`status`]), owned
//!   children applied and pruned ([`children`]), Events published once the status is written
//!   ([`events`]), metrics ([`metrics`]);
//! - HTTPS servers with certificate reload ([`https`], [`tls`]; the runtime's own port too,
//!   [`Serving`]), callers authenticated and authorized by TokenReview and SubjectAccessReview
//!   ([`auth`]);
//! - a scripted fake API server for tests (`testing`, behind the feature of that name).
//!
//! A binary's `main` parses its args, starts a [`Runtime`] (one builder: [`Runtime::controller`]
//! or [`Runtime::server`], then [`RuntimeBuilder::start`]), builds its controllers from
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

pub mod auth;
pub mod backoff;
pub mod children;
pub mod cli;
pub mod client;
pub mod controller;
pub mod draft;
pub mod duration;
pub mod events;
pub mod https;
pub mod leader;
pub mod metrics;
pub mod prom_api;
pub mod readiness;
pub mod runtime;
pub mod scope;
pub mod serve;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
pub mod watch;
pub mod watch_set;
pub mod zones;

pub use cli::{BaseArgs, LeaderArgs, LogFormat, RuntimeArgs};
pub use controller::ErrorChain;
pub use draft::{Blocked, Draft, Invalid};
pub use events::{EventPublisher, PendingEvents};
pub use kube::runtime::events::EventType;
pub use leader::{LeaderElector, LeaderError, LeaderHandle, LeaderStatus, LeaseConfig};
pub use metrics::{ControllerMetrics, ReconcileMetrics, ReconcileTimer};
pub use readiness::Readiness;
pub use runtime::{
    Runtime, RuntimeBuilder, RuntimeError, RuntimeParts, Serving, report_exit, run_controller,
};
pub use scope::ScopeArgs;
pub use shutdown::Shutdown;
pub use watch::InitialList;
pub use watch_set::WatchSet;
pub use zones::NodeZones;
