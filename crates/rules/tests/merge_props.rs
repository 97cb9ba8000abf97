//! Properties of the merge over random shards, replicas, rule states and alert instances.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use zone_rules::model::{Alert, AlertingRule, Labels};
use zone_rules::{MergeOptions, Rule, RuleGroup, Source, merge, shared_label};

const STATES: [&str; 3] = ["inactive", "pending", "firing"];

/// One replica's copy of a rule: its state and its alert instances (pod → state).
#[derive(Debug, Clone)]
struct Copy {
    state: usize,
    alerts: BTreeMap<u8, usize>,
}

/// Shards, each with the master rules it has (a mask) and its replicas' copies.
#[derive(Debug, Clone)]
struct World {
    rules: usize,
    shards: Vec<(Vec<bool>, Vec<Vec<Copy>>)>,
}

fn world() -> impl Strategy<Value = World> {
    (1usize..7).prop_flat_map(|rules| {
        let copy = (
            0usize..3,
            prop::collection::btree_map(0u8..4, 0usize..3, 0..3),
        )
            .prop_map(|(state, alerts)| Copy { state, alerts });
        let shard = (
            prop::collection::vec(any::<bool>(), rules),
            prop::collection::vec(prop::collection::vec(copy, rules), 1..4),
        );
        prop::collection::vec(shard, 1..4).prop_map(move |shards| World { rules, shards })
    })
}

/// The generated sources: shards told apart by `shard`, replicas by `prometheus_replica`.
fn sharded() -> MergeOptions {
    MergeOptions {
        replica_labels: vec!["prometheus_replica".to_string()],
        shard_label: Some("shard".to_string()),
    }
}

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn sources(world: &World) -> Vec<Source> {
    let mut sources = Vec::new();
    for (s, (mask, replicas)) in world.shards.iter().enumerate() {
        for (r, copies) in replicas.iter().enumerate() {
            let rules = (0..world.rules)
                .filter(|i| mask[*i])
                .map(|i| {
                    let copy = &copies[i];
                    Rule::Alerting(AlertingRule {
                        state: STATES[copy.state].into(),
                        name: format!("rule{i}").into(),
                        query: format!("expr{i}"),
                        health: "ok".into(),
                        alerts: Some(
                            copy.alerts
                                .iter()
                                .map(|(pod, state)| Alert {
                                    labels: labels(&[
                                        ("pod", pod.to_string()),
                                        ("prometheus_replica", format!("r{r}")),
                                    ]),
                                    state: STATES[1 + state % 2].into(),
                                    active_at: Some(format!("2026-11-25T12:00:0{state}Z").into()),
                                    ..Alert::default()
                                })
                                .collect(),
                        ),
                        ..AlertingRule::default()
                    })
                })
                .collect();
            sources.push(Source {
                shard: format!("s{s}"),
                name: format!("s{s}-r{r}"),
                groups: vec![RuleGroup {
                    name: "g".into(),
                    file: "f.yaml".into(),
                    rules,
                    ..RuleGroup::default()
                }],
            });
        }
    }
    sources
}

proptest! {
    #[test]
    fn shards_stay_apart_replicas_collapse_and_order_holds(world in world()) {
        let merged = merge(&sources(&world), &sharded());
        let present: usize = world.shards.iter().map(|(mask, _)| mask.iter().filter(|m| **m).count()).sum();
        let rules: Vec<&Rule> = merged.iter().flat_map(|g| &g.rules).collect();
        // One rule per (shard, rule) pair: replicas collapse, shards do not.
        prop_assert_eq!(rules.len(), present);
        for (s, (mask, replicas)) in world.shards.iter().enumerate() {
            let shard = format!("s{s}");
            let mine: Vec<&&Rule> = rules.iter().filter(|r| r.labels().get("shard") == Some(shard.as_str())).collect();
            // The shard's rules in the evaluation order of its backends.
            let names: Vec<String> = mine.iter().map(|r| r.name().to_string()).collect();
            let expected: Vec<String> = (0..world.rules).filter(|i| mask[*i]).map(|i| format!("rule{i}")).collect();
            prop_assert_eq!(names, expected);
            for rule in mine {
                let Rule::Alerting(rule) = rule else { unreachable!() };
                let i: usize = rule.name.trim_start_matches("rule").parse().unwrap();
                // The most severe state of the replicas.
                let best = replicas.iter().map(|copies| copies[i].state).max().unwrap();
                prop_assert_eq!(&rule.state, STATES[best]);
                // One instance per pod, the most severe, no replica label, the shard label.
                let alerts = rule.alerts.as_ref().unwrap();
                let mut pods: BTreeMap<u8, usize> = BTreeMap::new();
                for copies in replicas {
                    for (pod, state) in &copies[i].alerts {
                        let rank = 1 + state % 2;
                        let entry = pods.entry(*pod).or_insert(rank);
                        *entry = (*entry).max(rank);
                    }
                }
                prop_assert_eq!(alerts.len(), pods.len());
                for alert in alerts {
                    prop_assert!(!alert.labels.contains_key("prometheus_replica"));
                    prop_assert_eq!(alert.labels.get("shard"), Some(shard.as_str()));
                    let pod: u8 = alert.labels["pod"].parse().unwrap();
                    prop_assert_eq!(&alert.state, STATES[pods[&pod]]);
                }
            }
        }
    }

    #[test]
    fn the_merge_does_not_depend_on_the_order_of_replicas_but_for_exact_ties(world in world()) {
        let forward = sources(&world);
        let mut backward = forward.clone();
        backward.reverse();
        let summary = |groups: Vec<RuleGroup>| -> Vec<(String, String, String, usize)> {
            let mut rules: Vec<_> = groups.iter().flat_map(|g| &g.rules).map(|r| {
                let Rule::Alerting(r) = r else { unreachable!() };
                (r.labels["shard"].to_string(), r.name.to_string(), r.state.to_string(), r.alerts.as_ref().map_or(0, Vec::len))
            }).collect();
            rules.sort();
            rules
        };
        prop_assert_eq!(
            summary(merge(&forward, &sharded())),
            summary(merge(&backward, &sharded()))
        );
    }

    /// Answers of different shards interleaved (every shard's first replica, then every
    /// shard's second) merge as answers shard after shard do: a copy can come for a shard
    /// before others already folded in.
    #[test]
    fn the_merge_does_not_depend_on_how_shards_interleave(world in world()) {
        let by_shard = sources(&world);
        let mut interleaved = by_shard.clone();
        interleaved.sort_by_key(|source| {
            let (shard, replica) = source.name.split_once('-').unwrap();
            (replica.to_string(), shard[1..].parse::<usize>().unwrap())
        });
        prop_assert_eq!(merge(&by_shard, &sharded()), merge(&interleaved, &sharded()));
    }

    #[test]
    fn merging_a_merge_changes_nothing(world in world()) {
        let once = merge(&sources(&world), &sharded());
        let again = merge(
            &[Source { shard: String::new(), name: "merged".into(), groups: once.clone() }],
            &sharded(),
        );
        prop_assert_eq!(again, once);
    }

    /// Backends that do not name their shard but put it on every rule and alert, as Thanos
    /// sidecars do with their external labels: the shard read back from the rules
    /// ([`shared_label`]) merges them exactly as backends named by shard merge.
    #[test]
    fn a_shard_carried_on_the_rules_merges_as_a_named_one(world in world()) {
        let named = sources(&world);
        let carried: Vec<Source> = named
            .iter()
            .cloned()
            .map(|mut source| {
                let shard = std::mem::take(&mut source.shard);
                for rule in source.groups.iter_mut().flat_map(|g| &mut g.rules) {
                    rule.labels_mut().insert("shard", &shard);
                    if let Rule::Alerting(rule) = rule {
                        for alert in rule.alerts.iter_mut().flatten() {
                            alert.labels.insert("shard", &shard);
                        }
                    }
                }
                let read = shared_label(&source.groups, "shard").map(str::to_owned);
                // A shard without rules has nothing to carry its shard: it stays unnamed.
                source.shard = read.unwrap_or_default();
                source
            })
            .collect();
        prop_assert_eq!(merge(&carried, &sharded()), merge(&named, &sharded()));
    }
}
