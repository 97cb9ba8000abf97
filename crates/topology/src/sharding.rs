//! Zone-aware sharding of Prometheus scrape targets.
//!
//! The upstream operator ships `zone(i) = zones[i % Z]`, `in_zone(i) = i / Z` and a modulus of
//! `max(1, N / Z)`: whole shards idle when `N % Z != 0`, every zoneless target dropped, and
//! `N/(N+1)` of all targets remapped on every resize. Here, with `Z` zones and `N` shards:
//!
//! ```text
//! zone(i)    = zones[i % Z]                  (A,B,C,A,B,C — the interleaving is kept)
//! in_zone(i) = i / Z
//! n(z)       = N / Z + (1 if z < N % Z)       shards of zone index z: every shard has work
//! ```
//!
//! A target hashes into one of [`BUCKETS`] buckets; shard `i` keeps the buckets that
//! [`owners`]`(n(zone(i)))` gives to `in_zone(i)`, so a resize only moves buckets onto (or off)
//! the shard that was added (or removed). Targets with no usable zone — none, one not listed, or
//! one whose zone has no shard because `N < Z` — are spread over all `N` shards with
//! `owners(N)` (or dropped, if the user asks).

mod bucket_regex;
mod failover;
mod owners;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::relabel::{CompiledRules, Labels, RelabelConfig, RelabelError};

pub use bucket_regex::bucket_regex;
pub use owners::{BUCKETS, buckets_of, owners};

/// Label a user may set (e.g. to shard by pod name) to pick the hash input instead of
/// `__address__`. After the sharding rules it holds the target's bucket.
pub const TMP_HASH: &str = "__tmp_hash";
/// Label a user may set to override the detected topology of a target.
pub const TMP_TOPOLOGY: &str = "__tmp_topology";
/// Internal marker: `true` when `__tmp_topology` names a zone that has a shard.
pub const TMP_TOPOLOGY_SERVED: &str = "__tmp_topology_served";
/// A target whose relabel rules set this label (to anything non-empty) is scraped by every
/// shard: prometheus-operator's opt-out of sharding, for jobs each shard needs (its own
/// Prometheus, say). The name is upstream's, so monitors written for it keep working.
pub const TMP_DISABLE_SHARDING: &str = "__tmp_disable_sharding";

/// Where a target's zone comes from, in order of precedence after a user-set `__tmp_topology`,
/// for the default zone label `topology.kubernetes.io/zone` (see [`topology_sources`] for
/// another). The node label needs `attach_metadata: {node: true}` (see [`attach_node_metadata`]).
pub const TOPOLOGY_SOURCES: [&str; 3] = [
    "__meta_kubernetes_endpointslice_endpoint_zone",
    "__meta_kubernetes_node_label_topology_kubernetes_io_zone",
    "__meta_kubernetes_pod_label_topology_kubernetes_io_zone",
];

/// The zone sources for nodes and pods labelled with `zone_label`: the endpoint slice's zone
/// (set by Kubernetes from the node's `topology.kubernetes.io/zone` whatever the label), then
/// the node's and the pod's `zone_label`, as Prometheus names their meta labels.
pub fn topology_sources(zone_label: &str) -> [String; 3] {
    let label = sanitize_label_name(zone_label);
    [
        TOPOLOGY_SOURCES[0].to_string(),
        format!("__meta_kubernetes_node_label_{label}"),
        format!("__meta_kubernetes_pod_label_{label}"),
    ]
}

/// A Kubernetes label key as Prometheus's Kubernetes discovery writes it into a meta label name:
/// every character outside `[a-zA-Z0-9_]` becomes `_`.
pub fn sanitize_label_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The external label naming a sample's (a rule's, an alert's) shard: its index.
pub const SHARD_EXTERNAL_LABEL: &str = "shard";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ShardingMode {
    /// Hash targets over all shards, ignoring zones.
    #[serde(alias = "Address")]
    Classic,
    /// Pin shards to zones; each shard scrapes the targets of its own zone.
    #[default]
    Topology,
}

/// What happens to targets with no usable zone (Topology mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ZonelessTargets {
    /// Spread over all shards: scraped exactly once, across zones.
    #[default]
    Spread,
    /// Nobody scrapes them: zone-local scraping only (the upstream behaviour).
    Drop,
}

/// The schemas of the spec's enums: their values (ShardingMode's alias too, or the API server
/// would refuse it), without per-value descriptions (the field that holds one describes them).
#[cfg(feature = "schema")]
mod schema {
    use std::borrow::Cow;

    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    impl JsonSchema for super::ShardingMode {
        fn schema_name() -> Cow<'static, str> {
            "ShardingMode".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "enum": ["Classic", "Address", "Topology"]
            })
        }
    }

    impl JsonSchema for super::ZonelessTargets {
        fn schema_name() -> Cow<'static, str> {
            "ZonelessTargets".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "enum": ["Spread", "Drop"]
            })
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardingError {
    #[error("shards must be between 1 and {BUCKETS}, not {0}")]
    ShardCount(u32),
    #[error("topology sharding needs at least one zone in topology.values")]
    NoZones,
    #[error("zone names must not be empty")]
    EmptyZone,
    #[error("zone {0:?} is listed twice in topology.values")]
    DuplicateZone(String),
}

/// Zones with different shard counts (`N % Z != 0`): valid, every shard has work, but the shards
/// of the zones with one more shard each take a smaller share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnevenZones {
    /// Shards per zone, in the listed order.
    pub per_zone: Vec<(String, u32)>,
    /// The nearest even shard counts (multiples of the zone count) below (0 if none) and above.
    pub nearest_below: u32,
    pub nearest_above: u32,
}

impl fmt::Display for UnevenZones {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = self
            .per_zone
            .iter()
            .map(|(zone, n)| format!("{zone}: {n}"))
            .collect();
        write!(f, "shards per zone differ ({})", counts.join(", "))?;
        match self.nearest_below {
            0 => write!(f, "; {} shards would be even", self.nearest_above),
            below => write!(
                f,
                "; {below} or {} shards would be even",
                self.nearest_above
            ),
        }
    }
}

/// Shards mapped onto zones (Topology) or onto one pseudo-zone (Classic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLayout {
    shards: u32,
    /// Empty in Classic mode.
    zones: Vec<String>,
    zoneless: ZonelessTargets,
    /// The node (and pod) label that carries zones.
    zone_label: String,
    /// Where a target's zone is read from (Topology mode): meta labels derived from `zone_label`.
    sources: [String; 3],
    /// Zones whose shards are all down and whose zoneless buckets the other zones' shards
    /// scrape (see [`ShardLayout::failed_over`]).
    failed_over: BTreeSet<String>,
}

impl ShardLayout {
    /// Classic mode: `owners(N)` over all shards.
    pub fn classic(shards: u32) -> Result<ShardLayout, ShardingError> {
        check_shards(shards)?;
        Ok(ShardLayout {
            shards,
            zones: Vec::new(),
            zoneless: ZonelessTargets::Spread,
            zone_label: crate::ZONE_LABEL.to_string(),
            sources: topology_sources(crate::ZONE_LABEL),
            failed_over: BTreeSet::new(),
        })
    }

    /// Topology mode. Any `shards >= 1` is valid, also fewer than the zones.
    pub fn topology(
        shards: u32,
        zones: Vec<String>,
        zoneless: ZonelessTargets,
    ) -> Result<ShardLayout, ShardingError> {
        check_shards(shards)?;
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
        Ok(ShardLayout {
            shards,
            zones,
            zoneless,
            zone_label: crate::ZONE_LABEL.to_string(),
            sources: topology_sources(crate::ZONE_LABEL),
            failed_over: BTreeSet::new(),
        })
    }

    /// Reads targets' zones from nodes and pods labelled `zone_label` instead of
    /// `topology.kubernetes.io/zone`.
    pub fn with_zone_label(mut self, zone_label: &str) -> ShardLayout {
        self.sources = topology_sources(zone_label);
        self.zone_label = zone_label.to_string();
        self
    }

    /// What happens to targets with no served zone.
    pub fn zoneless(&self) -> ZonelessTargets {
        self.zoneless
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The listed zones; empty in Classic mode.
    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    pub fn is_topology(&self) -> bool {
        !self.zones.is_empty()
    }

    /// The zone shard `shard` is pinned to; `None` in Classic mode.
    pub fn zone(&self, shard: u32) -> Option<&str> {
        let z = self.zone_index(shard)?;
        self.zones.get(z).map(String::as_str)
    }

    /// The shard's index among the shards of its zone (Classic: the shard itself).
    pub fn in_zone(&self, shard: u32) -> u32 {
        match self.zone_count() {
            0 => shard,
            zones => shard / zones,
        }
    }

    /// Shards of the zone at `zone_index` in the list: `N / Z`, plus one for the first `N % Z`.
    pub fn shards_in_zone(&self, zone_index: usize) -> u32 {
        let zones = self.zone_count().max(1);
        let extra = u32::from((zone_index as u32) < self.shards % zones);
        self.shards / zones + extra
    }

    /// Shard counts per listed zone, in the listed order.
    pub fn per_zone(&self) -> Vec<(String, u32)> {
        self.zones
            .iter()
            .enumerate()
            .map(|(z, zone)| (zone.clone(), self.shards_in_zone(z)))
            .collect()
    }

    /// Listed zones with at least one shard, in the listed order.
    pub fn zones_with_shard(&self) -> Vec<String> {
        self.per_zone()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(zone, _)| zone)
            .collect()
    }

    /// Listed zones with no shard (`N < Z`): their targets are scraped cross-zone (Spread).
    pub fn zones_without_shard(&self) -> Vec<String> {
        self.per_zone()
            .into_iter()
            .filter(|(_, n)| *n == 0)
            .map(|(zone, _)| zone)
            .collect()
    }

    /// The `UnevenZones` warning when zones have different shard counts (and all have one).
    pub fn uneven(&self) -> Option<UnevenZones> {
        let zones = self.zone_count();
        if zones == 0 || self.shards < zones || self.shards.is_multiple_of(zones) {
            return None;
        }
        let below = self.shards / zones * zones;
        Some(UnevenZones {
            per_zone: self.per_zone(),
            nearest_below: below,
            nearest_above: below.saturating_add(zones),
        })
    }

    /// The buckets shard `shard` keeps among the targets of its own zone (Topology) or among all
    /// targets (Classic).
    pub fn zone_buckets(&self, shard: u32) -> Vec<u32> {
        match self.zone_index(shard) {
            Some(z) => buckets_of(self.shards_in_zone(z), self.in_zone(shard)),
            None => buckets_of(self.shards, shard),
        }
    }

    /// The buckets shard `shard` keeps among the targets with no usable zone (Spread): its
    /// share of `owners(N)`, plus its share of the failed-over zones' shards' buckets if it is
    /// not one of them (a failed-over shard keeps its own, for its return).
    pub fn zoneless_buckets(&self, shard: u32) -> Vec<u32> {
        if self.failed_over.is_empty() {
            return buckets_of(self.shards, shard);
        }
        let down: BTreeSet<u32> = (0..self.shards)
            .filter(|s| self.zone(*s).is_some_and(|z| self.failed_over.contains(z)))
            .collect();
        failover::zoneless_buckets(self.shards, shard, &down)
    }

    /// The layout with the zoneless buckets of `zones`' shards moved to the other zones' shards
    /// (Topology, Spread): a zone failover. Zones not listed, or without a shard, are left out;
    /// when no zone with a shard would be left, or zoneless targets are dropped, nothing moves.
    pub fn failed_over<'a>(mut self, zones: impl IntoIterator<Item = &'a str>) -> ShardLayout {
        let served: BTreeSet<String> = self.zones_with_shard().into_iter().collect();
        let down: BTreeSet<String> = zones
            .into_iter()
            .filter(|zone| served.contains(*zone))
            .map(str::to_string)
            .collect();
        let moves = self.zoneless == ZonelessTargets::Spread && down.len() < served.len();
        self.failed_over = match moves {
            true => down,
            false => BTreeSet::new(),
        };
        self
    }

    /// The zones failed over (see [`ShardLayout::failed_over`]).
    pub fn failed_over_zones(&self) -> &BTreeSet<String> {
        &self.failed_over
    }

    /// The relabel rules appended to every scrape config of shard `shard`, after the user's own.
    pub fn rules(&self, shard: u32) -> Vec<RelabelConfig> {
        let mut rules = Vec::new();
        if self.is_topology() {
            rules.extend(topology_detection_rules(&self.sources));
        }
        rules.extend(bucket_rules());
        // Any value of the opt-out reads as "true" to the keep rule below.
        rules.push(RelabelConfig::replace(
            &[TMP_DISABLE_SHARDING],
            ".+",
            TMP_DISABLE_SHARDING,
            "true",
        ));
        let Some(zone) = self.zone(shard) else {
            let regex = format!("true;.*|;(?:{})", bucket_regex(&self.zone_buckets(shard)));
            rules.push(RelabelConfig::keep(
                &[TMP_DISABLE_SHARDING, TMP_HASH],
                &regex,
            ));
            return rules;
        };
        let served: Vec<String> = self
            .zones_with_shard()
            .iter()
            .map(|zone| quote_meta(zone))
            .collect();
        rules.push(RelabelConfig::replace(
            &[TMP_TOPOLOGY],
            &served.join("|"),
            TMP_TOPOLOGY_SERVED,
            "true",
        ));
        // One keep rule over `served;zone;bucket`: a target of this zone in one of this shard's
        // buckets, or (Spread) a target with no served zone in one of its zoneless buckets.
        let mut regex = format!(
            "true;{};{}",
            quote_meta(zone),
            bucket_regex(&self.zone_buckets(shard))
        );
        if self.zoneless == ZonelessTargets::Spread {
            regex.push_str(&format!(
                "|;.*;{}",
                bucket_regex(&self.zoneless_buckets(shard))
            ));
        }
        rules.push(RelabelConfig::keep(
            &[
                TMP_DISABLE_SHARDING,
                TMP_TOPOLOGY_SERVED,
                TMP_TOPOLOGY,
                TMP_HASH,
            ],
            &format!("true;.*|;(?:{regex})"),
        ));
        rules
    }

    /// External labels of a shard: [`SHARD_EXTERNAL_LABEL`], and in Topology mode the zone under
    /// `zone_external_label` (`None` disables it).
    pub fn external_labels(
        &self,
        shard: u32,
        zone_external_label: Option<&str>,
    ) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(SHARD_EXTERNAL_LABEL.to_string(), shard.to_string())]);
        if let (Some(zone), Some(name)) = (self.zone(shard), zone_external_label)
            && !name.is_empty()
        {
            labels.insert(name.to_string(), zone.to_string());
        }
        labels
    }

    /// The user's node selector with the node zone label set to the shard's zone (replacing a
    /// user value for that key). Classic shards keep the user's selector as it is.
    pub fn node_selector(
        &self,
        shard: u32,
        user: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut selector = user.clone();
        if let Some(zone) = self.zone(shard) {
            selector.insert(self.zone_label.clone(), zone.to_string());
        }
        selector
    }

    fn zone_count(&self) -> u32 {
        u32::try_from(self.zones.len()).unwrap_or(u32::MAX)
    }

    fn zone_index(&self, shard: u32) -> Option<usize> {
        match self.zone_count() {
            0 => None,
            zones => Some((shard % zones) as usize),
        }
    }
}

fn check_shards(shards: u32) -> Result<(), ShardingError> {
    if shards == 0 || shards > BUCKETS {
        return Err(ShardingError::ShardCount(shards));
    }
    Ok(())
}

/// Every shard's rules of `layout`, compiled, in shard order: what each shard's Prometheus
/// applies to a target.
pub fn compiled_rules(layout: &ShardLayout) -> Result<Vec<CompiledRules>, RelabelError> {
    (0..layout.shards())
        .map(|shard| CompiledRules::new(&layout.rules(shard)))
        .collect()
}

/// The shards whose rules (`rules`, in shard order, as [`compiled_rules`] gives them) keep a
/// target with `labels`: exactly one for a target every layout scrapes, none for one dropped.
pub fn keepers(rules: &[CompiledRules], labels: &Labels) -> Vec<u32> {
    (0u32..)
        .zip(rules)
        .filter(|(_, rules)| rules.apply(labels).is_some())
        .map(|(shard, _)| shard)
        .collect()
}

/// Rules for a shard that must scrape nothing (a retained shard after a scale-down): it keeps
/// serving queries over the data it has, but takes no target.
pub fn rules_scraping_nothing() -> Vec<RelabelConfig> {
    vec![RelabelConfig::drop(&["__address__"], ".*")]
}

/// Fills `__tmp_topology` from the first non-empty source, never overriding a value already set
/// (by the user or by an earlier source): each rule joins its source with `__tmp_topology` and
/// only matches `"<zone>;"`, i.e. while `__tmp_topology` is still empty.
fn topology_detection_rules(sources: &[String]) -> Vec<RelabelConfig> {
    sources
        .iter()
        .map(|source| RelabelConfig::replace(&[source, TMP_TOPOLOGY], "(.+);", TMP_TOPOLOGY, "$1"))
        .collect()
}

/// `__tmp_hash` := `__address__` unless the user set it, then its bucket.
fn bucket_rules() -> Vec<RelabelConfig> {
    vec![
        RelabelConfig::replace(&["__address__", TMP_HASH], "(.+);", TMP_HASH, "$1"),
        RelabelConfig::hashmod(&[TMP_HASH], TMP_HASH, u64::from(BUCKETS)),
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

/// Kubernetes SD roles whose targets only get node labels with `attach_metadata: {node: true}`.
pub const ROLES_NEEDING_NODE_METADATA: [&str; 3] = ["pod", "endpoints", "endpointslice"];

/// What [`attach_node_metadata`] did to a scrape config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMetadata {
    /// Whether `attach_metadata.node: true` was added somewhere.
    pub attached: bool,
    /// Roles where the user set `attach_metadata.node` explicitly to false: left alone, so zone
    /// detection falls back to the other sources for them.
    pub disabled_by_user: Vec<String>,
}

/// Turns on `attach_metadata.node` in every `kubernetes_sd_configs` entry whose role needs it,
/// unless the user set `attach_metadata.node` explicitly (an explicit `false` is respected and
/// reported, unlike upstream, which overrides it).
pub fn attach_node_metadata(scrape_config: &mut serde_json::Value) -> NodeMetadata {
    let mut outcome = NodeMetadata::default();
    let Some(sd_configs) = scrape_config
        .get_mut("kubernetes_sd_configs")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return outcome;
    };
    for sd in sd_configs.iter_mut() {
        let role = sd
            .get("role")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !ROLES_NEEDING_NODE_METADATA.contains(&role.as_str()) {
            continue;
        }
        let Some(sd) = sd.as_object_mut() else {
            continue;
        };
        let attach = sd
            .entry("attach_metadata")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        let Some(attach) = attach.as_object_mut() else {
            continue;
        };
        match attach.get("node") {
            Some(serde_json::Value::Bool(false)) => outcome.disabled_by_user.push(role),
            Some(serde_json::Value::Bool(true)) => {}
            _ => {
                attach.insert("node".to_string(), serde_json::Value::Bool(true));
                outcome.attached = true;
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests;
