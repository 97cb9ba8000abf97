//! Disruption seen from outside: how many pods of a workload are unavailable at once and in how
//! many zones ([`Monitor`]), and a steady load of evictions judged by the eviction webhook
//! ([`EvictionLoad`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::pods;

/// Watches the pods of `selector` and records, at every change, how many replicas are
/// unavailable (missing, not Ready or terminating) and in which zones (pod names mapped to their
/// zone when it starts: the spread constraint puts a recreated pod back into its zone).
pub struct Monitor {
    worst: Arc<Mutex<(usize, usize)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    pub async fn start(pods_api: Api<Pod>, selector: &str, replicas: usize) -> Monitor {
        let zones = crate::nodes::pod_zones(&pods_api, selector).await;
        let worst = Arc::new(Mutex::new((0usize, 0usize)));
        let seen = worst.clone();
        let stream = watcher(pods_api, watcher::Config::default().labels(selector));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut current: BTreeMap<String, bool> = BTreeMap::new();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        current.insert(pod.name_any(), pods::is_available(&pod));
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        current.remove(&pod.name_any());
                    }
                    Ok(watcher::Event::Init) => current.clear(),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Err(_) => continue,
                }
                if synced.is_none() {
                    let (unavailable, zones_down) = unavailable(&current, &zones, replicas);
                    let mut worst = seen.lock().unwrap_or_else(|e| e.into_inner());
                    worst.0 = worst.0.max(unavailable);
                    worst.1 = worst.1.max(zones_down);
                }
            }
        });
        let _ = synced_rx.await;
        Monitor { worst, task }
    }

    /// (most replicas unavailable at once, most zones with unavailable replicas at once)
    pub fn worst(&self) -> (usize, usize) {
        *self.worst.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// (replicas unavailable, zones with an unavailable replica) of the pods' availability.
fn unavailable(
    current: &BTreeMap<String, bool>,
    zones: &BTreeMap<String, String>,
    replicas: usize,
) -> (usize, usize) {
    let available: BTreeSet<&String> = current
        .iter()
        .filter(|(_, a)| **a)
        .map(|(n, _)| n)
        .collect();
    let down_zones: BTreeSet<&String> = zones
        .iter()
        .filter(|(pod, _)| !available.contains(pod))
        .map(|(_, zone)| zone)
        .collect();
    (replicas.saturating_sub(available.len()), down_zones.len())
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a steady eviction load met.
#[derive(Debug, Default, Clone)]
pub struct LoadReport {
    /// Evictions the API server carried out.
    pub allowed: usize,
    /// Evictions refused with 429 (the budget had no room).
    pub refused: usize,
    /// Evictions that failed because the webhook could not be called (or answered an error):
    /// each answer's code and message.
    pub failed: Vec<(u16, String)>,
}

/// Evicts a Ready pod of `selector` every `pace`, round robin, until stopped, and counts what the
/// API server answered.
pub struct EvictionLoad {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<LoadReport>,
}

impl EvictionLoad {
    pub fn start(pods_api: Api<Pod>, selector: &str, pace: Duration) -> EvictionLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let selector = selector.to_string();
        let task = tokio::spawn(async move {
            let mut report = LoadReport::default();
            let mut turn = 0usize;
            // The load's pace, not a wait for a condition.
            let mut pace = tokio::time::interval(pace);
            while !stopped.load(Ordering::Relaxed) {
                pace.tick().await;
                let ready: Vec<String> = pods::list(&pods_api, &selector)
                    .await
                    .iter()
                    .filter(|pod| pods::is_available(pod))
                    .map(ResourceExt::name_any)
                    .collect();
                if let Some(name) = ready.get(turn % ready.len().max(1)) {
                    turn += 1;
                    match pods::evict(&pods_api, name, false).await {
                        Ok(()) => report.allowed += 1,
                        Err((429, _)) => report.refused += 1,
                        // The pod went between the list and the eviction.
                        Err((404, _)) => {}
                        Err(answer) => report.failed.push(answer),
                    }
                }
            }
            report
        });
        EvictionLoad { stop, task }
    }

    /// Stops the load (after its current eviction) and reports what it met.
    pub async fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}
