//! Random eviction sequences against a budget: allowed evictions never disrupt two zones and never
//! exceed maxUnavailable in a zone.

use std::collections::BTreeMap;

use proptest::prelude::*;
use zone_topology::budget::{
    BudgetInput, BudgetPod, Decision, Disruption, EvictedPod, PodCondition, Policy, compute,
};
use zone_topology::{IntOrPercent, Zone};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn allowed_evictions_stay_in_one_zone_within_budget(
        placement in proptest::collection::vec(0usize..3, 1..30),
        max_unavailable in 1u32..4,
        attempts in proptest::collection::vec(any::<proptest::sample::Index>(), 1..60),
    ) {
        let pods: Vec<BudgetPod> = placement.iter().enumerate().map(|(i, zone)| BudgetPod {
            name: format!("p-{i}"),
            zone: Zone::known(format!("zone-{zone}")),
            healthy: true,
            // Created well before any eviction: re-evicting one is a retry.
            created_ms: -60_000,
        }).collect();
        let mut records: Vec<Disruption> = Vec::new();
        let previous = BTreeMap::new();
        for attempt in attempts {
            let pod = &pods[attempt.index(pods.len())];
            let budget = compute(&BudgetInput {
                expected_total: u32::try_from(pods.len()).unwrap(),
                pods: &pods,
                healthy_unnamed: &BTreeMap::new(),
                previous_expected: &previous,
                disruptions: &records,
                policy: Policy::max_unavailable(IntOrPercent::Int(i64::from(max_unavailable))),
            });
            let decision = budget.decide(&EvictedPod {
                name: &pod.name,
                zone: pod.zone.clone(),
                condition: PodCondition::Healthy,
                created_ms: pod.created_ms,
                rollout: false,
            });
            if let Decision::Allow { zone, record: true } = decision {
                records.push(Disruption { pod: pod.name.clone(), zone, at_ms: 0 });
            }
            let mut per_zone: BTreeMap<&Zone, u32> = BTreeMap::new();
            for record in &records {
                *per_zone.entry(&record.zone).or_default() += 1;
            }
            prop_assert!(per_zone.len() <= 1, "two zones disrupted: {:?}", per_zone);
            prop_assert!(per_zone.values().all(|n| *n <= max_unavailable), "{:?}", per_zone);
        }
    }
}
