//! Zone-aware sharding of Prometheus scrape targets.
//!
//! The upstream proposals' pseudo-code is wrong in three places (zone index, in-zone index and
//! modulus); these are the formulas the upstream operator shipped, which also match the
//! proposals' own prose ("A,B,C,A,B,C"):
//!
//! ```text
//! shards_per_zone = max(1, shards / len(zones))
//! zone(i)         = zones[i % len(zones)]
//! in_zone(i)      = i / len(zones)
//! modulus         = shards_per_zone
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::relabel::RelabelConfig;
use crate::zone::ZONE_LABEL;

/// Label a user may set (e.g. in a scrape class) to pick the hash input instead of `__address__`.
pub const TMP_HASH: &str = "__tmp_hash";
/// Label a user may set to override the detected topology of a target.
pub const TMP_TOPOLOGY: &str = "__tmp_topology";
/// Internal marker: non-empty when `__tmp_topology` names one of the listed zones.
pub const TMP_TOPOLOGY_LISTED: &str = "__tmp_topology_listed";

/// Where a target's zone comes from, in order of precedence after a user-set `__tmp_topology`.
/// The node label needs `attach_metadata: {node: true}` (see [`attach_node_metadata`]).
pub const TOPOLOGY_SOURCES: [&str; 3] = [
    "__meta_kubernetes_endpointslice_endpoint_zone",
    "__meta_kubernetes_node_label_topology_kubernetes_io_zone",
    "__meta_kubernetes_pod_label_topology_kubernetes_io_zone",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ShardingMode {
    /// Hash `__address__` over all shards, ignoring zones.
    #[default]
    #[serde(alias = "Address")]
    Classic,
    /// Pin shards to zones; each shard scrapes only targets of its own zone.
    Topology,
}

/// What happens to targets whose zone is unknown or not in the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ZonelessTargets {
    /// Nobody scrapes them (the upstream behaviour: they silently vanish).
    Drop,
    /// The shards of the first listed zone take them, hashed by the same in-zone modulus.
    #[default]
    FirstZone,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardingError {
    #[error("shards must be at least 1")]
    NoShards,
    #[error("topology sharding needs at least one zone in topology.values")]
    NoZones,
    #[error("zone names must not be empty")]
    EmptyZone,
    #[error("zone {0:?} is listed twice in topology.values")]
    DuplicateZone(String),
    #[error(
        "{shards} shard(s) cannot cover {zones} zones: zone(s) {} would never be scraped; use at least {zones} shards",
        unscraped.join(", ")
    )]
    TooFewShards {
        shards: u32,
        zones: u32,
        unscraped: Vec<String>,
    },
}

/// A valid but wasteful layout: `shards % zones != 0` leaves some shards scraping nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnevenShards {
    pub shards: u32,
    pub zones: u32,
    /// Shards whose in-zone index is at or above the modulus: they keep no target.
    pub idle: Vec<u32>,
    /// The nearest valid shard counts (multiples of the zone count) below and above.
    pub nearest_below: u32,
    pub nearest_above: u32,
}

impl fmt::Display for UnevenShards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idle: Vec<String> = self.idle.iter().map(u32::to_string).collect();
        write!(
            f,
            "{} shards is not a multiple of {} zones: shard(s) {} scrape nothing; use {} or {} shards",
            self.shards,
            self.zones,
            idle.join(", "),
            self.nearest_below,
            self.nearest_above
        )
    }
}

/// The smallest valid shard count for a requested one: the next multiple of the zone count, and
/// at least the zone count. Used when an autoscaler (not a person) asked for too few shards.
pub fn round_up_to_zone_multiple(shards: u32, zones: u32) -> u32 {
    if zones == 0 {
        return shards.max(1);
    }
    shards.max(zones).div_ceil(zones).saturating_mul(zones)
}

/// Shards mapped onto zones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLayout {
    shards: u32,
    zones: Vec<String>,
}

impl ShardLayout {
    /// Validates and builds a layout. An uneven count is allowed; see [`ShardLayout::uneven`].
    pub fn new(shards: u32, zones: Vec<String>) -> Result<ShardLayout, ShardingError> {
        if shards == 0 {
            return Err(ShardingError::NoShards);
        }
        if zones.is_empty() {
            return Err(ShardingError::NoZones);
        }
        let mut seen = BTreeSet::new();
        for zone in &zones {
            if zone.is_empty() {
                return Err(ShardingError::EmptyZone);
            }
            if !seen.insert(zone.as_str()) {
                return Err(ShardingError::DuplicateZone(zone.clone()));
            }
        }
        let zone_count = zone_count(&zones);
        if shards < zone_count {
            return Err(ShardingError::TooFewShards {
                shards,
                zones: zone_count,
                unscraped: zones[shards as usize..].to_vec(),
            });
        }
        Ok(ShardLayout { shards, zones })
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    fn zone_count(&self) -> u32 {
        zone_count(&self.zones)
    }

    pub fn shards_per_zone(&self) -> u32 {
        (self.shards / self.zone_count()).max(1)
    }

    /// The hashmod modulus inside a zone.
    pub fn modulus(&self) -> u32 {
        self.shards_per_zone()
    }

    pub fn zone(&self, shard: u32) -> &str {
        let index = (shard % self.zone_count()) as usize;
        self.zones.get(index).map_or("", String::as_str)
    }

    pub fn in_zone(&self, shard: u32) -> u32 {
        shard / self.zone_count()
    }

    /// A shard whose in-zone index no hash bucket reaches: it keeps no target.
    pub fn is_idle(&self, shard: u32) -> bool {
        self.in_zone(shard) >= self.modulus()
    }

    pub fn idle_shards(&self) -> Vec<u32> {
        (0..self.shards)
            .filter(|shard| self.is_idle(*shard))
            .collect()
    }

    /// The warning for `shards % zones != 0`, if it applies.
    pub fn uneven(&self) -> Option<UnevenShards> {
        let zones = self.zone_count();
        if self.shards.is_multiple_of(zones) {
            return None;
        }
        let below = self.shards / zones * zones;
        Some(UnevenShards {
            shards: self.shards,
            zones,
            idle: self.idle_shards(),
            nearest_below: below,
            nearest_above: below.saturating_add(zones),
        })
    }
}

fn zone_count(zones: &[String]) -> u32 {
    u32::try_from(zones.len()).unwrap_or(u32::MAX)
}

/// Rules of a Classic-mode shard: hash `__address__` (or a user `__tmp_hash`) over all shards.
pub fn classic_rules(shards: u32, shard: u32) -> Vec<RelabelConfig> {
    hash_and_keep(shards, shard)
}

/// Rules of a Topology-mode shard: determine the target's zone, keep only this shard's zone,
/// then hash within the zone.
pub fn topology_rules(
    layout: &ShardLayout,
    shard: u32,
    zoneless: ZonelessTargets,
) -> Vec<RelabelConfig> {
    let mut rules = topology_detection_rules();
    if zoneless == ZonelessTargets::FirstZone {
        rules.extend(zoneless_to_first_zone(layout.zones()));
    }
    rules.push(RelabelConfig::keep(
        &[TMP_TOPOLOGY],
        &quote_meta(layout.zone(shard)),
    ));
    rules.extend(hash_and_keep(layout.modulus(), layout.in_zone(shard)));
    rules
}

/// Rules for a shard that must scrape nothing (a retained shard after a scale-down): it keeps
/// serving queries over the data it has, but takes no target.
pub fn rules_scraping_nothing() -> Vec<RelabelConfig> {
    vec![RelabelConfig::drop(&["__address__"], ".*")]
}

/// Fills `__tmp_topology` from the first non-empty source, never overriding a value already set
/// (by the user or by an earlier source): each rule joins its source with `__tmp_topology` and
/// only matches `"<zone>;"`, i.e. while `__tmp_topology` is still empty.
fn topology_detection_rules() -> Vec<RelabelConfig> {
    TOPOLOGY_SOURCES
        .iter()
        .map(|source| RelabelConfig::replace(&[source, TMP_TOPOLOGY], "(.+);", TMP_TOPOLOGY, "$1"))
        .collect()
}

/// Sends targets with no zone, or a zone not listed, to the first zone. RE2 has no negative
/// look-ahead, so "not listed" is a marker label left empty by a rule matching the listed ones.
fn zoneless_to_first_zone(zones: &[String]) -> Vec<RelabelConfig> {
    let listed = zones
        .iter()
        .map(|zone| quote_meta(zone))
        .collect::<Vec<_>>()
        .join("|");
    let first = zones
        .first()
        .map_or(String::new(), |zone| zone.replace('$', "$$"));
    vec![
        RelabelConfig::replace(&[TMP_TOPOLOGY], &listed, TMP_TOPOLOGY_LISTED, "true"),
        RelabelConfig::replace(&[TMP_TOPOLOGY_LISTED], "", TMP_TOPOLOGY, &first),
    ]
}

/// Escapes the characters that are special in RE2 (Go's `regexp.QuoteMeta` set), so zone names
/// such as `us-east-1.a` match literally yet stay readable in the generated YAML.
pub fn quote_meta(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len());
    for c in text.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted
}

fn hash_and_keep(modulus: u32, bucket: u32) -> Vec<RelabelConfig> {
    vec![
        RelabelConfig::replace(&["__address__", TMP_HASH], "(.+);", TMP_HASH, "$1"),
        RelabelConfig::hashmod(&[TMP_HASH], TMP_HASH, u64::from(modulus)),
        RelabelConfig::keep(&[TMP_HASH], &bucket.to_string()),
    ]
}

/// External labels of a shard: `shard`, and in Topology mode the zone under
/// `external_label_name` (an empty name disables it).
pub fn external_labels(
    layout: Option<&ShardLayout>,
    shard: u32,
    external_label_name: &str,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([("shard".to_string(), shard.to_string())]);
    if let Some(layout) = layout
        && !external_label_name.is_empty()
    {
        labels.insert(
            external_label_name.to_string(),
            layout.zone(shard).to_string(),
        );
    }
    labels
}

/// The user's node selector with the zone key set to the shard's zone (replacing a user value).
pub fn node_selector(
    layout: &ShardLayout,
    shard: u32,
    user: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut selector = user.clone();
    selector.insert(ZONE_LABEL.to_string(), layout.zone(shard).to_string());
    selector
}

/// Kubernetes SD roles whose targets only get node labels with `attach_metadata: {node: true}`.
pub const ROLES_NEEDING_NODE_METADATA: [&str; 3] = ["pod", "endpoints", "endpointslice"];

/// Turns on `attach_metadata.node` in every `kubernetes_sd_configs` entry of a scrape config
/// whose role needs it, so the node zone label is available to the topology rules. Returns
/// whether anything changed.
pub fn attach_node_metadata(scrape_config: &mut serde_json::Value) -> bool {
    let Some(sd_configs) = scrape_config
        .get_mut("kubernetes_sd_configs")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return false;
    };
    let mut changed = false;
    for sd in sd_configs.iter_mut() {
        let role = sd
            .get("role")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        if !ROLES_NEEDING_NODE_METADATA.contains(&role) {
            continue;
        }
        let Some(sd) = sd.as_object_mut() else {
            continue;
        };
        let attach = sd
            .entry("attach_metadata")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let Some(attach) = attach.as_object_mut()
            && attach.get("node") != Some(&serde_json::Value::Bool(true))
        {
            attach.insert("node".to_string(), serde_json::Value::Bool(true));
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests;
