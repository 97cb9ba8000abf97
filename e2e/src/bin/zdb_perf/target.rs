//! The controller measured: its process's webhook reached over a [`Pool`], its `/metrics`
//! and its CPU time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::process::{ControllerProcess, http_get_from};
use e2e::wait_for;
use e2e::webhook::TLS_SECRET;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::client::{Pool, admission_review};
use crate::figures::{Scrape, Usage, parse_metrics};
use crate::setup::{Objects, Perf, apiserver_pid, loopback};

/// The running controller and the connections to it.
pub struct Target {
    pub pool: Arc<Pool>,
    pub listen: SocketAddr,
    pub pid: u32,
    pub apiserver: Option<u32>,
    /// `ZDB_PERF_SAMPLES`: where to append every request's latency.
    pub samples: Option<std::path::PathBuf>,
}

impl Target {
    /// The controller `pid` listening on `listen`, its webhook on `webhook` with CA `ca_pem`.
    pub fn new(
        webhook: SocketAddr,
        ca_pem: &[u8],
        listen: SocketAddr,
        pid: u32,
        apiserver: Option<u32>,
    ) -> Target {
        Target {
            pool: Arc::new(Pool::new(webhook, ca_pem)),
            listen,
            pid,
            apiserver,
            samples: None,
        }
    }

    /// Waits until the webhook's budget cache (its own watch) holds the budget of each of
    /// `sets`: a dry-run review of one of its pods is no longer decided "no budget".
    pub async fn wait_budgets_cached(&self, namespace: &str, sets: &[String]) {
        let no_budget = |scrape: &Scrape| scrape.decisions.get("allowed/NoBudget").copied();
        for set in sets {
            let pod = format!("{set}-0");
            wait_for(
                &format!("the webhook to cache budget {set}"),
                Duration::from_secs(30),
                || async {
                    let before = no_budget(&self.scrape().await);
                    let body = admission_review("cache-probe", namespace, &pod, true);
                    self.pool.post(body).await?;
                    let after = no_budget(&self.scrape().await);
                    if after == before {
                        Ok(())
                    } else {
                        Err(format!("{pod} decided NoBudget"))
                    }
                },
            )
            .await;
        }
    }

    pub async fn scrape(&self) -> Scrape {
        let (code, body) = http_get_from(self.listen, "/metrics")
            .await
            .expect("GET /metrics of zdb-controller");
        assert_eq!(code, 200, "GET /metrics: {body}");
        parse_metrics(&body)
    }

    pub fn usage(&self) -> Usage {
        Usage::now(self.pid, self.apiserver)
    }
}

/// Waits (up to `timeout`) until the controller listening on `listen` is ready.
pub async fn wait_ready(listen: SocketAddr, what: &str, timeout: Duration) {
    wait_for(what, timeout, || async {
        match http_get_from(listen, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The controller measured, started on the measurement's objects.
pub struct Controller {
    pub process: ControllerProcess,
    pub target: Target,
    /// The webhook's CA (PEM), from its Secret.
    pub ca: Vec<u8>,
    /// From the controller's start to every budget computed.
    pub status_time: Duration,
}

impl Perf {
    /// Starts the controller, waits until it computed every budget of `objects` and its
    /// webhook answers.
    pub async fn start_controller(&self, objects: &Objects) -> Controller {
        let (listen, webhook) = (loopback(), loopback());
        let started = Instant::now();
        let process = self.controller(listen, webhook, "zdb-perf-a");
        let pid = process.pid();
        eprintln!(
            "zdb-perf: zdb-controller pid {pid}, log {}",
            process.log.display()
        );
        wait_ready(listen, "zdb-controller ready", Duration::from_secs(120)).await;
        self.wait_budgets(
            std::slice::from_ref(&objects.deny_set),
            &["zone-a"],
            Duration::from_secs(300),
        )
        .await;
        self.wait_budgets(&objects.allowed_sets, &[], Duration::from_secs(300))
            .await;
        let status_time = started.elapsed();
        eprintln!(
            "zdb-perf: controller ready and every budget computed {:.1} s after start",
            status_time.as_secs_f64()
        );
        let ca = self.webhook_ca().await;
        let target = Target {
            samples: std::env::var_os("ZDB_PERF_SAMPLES").map(Into::into),
            ..Target::new(webhook, &ca, listen, pid, apiserver_pid())
        };
        // The webhook serves once its certificate and node cache are there.
        wait_for("the webhook answering", Duration::from_secs(60), || async {
            let body = admission_review("warm-up", &self.other_ns.name, "warm-up", false);
            target.pool.post(body).await.map(|_| ())
        })
        .await;
        Controller {
            process,
            target,
            ca,
            status_time,
        }
    }

    /// The webhook's CA, once the controller wrote its Secret.
    async fn webhook_ca(&self) -> Vec<u8> {
        let secrets: Api<Secret> = self.ns.api();
        wait_for("the webhook Secret", Duration::from_secs(60), || async {
            let secret = secrets
                .get_opt(TLS_SECRET)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no Secret yet")?;
            secret
                .data
                .and_then(|d| d.get("ca.crt").map(|b| b.0.clone()))
                .ok_or_else(|| "no ca.crt yet".to_string())
        })
        .await
    }
}
