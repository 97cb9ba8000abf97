//! The planner driven through random rollouts: pods come back slowly, some never become Ready
//! until replaced, and the invariants must hold at every removal.

use std::collections::BTreeSet;

use proptest::prelude::*;
use zone_topology::Zone;
use zone_topology::rollout::{Plan, RolloutInput, RolloutPod, plan};

const OLD: &str = "old";
const NEW: &str = "new";
const MAX_ITERATIONS: usize = 5_000;

#[derive(Debug, Clone)]
struct SimPod {
    pod: RolloutPod,
    /// Removed and not yet recreated.
    gone: bool,
    /// An old pod that is down until replaced (crash-looping).
    broken: bool,
    /// Ticks spent waiting in the current stage; a pod always advances after a few.
    waited: u8,
}

#[derive(Debug, Clone)]
struct Scenario {
    zones: Vec<usize>,
    broken: Vec<bool>,
    max_unavailable: u32,
    factor: f64,
    /// Random bits driving which in-flight pods advance at each tick.
    coins: Vec<bool>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (1usize..=40, 1usize..=4).prop_flat_map(|(replicas, zone_count)| {
        (
            proptest::collection::vec(0..zone_count, replicas),
            proptest::collection::vec(proptest::bool::weighted(0.1), replicas),
            1u32..=6,
            proptest::sample::select(vec![0.0, 1.0, 1.5, 2.0, 3.0]),
            proptest::collection::vec(any::<bool>(), 64..256),
        )
            .prop_map(|(zones, broken, max_unavailable, factor, coins)| Scenario {
                zones,
                broken,
                max_unavailable,
                factor,
                coins,
            })
    })
}

fn unavailable(pods: &[SimPod]) -> usize {
    pods.iter()
        .filter(|p| p.gone || p.pod.terminating || !p.pod.ready)
        .count()
}

/// The scenario's pods, all of the old revision, the broken ones not ready.
#[allow(clippy::unwrap_used)]
fn pods_of(s: &Scenario) -> Vec<SimPod> {
    s.zones
        .iter()
        .zip(&s.broken)
        .enumerate()
        .map(|(ordinal, (zone, broken))| SimPod {
            pod: RolloutPod {
                name: format!("p-{ordinal}"),
                ordinal: u32::try_from(ordinal).unwrap(),
                zone: Zone::known(format!("zone-{zone}")),
                revision: OLD.into(),
                update_revision: NEW.into(),
                ready: !broken,
                terminating: false,
            },
            gone: false,
            broken: *broken,
            waited: 0,
        })
        .collect()
}

/// Time passes: each in-flight pod advances one stage (terminating, gone, replaced, ready) on
/// a coin flip, or after waiting three times.
fn advance<'a>(pods: &mut [SimPod], coin: &mut impl Iterator<Item = &'a bool>) {
    for sim in pods.iter_mut() {
        let in_flight = sim.pod.terminating || sim.gone || (!sim.pod.ready && !sim.broken);
        if !in_flight {
            continue;
        }
        if !coin.next().copied().unwrap_or(true) && sim.waited < 3 {
            sim.waited += 1;
            continue;
        }
        sim.waited = 0;
        if sim.pod.terminating {
            sim.pod.terminating = false;
            sim.gone = true;
        } else if sim.gone {
            sim.gone = false;
            sim.broken = false;
            sim.pod.revision = NEW.into();
            sim.pod.ready = false;
        } else if !sim.pod.ready && !sim.broken {
            sim.pod.ready = true;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rollouts_respect_the_budget_stay_in_one_zone_and_terminate(s in scenario()) {
        let mut pods = pods_of(&s);
        let replicas = u32::try_from(pods.len()).unwrap();
        let mut step = 0;
        let mut last_revision: Option<&str> = None;
        let mut last_zone: Option<Zone> = None;
        let mut coin = s.coins.iter().cycle();
        let mut done = false;
        for _ in 0..MAX_ITERATIONS {
            let present: Vec<RolloutPod> =
                pods.iter().filter(|p| !p.gone).map(|p| p.pod.clone()).collect();
            let (progress, next) = plan(&RolloutInput {
                replicas,
                update_revision: NEW,
                last_update_revision: last_revision,
                step,
                last_zone: last_zone.as_ref(),
                max_unavailable: s.max_unavailable,
                exponential_factor: s.factor,
                pods: &present,
            });
            last_revision = Some(NEW);
            step = progress.step;
            last_zone = progress.current_zone.clone();
            match next {
                Plan::Complete => {
                    prop_assert!(pods.iter().all(|p| !p.gone && p.pod.ready && p.pod.revision == NEW));
                    done = true;
                    break;
                }
                Plan::Remove(batch) => {
                    step = batch.next_step;
                    let before = unavailable(&pods);
                    let down_zones: BTreeSet<Zone> = pods.iter()
                        .filter(|p| p.gone || p.pod.terminating || !p.pod.ready)
                        .map(|p| p.pod.zone.clone())
                        .collect();
                    prop_assert!(!batch.pods.is_empty());
                    let only_down_pods = batch.pods.iter().all(|name| {
                        pods.iter().any(|p| &p.pod.name == name && !p.pod.ready)
                    });
                    // Nothing in flight elsewhere: every unavailable pod is in the batch's zone,
                    // unless the batch only replaces pods that are already down.
                    prop_assert!(
                        only_down_pods || down_zones.iter().all(|z| *z == batch.zone),
                        "{:?} vs {:?}", down_zones, batch.zone
                    );
                    // Never anything in flight: removals wait for the previous batch.
                    prop_assert!(pods.iter().all(|p| !p.gone && !p.pod.terminating));
                    for name in &batch.pods {
                        let sim = pods.iter_mut().find(|p| &p.pod.name == name).unwrap();
                        prop_assert_eq!(&sim.pod.zone, &batch.zone, "batch crosses zones");
                        prop_assert_eq!(sim.pod.revision.as_str(), OLD);
                        sim.pod.terminating = true;
                    }
                    let after = unavailable(&pods);
                    prop_assert!(
                        after <= before.max(s.max_unavailable as usize),
                        "unavailable {} -> {} with maxUnavailable {}", before, after, s.max_unavailable
                    );
                }
                Plan::Wait(_) => {}
            }
            // Time passes: each in-flight pod advances one stage on a coin flip.
            advance(&mut pods, &mut coin);
        }
        prop_assert!(done, "rollout did not complete in {} iterations", MAX_ITERATIONS);
    }
}
