//! Whether every shard's Prometheus runs the configuration the controller applied.
//!
//! A configuration Prometheus refuses to load leaves the previous one running: the pods stay
//! ready and the shards available, only Prometheus's log tells. A background prober asks every
//! running Prometheus pod of every active shard, every [`PROBE_INTERVAL`], for
//! `/api/v1/status/runtimeinfo` (did the last reload succeed, when was the configuration loaded)
//! and, when that changed, for `/api/v1/status/config` (what it runs, as a
//! [`Fingerprint`]). Answers are kept per shard (namespace, name, index) in [`ConfigHealth`],
//! shared with the reconcile: a changed answer reconciles the ShardedPrometheus, whose status
//! then says `ConfigLoaded` ([`verdict`]). The apply step records there which configuration
//! each shard was given, and when it changed, for the grace a changed Secret needs to reach the
//! pods. Agents serve both endpoints too (checked with Prometheus 3.16 `--agent`).

mod fingerprint;
pub(crate) mod prober;
pub mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use fingerprint::Fingerprint;
pub use prober::{Prober, strip_pod};
use verdict::PodProbe;

/// How often every pod is asked. A refused configuration shows in the status at most this long
/// (plus a reconcile) after Prometheus tried to load it.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(15);
/// Per request: a Prometheus that takes longer is busy enough to count as not asked.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pods asked at once. Answers take milliseconds, so 100 shards of 2 replicas take well under a
/// second; were they all to time out, a round would take 200 / 16 × 2 s ≈ 25 s and the next
/// one would start late (rounds never overlap), without hundreds of connections at once.
const PROBE_CONCURRENCY: usize = 16;
/// The served configuration of a shard with thousands of jobs is a few MiB.
const MAX_ANSWER_BYTES: u64 = 32 << 20;
/// How long after a shard's configuration changed a pod may still run the previous one before
/// it counts as not loaded. The controller annotates a shard's pods with the new configuration's
/// digest when it writes it, which makes the kubelet sync the pod and copy the Secret at once;
/// Prometheus notices the file at its next `--config.auto-reload-interval` check (10 s, set by
/// the controller). Measured on the local cluster's real nodes: 8.6 to 9.1 s from the Secret
/// written to the pods running it (before the annotation, when the kubelet's own sync decided:
/// 22 to 112 s, median 53 s). 2 minutes still covers a pod the controller could not annotate
/// (the kubelet's `syncFrequency`, 1 minute with up to 50 % jitter, plus 10 s).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(120);

/// A shard: namespace, ShardedPrometheus name, index.
pub type ShardKey = (String, String, u32);

/// The configuration the controller applied to a shard, as the plan built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedConfig {
    /// `None` if the rendered file could not be read back (never expected).
    pub fingerprint: Option<Fingerprint>,
    /// The Secret written differs from the one in the cluster.
    pub secret_changed: bool,
}

/// What the reconcile of one ShardedPrometheus reads from [`ConfigHealth`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigObservation {
    /// Whether the prober has asked every pod once since the controller started: until then
    /// `ConfigLoaded` stays as it was.
    pub probed: bool,
    pub grace: Duration,
    /// Per shard, the fingerprint last applied and how long ago it changed (`None`: before the
    /// controller started).
    pub applied: BTreeMap<u32, (Fingerprint, Option<Duration>)>,
    /// Per shard, what its running pods answered, by pod name.
    pub pods: BTreeMap<u32, Vec<PodProbe>>,
}

/// The shared map of applied configurations and answers, keyed by shard.
#[derive(Clone)]
pub struct ConfigHealth {
    state: Arc<Mutex<State>>,
    grace: Duration,
}

impl Default for ConfigHealth {
    fn default() -> Self {
        ConfigHealth::new(DEFAULT_GRACE)
    }
}

#[derive(Default)]
struct State {
    applied: BTreeMap<ShardKey, Applied>,
    answers: BTreeMap<ShardKey, Vec<PodProbe>>,
    probed: bool,
}

struct Applied {
    fingerprint: Fingerprint,
    /// When the fingerprint last changed; `None`: before the controller started.
    changed_at: Option<Instant>,
}

impl ConfigHealth {
    pub fn new(grace: Duration) -> Self {
        ConfigHealth {
            state: Arc::default(),
            grace,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What is known of the shards of `namespace/name`.
    pub fn observe(&self, namespace: &str, name: &str) -> ConfigObservation {
        let state = self.lock();
        let range = |key: &ShardKey| key.0 == namespace && key.1 == name;
        let start = (namespace.to_string(), name.to_string(), 0);
        ConfigObservation {
            probed: state.probed,
            grace: self.grace,
            applied: state
                .applied
                .range(start.clone()..)
                .take_while(|(key, _)| range(key))
                .map(|(key, applied)| {
                    let age = applied.changed_at.map(|at| at.elapsed());
                    (key.2, (applied.fingerprint.clone(), age))
                })
                .collect(),
            pods: state
                .answers
                .range(start..)
                .take_while(|(key, _)| range(key))
                .map(|(key, pods)| (key.2, pods.clone()))
                .collect(),
        }
    }

    /// Records the configurations applied to the active shards of `namespace/name` (the others
    /// are forgotten). A fingerprint that changed starts the grace now; one seen for the first
    /// time starts it only if its Secret was rewritten (else it was applied before the
    /// controller started, and the pods have had their time).
    pub fn record_applied(
        &self,
        namespace: &str,
        name: &str,
        configs: &BTreeMap<u32, AppliedConfig>,
    ) {
        let now = Instant::now();
        let mut state = self.lock();
        state
            .applied
            .retain(|key, _| key.0 != namespace || key.1 != name || configs.contains_key(&key.2));
        for (index, config) in configs {
            let key = (namespace.to_string(), name.to_string(), *index);
            let Some(fingerprint) = &config.fingerprint else {
                state.applied.remove(&key);
                continue;
            };
            let changed_at = match state.applied.get(&key) {
                Some(applied) if &applied.fingerprint == fingerprint => continue,
                Some(_) => Some(now),
                None => config.secret_changed.then_some(now),
            };
            state.applied.insert(
                key,
                Applied {
                    fingerprint: fingerprint.clone(),
                    changed_at,
                },
            );
        }
    }

    /// Keeps the answers of one round of probes; forgets what belongs to ShardedPrometheuses
    /// that are gone (`live`). Returns the resources whose answers changed (all of them after
    /// the first round, so each gets its condition).
    pub(super) fn store_answers(
        &self,
        answers: BTreeMap<ShardKey, Vec<PodProbe>>,
        live: &BTreeSet<(String, String)>,
    ) -> BTreeSet<(String, String)> {
        let mut state = self.lock();
        let resource = |key: &ShardKey| (key.0.clone(), key.1.clone());
        let mut changed: BTreeSet<(String, String)> = match state.probed {
            true => BTreeSet::new(),
            false => live.clone(),
        };
        for (key, pods) in &state.answers {
            if answers.get(key) != Some(pods) {
                changed.insert(resource(key));
            }
        }
        for key in answers.keys() {
            if !state.answers.contains_key(key) {
                changed.insert(resource(key));
            }
        }
        state.answers = answers;
        state.probed = true;
        state.applied.retain(|key, _| live.contains(&resource(key)));
        changed.retain(|sprom| live.contains(sprom));
        changed
    }

    /// Per shard with answers, whether its pods run the applied configuration (for the
    /// metric): `Some(false)` when one refused it or runs another past the grace, `None` when
    /// none answered.
    pub(super) fn shard_states(&self) -> BTreeMap<ShardKey, Option<bool>> {
        let state = self.lock();
        state
            .answers
            .iter()
            .map(|(key, pods)| {
                let applied = state.applied.get(key);
                let since = applied.and_then(|a| a.changed_at.map(|at| at.elapsed()));
                let verdicts: Vec<verdict::PodVerdict> = pods
                    .iter()
                    .map(|probe| {
                        verdict::pod_verdict(
                            &probe.answer,
                            applied.map(|a| &a.fingerprint),
                            since,
                            self.grace,
                        )
                    })
                    .collect();
                let failed = verdicts.iter().any(|v| {
                    matches!(
                        v,
                        verdict::PodVerdict::Refused { .. } | verdict::PodVerdict::NotLoaded { .. }
                    )
                });
                let answered = verdicts
                    .iter()
                    .any(|v| !matches!(v, verdict::PodVerdict::NotProbed(_)));
                let loaded = match (failed, answered) {
                    (true, _) => Some(false),
                    (false, true) => Some(true),
                    (false, false) => None,
                };
                (key.clone(), loaded)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
