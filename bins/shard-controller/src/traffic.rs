//! The cross-zone traffic ledger: what the shards' scraping moves between zones.
//!
//! Every [`ROUND`], each running Prometheus pod of an active shard is asked two things: its
//! active targets (`/api/v1/targets`: every target's labels and the labels discovery gave it,
//! where its zone is) and, per target, the bytes of the bodies it scraped since the pod's last
//! round (`sum_over_time(scrape_body_size_bytes[window])` at the round's end; the series
//! `--enable-feature=extra-scrape-metrics` adds, one sample per scrape). Windows are
//! `(previous end, end]`, Prometheus's own range bounds, so consecutive rounds count each scrape
//! once; a round a pod does not answer is counted by its next one. Each target's bytes are
//! classed by its zone against the pod's node's zone ([`Class`]) and summed per shard.
//!
//! Bytes are the body's, as Prometheus counts them: uncompressed. A target that gzips its
//! answer moves fewer on the wire (its headers are not counted either); for the cost of a
//! target that does not compress, they are the bytes moved. The target's zone is read as the
//! shard's relabelling reads it (the first of `__tmp_topology` as discovered, the endpoint
//! slice's zone, the node's and the pod's zone label); a relabel rule of the user's that sets
//! `__tmp_topology` is not followed. Agents serve no query API: their shards are not measured.
//!
//! The sums go to counters (`zone_aware_sprom_scrape_bytes_total`) and, per resource, to the
//! last hour's rounds, from which `status.traffic` projects a day ([`TrafficLedger::observe`]).

mod measure;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use zone_api::ShardedPrometheus;
use zone_api::sprom::{ShardTraffic, ShardTrafficStatus, TrafficBytes};
use zone_operator::NodeZones;
use zone_operator::prom_api::ApiClient;
use zone_topology::sharding::topology_sources;

use crate::health::prober::{self, Target};
use crate::metrics::SpromMetrics;

pub use measure::Class;

/// How often the pods are asked.
pub const ROUND: Duration = Duration::from_secs(60);
/// A round counts the scrapes up to this long before it starts: a scrape still running at the
/// window's end would be appended after it and never counted.
const LAG: Duration = Duration::from_secs(10);
/// The status is refreshed every this many rounds (and after the first).
const STATUS_EVERY: u64 = 5;
/// The rounds `status.traffic` is projected from.
const RATE_WINDOW: Duration = Duration::from_secs(3600);
/// The longest window one query asks for: a pod unreachable for longer loses the rest.
const MAX_WINDOW: Duration = RATE_WINDOW;
/// Pods asked at once: their answers are the size of their target lists.
const CONCURRENCY: usize = 4;
const DAY: f64 = 86_400.0;

/// Bytes scraped in a window, by class.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bytes {
    pub same_zone: f64,
    pub cross_zone: f64,
    pub zoneless: f64,
}

impl Bytes {
    fn add(&mut self, class: Class, bytes: f64) {
        match class {
            Class::SameZone => self.same_zone += bytes,
            Class::CrossZone => self.cross_zone += bytes,
            Class::Zoneless => self.zoneless += bytes,
        }
    }

    fn add_all(&mut self, other: &Bytes) {
        self.same_zone += other.same_zone;
        self.cross_zone += other.cross_zone;
        self.zoneless += other.zoneless;
    }

    /// Same-zone, cross-zone, zoneless: the order of `metrics::TRAFFIC_CLASSES`.
    fn classes(&self) -> [f64; 3] {
        [self.same_zone, self.cross_zone, self.zoneless]
    }

    fn per_day(&self, factor: f64) -> TrafficBytes {
        TrafficBytes {
            same_zone_bytes_per_day: whole(self.same_zone * factor),
            cross_zone_bytes_per_day: whole(self.cross_zone * factor),
            zoneless_bytes_per_day: whole(self.zoneless * factor),
        }
    }
}

fn whole(bytes: f64) -> i64 {
    // Saturating: `as` maps NaN to 0 and clamps to i64's range.
    bytes.round() as i64
}

/// One round of one resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    /// The end of its windows, Unix seconds.
    pub end: f64,
    /// The seconds since the resource's previous round (the first: one [`ROUND`]).
    pub seconds: f64,
    pub shards: BTreeMap<u32, Bytes>,
    /// What Classic sharding would have scraped across zones (see
    /// [`ShardTrafficStatus::classic_cross_zone_bytes_per_day`]).
    pub classic_cross_zone: f64,
    /// The resource's generation when it was counted: the rounds of an earlier spec do not
    /// predict the day of this one.
    pub generation: Option<i64>,
}

/// A ShardedPrometheus: namespace, name.
type Resource = (String, String);

/// The last hour's rounds of every resource, shared with the reconcile.
#[derive(Clone, Default)]
pub struct TrafficLedger {
    rounds: Arc<Mutex<BTreeMap<Resource, VecDeque<Round>>>>,
}

impl TrafficLedger {
    /// `status.traffic` of `namespace/name`: the last hour's bytes per day; `None` before its
    /// first round.
    pub fn observe(&self, namespace: &str, name: &str) -> Option<ShardTrafficStatus> {
        let rounds = self.rounds.lock().unwrap_or_else(PoisonError::into_inner);
        let rounds = rounds.get(&(namespace.to_owned(), name.to_owned()))?;
        let last = rounds.back()?;
        let seconds: f64 = rounds.iter().map(|round| round.seconds).sum();
        let factor = if seconds > 0.0 { DAY / seconds } else { 0.0 };
        let mut shards: BTreeMap<u32, Bytes> = BTreeMap::new();
        let mut classic = 0.0;
        for round in rounds {
            for (index, bytes) in &round.shards {
                shards.entry(*index).or_default().add_all(bytes);
            }
            classic += round.classic_cross_zone;
        }
        let mut total = Bytes::default();
        for bytes in shards.values() {
            total.add_all(bytes);
        }
        Some(ShardTrafficStatus {
            measured_seconds: whole(seconds),
            measured_at: timestamp(last.end),
            total: total.per_day(factor),
            classic_cross_zone_bytes_per_day: whole(classic * factor),
            shards: shards
                .iter()
                .map(|(index, bytes)| ShardTraffic {
                    index: i32::try_from(*index).unwrap_or(i32::MAX),
                    bytes: bytes.per_day(factor),
                })
                .collect(),
        })
    }

    /// Keeps a round of `resource`, dropping its rounds older than the rate window, and all of
    /// them when its generation changed; true if it is the first kept.
    fn record(&self, resource: Resource, mut round: Round) -> bool {
        let mut rounds = self.rounds.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = rounds.entry(resource).or_default();
        if kept
            .back()
            .is_some_and(|last| last.generation != round.generation)
        {
            kept.clear();
        }
        let first = kept.is_empty();
        round.seconds = match kept.back() {
            Some(previous) => (round.end - previous.end).max(0.0),
            None => ROUND.as_secs_f64(),
        };
        kept.push_back(round);
        let oldest = kept.back().map_or(0.0, |r| r.end) - RATE_WINDOW.as_secs_f64();
        while kept.front().is_some_and(|r| r.end <= oldest) {
            kept.pop_front();
        }
        first
    }

    /// Forgets the resources not in `live`; returns them.
    fn forget_all_but(&self, live: &BTreeSet<Resource>) -> Vec<Resource> {
        let mut rounds = self.rounds.lock().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<Resource> = rounds
            .keys()
            .filter(|key| !live.contains(*key))
            .cloned()
            .collect();
        for key in &gone {
            rounds.remove(key);
        }
        gone
    }
}

fn timestamp(unix: f64) -> String {
    Timestamp::from_millisecond(whole(unix * 1000.0))
        .map(|at| at.to_string())
        .unwrap_or_default()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// The background task keeping the ledger.
pub struct Ledger {
    pub ledger: TrafficLedger,
    pub sproms: Store<ShardedPrometheus>,
    pub pods: Store<Pod>,
    pub zones: NodeZones,
    pub zone_label: String,
    pub metrics: SpromMetrics,
    /// Reconciles of the resources whose status should show the new figures.
    pub triggers: UnboundedSender<ObjectRef<ShardedPrometheus>>,
}

impl Ledger {
    /// Asks every pod every [`ROUND`], once the caches have synced; runs until aborted.
    pub async fn run(self) {
        if !prober::synced(&self.pods).await || !prober::synced(&self.sproms).await {
            return;
        }
        let Some(client) = prober::client().map(|client| client.gzip()) else {
            return;
        };
        let sources = topology_sources(&self.zone_label);
        // Per pod (uid): where its last counted window ended.
        let mut ends: HashMap<String, f64> = HashMap::new();
        let mut interval = tokio::time::interval(ROUND);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for number in 0_u64.. {
            interval.tick().await;
            let end = unix_now() - LAG.as_secs_f64();
            let (targets, live) = prober::targets(&self.sproms, &self.pods);
            let asked = targets.len();
            let answers = ask(&client, targets, &ends, end, &sources).await;
            let rounds = sum(&answers, end, |target| self.pod_zone(target));
            ends = next_ends(&ends, &answers, end);
            let measured = rounds.len();
            for (resource, mut round) in rounds {
                round.generation = self.generation(&resource);
                let shards = round
                    .shards
                    .iter()
                    .map(|(index, bytes)| (*index, bytes.classes()))
                    .collect();
                self.metrics
                    .traffic(&resource.0, &resource.1, round.end, &shards);
                let first = self.ledger.record(resource.clone(), round);
                // The status shows the first figures, then new ones every few rounds.
                if (first || number % STATUS_EVERY == 0) && !self.reconcile(&resource) {
                    return;
                }
            }
            for (namespace, name) in self.ledger.forget_all_but(&live) {
                self.metrics.forget_traffic(&namespace, &name);
            }
            tracing::debug!(
                pods = asked,
                resources = measured,
                "shards' scrape traffic measured"
            );
        }
    }

    fn generation(&self, (namespace, name): &Resource) -> Option<i64> {
        let sprom = self.sproms.get(&ObjectRef::new(name).within(namespace))?;
        sprom.metadata.generation
    }

    fn pod_zone(&self, target: &Target) -> Option<String> {
        let zone = self.zones.zone_of_node(target.node.as_deref()?);
        zone.name().map(str::to_owned)
    }

    fn reconcile(&self, (namespace, name): &Resource) -> bool {
        let sprom = ObjectRef::new(name).within(namespace);
        self.triggers.unbounded_send(sprom).is_ok()
    }
}

/// The answers summed per resource: a round for each resource with a pod that answered.
/// `zone_of` gives a pod's zone.
fn sum(
    answers: &[(Target, Option<Vec<measure::Scraped>>)],
    end: f64,
    zone_of: impl Fn(&Target) -> Option<String>,
) -> BTreeMap<Resource, Round> {
    // Every asked pod's zone, answered or not: where the Classic shards would be.
    let mut pod_zones: BTreeMap<Resource, BTreeMap<String, usize>> = BTreeMap::new();
    for (target, _) in answers {
        if let Some(zone) = zone_of(target) {
            let resource = (target.shard.0.clone(), target.shard.1.clone());
            *pod_zones
                .entry(resource)
                .or_default()
                .entry(zone)
                .or_default() += 1;
        }
    }
    let mut rounds: BTreeMap<Resource, Round> = BTreeMap::new();
    for (target, scraped) in answers {
        let Some(scraped) = scraped else { continue };
        let resource = (target.shard.0.clone(), target.shard.1.clone());
        let pod_zone = zone_of(target);
        let zones = pod_zones.get(&resource);
        let round = rounds.entry(resource).or_insert_with(|| Round {
            end,
            ..Round::default()
        });
        let shard = round.shards.entry(target.shard.2).or_default();
        for one in scraped {
            let class = Class::of(pod_zone.as_deref(), one.zone.as_deref());
            shard.add(class, one.bytes);
            if let (Some(zone), Some(zones)) = (&one.zone, zones) {
                round.classic_cross_zone += one.bytes * outside_share(zones, zone);
            }
        }
    }
    rounds
}

/// Every pod's bytes since its last counted window (`ends`, by uid), up to `end`.
async fn ask(
    client: &ApiClient,
    targets: Vec<Target>,
    ends: &HashMap<String, f64>,
    end: f64,
    sources: &[String],
) -> Vec<(Target, Option<Vec<measure::Scraped>>)> {
    futures::stream::iter(targets)
        .map(|target| {
            let start = window_start(ends.get(&target.uid).copied(), end);
            async move {
                let scraped = measure::scraped(client, target.address, start, end, sources).await;
                (target, scraped)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// Where each asked pod's counted windows end after this round: at `end` for those that
/// answered; a pod that did not keeps its start, so its next round counts the window.
fn next_ends(
    ends: &HashMap<String, f64>,
    answers: &[(Target, Option<Vec<measure::Scraped>>)],
    end: f64,
) -> HashMap<String, f64> {
    answers
        .iter()
        .filter_map(|(target, scraped)| {
            let kept = match scraped {
                Some(_) => Some(end),
                None => ends.get(&target.uid).copied(),
            };
            Some((target.uid.clone(), kept?))
        })
        .collect()
}

/// The share of the pods (counted per zone) that are outside `zone`.
fn outside_share(pods: &BTreeMap<String, usize>, zone: &str) -> f64 {
    let total: usize = pods.values().sum();
    if total == 0 {
        return 0.0;
    }
    let inside = pods.get(zone).copied().unwrap_or(0);
    (total - inside) as f64 / total as f64
}

/// Where a pod's window starts: after its last counted one, no longer than [`MAX_WINDOW`]; a
/// pod not counted before counts one [`ROUND`].
fn window_start(last_end: Option<f64>, end: f64) -> f64 {
    let start = last_end.unwrap_or(end - ROUND.as_secs_f64());
    start.max(end - MAX_WINDOW.as_secs_f64())
}
