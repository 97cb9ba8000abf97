//! A ShardedPrometheus through the outage: three shards (one Prometheus each, on the real
//! nodes of zone-a, zone-b and zone-c) and a job of zoneless targets (static, so no zone: spread
//! over all shards). While zone-b is dark its shard's zoneless buckets fail over to the shards
//! of zone-a and zone-c after `zoneFailoverAfter`, and return when it is back. What the suite
//! measures: where each target is scraped (each shard's active targets), the samples of `up`
//! the surviving shards recorded (a missed scrape is a gap), and how long any target was
//! scraped by two shards at once after the return. A second job, of the namespace's pods (the
//! Prometheus, their sidecars and Thanos) in the zones of their nodes, measures the samples of
//! the surviving zones' targets through the whole outage. The deployed rules-federator
//! discovering the shards answers throughout (called as Grafana calls it: HTTPS, a reader's
//! token): while zone-b is dark, with the rules of zone-a's and zone-c's shards and a warning
//! naming zone-b's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::deploy::DeployedFederator;
use e2e::fixture::{self, Wanted};
use e2e::process::http_get_from;
use e2e::prometheus::url_encode;
use e2e::wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_api::sprom::{UnreadyZone, condition, reason};

use super::DARK;

/// config/thanos's name for the ShardedPrometheus it joins.
pub const NAME: &str = "prometheus";
const MANAGER: &str = "e2e-zone-outage";
/// The zoneless job's targets.
pub const TARGETS: usize = 24;
pub const JOB: &str = "zoneless";
/// The job of the namespace's pods, each in its node's zone.
const ZONED: &str = "zoned";
/// The zones that stay up.
const SURVIVING: &str = "zone-a|zone-c";
/// The zoneless job's scrape interval.
pub const INTERVAL: Duration = Duration::from_secs(15);
const FAILOVER_AFTER: &str = "20s";
pub const TIMEOUT: Duration = Duration::from_secs(240);

/// Target (its `t` label) → the shards whose Prometheus scrapes it.
pub type Placement = BTreeMap<String, BTreeSet<u32>>;

pub struct Shards {
    pub sprom: fixture::Sprom,
    generation: i64,
    /// The placement before the outage: one shard per target.
    pub before: Placement,
    /// The deployed rules-federator over the shards (a replica outside the dark zone), and a
    /// reader's token.
    federator: DeployedFederator,
    token: String,
    pub thanos: super::thanos::Thanos,
}

/// What the federator answered to `/api/v1/rules`: the shards whose rules it has, and its
/// warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Federated {
    pub shards: BTreeSet<String>,
    pub warnings: Vec<String>,
}

/// The zoneless job: [`TARGETS`] static targets, each its own Prometheus (`127.0.0.1:9090`
/// answers in every pod), told apart by the label `t`, which is also their hash input.
fn zoneless_job() -> Value {
    let targets: Vec<Value> = (0..TARGETS)
        .map(|t| json!({"targets": ["127.0.0.1:9090"], "labels": {"t": format!("t{t:02}")}}))
        .collect();
    json!({
        "job_name": JOB,
        "scrape_interval": format!("{}s", INTERVAL.as_secs()),
        "static_configs": targets,
        "relabel_configs": [{"source_labels": ["t"], "target_label": "__tmp_hash"}],
    })
}

/// The zoned job: the pods of `namespace` on their HTTP ports (the Prometheus, their Thanos
/// sidecars and config/thanos's pods), sharded by the zone of their node.
fn zoned_job(namespace: &str) -> Value {
    json!({
        "job_name": ZONED,
        "scrape_interval": format!("{}s", INTERVAL.as_secs()),
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": "9090|10902", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_node_label_topology_kubernetes_io_zone"], "target_label": "zone"},
        ],
    })
}

/// `GET <path>` of the Prometheus of the pod at `ip`, within 5 s, as JSON.
async fn prometheus_get(ip: &str, path: &str) -> Result<Value, String> {
    let address = format!("{ip}:9090").parse().map_err(|e| format!("{e}"))?;
    let answer = tokio::time::timeout(Duration::from_secs(5), http_get_from(address, path))
        .await
        .map_err(|_| format!("{ip}: no answer within 5 s"))??;
    match answer {
        (200, body) => serde_json::from_str(&body).map_err(|e| e.to_string()),
        (code, body) => Err(format!("{ip}: HTTP {code}: {body}")),
    }
}

/// The `t` labels of the zoneless job's active targets of the Prometheus at `ip`.
async fn active(ip: &str) -> Result<BTreeSet<String>, String> {
    let body = prometheus_get(ip, "/api/v1/targets?state=active").await?;
    Ok(body["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|target| target["scrapePool"] == JOB)
        .filter_map(|target| target["labels"]["t"].as_str().map(str::to_string))
        .collect())
}

impl Shards {
    /// The resource's namespace, watched by the deployed shard controller.
    pub async fn namespace() -> fixture::Sprom {
        fixture::Sprom::watched_elsewhere("zone-outage-shards", NAME, MANAGER, TIMEOUT).await
    }

    /// The resource applied in `sprom`'s namespace on the real nodes, its three shards ready and
    /// scraping every zoneless target once, the deployed federator answering for them.
    pub async fn set_up(
        sprom: fixture::Sprom,
        controllers: &super::deployed::Controllers<'_>,
    ) -> Shards {
        let cluster = e2e::Cluster::get();
        let real = e2e::real::RealNodes::of(&cluster);
        sprom.prometheus_service_account().await;
        let rules: Api<ConfigMap> = sprom.ns.api();
        let rule_file = json!({
            "metadata": {"name": "rules"},
            "data": {"rules.yaml": "groups:\n- name: shard\n  rules:\n  - record: one\n    expr: vector(1)\n"},
        });
        fixture::create(&rules, rule_file).await;
        e2e::operator::install_crds(&cluster).await;
        e2e::config_thanos::objstore_secret(&cluster, &sprom.ns).await;
        super::thanos::global_rules(&sprom.ns).await;
        let mut spec = fixture::on_real_nodes(
            &real,
            json!({
                "shards": 3,
                "replicas": 1,
                "ruleFiles": [{"configMap": "rules"}],
                "ruleSelector": {},
                "scrapeConfigs": [zoneless_job(), zoned_job(&sprom.ns.name)],
                "thanos": {
                    "image": real.thanos_image,
                    "objectStorageConfig": {"name": e2e::config_thanos::OBJSTORE_SECRET, "key": "objstore.yml"},
                },
            }),
        );
        spec["shardingStrategy"]["zoneFailoverAfter"] = json!(FAILOVER_AFTER);
        let generation = sprom.apply(spec).await;
        sprom
            .wait_ready_shards("three ready shards", generation, 3)
            .await;
        let federator = controllers.federator_outside(DARK).await;
        let thanos = super::thanos::Thanos::set_up(&cluster, &real, &sprom.ns).await;
        let mut shards = Shards {
            sprom,
            generation,
            before: Placement::new(),
            federator,
            token: controllers.reader.clone(),
            thanos,
        };
        shards
            .wait_federated(
                "the federator answering for the three shards",
                &["0", "1", "2"],
                false,
            )
            .await;
        shards.before = shards
            .wait_placement("every zoneless target scraped once", |placement| {
                once_each(placement, &[0, 1, 2])
            })
            .await;
        shards
    }

    /// The federator's `/api/v1/rules`.
    pub async fn federated(&self) -> Result<Federated, String> {
        let (code, body) = self
            .federator
            .get("/api/v1/rules", Some(&self.token))
            .await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 || value["status"] != "success" {
            return Err(format!("{code}: {body}"));
        }
        let rules = value["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|group| group["rules"].as_array().into_iter().flatten());
        Ok(Federated {
            shards: rules
                .filter_map(|rule| rule["labels"]["shard"].as_str().map(str::to_string))
                .collect(),
            warnings: value["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect(),
        })
    }

    /// Waits until the federator answers with the rules of `shards` exactly, and a warning
    /// naming zone-b's shard when `warned` (no warning otherwise).
    pub async fn wait_federated(&self, what: &str, shards: &[&str], warned: bool) -> Federated {
        let want: BTreeSet<String> = shards.iter().map(|s| s.to_string()).collect();
        wait_for(what, TIMEOUT, || async {
            let answer = self.federated().await?;
            let warnings_right = match warned {
                true => {
                    answer.warnings.len() == 1
                        && answer.warnings[0]
                            .starts_with(&format!("shard 1: no ready pod ({NAME}-shard-1-0"))
                }
                false => answer.warnings.is_empty(),
            };
            match answer.shards == want && warnings_right {
                true => Ok(answer),
                false => Err(format!("{answer:?}")),
            }
        })
        .await
    }

    /// Shard → the IP of its Prometheus pod.
    async fn pods(&self) -> BTreeMap<u32, String> {
        self.sprom
            .prometheus_pods()
            .await
            .iter()
            .filter_map(|pod| {
                let shard = pod
                    .labels()
                    .get("zonecontrol.k8s.aws/shard")?
                    .parse()
                    .ok()?;
                let ip = pod.status.as_ref()?.pod_ip.clone()?;
                Some((shard, ip))
            })
            .collect()
    }

    /// Where each zoneless target is scraped, asking the shards `asked` (a dark shard does
    /// not answer).
    pub async fn placement(&self, asked: &[u32]) -> Result<Placement, String> {
        let mut placement = Placement::new();
        for (shard, ip) in self.pods().await {
            if !asked.contains(&shard) {
                continue;
            }
            for t in active(&ip).await? {
                placement.entry(t).or_default().insert(shard);
            }
        }
        Ok(placement)
    }

    /// Waits until the placement over the three shards is one `check` accepts.
    async fn wait_placement(
        &self,
        what: &str,
        check: impl Fn(&Placement) -> Result<(), String>,
    ) -> Placement {
        wait_for(what, TIMEOUT, || async {
            let placement = self.placement(&[0, 1, 2]).await?;
            check(&placement).map(|()| placement)
        })
        .await
    }

    /// Waits until zone-b's shard has failed over: the status says so, Degraded names it, and
    /// the shards of zone-a and zone-c scrape every zoneless target once between them. When
    /// the status said so, and the placement then.
    pub async fn wait_failed_over(&self) -> (UnreadyZone, Timestamp, Placement) {
        let wanted = Wanted::true_with(condition::DEGRADED, reason::ZONE_FAILED_OVER);
        let sprom = self
            .sprom
            .wait_condition(self.generation, wanted, TIMEOUT, |message| {
                message.contains(&format!("zone {DARK} since"))
            })
            .await;
        let failed_at = Timestamp::now();
        let zone = unready(&sprom)
            .into_iter()
            .find(|zone| zone.zone == DARK && zone.failed_over)
            .expect("zone-b failed over in status.unreadyZones");
        let placement = wait_for(
            "zone-a's and zone-c's shards scraping every zoneless target",
            TIMEOUT,
            || async {
                let placement = self.placement(&[0, 2]).await?;
                once_each(&placement, &[0, 2]).map(|()| placement)
            },
        )
        .await;
        (zone, failed_at, placement)
    }

    /// The samples of `up` of the zoneless targets the shards `asked` recorded over the last
    /// `window`: per target, the longest gap between two of them, and the scrapes missed
    /// (a gap of k intervals misses k - 1).
    pub async fn gaps(&self, asked: &[u32], window: Duration) -> Result<Gaps, String> {
        let zoneless = format!(r#"job="{JOB}""#);
        Ok(gaps_of(self.scraped(&zoneless, "t", asked, window).await?))
    }

    /// [`Shards::gaps`] of the surviving zones' zoned targets, on their shards (0 and 2).
    pub async fn zoned_gaps(&self, window: Duration) -> Result<Gaps, String> {
        let zoned = format!(r#"job="{ZONED}", zone=~"{SURVIVING}""#);
        Ok(gaps_of(
            self.scraped(&zoned, "instance", &[0, 2], window).await?,
        ))
    }

    /// The times of the samples of `up{<selector>}` the shards `asked` recorded over the last
    /// `window`, per target (its label `key`) and shard.
    async fn scraped(
        &self,
        selector: &str,
        key: &str,
        asked: &[u32],
        window: Duration,
    ) -> Result<BTreeMap<(String, u32), Vec<f64>>, String> {
        let query = format!("up{{{selector}}}[{}s]", window.as_secs());
        let mut times = BTreeMap::new();
        for (shard, ip) in self.pods().await {
            if !asked.contains(&shard) {
                continue;
            }
            let path = format!("/api/v1/query?query={}", url_encode(&query));
            let body = prometheus_get(&ip, &path).await?;
            for series in body["data"]["result"].as_array().into_iter().flatten() {
                let t = series["metric"][key].as_str().unwrap_or_default();
                let samples = series["values"].as_array().into_iter().flatten();
                times
                    .entry((t.to_string(), shard))
                    .or_insert_with(Vec::new)
                    .extend(samples.filter_map(|sample| sample[0].as_f64()));
            }
        }
        Ok(times)
    }

    /// From the three shards' TSDBs, over the last `window`: the longest time a zoneless target
    /// was scraped by two shards (from the later one's first sample to the earlier one's last),
    /// in seconds.
    pub async fn scraped_twice(&self, window: Duration) -> Result<f64, String> {
        let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let zoneless = format!(r#"job="{JOB}""#);
        for ((t, _), at) in self.scraped(&zoneless, "t", &[0, 1, 2], window).await? {
            let first = at.iter().copied().fold(f64::INFINITY, f64::min);
            let last = at.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            spans.entry(t).or_default().push((first, last));
        }
        let mut longest: f64 = 0.0;
        for spans in spans.values() {
            for (i, a) in spans.iter().enumerate() {
                for b in &spans[i + 1..] {
                    longest = longest.max(a.1.min(b.1) - a.0.max(b.0));
                }
            }
        }
        Ok(longest)
    }

    /// After the outage: polls every shard each second until every zoneless target is back
    /// where it was before and stays so for three intervals; then, from the shards' TSDBs since
    /// it began, how long any target was scraped by two shards and the scrapes missed.
    pub async fn wait_returned(&self) -> Returned {
        let started = Timestamp::now();
        let mut every_second = tokio::time::interval(Duration::from_secs(1));
        let mut settled_since: Option<Timestamp> = None;
        loop {
            every_second.tick().await;
            let waited = super::since(started, Timestamp::now());
            assert!(
                waited < TIMEOUT,
                "the zoneless targets not back where they were within {TIMEOUT:?}"
            );
            let Ok(placement) = self.placement(&[0, 1, 2]).await else {
                continue;
            };
            match (placement == self.before, settled_since) {
                (true, None) => settled_since = Some(Timestamp::now()),
                (true, Some(at)) if super::since(at, Timestamp::now()) >= 3 * INTERVAL => {
                    let window = super::since(started, Timestamp::now());
                    let twice = self.scraped_twice(window).await;
                    let gaps = self.gaps(&[0, 1, 2], window).await;
                    return Returned {
                        back: super::since(started, at),
                        twice: Duration::from_secs_f64(twice.expect("the shards' samples")),
                        missed: gaps.expect("the shards' samples").missed,
                    };
                }
                (true, Some(_)) => {}
                (false, _) => settled_since = None,
            }
        }
    }

    /// Waits until the status has no unready zone and Degraded no longer says ZoneFailedOver,
    /// and a ZoneReturned event was recorded.
    pub async fn wait_status_returned(&self) {
        self.sprom
            .wait_status(
                "zone-b's shard back in the status",
                self.generation,
                |sprom| {
                    let degraded = sprom
                        .status
                        .as_ref()
                        .and_then(|s| {
                            use zone_api::conditions::Conditions;
                            s.condition(condition::DEGRADED).map(|c| c.reason.clone())
                        })
                        .unwrap_or_default();
                    match unready(sprom).is_empty() && degraded != reason::ZONE_FAILED_OVER {
                        true => Ok(()),
                        false => Err(format!("{:?}, Degraded {degraded}", unready(sprom))),
                    }
                },
            )
            .await;
        fixture::wait_events(&self.sprom.ns.api(), "a ZoneReturned event", |e| {
            e.reason.as_deref() == Some(reason::ZONE_RETURNED)
        })
        .await;
    }

    /// `kubectl zone drill zone-b` of the resource's namespace: its predicted effect.
    pub fn drill(&self, cluster: &e2e::Cluster) -> String {
        let answer = e2e::kubectl_zone::run(
            cluster,
            &cluster.kubeconfig,
            &["drill", DARK, "-n", &self.sprom.ns.name, "-o", "json"],
        );
        assert_eq!(answer.code, 0, "{}", answer.stderr);
        let drill = answer.json();
        let prediction = drill["predictions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["kind"] == "ShardedPrometheus" && p["name"] == NAME)
            .unwrap_or_else(|| panic!("no prediction for the ShardedPrometheus: {drill}"));
        println!("drill: ShardedPrometheus {NAME}: {prediction}");
        prediction["effect"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// Per target, the longest gap between two samples of `times` and the scrapes missed (a gap of
/// k intervals misses k - 1).
fn gaps_of(scraped: BTreeMap<(String, u32), Vec<f64>>) -> Gaps {
    let mut times: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for ((t, _), at) in scraped {
        times.entry(t).or_default().extend(at);
    }
    let mut gaps = Gaps::default();
    for (t, mut at) in times {
        at.sort_by(f64::total_cmp);
        let longest = at.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        let missed: usize = at
            .windows(2)
            .map(|w| ((w[1] - w[0]) / INTERVAL.as_secs_f64()).round() as usize)
            .map(|intervals| intervals.saturating_sub(1))
            .sum();
        gaps.longest = gaps.longest.max(longest);
        gaps.missed += missed;
        gaps.targets.insert(t, at.len());
    }
    gaps
}

/// The samples of some targets the shards recorded: gaps and scrapes missed.
#[derive(Debug, Default)]
pub struct Gaps {
    /// The longest gap between two samples of one target, in seconds.
    pub longest: f64,
    /// Scrapes missed, over every target.
    pub missed: usize,
    /// Target → its samples.
    pub targets: BTreeMap<String, usize>,
}

/// What the return took.
#[derive(Debug)]
pub struct Returned {
    /// Until every target was back on its shard of before.
    pub back: Duration,
    /// The longest time some target was scraped by two shards (their TSDBs).
    pub twice: Duration,
    /// The zoneless targets' scrapes missed since the return (their TSDBs, merged).
    pub missed: usize,
}

fn unready(sprom: &ShardedPrometheus) -> Vec<UnreadyZone> {
    sprom
        .status
        .as_ref()
        .map(|s| s.unready_zones.clone())
        .unwrap_or_default()
}

/// Every zoneless target scraped by exactly one of `shards`, and by no other.
pub fn once_each(placement: &Placement, shards: &[u32]) -> Result<(), String> {
    let wrong: Vec<(&String, &BTreeSet<u32>)> = placement
        .iter()
        .filter(|(_, on)| on.len() != 1 || !on.iter().all(|s| shards.contains(s)))
        .collect();
    match (placement.len(), wrong.is_empty()) {
        (TARGETS, true) => Ok(()),
        (found, _) => Err(format!(
            "{found} of {TARGETS} targets; wrongly placed {wrong:?}"
        )),
    }
}

/// The row of the surviving zones' zoned targets.
pub fn zoned_row(gaps: &Gaps) -> super::Row {
    super::Row {
        component: "ShardedPrometheus (zone-a, zone-c)".into(),
        detected: None,
        action: format!(
            "{} targets scraped by their zone's shard through the outage, longest gap {:.0} s",
            gaps.targets.len(),
            gaps.longest
        ),
        recovered: None,
        gap: Some(gaps.longest),
        lost: Some(gaps.missed),
        wrong: 0,
    }
}

/// The surviving zones' targets: each zone's Prometheus and sidecar at least, no scrape
/// missed through the outage.
pub fn check_zoned(gaps: &Gaps) {
    assert!(gaps.targets.len() >= 4, "zoned targets: {gaps:?}");
    assert_eq!(gaps.missed, 0, "zoned scrapes missed: {gaps:?}");
}
