//! The metrics every binary serves, whatever else it does: the reconcile families, `process_*`,
//! `<binary>_build_info` and, for a runtime that runs controllers, whether this replica leads.
//! The runtime registers them ([`register_common`]); a binary's tests register them the same
//! way to see the families its `/metrics` serves.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::{METRIC_PREFIX, MetricsError, ReconcileMetrics, create};
use crate::leader::{LeaderHandle, LeaderStatus};

/// The version of the binaries (one workspace version for every crate).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binaries were built from: `ZONE_AWARE_REVISION` at build time (the
/// Makefile's image and static builds set it), "unknown" without it.
pub const REVISION: &str = match option_env!("ZONE_AWARE_REVISION") {
    Some(revision) if !revision.is_empty() => revision,
    _ => "unknown",
};

/// What a runtime runs, which decides whether leadership is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Controllers, leader-elected or (`--leader-elect=false`) acting on every replica:
    /// `zone_aware_leader` and `zone_aware_leader_transitions_total` are served.
    Controllers,
    /// A stateless server (every replica serves, nothing is reconciled: the rules-federator):
    /// no leadership to report, so no leader series that an alert could read as "no leader".
    Server,
}

/// The handles of the common metrics that change after start.
#[derive(Clone, Debug)]
pub struct CommonMetrics {
    pub reconcile: ReconcileMetrics,
    /// `None` for [`Profile::Server`].
    pub leader: Option<LeaderMetrics>,
    /// `zone_aware_http_connections_refused_total{server}`: connections closed at a server's
    /// cap (`--max-connections`).
    pub refused_connections: IntCounterVec,
}

/// Registers every metric the runtime serves for `controller` (the name given to the
/// runtime, e.g. `zdb-controller`) into `registry`. Labelled series known at start exist at
/// once: a controller's reconcile count and duration, its leader gauge and transitions at 0.
pub fn register_common(
    registry: &Registry,
    controller: &str,
    profile: Profile,
) -> Result<CommonMetrics, MetricsError> {
    let reconcile = ReconcileMetrics::register(registry)?;
    register_process(registry)?;
    build_info(registry, controller)?;
    let leader = match profile {
        Profile::Controllers => {
            // Both series of this controller exist before its first reconcile.
            drop(reconcile.controller(controller));
            Some(LeaderMetrics::register(registry, controller)?)
        }
        Profile::Server => None,
    };
    let refused_connections = create(
        registry,
        "http_connections_refused_total",
        IntCounterVec::new(
            Opts::new(
                "http_connections_refused_total",
                "Connections closed at once because the server had --max-connections open.",
            )
            .namespace(METRIC_PREFIX),
            &["server"],
        ),
    )?;
    Ok(CommonMetrics {
        reconcile,
        leader,
        refused_connections,
    })
}

/// `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, … read
/// from `/proc/self` at each scrape.
#[cfg(target_os = "linux")]
fn register_process(registry: &Registry) -> Result<(), MetricsError> {
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .map_err(|source| MetricsError::Register {
            metric: "process_*",
            source,
        })
}

/// The process collector reads `/proc`: elsewhere (a developer's macOS build) there is none.
#[cfg(not(target_os = "linux"))]
fn register_process(_: &Registry) -> Result<(), MetricsError> {
    Ok(())
}

/// The name of `controller`'s build-info gauge: `zdb-controller` → `zdb_controller_build_info`.
pub fn build_info_name(controller: &str) -> String {
    format!("{}_build_info", controller.replace('-', "_"))
}

/// `<binary>_build_info{version, revision} 1`, the conventional way to join a build's version
/// to any other series (`* on(pod) group_left(version)`).
fn build_info(registry: &Registry, controller: &str) -> Result<(), MetricsError> {
    let info = create(
        registry,
        "build_info",
        IntGaugeVec::new(
            Opts::new(
                build_info_name(controller),
                "Always 1; labels: version (the crate version) and revision (the git commit the \
                 binary was built from, \"unknown\" when built without ZONE_AWARE_REVISION).",
            ),
            &["version", "revision"],
        ),
    )?;
    info.with_label_values(&[VERSION, REVISION]).set(1);
    Ok(())
}

/// Whether this replica leads, for one controller name.
#[derive(Clone, Debug)]
pub struct LeaderMetrics {
    leading: IntGauge,
    transitions: IntCounter,
}

impl LeaderMetrics {
    fn register(registry: &Registry, controller: &str) -> Result<Self, MetricsError> {
        let leading = create(
            registry,
            "leader",
            IntGaugeVec::new(
                Opts::new(
                    "leader",
                    "1 while this replica leads (holds the Lease, or runs without leader \
                     election, where every replica acts), 0 as a standby.",
                )
                .namespace(METRIC_PREFIX),
                &["controller"],
            ),
        )?;
        let transitions = create(
            registry,
            "leader_transitions_total",
            IntCounterVec::new(
                Opts::new(
                    "leader_transitions_total",
                    "Times this replica acquired the Lease (never without leader election).",
                )
                .namespace(METRIC_PREFIX),
                &["controller"],
            ),
        )?;
        Ok(Self {
            leading: leading.with_label_values(&[controller]),
            transitions: transitions.with_label_values(&[controller]),
        })
    }

    /// Keeps the series in step with `leader` until this replica stops leading: without
    /// election it leads from the start (and never acquires a Lease); with election the gauge
    /// turns 1 and the counter counts when the Lease is acquired, and the gauge turns 0 when
    /// leadership ends (lost, its renew deadline passed, or released at shutdown).
    ///
    /// Without election the gauge is 1 when this returns; the future does the rest.
    pub fn follow(self, leader: LeaderHandle) -> impl Future<Output = ()> + Send + 'static {
        let elected = leader.identity().is_some();
        if !elected {
            self.leading.set(1);
        }
        async move {
            if !elected {
                return;
            }
            while leader.acquired().await {
                self.leading.set(1);
                self.transitions.inc();
                leader.lost().await;
                self.leading.set(0);
                // A replica that lost the lease exits; only a standby again could lead again.
                if !matches!(leader.status(), LeaderStatus::Standby { .. }) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::metrics::exposition;

    #[test]
    fn a_controller_runtime_serves_build_info_process_and_leader_series_at_start() {
        let registry = Registry::new();
        register_common(&registry, "zdb-controller", Profile::Controllers).unwrap();
        let text = exposition(&registry);
        assert!(
            text.contains(&format!(
                "zdb_controller_build_info{{revision=\"{REVISION}\",version=\"{VERSION}\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains("zone_aware_leader{controller=\"zdb-controller\"} 0"));
        assert!(
            text.contains("zone_aware_leader_transitions_total{controller=\"zdb-controller\"} 0")
        );
        assert!(text.contains("zone_aware_reconciliations_total{controller=\"zdb-controller\"} 0"));
        #[cfg(target_os = "linux")]
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
    }

    #[test]
    fn a_server_runtime_reports_no_leadership() {
        let registry = Registry::new();
        register_common(&registry, "rules-federator", Profile::Server).unwrap();
        let text = exposition(&registry);
        assert!(text.contains("rules_federator_build_info{"));
        assert!(!text.contains("zone_aware_leader"), "{text}");
        assert!(!text.contains("zone_aware_reconciliations_total{"));
    }

    #[test]
    fn build_info_is_named_after_the_binary() {
        for (controller, name) in [
            ("zdb-controller", "zdb_controller_build_info"),
            ("zau-controller", "zau_controller_build_info"),
            ("shard-controller", "shard_controller_build_info"),
            ("rules-federator", "rules_federator_build_info"),
        ] {
            assert_eq!(build_info_name(controller), name);
        }
    }

    #[test]
    fn without_election_every_replica_leads_and_never_acquires() {
        let registry = Registry::new();
        let common = register_common(&registry, "zau-controller", Profile::Controllers).unwrap();
        // Set before the future runs: the runtime's first scrape already shows it.
        drop(common.leader.unwrap().follow(LeaderHandle::unelected()));
        let text = exposition(&registry);
        assert!(text.contains("zone_aware_leader{controller=\"zau-controller\"} 1"));
        assert!(
            text.contains("zone_aware_leader_transitions_total{controller=\"zau-controller\"} 0")
        );
    }
}
