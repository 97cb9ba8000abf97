use super::*;

const NOW: i64 = 1_000_000;

fn pods_3x3() -> Vec<BudgetPod> {
    (0..9)
        .map(|i| BudgetPod {
            name: format!("web-{i}"),
            zone: Zone::known(["zone-a", "zone-b", "zone-c"][i % 3]),
            healthy: true,
            created_ms: 0,
        })
        .collect()
}

struct World {
    pods: Vec<BudgetPod>,
    records: Vec<Disruption>,
    previous: BTreeMap<Zone, u32>,
    expected: u32,
    policy: Policy,
}

impl World {
    fn new(max_unavailable: IntOrPercent) -> World {
        World::with(Policy::max_unavailable(max_unavailable))
    }

    fn with(policy: Policy) -> World {
        World {
            pods: pods_3x3(),
            records: Vec::new(),
            previous: BTreeMap::new(),
            expected: 9,
            policy,
        }
    }

    fn budget(&mut self) -> Budget {
        self.records = prune(&self.records, &self.pods, NOW);
        let budget = compute(&BudgetInput {
            expected_total: self.expected,
            pods: &self.pods,
            healthy_unnamed: &BTreeMap::new(),
            previous_expected: &self.previous,
            disruptions: &self.records,
            policy: self.policy,
        });
        self.previous = budget
            .zones
            .iter()
            .map(|(z, b)| (z.clone(), b.expected))
            .collect();
        budget
    }

    fn pod(&self, name: &str) -> &BudgetPod {
        self.pods.iter().find(|pod| pod.name == name).unwrap()
    }

    /// Asks for an eviction of a healthy pod and records it when allowed.
    fn evict(&mut self, name: &str) -> Decision {
        self.evict_as(name, PodCondition::Healthy, false)
    }

    /// Asks for an eviction of `name` in `condition` (by the rollout when `rollout`), and
    /// records it when allowed and recordable.
    fn evict_as(&mut self, name: &str, condition: PodCondition, rollout: bool) -> Decision {
        let zone = self.pod(name).zone.clone();
        let decision = self.budget().decide(&EvictedPod {
            name,
            zone,
            condition,
            created_ms: 0,
            rollout,
        });
        if let Decision::Allow { zone, record: true } = &decision {
            self.records.push(Disruption {
                pod: name.into(),
                zone: zone.clone(),
                at_ms: NOW,
            });
        }
        decision
    }

    fn delete(&mut self, name: &str) {
        self.pods.retain(|pod| pod.name != name);
    }

    fn recreate(&mut self, name: &str, zone: Zone, healthy: bool) {
        self.delete(name);
        self.pods.push(BudgetPod {
            name: name.into(),
            zone,
            healthy,
            created_ms: NOW + 1,
        });
    }
}

fn allowed(decision: &Decision) -> bool {
    matches!(decision, Decision::Allow { .. })
}

#[test]
fn nine_pods_max_two_the_issue_scenario() {
    let mut world = World::new(IntOrPercent::Int(2));
    // web-0 and web-3 are in zone-a.
    assert!(allowed(&world.evict("web-0")));
    assert!(allowed(&world.evict("web-3")));
    let Decision::Deny(denial) = world.evict("web-6") else {
        panic!("third eviction allowed")
    };
    assert_eq!(denial.zone(), &Zone::known("zone-a"));
    assert_eq!(
        denial.to_string(),
        "zone zone-a already has 2 of maxUnavailable 2 pod(s) unavailable (web-0, web-3 unavailable)"
    );
    // zone-b (web-1) is denied while zone-a is disrupted, naming zone-a and its pods.
    let Decision::Deny(denial) = world.evict("web-1") else {
        panic!("zone-b allowed")
    };
    assert_eq!(
        denial.to_string(),
        "zone zone-a is disrupted (web-0, web-3 unavailable); evictions in zone zone-b must wait"
    );
    // The evicted pods go away: still denied (missing pods count).
    world.delete("web-0");
    world.delete("web-3");
    let Decision::Deny(denial) = world.evict("web-1") else {
        panic!("zone-b allowed")
    };
    assert!(denial.to_string().contains("2 missing"), "{denial}");
    // Recreated Pending (no node yet): the records place them in zone-a; still denied.
    world.recreate("web-0", Zone::Unknown, false);
    world.recreate("web-3", Zone::Unknown, false);
    assert!(!allowed(&world.evict("web-1")));
    // Scheduled and Ready again: zone-b can be disrupted.
    world.recreate("web-0", Zone::known("zone-a"), true);
    world.recreate("web-3", Zone::known("zone-a"), true);
    assert!(allowed(&world.evict("web-1")));
}

#[test]
fn a_deleted_pod_not_yet_recreated_blocks_other_zones() {
    let mut world = World::new(IntOrPercent::Int(2));
    world.budget();
    world.delete("web-0"); // zone-a, no eviction record: placed by the previous expected counts
    let budget = world.budget();
    assert_eq!(budget.zones[&Zone::known("zone-a")].missing, 1);
    assert_eq!(budget.zones[&Zone::known("zone-a")].unhealthy, 1);
    assert!(
        !allowed(&world.evict("web-1")),
        "zone-b must wait for zone-a's missing pod"
    );
    assert!(
        allowed(&world.evict("web-3")),
        "zone-a itself still has budget"
    );
}

#[test]
fn a_missing_pod_with_no_history_is_unknown_and_blocks_every_zone() {
    let mut world = World::new(IntOrPercent::Int(2));
    world.expected = 10;
    let budget = world.budget();
    assert_eq!(budget.zones[&Zone::Unknown].missing, 1);
    assert!(!allowed(&world.evict("web-0")));
}

#[test]
fn unready_pods_are_allowed_and_not_recorded() {
    let mut world = World::new(IntOrPercent::Int(1));
    assert!(allowed(&world.evict("web-0"))); // zone-a disrupted now
    for condition in [
        PodCondition::NotReady,
        PodCondition::Pending,
        PodCondition::Terminal,
    ] {
        let pod = EvictedPod {
            name: "web-1",
            zone: Zone::known("zone-b"),
            condition,
            created_ms: 0,
            rollout: false,
        };
        assert_eq!(
            world.budget().decide(&pod),
            Decision::Allow {
                zone: Zone::known("zone-b"),
                record: false
            }
        );
    }
}

#[test]
fn re_evicting_a_recorded_pod_is_idempotent() {
    let mut world = World::new(IntOrPercent::Int(1));
    assert_eq!(
        world.evict("web-0"),
        Decision::Allow {
            zone: Zone::known("zone-a"),
            record: true
        }
    );
    assert_eq!(
        world.evict("web-0"),
        Decision::Allow {
            zone: Zone::known("zone-a"),
            record: false
        }
    );
    assert_eq!(world.records.len(), 1);
}

/// A StatefulSet brings a pod back under its name: while the record of the evicted one is not
/// pruned yet, an eviction of the new pod is not a retry. The old record still counts in its
/// zone, so the new pod's eviction is judged like any other.
#[test]
fn a_new_pod_under_a_recorded_name_is_not_a_retry() {
    let recorded_at = NOW - 5_000;
    let decide = |max_unavailable: i64, created_ms: i64| {
        // The budget as the webhook rebuilds it from the status: the recorded pod unhealthy.
        let mut pods = pods_3x3();
        pods[0].healthy = false;
        let records = [Disruption {
            pod: "web-0".into(),
            zone: Zone::known("zone-a"),
            at_ms: recorded_at,
        }];
        compute(&BudgetInput {
            expected_total: 9,
            pods: &pods,
            healthy_unnamed: &BTreeMap::new(),
            previous_expected: &BTreeMap::new(),
            disruptions: &records,
            policy: Policy::max_unavailable(IntOrPercent::Int(max_unavailable)),
        })
        .decide(&EvictedPod {
            name: "web-0",
            zone: Zone::known("zone-a"),
            condition: PodCondition::Healthy,
            created_ms,
            rollout: false,
        })
    };
    let zone_a = Zone::known("zone-a");
    // The pod the record is of: a retry, answered the same way.
    assert_eq!(
        decide(1, recorded_at - 60_000),
        Decision::Allow {
            zone: zone_a.clone(),
            record: false
        }
    );
    // Its successor, created after the record: the zone's one unavailable pod is the record.
    assert!(matches!(
        decide(1, recorded_at + 1_000),
        Decision::Deny(Denial::ZoneBudgetExhausted { .. })
    ));
    assert_eq!(
        decide(2, recorded_at + 1_000),
        Decision::Allow {
            zone: zone_a,
            record: true
        }
    );
}

#[test]
fn percent_is_of_the_total_rounded_up_and_applies_per_zone() {
    let mut world = World::new(IntOrPercent::Percent(25));
    let budget = world.budget();
    assert_eq!(budget.max_unavailable(), Some(3));
    for zone_budget in budget.zones.values() {
        assert_eq!(zone_budget.disruptions_allowed, 3);
        assert_eq!(zone_budget.desired_healthy, 0);
    }
}

#[test]
fn status_numbers_per_zone() {
    let mut world = World::new(IntOrPercent::Int(2));
    world.pods[0].healthy = false; // zone-a
    let budget = world.budget();
    let zone_a = &budget.zones[&Zone::known("zone-a")];
    assert_eq!(
        (zone_a.expected, zone_a.healthy, zone_a.unhealthy),
        (3, 2, 1)
    );
    assert_eq!((zone_a.desired_healthy, zone_a.disruptions_allowed), (1, 1));
    assert_eq!(budget.zones[&Zone::known("zone-b")].disruptions_allowed, 0);
    assert_eq!(budget.disrupted_zones(), vec![&Zone::known("zone-a")]);
}

#[test]
fn a_zone_whose_nodes_vanished_stays_in_the_budget() {
    let mut world = World::new(IntOrPercent::Int(2));
    world.budget();
    for name in ["web-2", "web-5", "web-8"] {
        world.delete(name); // all of zone-c
    }
    let budget = world.budget();
    assert_eq!(budget.zones[&Zone::known("zone-c")].missing, 3);
    assert!(!allowed(&world.evict("web-0")));
}

#[test]
fn records_expire_and_clear_when_the_pod_is_recreated_and_scheduled() {
    let pods = pods_3x3();
    let old = Disruption {
        pod: "web-0".into(),
        zone: Zone::known("zone-a"),
        at_ms: NOW - DISRUPTION_TTL_MS - 1,
    };
    let fresh = Disruption {
        pod: "web-3".into(),
        zone: Zone::known("zone-a"),
        at_ms: NOW,
    };
    assert_eq!(
        prune(&[old, fresh.clone()], &pods, NOW),
        vec![fresh.clone()]
    );
    let recreated = BudgetPod {
        name: "web-3".into(),
        zone: Zone::known("zone-a"),
        healthy: false,
        created_ms: NOW + 5,
    };
    assert!(
        prune(
            std::slice::from_ref(&fresh),
            std::slice::from_ref(&recreated),
            NOW
        )
        .is_empty()
    );
    let pending = BudgetPod {
        zone: Zone::Unknown,
        ..recreated
    };
    assert_eq!(
        prune(std::slice::from_ref(&fresh), &[pending], NOW),
        vec![fresh.clone()]
    );
    // Times are stored to the second: a pod recreated within the record's second has that
    // second as its creation time, and counts as recreated.
    let same_second = BudgetPod {
        name: "web-3".into(),
        zone: Zone::known("zone-a"),
        healthy: false,
        created_ms: NOW,
    };
    assert!(prune(std::slice::from_ref(&fresh), &[same_second], NOW).is_empty());
    assert_eq!(
        prune(std::slice::from_ref(&fresh), &[], NOW),
        vec![fresh],
        "gone pods keep their record"
    );
}

/// A record whose pod is still the same pod, not terminating, past the confirmation window was
/// not carried out; a pod recreated since, or one that never stood (gone or terminating, so not
/// passed as standing), confirms nothing and drops nothing.
#[test]
fn a_record_whose_pod_still_stands_past_the_window_is_unconfirmed() {
    let pods = pods_3x3();
    let record = Disruption {
        pod: "web-0".into(),
        zone: Zone::known("zone-a"),
        at_ms: NOW,
    };
    let records = std::slice::from_ref(&record);
    assert_eq!(
        confirmation_deadline(&record, &pods[0]),
        Some(NOW + CONFIRMATION_WINDOW_MS)
    );
    assert_eq!(confirmation_deadline(&record, &pods[1]), None);
    assert!(unconfirmed(records, &pods, NOW + CONFIRMATION_WINDOW_MS).is_empty());
    assert_eq!(
        unconfirmed(records, &pods, NOW + CONFIRMATION_WINDOW_MS + 1),
        vec![&record]
    );
    // Terminating or gone: the caller passes only standing pods.
    assert!(unconfirmed(records, &pods[1..], NOW + DISRUPTION_TTL_MS).is_empty());
    // Recreated under the recorded name after the record: not the pod the eviction named.
    let recreated = BudgetPod {
        created_ms: NOW + 2_000,
        ..pods[0].clone()
    };
    assert_eq!(confirmation_deadline(&record, &recreated), None);
    assert!(unconfirmed(records, &[recreated], NOW + DISRUPTION_TTL_MS).is_empty());
}

#[test]
fn expected_total_counts_owners_once_plus_bare_pods() {
    let owners = BTreeMap::from([("Deployment/web", 6u32), ("StatefulSet/db", 3u32)]);
    assert_eq!(expected_total(owners.values(), 2), 11);
}

#[test]
fn healthy_pods_counted_by_number_are_healthy_named_pods() {
    // Zone-a: 2 healthy + 1 recorded; zone-b: 3 healthy, 1 missing; zone-c: nothing healthy.
    let record = Disruption {
        pod: "web-0".into(),
        zone: Zone::known("zone-a"),
        at_ms: NOW,
    };
    let previous: BTreeMap<Zone, u32> = [("zone-a", 3), ("zone-b", 4), ("zone-c", 1)]
        .into_iter()
        .map(|(zone, n)| (Zone::known(zone), n))
        .collect();
    let recorded = BudgetPod {
        name: "web-0".into(),
        zone: Zone::known("zone-a"),
        healthy: true,
        created_ms: 0,
    };
    let healthy = [("zone-a", 2), ("zone-b", 3), ("zone-c", 0)];
    let mut named = vec![recorded.clone()];
    for (zone, n) in healthy {
        for i in 0..n {
            named.push(BudgetPod {
                name: format!("{zone}-{i}"),
                zone: Zone::known(zone),
                healthy: true,
                created_ms: 0,
            });
        }
    }
    let counts: BTreeMap<Zone, u32> = healthy
        .into_iter()
        .map(|(zone, n)| (Zone::known(zone), n))
        .collect();
    let records = [record];
    let by_name = compute(&BudgetInput {
        expected_total: 8,
        pods: &named,
        healthy_unnamed: &BTreeMap::new(),
        previous_expected: &previous,
        disruptions: &records,
        policy: Policy::max_unavailable(IntOrPercent::Int(1)),
    });
    let by_number = compute(&BudgetInput {
        expected_total: 8,
        pods: std::slice::from_ref(&recorded),
        healthy_unnamed: &counts,
        previous_expected: &previous,
        disruptions: &records,
        policy: Policy::max_unavailable(IntOrPercent::Int(1)),
    });
    assert_eq!(by_name, by_number);
    assert_eq!(by_number.zones[&Zone::known("zone-b")].missing, 1);
    assert_eq!(
        by_number.zones[&Zone::known("zone-a")].blocking_pods,
        ["web-0"]
    );
}

/// The decision of `pod` (in zone-a) under `max_unavailable` with every pod healthy.
fn decide_in_3x3(max_unavailable: IntOrPercent, condition: PodCondition) -> Decision {
    World::new(max_unavailable).budget().decide(&EvictedPod {
        name: "web-0",
        zone: Zone::known("zone-a"),
        condition,
        created_ms: 0,
        rollout: false,
    })
}

#[test]
fn zero_and_zero_percent_freeze_every_running_pod() {
    for zero in [IntOrPercent::Int(0), IntOrPercent::Percent(0)] {
        let mut world = World::new(zero);
        let budget = world.budget();
        assert!(budget.frozen, "{zero}");
        assert_eq!(budget.max_unavailable(), Some(0));
        for zone_budget in budget.zones.values() {
            assert_eq!(
                (zone_budget.desired_healthy, zone_budget.disruptions_allowed),
                (3, 0),
                "{zero}"
            );
        }
        for condition in [PodCondition::Healthy, PodCondition::NotReady] {
            let decision = decide_in_3x3(zero, condition);
            assert_eq!(
                decision,
                Decision::Deny(Denial::Frozen {
                    zone: Zone::known("zone-a"),
                    limit: Limit::MaxUnavailable(zero),
                }),
                "{zero} {condition:?}"
            );
        }
        // Nothing runs in a Pending or finished pod: let go, as a PodDisruptionBudget does.
        for condition in [PodCondition::Pending, PodCondition::Terminal] {
            assert!(
                allowed(&decide_in_3x3(zero, condition)),
                "{zero} {condition:?}"
            );
        }
        // No record is ever made, so the freeze holds whatever was evicted before.
        assert!(!allowed(&world.evict("web-1")));
        assert!(world.records.is_empty());
    }
}

#[test]
fn a_freeze_refuses_the_retry_of_an_eviction_allowed_before_it() {
    let mut world = World::new(IntOrPercent::Int(1));
    assert!(allowed(&world.evict("web-0")));
    world.policy = Policy::max_unavailable(IntOrPercent::Int(0));
    let Decision::Deny(denial) = world.evict("web-0") else {
        panic!("the retry was allowed under a freeze")
    };
    assert_eq!(
        denial.to_string(),
        "the budget is frozen (maxUnavailable 0): no voluntary eviction of its pods"
    );
}

#[test]
fn a_non_zero_budget_is_no_freeze() {
    // 10% of no pod resolves to 0 but is a budget: an eviction of a healthy pod is judged by
    // zones (here, nothing is expected, so it exceeds the zone's budget), not frozen.
    let budget = compute(&BudgetInput {
        expected_total: 0,
        pods: &[],
        healthy_unnamed: &BTreeMap::new(),
        previous_expected: &BTreeMap::new(),
        disruptions: &[],
        policy: Policy::max_unavailable(IntOrPercent::Percent(10)),
    });
    assert!(!budget.frozen);
    for max_unavailable in [IntOrPercent::Int(1), IntOrPercent::Percent(10)] {
        assert!(!World::new(max_unavailable).budget().frozen);
        assert_eq!(
            decide_in_3x3(max_unavailable, PodCondition::Healthy),
            Decision::Allow {
                zone: Zone::known("zone-a"),
                record: true
            },
            "{max_unavailable}"
        );
        assert!(allowed(&decide_in_3x3(
            max_unavailable,
            PodCondition::NotReady
        )));
    }
}

/// minAvailable is per zone, a percentage of the zone's expected pods rounded up: in each zone,
/// a PodDisruptionBudget over that zone's pods.
#[test]
fn min_available_keeps_that_many_healthy_pods_in_each_zone() {
    for min in [IntOrPercent::Int(2), IntOrPercent::Percent(50)] {
        let mut world = World::with(Policy::min_available(min));
        let budget = world.budget();
        assert!(!budget.frozen, "{min}");
        assert_eq!(budget.max_unavailable(), None);
        for zone_budget in budget.zones.values() {
            assert_eq!(
                (zone_budget.desired_healthy, zone_budget.disruptions_allowed),
                (2, 1),
                "{min}"
            );
        }
        // web-0, web-3 and web-6 are zone-a's three pods.
        assert!(allowed(&world.evict("web-0")), "{min}");
        let Decision::Deny(denial) = world.evict("web-3") else {
            panic!("{min}: a second eviction in zone-a was allowed")
        };
        assert_eq!(
            denial.to_string(),
            "zone zone-a has 2 healthy pod(s), minAvailable 2 (web-0 unavailable)",
            "{min}"
        );
        // Another zone waits for zone-a, as under maxUnavailable.
        assert!(matches!(
            world.evict("web-1"),
            Decision::Deny(Denial::OtherZoneDisrupted { .. })
        ));
    }
    // More than a zone has: nothing may go, and that is no freeze.
    let mut world = World::with(Policy::min_available(IntOrPercent::Int(4)));
    let budget = world.budget();
    assert!(!budget.frozen);
    assert!(budget.zones.values().all(|b| b.disruptions_allowed == 0));
    assert!(!allowed(&world.evict("web-0")));
}

#[test]
fn min_available_of_all_pods_is_a_freeze() {
    let all = Policy::min_available(IntOrPercent::Percent(100));
    let budget = World::with(all).budget();
    assert!(budget.frozen);
    let Decision::Deny(denial) = World::with(all).evict("web-0") else {
        panic!("an eviction under minAvailable 100% was allowed")
    };
    assert_eq!(
        denial.to_string(),
        "the budget is frozen (minAvailable 100%): no voluntary eviction of its pods"
    );
    assert!(
        !World::with(Policy::min_available(IntOrPercent::Percent(99)))
            .budget()
            .frozen
    );
}

/// The eviction of a running pod that is not Ready, in zone-a where `unready` of the three pods
/// are not Ready, under `limit` and `policy`.
fn decide_not_ready(limit: Limit, policy: UnhealthyPods, unready: usize) -> Decision {
    let mut world = World::with(Policy {
        limit,
        unhealthy_pods: policy,
        rollouts_when_frozen: RolloutsWhenFrozen::Hold,
    });
    // web-0, web-3 and web-6 are zone-a's.
    for name in ["web-0", "web-3", "web-6"].into_iter().take(unready) {
        if let Some(pod) = world.pods.iter_mut().find(|pod| pod.name == name) {
            pod.healthy = false;
        }
    }
    world.budget().decide(&EvictedPod {
        name: "web-0",
        zone: Zone::known("zone-a"),
        condition: PodCondition::NotReady,
        created_ms: 0,
        rollout: false,
    })
}

/// unhealthyPodEvictionPolicy as a PodDisruptionBudget reads it: IfHealthyBudget lets a pod that
/// is not Ready go only while its zone has the healthy pods the budget asks for (healthy >=
/// desired > 0, or a disruption allowed), AlwaysAllow always; unset, as before the field: always,
/// but under a freeze.
#[test]
fn pods_that_are_not_ready_go_by_the_unhealthy_pod_policy() {
    use UnhealthyPods::{AlwaysAllow, IfHealthyBudget, Unset};
    let max_one = Limit::MaxUnavailable(IntOrPercent::Int(1));
    let min_two = Limit::MinAvailable(IntOrPercent::Int(2));
    let max_three = Limit::MaxUnavailable(IntOrPercent::Int(3));
    let frozen = Limit::MaxUnavailable(IntOrPercent::Int(0));
    // (limit, policy, pods of zone-a not Ready, allowed)
    let table = [
        // One not Ready: 2 healthy of 3, the zone within either budget.
        (max_one, IfHealthyBudget, 1, true),
        (min_two, IfHealthyBudget, 1, true),
        // Two not Ready: 1 healthy, below both budgets.
        (max_one, IfHealthyBudget, 2, false),
        (min_two, IfHealthyBudget, 2, false),
        (max_one, AlwaysAllow, 2, true),
        (min_two, AlwaysAllow, 2, true),
        (max_one, Unset, 2, true),
        (min_two, Unset, 2, true),
        // Nothing asked for (maxUnavailable 3 of 3 pods): a disruption must be allowed, as
        // for a healthy pod, so some pod must be healthy.
        (max_three, IfHealthyBudget, 2, true),
        (max_three, IfHealthyBudget, 3, false),
        (max_three, AlwaysAllow, 3, true),
        // Frozen: only AlwaysAllow lets it go.
        (frozen, IfHealthyBudget, 1, false),
        (frozen, Unset, 1, false),
        (frozen, AlwaysAllow, 1, true),
    ];
    for (limit, policy, unready, expected) in table {
        let decision = decide_not_ready(limit, policy, unready);
        assert_eq!(
            allowed(&decision),
            expected,
            "{limit} {policy:?} with {unready} not Ready: {decision:?}"
        );
        if let Decision::Allow { record, .. } = decision {
            assert!(!record, "a pod that is not Ready is never recorded");
        }
    }
    assert_eq!(
        decide_not_ready(min_two, IfHealthyBudget, 2),
        Decision::Deny(Denial::ZoneBudgetExhausted {
            zone: Zone::known("zone-a"),
            limit: ZoneLimit::MinAvailable(2),
            blocking: ZoneBudget {
                expected: 3,
                healthy: 1,
                unhealthy: 2,
                desired_healthy: 2,
                disruptions_allowed: 0,
                blocking_pods: vec!["web-0".into(), "web-3".into()],
                missing: 0,
            },
        })
    );
}

impl World {
    /// As [`World::evict_as`], asked by the ZoneAwareUpdate controller for its rollout.
    fn evict_for_rollout(&mut self, name: &str, condition: PodCondition) -> Decision {
        self.evict_as(name, condition, true)
    }
}

/// A rollout's own evictions in its zone are not capped by the zone's limit, and are recorded,
/// so every other zone stays undisrupted meanwhile; everyone else's evictions keep the limit.
#[test]
fn a_rollout_goes_past_the_zone_limit_and_holds_every_other_zone() {
    let mut world = World::new(IntOrPercent::Int(1));
    // web-0, web-3 and web-6 are zone-a's; web-1 is zone-b's.
    for pod in ["web-0", "web-3"] {
        assert_eq!(
            world.evict_for_rollout(pod, PodCondition::Healthy),
            Decision::Allow {
                zone: Zone::known("zone-a"),
                record: true
            },
            "{pod}"
        );
    }
    assert!(matches!(
        world.evict("web-6"),
        Decision::Deny(Denial::ZoneBudgetExhausted { .. })
    ));
    assert!(matches!(
        world.evict("web-1"),
        Decision::Deny(Denial::OtherZoneDisrupted { .. })
    ));
    // Never two zones, rollout or not.
    assert!(matches!(
        world.evict_for_rollout("web-1", PodCondition::Healthy),
        Decision::Deny(Denial::OtherZoneDisrupted { .. })
    ));
}

/// A freeze holds a rollout by default; `Proceed` lets the rollout's evictions (and only
/// those) through it, in one zone at a time.
#[test]
fn a_freeze_holds_rollouts_unless_the_budget_lets_them_proceed() {
    let frozen = |rollouts_when_frozen| {
        World::with(Policy {
            rollouts_when_frozen,
            ..Policy::max_unavailable(IntOrPercent::Int(0))
        })
    };
    let mut hold = frozen(RolloutsWhenFrozen::Hold);
    for condition in [PodCondition::Healthy, PodCondition::NotReady] {
        assert!(
            matches!(
                hold.evict_for_rollout("web-0", condition),
                Decision::Deny(Denial::Frozen { .. })
            ),
            "{condition:?}"
        );
    }

    let mut proceed = frozen(RolloutsWhenFrozen::Proceed);
    assert_eq!(
        proceed.evict_for_rollout("web-3", PodCondition::NotReady),
        Decision::Allow {
            zone: Zone::known("zone-a"),
            record: false
        }
    );
    for pod in ["web-0", "web-6"] {
        assert!(
            matches!(
                proceed.evict_for_rollout(pod, PodCondition::Healthy),
                Decision::Allow { record: true, .. }
            ),
            "{pod}"
        );
    }
    assert!(matches!(
        proceed.evict("web-3"),
        Decision::Deny(Denial::Frozen { .. })
    ));
    assert!(matches!(
        proceed.evict_for_rollout("web-1", PodCondition::Healthy),
        Decision::Deny(Denial::OtherZoneDisrupted { .. })
    ));
}
