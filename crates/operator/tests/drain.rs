//! `Runtime::drain_on_shutdown` with an HTTPS server on every replica, as the zdb webhook runs:
//! at shutdown `/readyz` answers 503 at once, the server keeps accepting through the drain delay
//! (clients that have not yet seen the endpoints change are still answered), then closes its
//! listener and finishes the request it was answering.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::{Router, extract::State, routing::post};
use clap::Parser;
use support::{FakeLeaseApi, http_get};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use zone_operator::https::{self, SelfCallError};
use zone_operator::serve;
use zone_operator::tls::{CertStore, CertValidity, generate, unix_now};
use zone_operator::{Runtime, RuntimeArgs, Shutdown};

const PATIENCE: Duration = Duration::from_secs(10);
/// Short, so the test is quick; the assertions hold for any length.
const DELAY: Duration = Duration::from_secs(1);
const IN_FLIGHT: Duration = Duration::from_secs(5);

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// A request to `/slow` says it arrived, then waits to be released: a decision in flight.
#[derive(Clone)]
struct Slow {
    arrived: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
}

async fn slow(State(slow): State<Slow>) -> &'static str {
    slow.arrived.send(()).unwrap();
    slow.release.notified().await;
    "slow\n"
}

#[tokio::test]
async fn a_replica_leaves_readiness_first_serves_through_the_delay_then_finishes_in_flight() {
    let args = Args::try_parse_from([
        "test",
        "--listen-address",
        "127.0.0.1:0",
        "--leader-elect=false",
    ])
    .unwrap()
    .runtime;
    let api = FakeLeaseApi::new();
    let mut runtime = Runtime::controller("zdb-controller", &args)
        .client("a".into(), api.client("zone-system"), Shutdown::new())
        .start()
        .await
        .unwrap();
    let health = runtime.local_addr();
    let parts = runtime.clone_parts();
    runtime.drain_on_shutdown(DELAY, IN_FLIGHT);

    let generated = generate("CA", "svc", "ns", CertValidity::default(), unix_now(), None).unwrap();
    let certs = Arc::new(CertStore::new(generated.pair.certified_key().unwrap()));
    let (listener, address) = https::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let router = Router::new()
        .route("/fast", post(|| async { "fast\n" }))
        .route("/slow", post(slow))
        .with_state(Slow {
            arrived: arrived_tx,
            release: release.clone(),
        });
    let gate = parts.readiness.gate("server");
    let stop = parts.shutdown.clone().stop_accepting();
    runtime.spawn_every_replica(async move {
        gate.open();
        serve::serve_until(
            listener,
            Some(certs),
            router,
            serve::Limits::default(),
            stop,
            IN_FLIGHT,
        )
        .await;
    });
    let work = {
        let parts = parts.clone();
        async move {
            parts.readiness.set_ready();
            parts.shutdown.cancelled().await;
            Ok::<(), std::io::Error>(())
        }
    };
    let run = tokio::spawn(runtime.run(work));
    let call = |path: &'static str| {
        let ca = generated.ca.clone();
        async move { https::call_self(address, "svc.ns.svc", &ca, path, b"{}").await }
    };
    tokio::time::timeout(PATIENCE, async {
        while http_get(health, "/readyz").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();

    // A decision in flight when the shutdown starts.
    let in_flight = tokio::spawn(call("/slow"));
    tokio::time::timeout(PATIENCE, arrived.recv())
        .await
        .unwrap()
        .unwrap();
    let triggered = Instant::now();
    parts.shutdown.trigger();
    assert_eq!(
        http_get(health, "/readyz").await,
        (503, "shutting down\n".to_owned()),
        "not ready from the trigger on"
    );
    assert_eq!(
        call("/fast").await.unwrap(),
        "fast\n",
        "a new connection during the delay is answered"
    );

    // Connections keep being answered until the listener closes, never refused before the
    // delay has passed.
    let refused_after = tokio::time::timeout(PATIENCE, async {
        loop {
            match call("/fast").await {
                Ok(body) => assert_eq!(body, "fast\n"),
                Err(SelfCallError::Connect { .. }) => break triggered.elapsed(),
                Err(other) => panic!("neither answered nor refused: {other:?}"),
            }
        }
    })
    .await
    .unwrap();
    assert!(
        refused_after >= DELAY,
        "refused {refused_after:?} after the trigger, before the {DELAY:?} delay"
    );
    assert!(!in_flight.is_finished(), "still waiting for its answer");

    release.notify_one();
    assert_eq!(
        tokio::time::timeout(PATIENCE, in_flight)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        "slow\n",
        "the request in flight at the close is answered"
    );
    let stopped = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    assert!(stopped.is_ok(), "{stopped:?}");
    assert!(tokio::net::TcpStream::connect(health).await.is_err());
    assert!(
        parts.readiness.failing_gates().contains(&"server"),
        "the task ended, its gate closed"
    );
}
