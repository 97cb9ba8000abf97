//! `Runtime::run`: standby readiness, controllers only while leading, release on shutdown, exit on
//! leadership loss. Runs against the in-memory Lease API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use clap::Parser;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use support::{FakeLeaseApi, http_get};
use tokio::sync::oneshot;
use zone_operator::{BaseArgs, Runtime, RuntimeArgs, RuntimeError, Shutdown};

const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
}

fn args(extra: &[&str]) -> RuntimeArgs {
    let mut argv = vec![
        "test",
        "--listen-address",
        "127.0.0.1:0",
        "--log-level",
        "info",
        "--log-format",
        "plain",
        "--lease-name",
        "zau-controller",
        "--lease-namespace",
        "zone-system",
        "--lease-duration",
        "30s",
        "--renew-interval",
        "100ms",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).unwrap().runtime
}

async fn runtime(api: &FakeLeaseApi, extra: &[&str]) -> Runtime {
    Runtime::controller("zau-controller", &args(extra))
        .client("b".into(), api.client("zone-system"), Shutdown::new())
        .start()
        .await
        .unwrap()
}

/// Waits until `registry` serves `series` (the leader series follow the Lease from a task of
/// their own).
async fn served_soon(registry: &prometheus::Registry, series: &str) {
    let served = tokio::time::timeout(PATIENCE, async {
        while !zone_operator::metrics::exposition(registry).contains(series) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        served.is_ok(),
        "{series} not served: {}",
        zone_operator::metrics::exposition(registry)
    );
}

fn held_by(holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("zau-controller".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: Some(30),
            ..LeaseSpec::default()
        }),
    }
}

#[tokio::test]
async fn standby_then_leader_then_graceful_shutdown() {
    let api = FakeLeaseApi::new();
    api.put(held_by("a"));
    let runtime = runtime(&api, &["--leader-elect=true"]).await;
    let address = runtime.local_addr();
    let parts = runtime.clone_parts();

    let (started_tx, started_rx) = oneshot::channel();
    let (synced_tx, synced_rx) = oneshot::channel::<()>();
    let (ready_tx, ready_rx) = oneshot::channel::<()>();
    let controller_parts = parts.clone();
    let controllers = async move {
        started_tx.send(()).unwrap();
        synced_rx.await.unwrap();
        controller_parts.readiness.set_ready();
        ready_tx.send(()).unwrap();
        controller_parts.shutdown.cancelled().await;
        Ok::<(), std::io::Error>(())
    };
    let run = tokio::spawn(runtime.run(controllers));

    // Standby: ready (so a rolling update can proceed) but the controllers have not started.
    let mut leader = parts.leader.watch();
    tokio::time::timeout(
        PATIENCE,
        leader.wait_for(|s| matches!(s, zone_operator::LeaderStatus::Standby { holder: Some(_) })),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        http_get(address, "/readyz").await,
        (200, "standby\n".into())
    );
    assert_eq!(http_get(address, "/healthz").await.0, 200);
    let (_, metrics) = http_get(address, "/metrics").await;
    assert!(
        metrics.contains("zone_aware_leader{controller=\"zau-controller\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("zone_aware_leader_transitions_total{controller=\"zau-controller\"} 0")
    );
    assert!(metrics.contains("zau_controller_build_info{"));

    // The other replica releases: we lead, start the controllers, and are not ready until synced.
    let mut released = api.lease().unwrap();
    released.spec.as_mut().unwrap().holder_identity = None;
    api.put(released);
    tokio::time::timeout(PATIENCE, started_rx)
        .await
        .unwrap()
        .unwrap();
    assert!(parts.leader.is_leader());
    assert_eq!(http_get(address, "/readyz").await.0, 503);
    synced_tx.send(()).unwrap();
    tokio::time::timeout(PATIENCE, ready_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(http_get(address, "/readyz").await, (200, "ready\n".into()));
    // The runtime registers the reconcile metrics; a controller's first reconcile shows up.
    drop(parts.controller_metrics().reconcile_timer());
    let (code, metrics) = http_get(address, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("zone_aware_reconciliations_total{controller=\"zau-controller\"} 1"),
        "{metrics}"
    );
    served_soon(
        &parts.registry,
        "zone_aware_leader{controller=\"zau-controller\"} 1",
    )
    .await;
    served_soon(
        &parts.registry,
        "zone_aware_leader_transitions_total{controller=\"zau-controller\"} 1",
    )
    .await;

    parts.shutdown.trigger();
    tokio::time::timeout(PATIENCE, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        api.holder(),
        None,
        "lease released after the controllers stopped"
    );
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "server stopped"
    );
}

#[tokio::test]
async fn losing_the_lease_stops_the_controllers() {
    let api = FakeLeaseApi::new();
    let runtime = runtime(&api, &[]).await;
    let parts = runtime.clone_parts();
    let (started_tx, started_rx) = oneshot::channel();
    let controllers = async move {
        started_tx.send(()).unwrap();
        std::future::pending::<Result<(), std::io::Error>>().await
    };
    let run = tokio::spawn(runtime.run(controllers));
    tokio::time::timeout(PATIENCE, started_rx)
        .await
        .unwrap()
        .unwrap();

    api.steal("a", 30);
    let result = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    assert!(
        matches!(result, Err(RuntimeError::LeadershipLost)),
        "{result:?}"
    );
    assert!(
        parts.shutdown.is_triggered(),
        "everything else is told to stop too"
    );
    assert_eq!(api.holder().as_deref(), Some("a"));
    // A lost lease turns the gauge back to 0; the acquisition stays counted.
    served_soon(
        &parts.registry,
        "zone_aware_leader{controller=\"zau-controller\"} 0",
    )
    .await;
    served_soon(
        &parts.registry,
        "zone_aware_leader_transitions_total{controller=\"zau-controller\"} 1",
    )
    .await;
}

#[tokio::test]
async fn without_election_controllers_start_at_once_and_errors_surface() {
    let api = FakeLeaseApi::new();
    let runtime = runtime(&api, &["--leader-elect=false"]).await;
    assert!(runtime.parts().leader.is_leader());
    let (_, metrics) = http_get(runtime.local_addr(), "/metrics").await;
    assert!(
        metrics.contains("zone_aware_leader{controller=\"zau-controller\"} 1"),
        "every replica acts, so every replica leads: {metrics}"
    );
    assert!(
        metrics.contains("zone_aware_leader_transitions_total{controller=\"zau-controller\"} 0")
    );
    let controllers = async { Err::<(), _>(std::io::Error::other("watch failed")) };
    let result = tokio::time::timeout(PATIENCE, runtime.run(controllers))
        .await
        .unwrap();
    assert!(
        matches!(result, Err(RuntimeError::Controller(_))),
        "{result:?}"
    );
    assert_eq!(api.writes(), 0, "no Lease traffic without election");
    assert!(api.lease().is_none());
}

/// A task spawned on every replica runs while this replica is a standby (the zdb webhook must
/// judge evictions before the status controller gets the lease), and stops with the runtime.
#[tokio::test]
async fn every_replica_tasks_run_on_a_standby_and_stop_with_the_runtime() {
    let api = FakeLeaseApi::new();
    api.put(held_by("a"));
    let mut runtime = runtime(&api, &["--leader-elect=true"]).await;
    let parts = runtime.clone_parts();
    let (running_tx, running_rx) = oneshot::channel::<()>();
    // Dropped (closing `stopped_rx`) when the task is stopped.
    let (stopped_tx, stopped_rx) = oneshot::channel::<()>();
    runtime.spawn_every_replica(async move {
        let _held_until_stopped = stopped_tx;
        running_tx.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    let (started_tx, mut started_rx) = oneshot::channel::<()>();
    let controllers = async move {
        started_tx.send(()).unwrap();
        Ok::<(), std::io::Error>(())
    };
    let run = tokio::spawn(runtime.run(controllers));

    tokio::time::timeout(PATIENCE, running_rx)
        .await
        .unwrap()
        .unwrap();
    assert!(!parts.leader.is_leader(), "still a standby");
    assert!(
        started_rx.try_recv().is_err(),
        "the leader-only work has not started"
    );

    parts.shutdown.trigger();
    let stopped = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    assert!(stopped.is_ok(), "{stopped:?}");
    assert!(
        tokio::time::timeout(PATIENCE, stopped_rx)
            .await
            .unwrap()
            .is_err(),
        "the task was stopped"
    );
}

/// A stateless server that needs no Kubernetes (the rules-federator with static endpoints): no
/// kubeconfig is read, its own routes share the runtime's port, it is ready when its work says
/// so, and it stops on shutdown. The only test here that starts logging and signal handlers: the
/// global subscriber can be installed once per process.
#[tokio::test]
async fn an_unelected_server_without_a_client_serves_its_routes_on_the_runtime_port() {
    #[derive(Parser)]
    struct ServerArgs {
        #[command(flatten)]
        base: BaseArgs,
    }
    let args = ServerArgs::try_parse_from([
        "test",
        "--listen-address",
        "127.0.0.1:0",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--identity",
        "server-0",
        "--log-level",
        "info",
        "--log-format",
        "plain",
    ])
    .unwrap()
    .base;
    let runtime = Runtime::server("server", &args)
        .kubernetes(false)
        .start()
        .await
        .unwrap();
    let address = runtime.local_addr();
    assert_eq!(http_get(address, "/api/v1/rules").await.0, 404);
    let (_, metrics) = http_get(address, "/metrics").await;
    assert!(metrics.contains("server_build_info{"), "{metrics}");
    assert!(
        !metrics.contains("zone_aware_leader"),
        "a stateless server has no leader"
    );
    #[cfg(target_os = "linux")]
    assert!(metrics.contains("# TYPE process_resident_memory_bytes gauge"));
    runtime.merge_routes(
        axum::Router::new().route("/api/v1/rules", axum::routing::get(|| async { "rules\n" })),
    );
    assert_eq!(
        http_get(address, "/api/v1/rules").await,
        (200, "rules\n".to_owned())
    );
    let parts = runtime.clone_parts();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::default_namespaced(parts.client.clone());
    assert!(
        matches!(pods.list(&Default::default()).await, Err(kube::Error::Api(status)) if status.code == 503),
        "the client refuses without connecting"
    );

    let (release_tx, release_rx) = oneshot::channel::<()>();
    let work = {
        let parts = parts.clone();
        async move {
            if release_rx.await.is_ok() {
                parts.readiness.set_ready();
            }
            parts.shutdown.cancelled().await;
            Ok::<(), std::io::Error>(())
        }
    };
    let run = tokio::spawn(runtime.run(work));
    assert_eq!(http_get(address, "/readyz").await.0, 503);
    release_tx.send(()).unwrap();
    tokio::time::timeout(PATIENCE, async {
        while http_get(address, "/readyz").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();

    parts.shutdown.trigger();
    let stopped = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    assert!(stopped.is_ok(), "{stopped:?}");
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
}
