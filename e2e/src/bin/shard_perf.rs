//! Measurements of the ShardedPrometheus controller (`make perf`, `e2e/perf/shard.sh`) on the
//! local zonal cluster, with the release `shard-controller`:
//!
//! 1. CPU. A ShardedPrometheus of 100 shards (Topology over the three zones, 2 replicas each) is
//!    applied; the controller's CPU time (utime + stime from /proc) is read before and once the
//!    status observes all 100 StatefulSets and every config Secret and Service exists: one
//!    reconcile + apply of 300 children, and the reconciles their watch events trigger. Then the
//!    scrape configs change: every config Secret rewritten, measured the same way. Target: <= 1 s of
//!    CPU for each.
//! 2. Memory. With the 100 shards' 200 pods Ready (kwok), the controller's VmRSS is sampled every
//!    second for 30 s, then VmHWM read. Target: <= 50 MiB.
//!
//! Settings (environment): `SHARD_PERF_SHARDS` (100), `SHARD_PERF_REPLICAS` (2),
//! `SHARD_PERF_CPU_SECONDS` (1.0), `SHARD_PERF_RSS_SECONDS` (30), `SHARD_PERF_RSS_MIB` (50).
//!
//! Exit status: 0 when every target is met, 1 otherwise.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use e2e::localstack::free_port;
use e2e::perf::{cpu_seconds, exit_on_targets, memory_kib, mib, setting};
use e2e::process::{ControllerProcess, metric_sum, namespace_args};
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;

const NAME: &str = "perf";
fn timeout() -> Duration {
    Duration::from_secs(setting("SHARD_PERF_TIMEOUT_SECONDS", 600))
}

fn spec(shards: u32, replicas: u32, jobs: &[&str]) -> Value {
    let scrape: Vec<Value> = jobs
        .iter()
        .map(|job| json!({"job_name": job, "kubernetes_sd_configs": [{"role": "pod"}]}))
        .collect();
    json!({
        "apiVersion": "zonecontrol.k8s.aws/v1",
        "kind": "ShardedPrometheus",
        "metadata": {"name": NAME},
        "spec": {
            "shards": shards,
            "replicas": replicas,
            "nodeSelector": {"type": "kwok"},
            "shardingStrategy": {"topology": {"values": ["zone-a", "zone-b", "zone-c"]}},
            "scrapeConfigs": scrape,
        },
    })
}

/// Applies `spec`, then waits until the controller observed it and `done` holds; returns the
/// controller's CPU seconds in between and the wall time.
async fn measured_apply<F, Fut>(
    controller: &ControllerProcess,
    sproms: &Api<ShardedPrometheus>,
    spec: &Value,
    what: &str,
    done: F,
) -> (f64, Duration)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let before = cpu_seconds(controller.pid());
    let started = Instant::now();
    sproms
        .patch(
            NAME,
            &PatchParams::apply("shard-perf").force(),
            &Patch::Apply(spec),
        )
        .await
        .unwrap();
    wait_for(what, timeout(), done).await;
    (cpu_seconds(controller.pid()) - before, started.elapsed())
}

/// The controller measured, on a namespace of its own, and the ShardedPrometheus's children.
struct Bench {
    shards: u32,
    replicas: u32,
    cpu_target: f64,
    rss_seconds: u64,
    rss_target: f64,
    ns: TestNamespace,
    port: u16,
    controller: ControllerProcess,
    sproms: Api<ShardedPrometheus>,
    sets: Api<StatefulSet>,
    secrets: Api<Secret>,
    services: Api<Service>,
}

/// Ok when `n` is the number of shards.
fn all_shards(shards: u32, n: usize) -> Result<(), String> {
    if n == shards as usize {
        Ok(())
    } else {
        Err(format!("{n} of {shards}"))
    }
}

/// How many objects of `api` match `params`.
async fn listed<K>(api: &Api<K>, params: &ListParams) -> Result<usize, String>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let list = api.list_metadata(params).await.map_err(|e| e.to_string())?;
    Ok(list.items.len())
}

impl Bench {
    /// Starts the controller on a new namespace, with the pods' ServiceAccount.
    async fn start(cluster: &Cluster) -> Bench {
        let shards: u32 = setting("SHARD_PERF_SHARDS", 100);
        let replicas: u32 = setting("SHARD_PERF_REPLICAS", 2);
        let cpu_target: f64 = setting("SHARD_PERF_CPU_SECONDS", 1.0);
        let rss_seconds: u64 = setting("SHARD_PERF_RSS_SECONDS", 30);
        let rss_target: f64 = setting("SHARD_PERF_RSS_MIB", 50.0);
        let ns = TestNamespace::create(cluster, "shard-perf").await;
        let port = free_port();
        let mut args = namespace_args(&ns.name, false);
        args.extend(["--listen-address".into(), format!("127.0.0.1:{port}")]);
        args.extend(["--log-level".into(), "warn".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let controller = ControllerProcess::start("shard-controller", &args, &[]);
        wait_for("the controller ready", Duration::from_secs(60), || async {
            e2e::process::http_get(port, "/readyz")
                .await
                .map(drop)
                .ok_or_else(|| "not ready".to_string())
        })
        .await;
        // The pods' ServiceAccount: without it the StatefulSet controller creates no pod.
        let accounts: Api<ServiceAccount> = ns.api();
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "prometheus"}})).unwrap(),
            )
            .await
            .unwrap();
        Bench {
            shards,
            replicas,
            cpu_target,
            rss_seconds,
            rss_target,
            sproms: ns.api(),
            sets: ns.api(),
            secrets: ns.api(),
            services: ns.api(),
            ns,
            port,
            controller,
        }
    }

    /// The ShardedPrometheus as it is now.
    async fn sprom(&self) -> Result<ShardedPrometheus, String> {
        self.sproms.get(NAME).await.map_err(|e| e.to_string())
    }

    /// 1a. Create: the shards' children applied and observed.
    async fn create(&self) -> bool {
        let (shards, replicas, cpu_target) = (self.shards, self.replicas, self.cpu_target);
        let reconciles_before =
            metric_sum(self.port, "zone_aware_reconciliations_total", None).await;
        let (cpu, wall) = measured_apply(
            &self.controller,
            &self.sproms,
            &spec(shards, replicas, &["pods"]),
            "every shard's children, observed",
            || async {
                let status = self.sprom().await?.status;
                let observed = status.map_or(0, |s| s.shards);
                all_shards(shards, usize::try_from(observed).unwrap_or(0))?;
                // Only the children, by their label.
                let params =
                    ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}"));
                all_shards(shards, listed(&self.sets, &params).await?)?;
                all_shards(shards, listed(&self.secrets, &params).await?)?;
                all_shards(shards, listed(&self.services, &params).await?)
            },
        )
        .await;
        let reconciles = metric_sum(self.port, "zone_aware_reconciliations_total", None).await
            - reconciles_before;
        println!(
            "shard perf: create {shards} shards x {replicas}: controller CPU {cpu:.2} s over {:.1} s, {reconciles} reconciles (target <= {cpu_target} s)",
            wall.as_secs_f64()
        );
        cpu <= cpu_target
    }

    /// 1b. A scrape config change: every config Secret rewritten in place.
    async fn change(&self) -> bool {
        let (shards, replicas, cpu_target) = (self.shards, self.replicas, self.cpu_target);
        let (cpu, wall) = measured_apply(
            &self.controller,
            &self.sproms,
            &spec(shards, replicas, &["pods", "more-pods"]),
            "every config Secret with the new job",
            || async {
                let list = self
                    .secrets
                    .list(
                        &ListParams::default()
                            .labels(&format!("app.kubernetes.io/instance={NAME}")),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let updated = list
                    .items
                    .iter()
                    .filter(|secret| {
                        secret
                            .data
                            .as_ref()
                            .and_then(|d| d.get("prometheus.yml"))
                            .and_then(|c| std::str::from_utf8(&c.0).ok())
                            .is_some_and(|c| c.contains("more-pods"))
                    })
                    .count();
                all_shards(shards, updated)
            },
        )
        .await;
        println!(
            "shard perf: change the scrape configs of {shards} shards: controller CPU {cpu:.2} s over {:.1} s (target <= {cpu_target} s)",
            wall.as_secs_f64()
        );
        cpu <= cpu_target
    }

    /// 2. Memory with every pod Ready.
    async fn memory(&self) -> bool {
        let (shards, replicas) = (self.shards, self.replicas);
        let (rss_seconds, rss_target) = (self.rss_seconds, self.rss_target);
        wait_for("every shard ready", timeout(), || async {
            let status = self.sprom().await?.status;
            all_shards(
                shards,
                usize::try_from(status.map_or(0, |s| s.ready_shards)).unwrap_or(0),
            )
        })
        .await;
        let mut peak_rss = 0;
        for _ in 0..rss_seconds {
            let (rss, _) = memory_kib(self.controller.pid()).expect("the controller runs");
            peak_rss = peak_rss.max(rss);
            tokio::time::sleep(Duration::from_secs(1)).await; // a sampling interval
        }
        let (_, hwm) = memory_kib(self.controller.pid()).expect("the controller runs");
        println!(
            "shard perf: {shards} shards x {replicas} replicas Ready: controller VmRSS peak {:.1} MiB over {rss_seconds} s, VmHWM {:.1} MiB (target <= {rss_target} MiB)",
            mib(peak_rss),
            mib(hwm)
        );
        mib(hwm) <= rss_target
    }
}

async fn measure(cluster: &Cluster) -> BTreeMap<&'static str, bool> {
    let bench = Bench::start(cluster).await;
    let mut met = BTreeMap::new();
    met.insert("cpu_create", bench.create().await);
    met.insert("cpu_change", bench.change().await);
    met.insert("rss", bench.memory().await);
    let Bench { ns, controller, .. } = bench;
    drop(controller);
    ns.delete_and_wait(timeout()).await;
    met
}

#[tokio::main]
async fn main() -> ExitCode {
    let cluster = Cluster::get();
    exit_on_targets("shard perf", measure(&cluster)).await
}
