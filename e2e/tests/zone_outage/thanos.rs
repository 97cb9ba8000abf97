//! Thanos through the outage: config/thanos as users apply it (two Queriers, a Store Gateway,
//! two Rulers, as pods on the real nodes, finding each other by the cluster DNS) over the
//! shards' sidecars. Watched: the Querier's answers through its Service IP, once a second for
//! the whole outage; and two global recording rules the Rulers evaluate every 5 s over the
//! zoneless targets, one with `partial_response_strategy: warn` and one with `abort`: their
//! recorded samples (through the Querier, deduplicated) and their failed evaluations.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use e2e::cluster::DeleteOnDrop;
use e2e::config_thanos;
use e2e::fixture;
use e2e::prometheus::url_encode;
use e2e::real::RealNodes;
use e2e::thanos::{api_at, healthy_endpoints};
use e2e::{Cluster, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde_json::{Value, json};
use zone_api::sprom::contract::{GLOBAL_SCOPE, RULE_SCOPE_LABEL};

use super::shards::{JOB, TIMEOUT};
use super::since;

/// Every zoneless target up, as the global rules count them.
const TARGETS: u64 = super::shards::TARGETS as u64;

/// The global rules' evaluation interval, in seconds.
const EVALUATED_EVERY: f64 = 5.0;

/// The global rules' groups, by their `partial_response_strategy`.
pub const STRATEGIES: [&str; 2] = ["warn", "abort"];

/// The series each strategy's rule records: the zoneless targets up.
fn recorded(strategy: &str) -> String {
    format!("zoneless:up:count_{strategy}")
}

/// config/thanos running, and the volumes its StatefulSets claim.
pub struct Thanos {
    /// The Querier's Service IP and HTTP port.
    pub query: SocketAddr,
    /// The Rulers' pods.
    rulers: Api<Pod>,
    _volumes: Vec<DeleteOnDrop>,
}

/// The PrometheusRule of the two global groups, in `ns` (the shard controller renders it into
/// the Rulers' ConfigMap).
pub async fn global_rules(ns: &TestNamespace) {
    let groups: Vec<Value> = STRATEGIES
        .iter()
        .map(|strategy| {
            json!({
                "name": format!("zoneless-{strategy}"),
                "interval": "5s",
                "partial_response_strategy": strategy,
                "rules": [{"record": recorded(strategy), "expr": format!("count(up{{job=\"{JOB}\"}} == 1)")}],
            })
        })
        .collect();
    let rules: Api<DynamicObject> = Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &e2e::operator::monitoring_resource("PrometheusRule", "prometheusrules"),
    );
    fixture::create(
        &rules,
        json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "global", "labels": {RULE_SCOPE_LABEL: GLOBAL_SCOPE}},
            "spec": {"groups": groups},
        }),
    )
    .await;
}

impl Thanos {
    /// config/thanos applied in `ns`, every pod available, the Querier seeing the three
    /// sidecars and both Rulers, which have recorded both series.
    pub async fn set_up(cluster: &Cluster, real: &RealNodes, ns: &TestNamespace) -> Thanos {
        let volumes = config_thanos::claim_volumes(cluster, ns).await;
        config_thanos::apply(cluster, real, &ns.name);
        let pods: Api<Pod> = ns.api();
        for (selector, count) in [
            ("app.kubernetes.io/name=thanos-query", 2),
            ("app.kubernetes.io/name=thanos-store", 1),
            ("app.kubernetes.io/name=thanos-ruler", 2),
        ] {
            e2e::pods::wait_available(&pods, selector, count, TIMEOUT).await;
        }
        let query = config_thanos::query_service(ns).await;
        wait_for(
            "3 sidecars and 2 Rulers at the Querier",
            TIMEOUT,
            || async {
                let healthy = healthy_endpoints(&api_at(query, "/api/v1/stores").await?);
                let count = |kind: &str| healthy.iter().filter(|e| e.starts_with(kind)).count();
                (count("sidecar ") == 3 && count("rule ") == 2)
                    .then_some(())
                    .ok_or(format!("healthy {healthy:?}"))
            },
        )
        .await;
        let thanos = Thanos {
            query,
            rulers: pods,
            _volumes: volumes,
        };
        for strategy in STRATEGIES {
            wait_for("the global rules recorded", TIMEOUT, || async {
                let samples = thanos.recorded_since(strategy, 60).await?;
                (!samples.is_empty())
                    .then_some(())
                    .ok_or(format!("no sample of {}", recorded(strategy)))
            })
            .await;
        }
        thanos
    }

    /// The raw samples of `strategy`'s recorded series in the last `seconds`, deduplicated:
    /// (Unix time, value).
    async fn recorded_since(
        &self,
        strategy: &str,
        seconds: i64,
    ) -> Result<Vec<(f64, f64)>, String> {
        let path = format!(
            "/api/v1/query?dedup=true&query={}",
            url_encode(&format!("{}[{seconds}s]", recorded(strategy)))
        );
        let data = api_at(self.query, &path).await?;
        Ok(data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|series| series["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.parse().ok()?)))
            .collect())
    }

    /// What each strategy's rule recorded from `from` to now, and how its evaluations failed.
    pub async fn rules_seen(&self, from: Timestamp) -> BTreeMap<&'static str, RuleSeen> {
        let seconds = Timestamp::now().as_second() - from.as_second() + 5;
        let failures = self.evaluation_failures().await;
        let mut seen = BTreeMap::new();
        for strategy in STRATEGIES {
            let mut samples = self
                .recorded_since(strategy, seconds)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", recorded(strategy)));
            samples.sort_by(|a, b| a.0.total_cmp(&b.0));
            let times: Vec<f64> = samples.iter().map(|s| s.0).collect();
            let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
            let longest_gap = gaps.iter().copied().fold(0.0, f64::max);
            let missed = gaps
                .iter()
                .map(|gap| ((gap / EVALUATED_EVERY).round() as usize).saturating_sub(1))
                .sum();
            seen.insert(
                strategy,
                RuleSeen {
                    samples: samples.len(),
                    longest_gap,
                    missed,
                    values: samples.iter().map(|s| s.1 as u64).collect(),
                    failures: failures.get(strategy).copied().unwrap_or_default(),
                },
            );
        }
        seen
    }

    /// Failed evaluations of each strategy's group, summed over the Rulers
    /// (`prometheus_rule_evaluation_failures_total` of their /metrics).
    async fn evaluation_failures(&self) -> BTreeMap<&'static str, f64> {
        let rulers = self
            .rulers
            .list(&ListParams::default().labels("app.kubernetes.io/name=thanos-ruler"))
            .await
            .unwrap();
        let mut failures = BTreeMap::new();
        for pod in rulers.items {
            let Some(ip) = pod.status.and_then(|s| s.pod_ip) else {
                continue;
            };
            let address = SocketAddr::new(ip.parse().unwrap(), 10902);
            let Ok((200, metrics)) = e2e::process::http_get_from(address, "/metrics").await else {
                continue;
            };
            for strategy in STRATEGIES {
                let group = format!("zoneless-{strategy}\"");
                *failures.entry(strategy).or_default() += e2e::process::sum_of(
                    &metrics,
                    "prometheus_rule_evaluation_failures_total{",
                    Some(&group),
                );
            }
        }
        failures
    }

    /// Starts asking the Querier, once a second, which shards' zoneless targets it sees.
    pub fn watch(&self) -> Watch {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let query = self.query;
        let kept = answers.clone();
        let path = format!(
            "/api/v1/query?query={}",
            url_encode(&format!("count by (shard) (up{{job=\"{JOB}\"}} == 1)"))
        );
        let task = tokio::spawn(async move {
            let mut every_second = tokio::time::interval(std::time::Duration::from_secs(1));
            every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every_second.tick().await;
                let at = Timestamp::now();
                let answer =
                    tokio::time::timeout(std::time::Duration::from_secs(5), api_at(query, &path))
                        .await
                        .unwrap_or_else(|_| Err("no answer within 5 s".into()))
                        .map(|data| {
                            data["result"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|s| s["metric"]["shard"].as_str().map(str::to_string))
                                .collect()
                        });
                kept.lock().unwrap().push((at, answer));
            }
        });
        Watch { answers, task }
    }
}

/// What a global rule recorded through the outage.
#[derive(Debug)]
pub struct RuleSeen {
    pub samples: usize,
    /// The longest time between two recorded samples, in seconds.
    pub longest_gap: f64,
    /// Evaluations that recorded nothing.
    pub missed: usize,
    pub values: Vec<u64>,
    pub failures: f64,
}

/// An answer of the Querier: when it was asked, and the shards it counted (or why none).
pub type Answer = (Timestamp, Result<BTreeSet<String>, String>);

/// The Querier asked once a second (see [`Thanos::watch`]).
pub struct Watch {
    answers: Arc<Mutex<Vec<Answer>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    pub fn stop(self) -> Vec<Answer> {
        self.task.abort();
        std::mem::take(&mut *self.answers.lock().unwrap())
    }
}

/// The Querier's answers through the outage, in figures.
#[derive(Debug)]
pub struct QuerierSeen {
    pub asked: usize,
    pub failed: Vec<(Timestamp, String)>,
    /// The longest time without a successful answer, in seconds.
    pub longest_without: f64,
    /// From the outage to its first answer without zone-b's shard.
    pub dropped: Option<std::time::Duration>,
    /// From the end of the outage to its first answer with all three shards again.
    pub back: Option<std::time::Duration>,
}

/// Shard 1 is zone-b's.
const DARK_SHARD: &str = "1";

pub fn querier_seen(answers: &[Answer], started: Timestamp, ended: Timestamp) -> QuerierSeen {
    let ok_times: Vec<Timestamp> = answers
        .iter()
        .filter(|(_, a)| a.is_ok())
        .map(|(at, _)| *at)
        .collect();
    let longest_without = ok_times
        .windows(2)
        .map(|w| since(w[0], w[1]).as_secs_f64())
        .fold(0.0, f64::max);
    let has_dark = |a: &Result<BTreeSet<String>, String>| {
        a.as_ref().is_ok_and(|shards| shards.contains(DARK_SHARD))
    };
    let dropped = answers
        .iter()
        .find(|(at, a)| *at >= started && a.is_ok() && !has_dark(a))
        .map(|(at, _)| since(started, *at));
    let back = answers
        .iter()
        .find(|(at, a)| *at >= ended && a.as_ref().is_ok_and(|s| s.len() == 3))
        .map(|(at, _)| since(ended, *at));
    QuerierSeen {
        asked: answers.len(),
        failed: answers
            .iter()
            .filter_map(|(at, a)| a.as_ref().err().map(|e| (*at, e.clone())))
            .collect(),
        longest_without,
        dropped,
        back,
    }
}

/// Thanos's promises through the outage: the Querier answers with no stretch over 30 s
/// without an answer and sees all three shards again after the return; the global rule with
/// `warn` records with no gap over three evaluations, and both rules see every zoneless target
/// again once zone-b's buckets have failed over and at the end.
pub fn check(querier: &QuerierSeen, global: &BTreeMap<&'static str, RuleSeen>) {
    assert!(
        querier.longest_without <= 30.0,
        "the Querier did not answer for {:.0} s: {:?}",
        querier.longest_without,
        querier.failed
    );
    assert!(
        querier.back.is_some(),
        "the Querier never saw shard 1 again"
    );
    let warn = &global["warn"];
    assert!(
        warn.longest_gap <= 3.0 * EVALUATED_EVERY,
        "the warn rule recorded nothing for {:.0} s",
        warn.longest_gap
    );
    for (strategy, seen) in global {
        let short = seen.short_after_failover();
        assert!(
            short == Some(0) && seen.values.last() == Some(&TARGETS),
            "the {strategy} rule saw fewer than {TARGETS} zoneless targets up {short:?} times \
             after the failover: {:?}",
            seen.values
        );
    }
}

impl RuleSeen {
    /// The samples with fewer than every zoneless target up once they had all been up again
    /// after the outage's dip (the failover); None if they never were.
    pub fn short_after_failover(&self) -> Option<usize> {
        let dip = self.values.iter().position(|v| *v < TARGETS)?;
        let again = dip + self.values[dip..].iter().position(|v| *v >= TARGETS)?;
        Some(
            self.values[again..]
                .iter()
                .filter(|v| **v < TARGETS)
                .count(),
        )
    }
}
