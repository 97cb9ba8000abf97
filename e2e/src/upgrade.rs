//! What an upgrade is measured by: the previous release (e2e/cluster/previous-release.sh), the
//! shards' scrapes seen live while their pods are replaced ([`ScrapeWatch`]) and the names of the
//! webhooks whose calls the API server counts ([`webhook_names`], for
//! [`crate::webhook::Counters`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::deploy::repo_root;
use crate::process::http_get_from;
use crate::{Cluster, identity, pods};

/// The previous release's artifacts (previous-release.sh's cache directory), built if missing,
/// its image imported into every real node: once per test process, whichever test asks first.
pub fn previous_release(cluster: &Cluster) -> PathBuf {
    static PREPARED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PREPARED
        .get_or_init(|| prepare_previous_release(cluster))
        .clone()
}

fn prepare_previous_release(cluster: &Cluster) -> PathBuf {
    let mut command = Command::new("bash");
    command
        .current_dir(repo_root())
        .env("PATH", identity::path_with_cluster_tools(cluster))
        .args(["e2e/cluster/previous-release.sh", "build"]);
    let dir = identity::run(command, None);
    let dir = PathBuf::from(dir.lines().last().unwrap_or_default().trim());
    let mut import = Command::new("bash");
    import
        .current_dir(repo_root())
        .args(["e2e/cluster/images.sh", "previous"])
        .arg(&dir);
    eprintln!("{}", identity::run(import, None).trim());
    dir
}

/// The previous release's image, as its manifests run it.
pub fn previous_image(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("manifests.yaml")).expect("manifests.yaml");
    identity::yaml_to_json(&text)
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .filter_map(|o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(str::to_string)
        })
        .next()
        .expect("the previous release's manifests run a Deployment")
}

/// The names of the webhooks of the ValidatingWebhookConfigurations among `objects`.
pub fn webhook_names(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .flat_map(|o| o["webhooks"].as_array().cloned().unwrap_or_default())
        .filter_map(|w| w["name"].as_str().map(str::to_string))
        .collect()
}

/// A target of a shard: (the shard's index, the target's scrape URL).
pub type ShardTarget = (String, String);

/// How long a pod has to answer the watch: a replica that does not answer within it misses
/// this round (its twin's answers and its next one still cover its targets).
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Polls every Prometheus pod of `selector` (its `/api/v1/targets`, on the pod's address) every
/// `every` and keeps, per shard and target, the times of the successful scrapes it reports.
/// The union over a shard's replicas, taken while their pods are replaced, is what the shard
/// scraped: a replica's own storage does not outlive its pod.
pub struct ScrapeWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Scrapes>>,
    task: tokio::task::JoinHandle<()>,
}

/// Per shard and target, the times of the successful scrapes seen.
pub type Scrapes = BTreeMap<ShardTarget, BTreeSet<Timestamp>>;

impl ScrapeWatch {
    pub fn start(pods_api: Api<Pod>, selector: &str, every: Duration) -> ScrapeWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Scrapes::new()));
        let (stopped, record) = (stop.clone(), seen.clone());
        let selector = selector.to_string();
        let task = tokio::spawn(async move {
            // The poll's period, shorter than a scrape interval: every scrape is seen.
            let mut period = tokio::time::interval(every);
            while !stopped.load(Ordering::Relaxed) {
                period.tick().await;
                // Every pod at once, each within a bound: a pod being removed (its address no
                // longer answering, a connection that hangs) must not stop the watch of the
                // others, or their scrapes would go unseen and look like a gap.
                let listed = pods::list(&pods_api, &selector).await;
                let answers = futures::future::join_all(listed.iter().map(|pod| async move {
                    let answer = tokio::time::timeout(ANSWER_WITHIN, scraped(pod)).await;
                    (shard_of(pod), answer.unwrap_or_default())
                }))
                .await;
                let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                for (shard, scraped) in answers {
                    for (target, at) in scraped {
                        seen.entry((shard.clone(), target)).or_default().insert(at);
                    }
                }
            }
        });
        ScrapeWatch { stop, seen, task }
    }

    /// What was seen so far.
    pub fn seen(&self) -> Scrapes {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops polling (after the current round); what was seen.
    pub async fn stop(self) -> Scrapes {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.seen.clone();
        let _ = self.task.await;
        seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn shard_of(pod: &Pod) -> String {
    pod.labels()
        .get(zone_api::sprom::contract::SHARD_POD_LABEL)
        .cloned()
        .unwrap_or_default()
}

/// The active targets a Prometheus pod last scraped successfully, with the scrape's time.
async fn scraped(pod: &Pod) -> Vec<(String, Timestamp)> {
    let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) else {
        return Vec::new();
    };
    let Ok(ip) = ip.parse() else {
        return Vec::new();
    };
    let address = SocketAddr::new(ip, 9090);
    let Ok((200, body)) = http_get_from(address, "/api/v1/targets?state=active").await else {
        return Vec::new();
    };
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    answer["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["health"] == "up")
        .filter_map(|t| {
            let at: Timestamp = t["lastScrape"].as_str()?.parse().ok()?;
            Some((t["scrapeUrl"].as_str()?.to_string(), at))
        })
        .collect()
}

/// The longest time between two successive scrapes of any target of `seen`, with the target,
/// over the window the times cover.
pub fn longest_gap(seen: &Scrapes) -> Option<(SignedDuration, ShardTarget)> {
    seen.iter()
        .flat_map(|(target, times)| {
            let times: Vec<&Timestamp> = times.iter().collect();
            times
                .windows(2)
                .map(|pair| (pair[1].duration_since(*pair[0]), target.clone()))
                .collect::<Vec<_>>()
        })
        .max_by_key(|(gap, _)| *gap)
}
