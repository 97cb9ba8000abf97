//! The health part of the plan: the configuration each active shard is given, and the verdict on
//! what each probed pod runs.

use std::collections::BTreeMap;

use crate::children::build::{self, applied_hash};
use crate::children::config::CONFIG_KEY;
use crate::health::verdict::{self, ShardConfig};
use crate::health::{AppliedConfig, ConfigObservation, Fingerprint};
use crate::reconcile::observe::{ChildKind, Observed};

/// The fingerprint of each active shard's configuration as built, and whether its Secret in
/// the cluster differs.
pub fn applied_configs(built: &build::Built, observed: &Observed) -> BTreeMap<u32, AppliedConfig> {
    built
        .shards
        .iter()
        .map(|shard| {
            let yaml = shard
                .config
                .data
                .as_ref()
                .and_then(|data| data.get(CONFIG_KEY))
                .and_then(|bytes| std::str::from_utf8(&bytes.0).ok());
            let name = shard.config.metadata.name.as_deref().unwrap_or_default();
            let config = AppliedConfig {
                fingerprint: yaml.and_then(|yaml| Fingerprint::of_yaml(yaml).ok()),
                secret_changed: !observed.unchanged(
                    ChildKind::Secret,
                    name,
                    applied_hash(&shard.config),
                ),
            };
            (shard.index, config)
        })
        .collect()
}

/// The verdict on every probed pod of every active shard; `None` until the prober has asked
/// them all once (the condition stays as it was).
pub fn config_verdicts(
    configs: &BTreeMap<u32, AppliedConfig>,
    observation: &ConfigObservation,
) -> Option<Vec<ShardConfig>> {
    if !observation.probed {
        return None;
    }
    let verdicts = configs
        .iter()
        .map(|(index, config)| {
            let recorded = observation
                .applied
                .get(index)
                .map(|(fingerprint, age)| (fingerprint, *age));
            let built = config.fingerprint.as_ref();
            let since = verdict::since_change(recorded, built, config.secret_changed);
            let pods = observation
                .pods
                .get(index)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            ShardConfig {
                index: *index,
                pods: pods
                    .iter()
                    .map(|probe| {
                        let verdict =
                            verdict::pod_verdict(&probe.answer, built, since, observation.grace);
                        (probe.pod.clone(), verdict)
                    })
                    .collect(),
            }
        })
        .collect();
    Some(verdicts)
}
