//! The drain storm through the API server while the **deployed** zdb-controller restarts
//! (`ZDB_PERF_RESTART=1`; e2e/perf/zdb.sh): real evictions (`pods/eviction`) of the storm's
//! pods at the storm's rate, each judged by the webhook the API server calls through its Service
//! (pods on the real nodes, `make deploy-local`), and `kubectl rollout restart` of the
//! Deployment mid-storm. With `failurePolicy: Fail` (asserted before the storm: at `Ignore` an
//! unreachable webhook is hidden as fail-open), an eviction the API server could not get judged
//! fails with "failed calling webhook": counted from the eviction errors the driver gets and from
//! the API server's own counters (`apiserver_admission_webhook_rejection_count` with
//! `error_type="calling_webhook_error"`, `apiserver_admission_webhook_fail_open_count`), before
//! and after. Budget violations come from the storm's ledger.
//!
//! Settings: `ZDB_PERF_RESTART_NAMESPACE` (zone-aware-system), `ZDB_PERF_RESTART_DEPLOYMENT`
//! (zdb-controller), `ZDB_PERF_RESTART_CONFIG` (zone-aware-eviction-webhook),
//! `ZDB_PERF_RESTART_AFTER` (10 s into the storm), `ZDB_PERF_RESTART_SECONDS` (90: the storm's
//! length, past the rollout), `ZDB_PERF_STORM_MAX_UNAVAILABLE` (its first value),
//! `ZDB_PERF_STORM_RATE`, `ZDB_PERF_STORM_PODS`.

use std::process::Command;
use std::time::{Duration, Instant};

use e2e::perf::setting;
use e2e::wait_for;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use super::evict::{Evicted, Evictions};
use super::ledger::Replayed;
use super::{STORM_SET, Tally};
use crate::settings::{StormSettings, limit};
use crate::setup::Perf;

/// How long one eviction may take: the webhook's timeout and the API server's own work.
const EVICTION_TIMEOUT: Duration = Duration::from_secs(15);

pub struct RestartSettings {
    namespace: String,
    deployment: String,
    config: String,
    after: Duration,
    seconds: u64,
}

impl RestartSettings {
    pub fn from_env() -> RestartSettings {
        RestartSettings {
            namespace: setting(
                "ZDB_PERF_RESTART_NAMESPACE",
                "zone-aware-system".to_string(),
            ),
            deployment: setting("ZDB_PERF_RESTART_DEPLOYMENT", "zdb-controller".to_string()),
            config: setting(
                "ZDB_PERF_RESTART_CONFIG",
                "zone-aware-eviction-webhook".to_string(),
            ),
            after: Duration::from_secs(setting("ZDB_PERF_RESTART_AFTER", 10)),
            seconds: setting("ZDB_PERF_RESTART_SECONDS", 90),
        }
    }
}

/// The API server's counters of calls of webhook `name` that failed (summed over their other
/// labels): (rejected because calling it failed, let through because calling it failed and the
/// policy was Ignore, calls made).
fn webhook_counters(name: &str) -> (f64, f64, f64) {
    let output = Command::new("kubectl")
        .args(["get", "--raw", "/metrics"])
        .output()
        .expect("run kubectl get --raw /metrics");
    assert!(
        output.status.success(),
        "kubectl get --raw /metrics: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let named = format!("name=\"{name}\"");
    let sum = |metric: &str, extra: Option<&str>| -> f64 {
        text.lines()
            .filter(|line| line.starts_with(&format!("{metric}{{")))
            .filter(|line| line.contains(&named))
            .filter(|line| extra.is_none_or(|e| line.contains(e)))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (
        sum(
            "apiserver_admission_webhook_rejection_count",
            Some("error_type=\"calling_webhook_error\""),
        ),
        sum("apiserver_admission_webhook_fail_open_count", None),
        sum("apiserver_admission_webhook_request_total", None),
    )
}

fn kubectl(args: &[&str]) -> Result<String, String> {
    let output = Command::new("kubectl")
        .args(args)
        .output()
        .map_err(|e| format!("kubectl {args:?}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

impl Perf {
    /// The webhook configuration's every webhook at `Fail`, waited for (a replica switches it
    /// once it serves); returns the webhook names.
    async fn assert_fail_policy(&self, config: &str) -> Vec<String> {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(self.ns.client.clone());
        wait_for(
            &format!("failurePolicy Fail on {config}"),
            Duration::from_secs(180),
            || async {
                let found = configs.get(config).await.map_err(|e| e.to_string())?;
                let webhooks = found.webhooks.unwrap_or_default();
                let policies: Vec<(String, Option<String>)> = webhooks
                    .iter()
                    .map(|w| (w.name.clone(), w.failure_policy.clone()))
                    .collect();
                if !policies.is_empty()
                    && policies
                        .iter()
                        .all(|(_, policy)| policy.as_deref() == Some("Fail"))
                {
                    Ok(policies.into_iter().map(|(name, _)| name).collect())
                } else {
                    Err(format!("{policies:?}"))
                }
            },
        )
        .await
    }

    async fn deployment_ready(&self, settings: &RestartSettings) {
        let deployments: Api<Deployment> =
            Api::namespaced(self.ns.client.clone(), &settings.namespace);
        wait_for(
            &format!("deployment/{} ready", settings.deployment),
            Duration::from_secs(180),
            || async {
                let deployment = deployments
                    .get(&settings.deployment)
                    .await
                    .map_err(|e| e.to_string())?;
                let want = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
                let status = deployment.status.unwrap_or_default();
                if status.ready_replicas == Some(want) && status.updated_replicas == Some(want) {
                    Ok(())
                } else {
                    Err(format!("{status:?}"))
                }
            },
        )
        .await;
    }

    /// The storm through the API server with a rolling restart of the deployed controller in
    /// the middle; true when no eviction failed for want of the webhook and no budget was
    /// violated.
    pub async fn restart_storm(&self, storm: &StormSettings, settings: &RestartSettings) -> bool {
        let max_unavailable = storm.max_unavailable.first().expect("checked setting");
        let most_unavailable = limit(max_unavailable, storm.pods).expect("checked setting");
        self.deployment_ready(settings).await;
        let webhooks = self.assert_fail_policy(&settings.config).await;
        eprintln!(
            "zdb-perf: restart: {} at failurePolicy Fail; deployment/{} ready",
            settings.config, settings.deployment
        );
        self.storm_budget(storm, max_unavailable).await;
        let watched = self
            .watch_storm(&format!("app={STORM_SET}"), Some(STORM_SET))
            .await;

        let counters_before: Vec<_> = webhooks.iter().map(|w| webhook_counters(w)).collect();
        let count = usize::try_from(settings.seconds * u64::from(storm.rate)).unwrap_or(0);
        eprintln!(
            "zdb-perf: restart: evictions at {}/s for {} s through the API server (maxUnavailable {max_unavailable}); rollout restart after {:?}",
            storm.rate, settings.seconds, settings.after
        );
        let started = Instant::now();
        let restart = rollout_restart(settings, started);
        let evictions = Evictions {
            grace_period: None,
            timeout: EVICTION_TIMEOUT,
            in_flight: None,
        };
        let targets = watched.targets.clone();
        let (outcomes, elapsed) = evictions
            .send(&self.pods, started, storm.rate, count, targets)
            .await;
        let rollout = restart.await.expect("the rollout restart");
        let (replayed, ledger_errors) = watched.finish(self, storm.pods, most_unavailable).await;
        let counters_after: Vec<_> = webhooks.iter().map(|w| webhook_counters(w)).collect();

        let mut run = RestartRun {
            sent: outcomes.len(),
            evictions: Tally::default(),
            unreachable: Vec::new(),
            elapsed,
            rollout,
            counters: counters_delta(&counters_before, &counters_after),
            webhooks,
            replayed,
            ledger_errors,
        };
        for (scheduled, _, evicted) in outcomes {
            match evicted {
                Evicted::Judged(end) => run.evictions.count(end),
                Evicted::Unreachable { message, .. } => {
                    run.unreachable
                        .push((scheduled.duration_since(started), message));
                }
            }
        }
        run.report(storm, settings, max_unavailable)
    }
}

/// `kubectl rollout restart` of the deployed controller `settings.after` past `started`, and
/// its `rollout status`; returns when the restart was issued and when it was complete.
fn rollout_restart(
    settings: &RestartSettings,
    started: Instant,
) -> tokio::task::JoinHandle<Result<(Duration, Duration), String>> {
    let (namespace, deployment) = (settings.namespace.clone(), settings.deployment.clone());
    let after = settings.after;
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(after);
        let target = format!("deployment/{deployment}");
        kubectl(&["-n", &namespace, "rollout", "restart", &target])?;
        let issued = started.elapsed();
        kubectl(&[
            "-n",
            &namespace,
            "rollout",
            "status",
            &target,
            "--timeout=300s",
        ])?;
        Ok::<_, String>((issued, started.elapsed()))
    })
}

/// The API server's counters of the webhooks between two readings, summed over the webhooks:
/// (rejected for calling_webhook_error, failed open, calls).
fn counters_delta(before: &[(f64, f64, f64)], after: &[(f64, f64, f64)]) -> (f64, f64, f64) {
    let (mut calling_errors, mut fail_open, mut calls) = (0.0, 0.0, 0.0);
    for (b, a) in before.iter().zip(after) {
        calling_errors += a.0 - b.0;
        fail_open += a.1 - b.1;
        calls += a.2 - b.2;
    }
    (calling_errors, fail_open, calls)
}

/// The restart storm's figures.
struct RestartRun {
    /// Evictions sent.
    sent: usize,
    /// The evictions the API server judged (wrong: other errors).
    evictions: Tally,
    /// Evictions that failed for want of the webhook: when they were sent, and the message.
    unreachable: Vec<(Duration, String)>,
    elapsed: Duration,
    rollout: Result<(Duration, Duration), String>,
    webhooks: Vec<String>,
    /// The API server's counters meanwhile: (calling errors, failed open, calls).
    counters: (f64, f64, f64),
    replayed: Replayed,
    ledger_errors: Vec<String>,
}

impl RestartRun {
    /// Prints the figures; true when no eviction failed for want of the webhook and no budget
    /// was violated.
    fn report(
        &self,
        storm: &StormSettings,
        settings: &RestartSettings,
        max_unavailable: &str,
    ) -> bool {
        println!();
        println!(
            "restart storm: {} evictions through the API server at {}/s for {} s (maxUnavailable {max_unavailable}), `kubectl rollout restart deployment/{}` at {:?}",
            self.sent, storm.rate, settings.seconds, settings.deployment, settings.after
        );
        match &self.rollout {
            Ok((issued, done)) => println!(
                "  rollout: restart issued at {:.1} s, complete at {:.1} s",
                issued.as_secs_f64(),
                done.as_secs_f64()
            ),
            Err(error) => println!("  rollout: FAILED: {error}"),
        }
        self.report_evictions();
        let (calling_errors, fail_open, calls) = self.counters;
        println!(
            "  API server counters for {}: calls {calls:.0}, rejected for calling_webhook_error {calling_errors:.0}, failed open {fail_open:.0}",
            self.webhooks.join(", ")
        );
        let violations = &self.replayed.violations;
        println!(
            "  ledger: {} disruptions recorded, {} violations{}{}",
            self.replayed.starts.len(),
            violations.len(),
            violations
                .first()
                .map(|v| format!(" (first: {v})"))
                .unwrap_or_default(),
            if self.ledger_errors.is_empty() {
                String::new()
            } else {
                format!("; ledger errors: {}", self.ledger_errors.join("; "))
            }
        );
        let ok = self.rollout.is_ok()
            && self.unreachable.is_empty()
            && calling_errors == 0.0
            && fail_open == 0.0
            && violations.is_empty()
            && self.ledger_errors.is_empty();
        println!(
            "restart storm: {}",
            if ok {
                "no eviction failed for want of the webhook, no budget violated"
            } else {
                "TARGETS MISSED"
            }
        );
        ok
    }

    fn report_evictions(&self) {
        let e = &self.evictions;
        println!(
            "  evictions: {} allowed ({:.1}/s), {} refused by the budget (429), {} for a pod gone meanwhile, {} webhook unreachable, {} other errors{}; sent over {:.1} s",
            e.allowed,
            f64::from(u32::try_from(e.allowed).unwrap_or(u32::MAX)) / self.elapsed.as_secs_f64(),
            e.refused,
            e.gone,
            self.unreachable.len(),
            e.wrong,
            e.example
                .as_ref()
                .map(|e| format!(" (e.g. {e})"))
                .unwrap_or_default(),
            self.elapsed.as_secs_f64()
        );
        if let Some((first, message)) = self.unreachable.first() {
            let last = self.unreachable.last().map_or(*first, |(at, _)| *at);
            println!(
                "  webhook unreachable from {:.1} s to {:.1} s, e.g.: {message}",
                first.as_secs_f64(),
                last.as_secs_f64()
            );
        }
    }
}
