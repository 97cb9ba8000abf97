//! `kubectl zone shards <sprom> [--to N]`: a ShardedPrometheus's shards (zone, ready replicas,
//! the targets each scrapes, read from the shards through the API server's service proxy) and
//! its retained shards; with `--to N`, the targets a resize would move and where, from the
//! shard-controller's bucket assignment (`zone_topology::sharding`) run on each target's
//! discovered labels as the shards' own relabelling does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use zone_api::sprom::contract::{INSTANCE_LABEL, SHARD_POD_LABEL};
use zone_api::{ShardedPrometheus, ShardedPrometheusStatus};
use zone_topology::relabel::{CompiledRules, Labels, RelabelConfig};
use zone_topology::sharding::{ShardLayout, compiled_rules, keepers};

use crate::cluster::{Error, proxied, read};
use crate::output::columns;

/// Prometheus's port when the pod names none `web` (prometheus-operator's name).
const DEFAULT_PORT: i32 = 9090;
/// The most a shard's answer may weigh: a bound on what is read and parsed.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// What `kubectl zone shards` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardsReport {
    pub namespace: String,
    pub name: String,
    pub shards: Vec<ShardRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retained: Vec<RetainedRow>,
    /// With `--to`: what a resize would move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<Resize>,
    /// With `--cost`: the shards' scrape traffic per day, priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<cost::Cost>,
    /// What could not be read, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardRow {
    pub index: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub zone: String,
    pub ready_replicas: i32,
    pub replicas: i32,
    /// The active targets its Prometheus scrapes; `None` when they could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<usize>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RetainedRow {
    pub index: i32,
    /// RFC 3339; none: kept until deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_deadline: Option<String>,
    /// Seconds until the deadline (0 once past it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<i64>,
}

/// What a resize to `to` shards would move.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resize {
    pub to: u32,
    /// Targets scraped by one shard now.
    pub targets: usize,
    pub moved: usize,
    /// `moved / targets`.
    pub share: f64,
    /// Targets per shard after the resize.
    pub after: BTreeMap<u32, usize>,
    pub moves: Vec<Move>,
    /// Targets whose shard the prediction could not place as the shards' configuration does
    /// (the relabelling read back from a shard does not keep them where they are).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unplaced: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    pub job: String,
    /// The target's `__address__`.
    pub target: String,
    pub from: u32,
    pub to: u32,
}

/// A target as a shard reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapedTarget {
    pub job: String,
    pub discovered: Labels,
}

/// What one shard's Prometheus answered.
#[derive(Debug, Default)]
pub struct ShardView {
    pub targets: Vec<ScrapedTarget>,
    /// job → its relabel_configs, as the shard loaded them.
    pub relabel: BTreeMap<String, Vec<RelabelConfig>>,
}

/// The shards of ShardedPrometheus `args.name`; with `--to` a resize's prediction; with
/// `--cost` their scrape traffic's cost.
pub async fn report(
    client: &Client,
    namespace: &str,
    args: &crate::ShardsArgs,
) -> Result<ShardsReport, Error> {
    let (name, to, zone_label) = (args.name.as_str(), args.to, args.zone_label.as_str());
    let price_per_gib = args.cost.then_some(args.price_per_gib);
    let api: Api<ShardedPrometheus> = Api::namespaced(client.clone(), namespace);
    let sprom = api
        .get(name)
        .await
        .map_err(read(format!("get ShardedPrometheus {namespace}/{name}")))?;
    let invalid = Error::invalid("ShardedPrometheus", format!("{namespace}/{name}"));
    let status = sprom.status.clone().unwrap_or_default();
    let replicas = sprom.spec.replicas;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let shard_pods = pods
        .list(&ListParams::default().labels(&format!("{INSTANCE_LABEL}={name},{SHARD_POD_LABEL}")))
        .await
        .map_err(read(format!("list pods of {namespace}")))?;
    let mut failures = Vec::new();
    let mut views = BTreeMap::new();
    for shard in &status.shard_statuses {
        let index = u32::try_from(shard.index).unwrap_or(0);
        let Some(pod) = ready_pod(&shard_pods.items, index) else {
            failures.push((
                index,
                invalid(format!(
                    "shard {index} has no ready pod to ask for its targets"
                )),
            ));
            continue;
        };
        match shard_view(client, namespace, pod).await {
            Ok(view) => {
                views.insert(index, view);
            }
            Err(error) => failures.push((index, error)),
        }
    }
    let resize = match to {
        // A resize is predicted from every shard's targets or not at all: the first reason.
        Some(_) if !failures.is_empty() => return Err(failures.remove(0).1),
        Some(to) => {
            let now = layout(&sprom, &status, None, zone_label).map_err(&invalid)?;
            let then = layout(&sprom, &status, Some(to), zone_label).map_err(&invalid)?;
            Some(predict(&now, &then, &views).map_err(&invalid)?)
        }
        None => None,
    };
    let cost = match (price_per_gib, &status.traffic) {
        (None, _) => None,
        (Some(price), Some(traffic)) => Some(cost::cost(traffic, price)),
        (Some(_), None) => {
            return Err(invalid(
                "no scrape traffic measured yet: status.traffic appears a minute after the shards \
                 answer (agents are not measured)"
                    .into(),
            ));
        }
    };
    let missing = failures
        .iter()
        .map(|(index, error)| format!("the targets of shard {index}: {error}"))
        .collect();
    Ok(ShardsReport {
        namespace: namespace.to_string(),
        name: name.to_string(),
        shards: rows(&status, replicas, &views),
        retained: retained(&status, Timestamp::now()),
        resize,
        cost,
        missing,
    })
}

/// The layout of the running shards (`to` None: as many as the status reports), or of a resize.
fn layout(
    sprom: &ShardedPrometheus,
    status: &ShardedPrometheusStatus,
    to: Option<u32>,
    zone_label: &str,
) -> Result<ShardLayout, String> {
    if to.is_none() && i64::from(status.shards) != i64::from(sprom.spec.shards) {
        return Err(format!(
            "a resize is in progress ({} shards running, spec.shards {}): try again once it is done",
            status.shards, sprom.spec.shards
        ));
    }
    let mut spec = sprom.spec.clone();
    if let Some(to) = to {
        spec.shards = i32::try_from(to).map_err(|_| format!("--to {to}: too many shards"))?;
    }
    spec.validate(zone_label)
        .map(|valid| valid.layout)
        .map_err(|error| error.to_string())
}

/// A Ready pod of shard `index`.
fn ready_pod(pods: &[Pod], index: u32) -> Option<&Pod> {
    pods.iter()
        .filter(|pod| pod.labels().get(SHARD_POD_LABEL) == Some(&index.to_string()))
        .find(|pod| {
            zone_views::budget::pods::condition(pod) == zone_topology::budget::PodCondition::Healthy
        })
}

/// A shard's active targets and scrape configuration, from its Prometheus through the API
/// server's proxy (`get pods/proxy`).
async fn shard_view(client: &Client, namespace: &str, pod: &Pod) -> Result<ShardView, Error> {
    let port = pod
        .spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("web"))
        .map_or(DEFAULT_PORT, |p| p.container_port);
    let base = format!(
        "/api/v1/namespaces/{namespace}/pods/{}:{port}/proxy",
        pod.name_any()
    );
    let what = "the shard's Prometheus through the API server's proxy";
    let targets = proxied(
        client,
        &format!("{base}/api/v1/targets?state=active"),
        what,
        MAX_ANSWER_BYTES,
    )
    .await?;
    let config = proxied(
        client,
        &format!("{base}/api/v1/status/config"),
        what,
        MAX_ANSWER_BYTES,
    )
    .await?;
    parse_view(&targets, &config).map_err(Error::invalid(
        "Pod",
        format!("{namespace}/{}", pod.name_any()),
    ))
}

/// The targets and the relabelling of a shard from its `/api/v1/targets` and
/// `/api/v1/status/config` answers (pure).
pub fn parse_view(targets: &str, config: &str) -> Result<ShardView, String> {
    let targets: Value =
        serde_json::from_str(targets).map_err(|e| format!("/api/v1/targets: {e}"))?;
    let targets = targets["data"]["activeTargets"]
        .as_array()
        .ok_or("/api/v1/targets: no data.activeTargets")?
        .iter()
        .map(|target| {
            let discovered: Labels = serde_json::from_value(target["discoveredLabels"].clone())
                .map_err(|e| format!("/api/v1/targets: discoveredLabels: {e}"))?;
            Ok(ScrapedTarget {
                job: target["scrapePool"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                discovered,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let config: Value =
        serde_json::from_str(config).map_err(|e| format!("/api/v1/status/config: {e}"))?;
    let yaml = config["data"]["yaml"]
        .as_str()
        .ok_or("/api/v1/status/config: no data.yaml")?;
    zone_topology::yaml_depth::check(yaml, zone_topology::yaml_depth::MAX_DEPTH)?;
    #[derive(Deserialize)]
    struct Config {
        #[serde(default)]
        scrape_configs: Vec<Job>,
    }
    #[derive(Deserialize)]
    struct Job {
        job_name: String,
        #[serde(default)]
        relabel_configs: Vec<RelabelConfig>,
    }
    let config: Config =
        serde_norway::from_str(yaml).map_err(|e| format!("the loaded configuration: {e}"))?;
    Ok(ShardView {
        targets,
        relabel: config
            .scrape_configs
            .into_iter()
            .map(|job| (job.job_name, job.relabel_configs))
            .collect(),
    })
}

/// Where a target goes in a resize.
enum Placement {
    /// Scraped by every shard (sharding disabled for it): never moves.
    Everywhere,
    /// Kept by this shard after the resize.
    On(u32),
    /// Not where the relabelling read back says it is, or by no shard after.
    Unplaced,
}

/// Where each target of `views` goes when `now` becomes `then` (pure): its labels after the
/// job's own relabelling (the shard's rules but `now`'s sharding tail), then `then`'s rules.
pub fn predict(
    now: &ShardLayout,
    then: &ShardLayout,
    views: &BTreeMap<u32, ShardView>,
) -> Result<Resize, String> {
    let compile = |layout: &ShardLayout| {
        compiled_rules(layout).map_err(|e| format!("the sharding rules: {e}"))
    };
    let rules = (compile(now)?, compile(then)?);
    let mut resize = Resize {
        to: then.shards(),
        targets: 0,
        moved: 0,
        share: 0.0,
        after: (0..then.shards()).map(|shard| (shard, 0)).collect(),
        moves: Vec::new(),
        unplaced: Vec::new(),
    };
    for (&shard, view) in views {
        let own = own_rules(now, shard, view)?;
        for target in &view.targets {
            let address = target
                .discovered
                .get("__address__")
                .cloned()
                .unwrap_or_default();
            let placement = own
                .get(target.job.as_str())
                .map_or(Placement::Unplaced, |own| {
                    place(own, &rules, shard, &target.discovered)
                });
            let to = match placement {
                Placement::Everywhere => continue,
                Placement::Unplaced => {
                    resize.unplaced.push(format!("{}/{address}", target.job));
                    continue;
                }
                Placement::On(to) => to,
            };
            resize.targets += 1;
            *resize.after.entry(to).or_default() += 1;
            if to != shard {
                resize.moves.push(Move {
                    job: target.job.clone(),
                    target: address,
                    from: shard,
                    to,
                });
            }
        }
    }
    resize.moved = resize.moves.len();
    if resize.targets > 0 {
        resize.share = resize.moved as f64 / resize.targets as f64;
    }
    Ok(resize)
}

/// Each job's own relabelling on `shard` (what it loaded, without `now`'s sharding tail),
/// compiled, for every job its targets name.
fn own_rules<'v>(
    now: &ShardLayout,
    shard: u32,
    view: &'v ShardView,
) -> Result<BTreeMap<&'v str, CompiledRules>, String> {
    let tail = now.rules(shard).len();
    let mut own = BTreeMap::new();
    for target in &view.targets {
        let job = target.job.as_str();
        if own.contains_key(job) {
            continue;
        }
        let all = view.relabel.get(job).map(Vec::as_slice).unwrap_or_default();
        let mine = &all[..all.len().saturating_sub(tail)];
        let compiled = CompiledRules::new(mine).map_err(|e| format!("job {job}: {e}"))?;
        own.insert(job, compiled);
    }
    Ok(own)
}

/// Where a target of `shard` goes: its job's own rules, then the sharding rules of now (it must
/// be kept where it is) and of then.
fn place(
    own: &CompiledRules,
    (now, then): &(Vec<CompiledRules>, Vec<CompiledRules>),
    shard: u32,
    discovered: &Labels,
) -> Placement {
    let Some(labels) = own.apply(discovered) else {
        return Placement::Unplaced;
    };
    let kept_now = keepers(now, &labels);
    if kept_now.len() > 1 {
        return Placement::Everywhere;
    }
    if kept_now != [shard] {
        return Placement::Unplaced;
    }
    match keepers(then, &labels).first() {
        Some(&to) => Placement::On(to),
        None => Placement::Unplaced,
    }
}

fn rows(
    status: &ShardedPrometheusStatus,
    replicas: i32,
    views: &BTreeMap<u32, ShardView>,
) -> Vec<ShardRow> {
    status
        .shard_statuses
        .iter()
        .map(|shard| {
            let index = u32::try_from(shard.index).unwrap_or(0);
            ShardRow {
                index,
                zone: shard.zone.clone(),
                ready_replicas: shard.ready_replicas,
                replicas,
                targets: views.get(&index).map(|view| view.targets.len()),
            }
        })
        .collect()
}

fn retained(status: &ShardedPrometheusStatus, now: Timestamp) -> Vec<RetainedRow> {
    status
        .retained_shards
        .iter()
        .map(|shard| RetainedRow {
            index: shard.index,
            deletion_deadline: shard.deletion_deadline.clone(),
            seconds_left: shard
                .deletion_deadline
                .as_deref()
                .and_then(|at| at.parse::<Timestamp>().ok())
                .map(|at| at.as_second().saturating_sub(now.as_second()).max(0)),
        })
        .collect()
}

/// The shards as a table, the retained ones, then the resize.
pub fn table(report: &ShardsReport) -> String {
    let rows: Vec<Vec<String>> = report
        .shards
        .iter()
        .map(|s| {
            vec![
                s.index.to_string(),
                if s.zone.is_empty() {
                    "-".into()
                } else {
                    s.zone.clone()
                },
                format!("{}/{}", s.ready_replicas, s.replicas),
                s.targets.map_or("?".into(), |t| t.to_string()),
            ]
        })
        .collect();
    let mut out = format!(
        "ShardedPrometheus {}/{}: {} shards\n",
        report.namespace,
        report.name,
        report.shards.len()
    );
    out.push_str(&columns(&["SHARD", "ZONE", "READY", "TARGETS"], &rows));
    for shard in &report.retained {
        let until = match (&shard.deletion_deadline, shard.seconds_left) {
            (Some(at), Some(left)) => format!("deleted at {at} ({left}s left)"),
            _ => "kept until deleted".to_string(),
        };
        out.push_str(&format!("retained shard {}: {until}\n", shard.index));
    }
    if let Some(cost) = &report.cost {
        out.push_str(&cost::table(cost));
    }
    if let Some(resize) = &report.resize {
        out.push_str(&format!(
            "resize to {}: {} of {} targets move ({:.1}%)\n",
            resize.to,
            resize.moved,
            resize.targets,
            resize.share * 100.0
        ));
        let moves: Vec<Vec<String>> = resize
            .moves
            .iter()
            .map(|m| {
                vec![
                    m.job.clone(),
                    m.target.clone(),
                    m.from.to_string(),
                    m.to.to_string(),
                ]
            })
            .collect();
        if !moves.is_empty() {
            out.push_str(&columns(&["JOB", "TARGET", "FROM", "TO"], &moves));
        }
        let after: Vec<String> = resize
            .after
            .iter()
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        out.push_str(&format!("targets per shard after: {}\n", after.join(" ")));
        for target in &resize.unplaced {
            out.push_str(&format!("not predicted: {target}\n"));
        }
    }
    for missing in &report.missing {
        out.push_str(&format!("not shown: {missing}\n"));
    }
    out
}

pub mod cost;
#[cfg(test)]
mod tests;
