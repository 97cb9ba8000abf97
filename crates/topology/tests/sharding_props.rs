//! Coverage proofs: under the generated relabel rules, evaluated with Prometheus semantics and
//! Prometheus's hashmod, every target is kept by exactly the shards it should be, for any shard
//! count 1..64 and any list of 1..6 zones, and a resize moves targets only onto the new shard.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use proptest::prelude::*;
use zone_topology::relabel::{CompiledRules, Labels};
use zone_topology::sharding::{
    ShardLayout, TMP_HASH, TMP_TOPOLOGY, TOPOLOGY_SOURCES, ZonelessTargets, compiled_rules, keepers,
};

/// Zone names, some with RE2 metacharacters, so escaping is exercised.
const ZONE_NAMES: [&str; 8] = [
    "zone-a",
    "zone-b",
    "zone-c",
    "us-east-1.a",
    "usXeast-1Xa",
    "z+1",
    "z(2)",
    "eu|west",
];

#[derive(Debug, Clone)]
enum ZoneSource {
    None,
    Listed { source: usize, zone: usize },
    Unlisted { source: usize },
}

#[derive(Debug, Clone)]
struct Target {
    address: String,
    zone: ZoneSource,
    user_hash: Option<String>,
}

fn zone_list() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(ZONE_NAMES.to_vec(), 1..=6)
        .prop_shuffle()
        .prop_map(|zones| zones.into_iter().map(String::from).collect())
}

fn target(zone_count: usize) -> impl Strategy<Value = Target> {
    let address = (any::<[u8; 4]>(), 1u16..65535)
        .prop_map(|(ip, port)| format!("{}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3]));
    // Source index 0..=3: TMP_TOPOLOGY (user override) or one of the three discovery labels.
    let zone = prop_oneof![
        Just(ZoneSource::None),
        (0usize..4, 0..zone_count).prop_map(|(source, zone)| ZoneSource::Listed { source, zone }),
        (0usize..4).prop_map(|source| ZoneSource::Unlisted { source }),
    ];
    let user_hash = proptest::option::weighted(0.2, "[a-z0-9]{1,12}");
    (address, zone, user_hash).prop_map(|(address, zone, user_hash)| Target {
        address,
        zone,
        user_hash,
    })
}

fn source_label(source: usize) -> &'static str {
    match source {
        0 => TMP_TOPOLOGY,
        n => TOPOLOGY_SOURCES[n - 1],
    }
}

impl Target {
    fn labels(&self, zones: &[String]) -> Labels {
        let mut labels = Labels::from([("__address__".to_string(), self.address.clone())]);
        match &self.zone {
            ZoneSource::None => {}
            ZoneSource::Listed { source, zone } => {
                labels.insert(source_label(*source).to_string(), zones[*zone].clone());
            }
            ZoneSource::Unlisted { source } => {
                labels.insert(
                    source_label(*source).to_string(),
                    "not-a-listed-zone".into(),
                );
            }
        }
        if let Some(hash) = &self.user_hash {
            labels.insert(TMP_HASH.to_string(), hash.clone());
        }
        labels
    }
}

fn compiled(layout: &ShardLayout) -> Vec<CompiledRules> {
    compiled_rules(layout).unwrap()
}

fn scenario() -> impl Strategy<Value = (Vec<String>, u32, Vec<Target>)> {
    zone_list().prop_flat_map(|zones| {
        let count = zones.len();
        (
            Just(zones),
            1u32..=64,
            proptest::collection::vec(target(count), 1..40),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Exactly one keeper per target (Drop: none for a target with no served zone), and a shard
    /// of the target's own zone whenever that zone has one.
    #[test]
    fn topology_targets_are_kept_exactly_once_by_their_own_zone(
        (zones, shards, targets) in scenario(),
        drop in any::<bool>(),
    ) {
        let policy = if drop { ZonelessTargets::Drop } else { ZonelessTargets::Spread };
        let layout = ShardLayout::topology(shards, zones.clone(), policy).unwrap();
        let without_shard: BTreeSet<String> = layout.zones_without_shard().into_iter().collect();
        let rules = compiled(&layout);
        for target in &targets {
            let kept = keepers(&rules, &target.labels(&zones));
            let served = match &target.zone {
                ZoneSource::Listed { zone, .. } if !without_shard.contains(&zones[*zone]) => {
                    Some(zones[*zone].as_str())
                }
                _ => None,
            };
            match (served, policy) {
                (Some(zone), _) => {
                    prop_assert_eq!(kept.len(), 1, "{:?} kept by {:?}", target, kept);
                    prop_assert_eq!(layout.zone(kept[0]), Some(zone));
                }
                (None, ZonelessTargets::Drop) => {
                    prop_assert!(kept.is_empty(), "{:?} kept by {:?}", target, kept)
                }
                (None, ZonelessTargets::Spread) => {
                    prop_assert_eq!(kept.len(), 1, "{:?} kept by {:?}", target, kept)
                }
            }
        }
    }

    #[test]
    fn classic_targets_are_kept_by_exactly_one_shard(
        shards in 1u32..=64,
        targets in proptest::collection::vec(target(1), 1..40),
    ) {
        let rules = compiled(&ShardLayout::classic(shards).unwrap());
        let zones = vec!["zone-a".to_string()];
        for target in &targets {
            prop_assert_eq!(keepers(&rules, &target.labels(&zones)).len(), 1);
        }
    }

    /// n → n+1 shards: a target either stays where it was or moves onto the new shard n.
    #[test]
    fn growing_by_one_shard_moves_targets_only_onto_it(
        (zones, shards, targets) in scenario(),
        classic in any::<bool>(),
    ) {
        let shards = shards.min(63);
        let layout = |n| match classic {
            true => ShardLayout::classic(n).unwrap(),
            false => ShardLayout::topology(n, zones.clone(), ZonelessTargets::Spread).unwrap(),
        };
        let (before, after) = (compiled(&layout(shards)), compiled(&layout(shards + 1)));
        for target in &targets {
            let labels = target.labels(&zones);
            let (old, new) = (keepers(&before, &labels), keepers(&after, &labels));
            prop_assert_eq!(old.len(), 1);
            prop_assert_eq!(new.len(), 1);
            prop_assert!(old == new || new[0] == shards, "{:?}: {:?} -> {:?}", target, old, new);
        }
    }
}
