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

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::EvictParams;

use super::*;

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

/// An eviction's end, as the API server answered it.
#[derive(Debug)]
enum Evicted {
    Allowed,
    /// 429: the budget (the webhook's denial).
    Refused,
    /// The API server could not get an answer from the webhook.
    Unreachable(String),
    /// The pod was gone or replaced meanwhile (404, 409): no judgement needed.
    Gone,
    Other(String),
}

fn classify_eviction(result: Result<kube::core::Status, kube::Error>) -> Evicted {
    match result {
        Ok(_) => Evicted::Allowed,
        Err(kube::Error::Api(status)) => {
            let message = status.message.clone();
            if message.contains("failed calling webhook") {
                Evicted::Unreachable(message)
            } else if status.code == 429 {
                Evicted::Refused
            } else if status.code == 404 || status.code == 409 {
                Evicted::Gone
            } else {
                Evicted::Other(format!("{} {message}", status.code))
            }
        }
        Err(error) => Evicted::Other(error.to_string()),
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
        let set = STORM_SET;
        let max_unavailable = storm.max_unavailable.first().expect("checked setting");
        let most_unavailable = limit(max_unavailable, storm.pods).expect("checked setting");
        self.deployment_ready(settings).await;
        let webhooks = self.assert_fail_policy(&settings.config).await;
        eprintln!(
            "zdb-perf: restart: {} at failurePolicy Fail; deployment/{} ready",
            settings.config, settings.deployment
        );
        self.storm_pods(storm).await;
        self.delete_budgets(&[set.to_string()]).await;
        self.create_budgets(&[set.to_string()], &spec_value(max_unavailable))
            .await;
        self.wait_budget(set, storm.pods, &[], Duration::from_secs(300))
            .await;
        let selector = format!("app={set}");
        let (initial, targets, ledger, stop, watches) = self.start_ledger(&selector, set).await;

        let counters_before: Vec<_> = webhooks.iter().map(|w| webhook_counters(w)).collect();
        let count = usize::try_from(settings.seconds * u64::from(storm.rate)).unwrap_or(0);
        let period = Duration::from_secs_f64(1.0 / f64::from(storm.rate));
        eprintln!(
            "zdb-perf: restart: evictions at {}/s for {} s through the API server (maxUnavailable {max_unavailable}); rollout restart after {:?}",
            storm.rate, settings.seconds, settings.after
        );
        let started = Instant::now();
        let restart = {
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
        };
        let runtime = tokio::runtime::Handle::current();
        let api = self.pods.clone();
        let pacer = {
            let targets = targets.clone();
            tokio::task::spawn_blocking(move || {
                let mut tasks = Vec::with_capacity(count);
                let mut cursor = String::new();
                for i in 0..count {
                    let scheduled = started + period * u32::try_from(i).unwrap_or(u32::MAX);
                    if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let pick = targets.lock().expect("targets").next_after(&cursor);
                    let Some((pod, uid)) = pick else { continue };
                    cursor.clone_from(&pod);
                    let (api, targets) = (api.clone(), targets.clone());
                    tasks.push(runtime.spawn(async move {
                        let params = EvictParams {
                            delete_options: Some(DeleteParams {
                                preconditions: Some(Preconditions {
                                    uid: Some(uid),
                                    resource_version: None,
                                }),
                                ..DeleteParams::default()
                            }),
                            ..EvictParams::default()
                        };
                        let result =
                            tokio::time::timeout(EVICTION_TIMEOUT, api.evict(&pod, &params)).await;
                        let sent_at = scheduled.duration_since(started);
                        let evicted = match result {
                            Err(_) => {
                                Evicted::Other(format!("no answer within {EVICTION_TIMEOUT:?}"))
                            }
                            Ok(result) => classify_eviction(result),
                        };
                        if matches!(evicted, Evicted::Allowed) {
                            targets.lock().expect("targets").evicted.insert(pod);
                        }
                        (sent_at, evicted)
                    }));
                }
                tasks
            })
        };
        let tasks = pacer.await.expect("the pacer");
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.expect("an eviction"));
        }
        let elapsed = started.elapsed();
        let rollout = restart.await.expect("the rollout restart");

        let catch_up = self.settle(&selector, set, storm.pods, &ledger).await;
        stop.store(true, Ordering::Release);
        for watch in watches {
            let _ = watch.await;
        }
        let counters_after: Vec<_> = webhooks.iter().map(|w| webhook_counters(w)).collect();
        let seen = std::mem::take(&mut *ledger.seen.lock().expect("ledger"));
        let (starts, _completed, violations) = replay(initial, seen, most_unavailable);
        let mut ledger_errors = std::mem::take(&mut *ledger.errors.lock().expect("ledger"));
        if let Err(error) = catch_up {
            ledger_errors.push(error);
        }

        let (mut allowed, mut refused, mut gone, mut other) = (0, 0, 0, 0);
        let mut unreachable: Vec<(Duration, String)> = Vec::new();
        let mut other_example = None;
        for (sent_at, evicted) in &outcomes {
            match evicted {
                Evicted::Allowed => allowed += 1,
                Evicted::Refused => refused += 1,
                Evicted::Gone => gone += 1,
                Evicted::Unreachable(message) => unreachable.push((*sent_at, message.clone())),
                Evicted::Other(message) => {
                    other += 1;
                    other_example.get_or_insert_with(|| message.clone());
                }
            }
        }
        let delta = |i: usize| -> (f64, f64, f64) {
            let (b, a) = (counters_before[i], counters_after[i]);
            (a.0 - b.0, a.1 - b.1, a.2 - b.2)
        };
        let (mut calling_errors, mut fail_open, mut calls) = (0.0, 0.0, 0.0);
        for i in 0..webhooks.len() {
            let (c, f, n) = delta(i);
            calling_errors += c;
            fail_open += f;
            calls += n;
        }

        println!();
        println!(
            "restart storm: {} evictions through the API server at {}/s for {} s (maxUnavailable {max_unavailable}), `kubectl rollout restart deployment/{}` at {:?}",
            outcomes.len(),
            storm.rate,
            settings.seconds,
            settings.deployment,
            settings.after
        );
        match &rollout {
            Ok((issued, done)) => println!(
                "  rollout: restart issued at {:.1} s, complete at {:.1} s",
                issued.as_secs_f64(),
                done.as_secs_f64()
            ),
            Err(error) => println!("  rollout: FAILED: {error}"),
        }
        println!(
            "  evictions: {allowed} allowed ({:.1}/s), {refused} refused by the budget (429), {gone} for a pod gone meanwhile, {} webhook unreachable, {other} other errors{}; sent over {:.1} s",
            f64::from(u32::try_from(allowed).unwrap_or(u32::MAX)) / elapsed.as_secs_f64(),
            unreachable.len(),
            other_example
                .map(|e| format!(" (e.g. {e})"))
                .unwrap_or_default(),
            elapsed.as_secs_f64()
        );
        if let Some((first, message)) = unreachable.first() {
            let last = unreachable.last().map_or(*first, |(at, _)| *at);
            println!(
                "  webhook unreachable from {:.1} s to {:.1} s, e.g.: {message}",
                first.as_secs_f64(),
                last.as_secs_f64()
            );
        }
        println!(
            "  API server counters for {}: calls {calls:.0}, rejected for calling_webhook_error {calling_errors:.0}, failed open {fail_open:.0}",
            webhooks.join(", ")
        );
        println!(
            "  ledger: {} disruptions recorded, {} violations{}{}",
            starts.len(),
            violations.len(),
            violations
                .first()
                .map(|v| format!(" (first: {v})"))
                .unwrap_or_default(),
            if ledger_errors.is_empty() {
                String::new()
            } else {
                format!("; ledger errors: {}", ledger_errors.join("; "))
            }
        );
        let ok = rollout.is_ok()
            && unreachable.is_empty()
            && calling_errors == 0.0
            && fail_open == 0.0
            && violations.is_empty()
            && ledger_errors.is_empty();
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
}
