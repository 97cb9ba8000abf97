//! `kubectl zone drill <zone>`: what each controller would do if the zone went dark now, from
//! live state (docs/outages.md says why): which budgets would refuse evictions elsewhere, which
//! rollouts would pause, which shards would stop; and each zone's health across the kinds.
//! Nothing is written, and nothing is taken down.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use zone_api::sprom::{ShardedPrometheus, ZonelessTargets};
use zone_api::zdb::UnhealthyPodEvictionPolicy;
use zone_api::{ZoneAwareUpdate, ZoneDisruptionBudget};
use zone_views::nodes;

use crate::cluster::{Error, read};
use crate::output::columns;

/// What a dark zone would do to one object.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A budget: the zone disrupted, evictions of Ready pods elsewhere refused.
    Disrupted,
    /// A rollout in progress: no pod removed, in any zone, until the zone is back.
    Paused,
    /// A rollout with nothing to do now: one started during the outage would wait.
    Idle,
    /// Shards of the zone stop scraping; their zoneless targets are not taken over.
    ShardsDown,
    /// Shards of the zone stop scraping; their zoneless targets fail over to the other zones'
    /// shards after `zoneFailoverAfter`.
    FailsOver,
    /// Nothing of it in the zone.
    Unaffected,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Prediction {
    pub kind: &'static str,
    pub name: String,
    pub effect: Effect,
    pub detail: String,
}

/// One zone's health across the kinds.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ZoneHealth {
    pub zone: String,
    pub nodes: usize,
    pub ready_nodes: usize,
    /// Pods the namespace's ZoneDisruptionBudgets expect in the zone, and how many are healthy.
    pub budget_pods: i32,
    pub budget_healthy: i32,
    /// Old-revision pods of the namespace's rollouts in the zone.
    pub rollout_old: i32,
    pub shards: usize,
    pub ready_shards: usize,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Drill {
    pub zone: String,
    /// The zone is dark already (no Ready node).
    pub dark_now: bool,
    pub zones: Vec<ZoneHealth>,
    pub predictions: Vec<Prediction>,
}

/// The objects of the namespace a drill reads.
pub struct Objects {
    pub nodes: Vec<Node>,
    pub budgets: Vec<ZoneDisruptionBudget>,
    pub rollouts: Vec<ZoneAwareUpdate>,
    pub shards: Vec<ShardedPrometheus>,
}

/// Reads the nodes and the namespace's objects, and predicts.
pub async fn drill(
    client: &Client,
    namespace: &str,
    zone: &str,
    zone_label: &str,
) -> Result<Drill, Error> {
    let params = ListParams::default();
    let nodes = Api::<Node>::all(client.clone())
        .list(&params)
        .await
        .map_err(read("list nodes".to_string()))?
        .items;
    let budgets = Api::<ZoneDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(read(format!("list zonedisruptionbudgets of {namespace}")))?
        .items;
    let rollouts = Api::<ZoneAwareUpdate>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(read(format!("list zoneawareupdates of {namespace}")))?
        .items;
    let shards = Api::<ShardedPrometheus>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(read(format!("list shardedprometheuses of {namespace}")))?
        .items;
    let objects = Objects {
        nodes,
        budgets,
        rollouts,
        shards,
    };
    predict(zone, zone_label, &objects).map_err(Error::invalid("zone", zone.to_string()))
}

/// What a dark `zone` would do to each object (pure).
pub fn predict(zone: &str, zone_label: &str, objects: &Objects) -> Result<Drill, String> {
    let zones = zone_health(zone_label, objects);
    if !zones.contains_key(zone) {
        let known: Vec<&str> = zones.keys().map(String::as_str).collect();
        return Err(format!(
            "no node is in this zone (zones: {})",
            known.join(", ")
        ));
    }
    let others: Vec<String> = zones.keys().filter(|z| *z != zone).cloned().collect();
    let mut predictions: Vec<Prediction> = objects
        .budgets
        .iter()
        .map(|zdb| budget(zone, &others, zdb))
        .collect();
    predictions.extend(objects.rollouts.iter().map(|zau| rollout(zone, zau)));
    predictions.extend(objects.shards.iter().map(|sprom| shards(zone, sprom)));
    let dark_now = nodes::dark_zones(&objects.nodes, zone_label).contains_key(zone);
    Ok(Drill {
        zone: zone.to_string(),
        dark_now,
        zones: zones.into_values().collect(),
        predictions,
    })
}

fn zone_health(zone_label: &str, objects: &Objects) -> BTreeMap<String, ZoneHealth> {
    let mut zones: BTreeMap<String, ZoneHealth> = nodes::zone_nodes(&objects.nodes, zone_label)
        .into_iter()
        .map(|(zone, (nodes, ready_nodes))| {
            let health = ZoneHealth {
                zone: zone.clone(),
                nodes,
                ready_nodes,
                ..ZoneHealth::default()
            };
            (zone, health)
        })
        .collect();
    let mut add = |zone: &str, f: &dyn Fn(&mut ZoneHealth)| {
        if let Some(health) = zones.get_mut(zone) {
            f(health);
        }
    };
    for status in objects.budgets.iter().filter_map(|z| z.status.as_ref()) {
        for (zone, expected) in &status.expected_pods {
            let healthy = status.current_healthy.get(zone).copied().unwrap_or(0);
            add(zone, &|h| {
                h.budget_pods += expected;
                h.budget_healthy += healthy;
            });
        }
    }
    for status in objects.rollouts.iter().filter_map(|z| z.status.as_ref()) {
        for (zone, old) in &status.old_replicas {
            add(zone, &|h| h.rollout_old += old);
        }
    }
    for status in objects.shards.iter().filter_map(|s| s.status.as_ref()) {
        for shard in &status.shard_statuses {
            let ready = usize::from(shard.ready_replicas > 0);
            add(&shard.zone, &|h| {
                h.shards += 1;
                h.ready_shards += ready;
            });
        }
    }
    zones
}

fn budget(zone: &str, others: &[String], zdb: &ZoneDisruptionBudget) -> Prediction {
    let status = zdb.status.clone().unwrap_or_default();
    let pods = status.expected_pods.get(zone).copied().unwrap_or(0);
    let (effect, detail) = if pods > 0 {
        let policy = match zdb.spec.unhealthy_pod_eviction_policy {
            Some(UnhealthyPodEvictionPolicy::AlwaysAllow) => "AlwaysAllow: allowed",
            Some(UnhealthyPodEvictionPolicy::IfHealthyBudget) => {
                "IfHealthyBudget: refused while the zone lacks its healthy pods"
            }
            None => "unset: allowed unless the budget is frozen",
        };
        (
            Effect::Disrupted,
            format!(
                "{zone} disrupted ({pods} pods not Ready): evictions of Ready pods in {} refused; {zone}'s own pods by unhealthyPodEvictionPolicy {policy}",
                others.join(", ")
            ),
        )
    } else {
        (Effect::Unaffected, format!("no pod in {zone}"))
    };
    Prediction {
        kind: "ZoneDisruptionBudget",
        name: zdb.name_any(),
        effect,
        detail,
    }
}

fn rollout(zone: &str, zau: &ZoneAwareUpdate) -> Prediction {
    let status = zau.status.clone().unwrap_or_default();
    let (effect, detail) = if status.total_old_replicas > 0 {
        (
            Effect::Paused,
            format!(
                "{} old pods left: paused (Zone), no pod removed in any zone until {zone} is back and 60 s settled; then it goes on in {}",
                status.total_old_replicas,
                status.current_zone.as_deref().unwrap_or("the next zone")
            ),
        )
    } else {
        (
            Effect::Idle,
            format!("no rollout in progress; one started while {zone} is dark waits for it"),
        )
    };
    Prediction {
        kind: "ZoneAwareUpdate",
        name: zau.name_any(),
        effect,
        detail,
    }
}

fn shards(zone: &str, sprom: &ShardedPrometheus) -> Prediction {
    let status = sprom.status.clone().unwrap_or_default();
    let in_zone: Vec<String> = status
        .shard_statuses
        .iter()
        .filter(|s| s.zone == zone)
        .map(|s| s.index.to_string())
        .collect();
    let strategy = &sprom.spec.sharding_strategy;
    let takers: Vec<String> = status
        .shard_statuses
        .iter()
        .filter(|s| s.zone != zone && s.ready_replicas > 0)
        .map(|s| s.zone.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let spread = strategy.zoneless_targets == ZonelessTargets::Spread;
    let failover = strategy.zone_failover.is_enabled();
    let (effect, detail) = match (in_zone.is_empty(), spread, takers.is_empty()) {
        (false, true, _) if !failover => (
            Effect::ShardsDown,
            format!(
                "shard(s) {} stop: {zone}'s targets are down with it; its zoneless targets stay \
                 unscraped until it is back (zoneFailover: Disabled)",
                in_zone.join(", ")
            ),
        ),
        (true, _, _) => (
            Effect::Unaffected,
            format!("no shard placed in {zone} (Classic shards are not placed by zone)"),
        ),
        (false, true, false) => (
            Effect::FailsOver,
            format!(
                "shard(s) {} stop: {zone}'s targets are down with it; its zoneless targets fail \
                 over to the shards of {} after {}",
                in_zone.join(", "),
                takers.join(", "),
                strategy.zone_failover_after.as_deref().unwrap_or("5m")
            ),
        ),
        (false, true, true) => (
            Effect::ShardsDown,
            format!(
                "shard(s) {} stop: {zone}'s targets are down with it; no other zone has a ready \
                 shard to take its zoneless targets",
                in_zone.join(", ")
            ),
        ),
        (false, false, _) => (
            Effect::ShardsDown,
            format!(
                "shard(s) {} stop: {zone}'s targets are down with it (zoneless targets are \
                 dropped: nothing to fail over)",
                in_zone.join(", ")
            ),
        ),
    };
    Prediction {
        kind: "ShardedPrometheus",
        name: sprom.name_any(),
        effect,
        detail,
    }
}

/// The drill as tables: the zones, then the predictions.
pub fn table(drill: &Drill) -> String {
    let zones: Vec<Vec<String>> = drill
        .zones
        .iter()
        .map(|z| {
            vec![
                z.zone.clone(),
                format!("{}/{}", z.ready_nodes, z.nodes),
                format!("{}/{}", z.budget_healthy, z.budget_pods),
                z.rollout_old.to_string(),
                format!("{}/{}", z.ready_shards, z.shards),
            ]
        })
        .collect();
    let predictions: Vec<Vec<String>> = drill
        .predictions
        .iter()
        .map(|p| {
            vec![
                p.kind.to_string(),
                p.name.clone(),
                format!("{:?}", p.effect),
                p.detail.clone(),
            ]
        })
        .collect();
    let dark = if drill.dark_now { " (dark now)" } else { "" };
    format!(
        "{}\nIf {}{dark} went dark now:\n{}",
        columns(
            &[
                "ZONE",
                "READY NODES",
                "HEALTHY BUDGET PODS",
                "OLD PODS",
                "READY SHARDS"
            ],
            &zones
        ),
        drill.zone,
        columns(&["KIND", "NAME", "EFFECT", "WHAT"], &predictions)
    )
}

#[cfg(test)]
mod tests;
