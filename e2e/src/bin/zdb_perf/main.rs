//! Load driver for the ZoneDisruptionBudget eviction webhook (`make perf`, `e2e/perf/zdb.sh`).
//!
//! On the local zonal cluster it creates a namespace with StatefulSets whose pods (3,000 by
//! default) are selected by ZoneDisruptionBudgets, starts the release `zdb-controller` (webhook
//! on 127.0.0.1, self-signed), waits for every budget's status, then sends AdmissionReview v1
//! requests for `pods/eviction` CREATE straight to the webhook over HTTPS (kept-alive
//! connections, as the API server keeps them), open loop at a fixed rate, one class at a time:
//!
//! - `denied`: pods of budget `s0`, whose zone-a has an unready pod and maxUnavailable 1: pods of
//!   zone-a exceed the zone's budget, pods of the other zones wait for zone-a (a 429 each);
//! - `unselected`: pods of the namespace that no budget selects (the webhook reads the pod and
//!   matches it against the budgets of the namespace);
//! - `no-budget-ns`: a namespace without budgets (answered from the budget cache alone);
//! - `allowed @N/s`: distinct healthy pods of budgets `s1..` (maxUnavailable 100%), one zone per
//!   budget, so every request is allowed and recorded by a status PUT carrying the
//!   resourceVersion. Nothing is evicted, so records stay: after a round of every such pod the
//!   budgets are recreated. Run at a drain-like rate (reported, not gated);
//! - the drain storm ([`storm`]): would-be-allowed evictions of one budget with maxUnavailable 1
//!   and 100% at the full rate for 30 s through two replicas, each allowed pod deleted and
//!   recreated as a drain would have it; gated on no budget violation, every answer before the
//!   API server's webhook timeout, the answers' p99, each replica's memory, and the allowed
//!   rate; then the same storm against a native PodDisruptionBudget ([`storm::native`]),
//!   reported side by side.
//!
//! Latency is client side, from the scheduled send time to the parsed answer (a late send counts
//! against the webhook, as it would for the API server). The webhook's own latency histogram and
//! decision counters are read from its `/metrics` around each class, with the CPU time the
//! controller and the API server spent. The controller's memory (VmRSS, VmHWM) is read from
//! `/proc` before the load and after the measured load (the gated classes and the drain-rate
//! allowed decisions), and sampled every 100 ms for both replicas during the storm.
//!
//! Settings (environment): `ZDB_PERF_PODS` (3000), `ZDB_PERF_SETS` (6: one for denials, the
//! others for allowed decisions), `ZDB_PERF_RATE` (200 requests/s), `ZDB_PERF_SECONDS` (30 per
//! gated class), `ZDB_PERF_WARMUP_SECONDS` (3, unmeasured), `ZDB_PERF_ALLOWED_RATE` (20),
//! `ZDB_PERF_ALLOWED_COUNT` (600), `ZDB_PERF_STORM_SECONDS` (30; 0 skips the storm),
//! `ZDB_PERF_STORM_RATE` (`ZDB_PERF_RATE`), `ZDB_PERF_STORM_MAX_UNAVAILABLE` ("1,100%"),
//! `ZDB_PERF_STORM_RSS_MIB` (64, per replica), `ZDB_PERF_STORM_P99_MS` (250),
//! `ZDB_PERF_STORM_MIN_RATE` (50 allowed/s with a percentage budget),
//! `ZDB_PERF_STORM_MIN_PER_CYCLE` (0.7 of a count budget per replacement cycle),
//! `ZDB_PERF_STORM_NATIVE` ("100%": the native PodDisruptionBudget storms; empty skips them),
//! `ZDB_PERF_STORM_NATIVE_FACTOR` (2), `ZDB_PERF_P99_MS` (5), `ZDB_PERF_RSS_MIB` (50),
//! `ZDB_PERF_POD_TIMEOUT` (900 s), `ZDB_PERF_SAMPLES` (a file to append every request's class,
//! send offset and latency to), `ZDB_PERF_RESTART=1` (only the storm through the API server
//! while the deployed controller restarts: [`storm::restart`]).
//!
//! Exit status: 0 when the targets are met (denied, unselected and no-budget-ns p99 within
//! `ZDB_PERF_P99_MS`; VmRSS after the measured load within `ZDB_PERF_RSS_MIB`; every answer as
//! expected and every allowed one recorded; the storm's targets), 1 otherwise (a panic, exit 101,
//! when the set-up fails).
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod client;
mod drive;
mod figures;
mod report;
mod settings;
mod setup;
mod storm;
mod target;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::perf::{setting, until_signalled};
use e2e::{Cluster, wait_until_no_namespace_terminates};

use report::{Report, conclude};
use settings::Settings;
use setup::Perf;

/// The measurement: set-up, the classes, the storms, the report; true when the targets are met.
async fn run(settings: Settings) -> bool {
    let cluster = Cluster::get();
    // The namespace of an earlier run may still be emptied of its pods: minutes of work for the
    // control plane, which would be measured with the webhook.
    let waited =
        wait_until_no_namespace_terminates(&cluster.client().await, settings.pod_timeout).await;
    if waited > Duration::from_secs(1) {
        eprintln!(
            "zdb-perf: waited {:.0} s for the namespaces of an earlier run to be deleted",
            waited.as_secs_f64()
        );
    }
    let perf = Perf::create(&cluster, settings, "zdb-perf").await;
    let settings = &perf.settings;
    let objects = perf.create_objects().await;
    let mut controller = perf.start_controller(&objects).await;
    let target = &controller.target;
    let measured = perf.measure(target, &objects).await;

    // The drain storms on the first allowed set's budget, through a second replica as well.
    let mut storms = Vec::new();
    if settings.storm.seconds > 0 {
        for max_unavailable in &settings.storm.max_unavailable {
            let mut result = perf
                .storm(&settings.storm, max_unavailable, target, &controller.ca)
                .await;
            result.running[0] = controller.process.is_running();
            storms.push(result);
        }
    }
    let running = controller.process.is_running();
    let opened = target.pool.opened.load(Ordering::Relaxed);
    // The same storm against native PodDisruptionBudgets, last: it deletes the storm's
    // ZoneDisruptionBudget, and it loads the API server enough that the controller (which
    // takes no part in it) may miss a lease renewal and exit, as a leader must.
    let mut natives = Vec::new();
    if settings.storm.seconds > 0 {
        for max_unavailable in &settings.storm.native {
            natives.push(perf.native_storm(&settings.storm, max_unavailable).await);
        }
    }

    let report = Report {
        settings,
        selected: objects.selected,
        opened,
        pod_time: objects.pod_time,
        status_time: controller.status_time,
        measured: &measured,
        apiserver: target.apiserver.is_some(),
    };
    let ok = conclude(&report, &storms, &natives, running);
    drop(controller);
    ok
}

/// `ZDB_PERF_RESTART=1`: the restart storm alone ([`storm::restart`]), against the deployed
/// controller.
async fn run_restart(settings: Settings) -> bool {
    let cluster = Cluster::get();
    wait_until_no_namespace_terminates(&cluster.client().await, settings.pod_timeout).await;
    let perf = Perf::create(&cluster, settings, "zdb-restart").await;
    let restart = storm::restart::RestartSettings::from_env();
    perf.restart_storm(&perf.settings.storm, &restart).await
}

fn main() -> ExitCode {
    let settings = Settings::from_env();
    let restart = setting("ZDB_PERF_RESTART", 0) == 1;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The namespaces and the controller are dropped (deleted, killed) when `run` returns or
    // panics, or when SIGINT/SIGTERM drops it half-way.
    let ok = runtime.block_on(async {
        let measured = async {
            if restart {
                run_restart(settings).await
            } else {
                run(settings).await
            }
        };
        until_signalled(measured).await.unwrap_or_else(|signal| {
            eprintln!("zdb-perf: {signal}; cleaning up");
            false
        })
    });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
