//! One pod's answer: its targets' zones and the bytes it scraped from each in a window.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use serde::Deserialize;
use zone_operator::prom_api::ApiClient;
use zone_topology::sharding::TMP_TOPOLOGY;

use crate::health::prober;

/// Where a target is from the pod that scrapes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    SameZone,
    CrossZone,
    /// The target has no zone, or the pod's node has none.
    Zoneless,
}

impl Class {
    pub fn of(pod_zone: Option<&str>, target_zone: Option<&str>) -> Class {
        match (pod_zone, target_zone) {
            (Some(pod), Some(target)) if pod == target => Class::SameZone,
            (Some(_), Some(_)) => Class::CrossZone,
            _ => Class::Zoneless,
        }
    }
}

/// A target's zone from the labels discovery gave it, as the shards' relabelling reads it: a
/// `__tmp_topology` set by discovery, else the first of `sources` set (non-empty).
pub fn target_zone(discovered: &BTreeMap<String, String>, sources: &[String]) -> Option<String> {
    std::iter::once(TMP_TOPOLOGY)
        .chain(sources.iter().map(String::as_str))
        .find_map(|label| discovered.get(label).filter(|zone| !zone.is_empty()))
        .cloned()
}

/// One target's bytes in the window, and its zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Scraped {
    pub zone: Option<String>,
    pub bytes: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Targets {
    #[serde(default)]
    active_targets: Vec<ActiveTarget>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActiveTarget {
    #[serde(default)]
    discovered_labels: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(super) struct Vector {
    #[serde(default)]
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// `[time, "value"]`.
    value: (f64, String),
}

/// What `address` scraped in `(start, end]` (Unix seconds), target by target; `None` if it did
/// not answer both questions.
pub async fn scraped(
    client: &ApiClient,
    address: SocketAddr,
    start: f64,
    end: f64,
    sources: &[String],
) -> Option<Vec<Scraped>> {
    let window_ms = ((end - start) * 1000.0).round() as i64;
    if window_ms < 1 {
        return Some(Vec::new());
    }
    let targets: Targets = ask(client, address, "/api/v1/targets?state=active").await?;
    let query = format!("sum_over_time(scrape_body_size_bytes[{window_ms}ms])");
    let path = format!(
        "/api/v1/query?{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", &query)
            .append_pair("time", &format!("{end:.3}"))
            .finish()
    );
    let vector: Vector = ask(client, address, &path).await?;
    Some(join(&targets, vector, sources))
}

async fn ask<T: serde::de::DeserializeOwned>(
    client: &ApiClient,
    address: SocketAddr,
    path: &str,
) -> Option<T> {
    match prober::get(client, address, path).await {
        Ok(answer) => Some(answer),
        Err(error) => {
            tracing::debug!(%address, path, %error, "scrape traffic not read");
            None
        }
    }
}

/// Each series of `vector` (a target's labels, as the report series carry them) with the zone
/// of the target of the same labels; a series whose target is gone counts as zoneless.
pub(super) fn join(targets: &Targets, vector: Vector, sources: &[String]) -> Vec<Scraped> {
    let zones: HashMap<&BTreeMap<String, String>, Option<String>> = targets
        .active_targets
        .iter()
        .map(|target| {
            (
                &target.labels,
                target_zone(&target.discovered_labels, sources),
            )
        })
        .collect();
    vector
        .result
        .into_iter()
        .filter_map(|sample| {
            let bytes: f64 = sample.value.1.parse().ok()?;
            // A scrape whose body was over its limit reports -1.
            let bytes = if bytes.is_finite() {
                bytes.max(0.0)
            } else {
                0.0
            };
            let zone = zones.get(&sample.metric).cloned().flatten();
            Some(Scraped { zone, bytes })
        })
        .collect()
}
