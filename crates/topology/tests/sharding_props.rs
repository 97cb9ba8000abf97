//! Coverage proofs: under the generated relabel rules, evaluated with Prometheus semantics and
//! Prometheus's hashmod, every target is kept by exactly the shards it should be.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use proptest::prelude::*;
use zone_topology::relabel::{CompiledRules, Labels};
use zone_topology::sharding::{
    ShardLayout, TMP_HASH, TMP_TOPOLOGY, TOPOLOGY_SOURCES, ZonelessTargets, classic_rules,
    topology_rules,
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
    proptest::sample::subsequence(ZONE_NAMES.to_vec(), 1..=5)
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

fn keepers(rules: &[CompiledRules], labels: &Labels) -> Vec<u32> {
    (0u32..)
        .zip(rules)
        .filter(|(_, rules)| rules.apply(labels).is_some())
        .map(|(shard, _)| shard)
        .collect()
}

fn scenario() -> impl Strategy<Value = (Vec<String>, u32, Vec<Target>)> {
    zone_list().prop_flat_map(|zones| {
        let count = zones.len();
        let multiple = 1u32..=(24 / u32::try_from(count).unwrap()).max(1);
        let shards = multiple.prop_map(move |m| m * u32::try_from(count).unwrap());
        (
            Just(zones),
            shards,
            proptest::collection::vec(target(count), 1..40),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn topology_targets_are_kept_by_exactly_one_shard_of_their_zone(
        (zones, shards, targets) in scenario(),
        first_zone in any::<bool>(),
    ) {
        let policy = if first_zone { ZonelessTargets::FirstZone } else { ZonelessTargets::Drop };
        let layout = ShardLayout::new(shards, zones.clone()).unwrap();
        prop_assert!(layout.uneven().is_none());
        let rules: Vec<CompiledRules> = (0..shards)
            .map(|shard| CompiledRules::new(&topology_rules(&layout, shard, policy)).unwrap())
            .collect();
        for target in &targets {
            let kept = keepers(&rules, &target.labels(&zones));
            match &target.zone {
                ZoneSource::Listed { zone, .. } => {
                    prop_assert_eq!(kept.len(), 1, "{:?} kept by {:?}", target, kept);
                    prop_assert_eq!(layout.zone(kept[0]), zones[*zone].as_str());
                }
                ZoneSource::None | ZoneSource::Unlisted { .. } => match policy {
                    ZonelessTargets::Drop => prop_assert!(kept.is_empty(), "{:?} kept by {:?}", target, kept),
                    ZonelessTargets::FirstZone => {
                        prop_assert_eq!(kept.len(), 1, "{:?} kept by {:?}", target, kept);
                        prop_assert_eq!(layout.zone(kept[0]), zones[0].as_str());
                    }
                },
            }
        }
    }

    #[test]
    fn classic_targets_are_kept_by_exactly_one_shard(
        shards in 1u32..=24,
        targets in proptest::collection::vec(target(1), 1..40),
    ) {
        let rules: Vec<CompiledRules> = (0..shards)
            .map(|shard| CompiledRules::new(&classic_rules(shards, shard)).unwrap())
            .collect();
        let zones = vec!["zone-a".to_string()];
        for target in &targets {
            prop_assert_eq!(keepers(&rules, &target.labels(&zones)).len(), 1);
        }
    }

    /// With an uneven count every listed-zone target is still kept by exactly one shard, and only
    /// the shards reported idle keep nothing.
    #[test]
    fn uneven_layouts_cover_everything_and_idle_shards_keep_nothing(
        (zones, shards, targets) in scenario(),
        extra in 1u32..3,
    ) {
        let zone_count = u32::try_from(zones.len()).unwrap();
        prop_assume!(extra < zone_count);
        let shards = shards + extra;
        let layout = ShardLayout::new(shards, zones.clone()).unwrap();
        let idle: BTreeSet<u32> = layout.uneven().unwrap().idle.into_iter().collect();
        let rules: Vec<CompiledRules> = (0..shards)
            .map(|shard| {
                CompiledRules::new(&topology_rules(&layout, shard, ZonelessTargets::FirstZone)).unwrap()
            })
            .collect();
        for target in &targets {
            let kept = keepers(&rules, &target.labels(&zones));
            prop_assert_eq!(kept.len(), 1);
            prop_assert!(!idle.contains(&kept[0]));
        }
    }
}
