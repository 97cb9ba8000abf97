//! `kubectl zone budget [<zdb>] [--drain <node>…]`: a ZoneDisruptionBudget's zones as its status
//! holds them, the pods the webhook would let go now, and a drain's evictions predicted with the
//! webhook's own code (`zone_views::budget`): which it would allow and refuse, and why.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use zone_api::ZoneDisruptionBudget;
use zone_topology::Zone;
use zone_views::budget::batch::{self, Assessment, Candidate};
use zone_views::budget::{self as judged, Selecting, pods, reason, view};

use crate::cluster::{Error, node_zones, pods_with_zones, read, with_zones};
use crate::output::columns;

/// What `kubectl zone budget` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub namespace: String,
    pub budgets: Vec<BudgetState>,
    /// What could not be read, and the permission it needs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetState {
    pub name: String,
    /// `maxUnavailable 1`, `minAvailable 80%`.
    pub limit: String,
    /// spec.dryRun: refusals are only warned about.
    pub shadow: bool,
    /// The reason the budget cannot decide now (invalid, status not computed), if it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_deciding: Option<String>,
    pub zones: Vec<ZoneRow>,
    /// The budget's pods whose eviction, alone, the webhook would allow now; `None` when the
    /// pods' zones cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evictable_now: Option<Vec<String>>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ZoneRow {
    pub zone: String,
    pub expected: u32,
    pub healthy: u32,
    /// Pods unavailable, missing or evicted (recorded).
    pub disrupted: u32,
    /// Evictions the zone has room for now (0 while another zone is disrupted).
    pub allowed: u32,
    /// What makes it disrupted.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub blocking: String,
}

/// What a drain of nodes would meet, pod by pod, in the order kubectl lists them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainPrediction {
    pub nodes: Vec<String>,
    pub evictions: Vec<PredictedEviction>,
    /// Pods a drain does not evict (DaemonSet and mirror pods).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PredictedEviction {
    pub namespace: String,
    pub pod: String,
    pub zone: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    pub allowed: bool,
    /// The webhook's reason (its `reason` metric label).
    pub reason: String,
    /// The webhook's message: a refusal, or a shadow mode warning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl DrainPrediction {
    pub fn refused(&self) -> usize {
        self.evictions.iter().filter(|e| !e.allowed).count()
    }
}

/// The budgets of `namespace` (or the one named), from their status and the live pods.
pub async fn report(
    client: &Client,
    namespace: &str,
    name: Option<&str>,
    zone_label: &str,
) -> Result<BudgetReport, Error> {
    let api: Api<ZoneDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    let budgets = match name {
        Some(name) => vec![
            api.get(name)
                .await
                .map_err(read(format!("get ZoneDisruptionBudget {namespace}/{name}")))?,
        ],
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(read(format!("list ZoneDisruptionBudgets of {namespace}")))?
                .items
        }
    };
    let mut missing = Vec::new();
    // The pods and their zones, for the evictable ones; the zones alone come from the status.
    let pods = match pods_with_zones(client, namespace, &ListParams::default(), zone_label).await {
        Ok(pods) => Some(pods),
        Err(error) => {
            missing.push(error.to_string());
            None
        }
    };
    let at = zone_api::conditions::now();
    let budgets = budgets
        .iter()
        .map(|zdb| state(zdb, &budgets, pods.as_deref(), &at))
        .collect();
    Ok(BudgetReport {
        namespace: namespace.to_string(),
        budgets,
        missing,
    })
}

/// One budget (pure): its zones from its status, and which of `pods` it alone would let go.
fn state(
    zdb: &ZoneDisruptionBudget,
    all: &[ZoneDisruptionBudget],
    pods: Option<&[(Pod, Zone)]>,
    at: &Time,
) -> BudgetState {
    let name = zdb.name_any();
    let status = zdb.status.clone().unwrap_or_default();
    let valid = zdb.spec.validate();
    let (limit, zones, not_deciding) = match &valid {
        Ok(valid) => {
            let budget = view::from_status(&status, valid.policy);
            let zones = budget
                .zones
                .iter()
                .map(|(zone, b)| ZoneRow {
                    zone: zone.to_string(),
                    expected: b.expected,
                    healthy: b.healthy,
                    disrupted: b.unhealthy,
                    allowed: b.disruptions_allowed,
                    blocking: view::blocking(b),
                })
                .collect();
            let generation = zdb.metadata.generation.unwrap_or(0);
            let not_observed = (status.observed_generation != generation).then(|| {
                format!(
                    "generation {generation} is not computed yet (status is for {}): every eviction is refused until it is",
                    status.observed_generation
                )
            });
            (valid.policy.limit.to_string(), zones, not_observed)
        }
        Err(error) => (
            String::new(),
            Vec::new(),
            Some(format!("invalid, it decides nothing: {error}")),
        ),
    };
    let evictable_now = pods.map(|pods| {
        pods.iter()
            .filter(|(pod, _)| {
                matches!(judged::selecting(all, pod.labels()), Selecting::One(z) if z.name_any() == name)
            })
            .filter(|(pod, zone)| {
                let candidate = candidate(pod, zone.clone());
                let mut status = status.clone();
                matches!(
                    batch::assess(&name, zdb, &mut status, &candidate, at),
                    Assessment::Record { .. }
                )
            })
            .map(|(pod, _)| pod.name_any())
            .collect()
    });
    BudgetState {
        name,
        limit,
        shadow: zdb.spec.dry_run,
        not_deciding,
        zones,
        evictable_now,
    }
}

fn candidate(pod: &Pod, zone: Zone) -> Candidate {
    Candidate {
        pod: pod.name_any(),
        zone,
        condition: pods::condition(pod),
        created_ms: pods::created_ms(pod),
        dry_run: false,
        rollout: false,
    }
}

/// What a drain of `nodes` would meet: every pod on them (but DaemonSet and mirror pods), in
/// kubectl's order, decided as the webhook decides a batch of its budget.
pub async fn drain(
    client: &Client,
    nodes: &[String],
    pod_selector: Option<&str>,
    zone_label: &str,
) -> Result<DrainPrediction, Error> {
    let zones = node_zones(client, zone_label).await?;
    for node in nodes {
        if !zones.contains_key(node) {
            return Err(Error::Invalid {
                kind: "Node",
                name: node.clone(),
                message: "not found".into(),
            });
        }
    }
    let all_pods: Api<Pod> = Api::all(client.clone());
    let mut pods = Vec::new();
    for node in nodes {
        let mut params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        if let Some(selector) = pod_selector {
            params = params.labels(selector);
        }
        let on_node = all_pods.list(&params).await.map_err(read(format!(
            "list the pods of node {node} in every namespace (as kubectl drain does)"
        )))?;
        pods.extend(on_node.items);
    }
    let mut budgets: BTreeMap<String, Vec<ZoneDisruptionBudget>> = BTreeMap::new();
    for namespace in pods.iter().filter_map(|pod| pod.namespace()) {
        if budgets.contains_key(&namespace) {
            continue;
        }
        let api: Api<ZoneDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(read(format!("list ZoneDisruptionBudgets of {namespace}")))?;
        budgets.insert(namespace, listed.items);
    }
    let pods = with_zones(pods, &zones);
    Ok(predict(
        nodes,
        &pods,
        &budgets,
        &zone_api::conditions::now(),
    ))
}

/// The drain's evictions (pure): in order, each budget's folded over one version of its status
/// as the webhook folds a batch, so the second eviction of a zone sees the first one's record.
pub fn predict(
    nodes: &[String],
    pods: &[(Pod, Zone)],
    budgets: &BTreeMap<String, Vec<ZoneDisruptionBudget>>,
    at: &Time,
) -> DrainPrediction {
    let mut skipped = Vec::new();
    let mut evictions = Vec::new();
    let mut statuses: BTreeMap<(String, String), zone_api::ZoneDisruptionBudgetStatus> =
        BTreeMap::new();
    let none = Vec::new();
    let mut ordered: Vec<&(Pod, Zone)> = pods.iter().collect();
    ordered.sort_by_key(|(pod, _)| (pod.namespace(), pod.name_any()));
    for (pod, zone) in ordered {
        let namespace = pod.namespace().unwrap_or_default();
        if let Some(why) = not_drained(pod) {
            skipped.push(format!("{namespace}/{} ({why})", pod.name_any()));
            continue;
        }
        let mut eviction = PredictedEviction {
            namespace: namespace.clone(),
            pod: pod.name_any(),
            zone: zone.to_string(),
            budget: None,
            allowed: true,
            reason: reason::NO_BUDGET.to_string(),
            message: None,
        };
        let candidates = budgets.get(&namespace).unwrap_or(&none);
        match judged::selecting(candidates, pod.labels()) {
            Selecting::None => {}
            Selecting::Several(names) => {
                eviction.allowed = false;
                eviction.reason = reason::OVERLAPPING_BUDGETS.to_string();
                eviction.message = Some(judged::overlapping_message(&eviction.pod, &names));
            }
            Selecting::One(zdb) => {
                let name = zdb.name_any();
                let status = statuses
                    .entry((namespace.clone(), name.clone()))
                    .or_insert_with(|| zdb.status.clone().unwrap_or_default());
                let outcome = batch::assess(&name, zdb, status, &candidate(pod, zone.clone()), at);
                decided(&mut eviction, zdb.spec.dry_run, &name, outcome);
                eviction.budget = Some(name);
            }
        }
        evictions.push(eviction);
    }
    DrainPrediction {
        nodes: nodes.to_vec(),
        evictions,
        skipped,
    }
}

/// The webhook's verdict on an assessment (a refusal of a budget in shadow mode is allowed with
/// a warning).
fn decided(eviction: &mut PredictedEviction, shadow: bool, name: &str, outcome: Assessment) {
    match outcome {
        Assessment::Allow(why) => eviction.reason = why.to_string(),
        Assessment::Record { .. } => eviction.reason = reason::RECORDED.to_string(),
        Assessment::Refuse { message, .. } if shadow => {
            eviction.reason = reason::SHADOW.to_string();
            eviction.message = Some(format!(
                "ZoneDisruptionBudget {name} is in shadow mode (spec.dryRun): allowed, but it would have denied: {message}"
            ));
        }
        Assessment::Refuse { reason, message } => {
            eviction.allowed = false;
            eviction.reason = reason.to_string();
            eviction.message = Some(message);
        }
    }
}

/// Why kubectl drain leaves a pod (with `--ignore-daemonsets`): a DaemonSet's pods and mirror
/// pods are never evicted.
fn not_drained(pod: &Pod) -> Option<&'static str> {
    if pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror")
    {
        return Some("mirror pod");
    }
    pod.owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet")
        .then_some("DaemonSet")
}

/// The budgets as tables: a zone a line, then the pods that may go now.
pub fn table(report: &BudgetReport) -> String {
    let mut out = String::new();
    for budget in &report.budgets {
        let shadow = if budget.shadow { ", shadow mode" } else { "" };
        out.push_str(&format!(
            "ZoneDisruptionBudget {}/{} ({}{shadow})\n",
            report.namespace, budget.name, budget.limit
        ));
        if let Some(why) = &budget.not_deciding {
            out.push_str(&format!("  {why}\n"));
        }
        let rows: Vec<Vec<String>> = budget
            .zones
            .iter()
            .map(|z| {
                vec![
                    z.zone.clone(),
                    z.expected.to_string(),
                    z.healthy.to_string(),
                    z.disrupted.to_string(),
                    z.allowed.to_string(),
                    z.blocking.clone(),
                ]
            })
            .collect();
        out.push_str(&columns(
            &[
                "ZONE",
                "EXPECTED",
                "HEALTHY",
                "DISRUPTED",
                "ALLOWED",
                "BLOCKING",
            ],
            &rows,
        ));
        if let Some(pods) = &budget.evictable_now {
            let pods = if pods.is_empty() {
                "none".to_string()
            } else {
                pods.join(",")
            };
            out.push_str(&format!("may be evicted now: {pods}\n"));
        }
    }
    if report.budgets.is_empty() {
        out.push_str(&format!(
            "no ZoneDisruptionBudget in namespace {}\n",
            report.namespace
        ));
    }
    for missing in &report.missing {
        out.push_str(&format!("not shown: {missing}\n"));
    }
    out
}

/// The drain as a table: an eviction a line, then the refusals' messages.
pub fn drain_table(drain: &DrainPrediction) -> String {
    let rows: Vec<Vec<String>> = drain
        .evictions
        .iter()
        .map(|e| {
            vec![
                e.namespace.clone(),
                e.pod.clone(),
                e.zone.clone(),
                e.budget.clone().unwrap_or_else(|| "-".into()),
                if e.allowed { "allowed" } else { "refused" }.to_string(),
                e.reason.clone(),
            ]
        })
        .collect();
    let mut out = format!(
        "drain of {}: {} evictions, {} refused\n",
        drain.nodes.join(", "),
        drain.evictions.len(),
        drain.refused()
    );
    if !rows.is_empty() {
        out.push_str(&columns(
            &["NAMESPACE", "POD", "ZONE", "BUDGET", "EVICTION", "REASON"],
            &rows,
        ));
    }
    for e in drain.evictions.iter().filter(|e| e.message.is_some()) {
        out.push_str(&format!(
            "{}/{}: {}\n",
            e.namespace,
            e.pod,
            e.message.as_deref().unwrap_or_default()
        ));
    }
    for pod in &drain.skipped {
        out.push_str(&format!("not evicted by a drain: {pod}\n"));
    }
    out
}

#[cfg(test)]
mod tests;
