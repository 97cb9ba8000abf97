//! The final upload's part of a reconcile's plan (pure): which of the shards the retention plan
//! deletes now wait for their upload, the writes that move it on (the retired configuration,
//! each attempt's start), what the status and the events say of it, and when to look again.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use zone_api::sprom::contract::shard_name;
use zone_api::sprom::{ValidSprom, ValidThanos, reason};
use zone_operator::{Invalid, PendingEvents};

use super::pods as upload;
use crate::children::build::{self, BuildInput};
use crate::children::retention;
use crate::reconcile::observe::Observed;
use crate::reconcile::plan::events::list;
use crate::reconcile::plan::write::{Child, Write, changed};
use crate::reconcile::validate::invalid_scrape_config;
use crate::status::UploadingShard;

/// The final uploads of the shards the retention plan deletes now.
#[derive(Debug, Default)]
pub struct Uploads {
    /// Not done yet: the shard stays (taken out of the plan's deletions).
    pub draining: Vec<upload::ShardUpload>,
    /// Done: the shards are deleted now.
    pub done: Vec<u32>,
}

impl Uploads {
    /// When to look again at the shards still uploading.
    pub fn next_look(&self, now: Timestamp) -> Option<Duration> {
        if self.draining.is_empty() {
            return None;
        }
        let retry = self
            .draining
            .iter()
            .filter_map(upload::ShardUpload::next_retry)
            .min()
            .map(|at| Duration::try_from(now.duration_until(at)).unwrap_or_default());
        Some(retry.map_or(UPLOAD_LOOK_AGAIN, |retry| {
            retry.min(UPLOAD_LOOK_AGAIN) + Duration::from_millis(1)
        }))
    }
}

/// While a removed shard waits for its final upload, it is looked at again at least this often
/// (its pods turning to the retired configuration are not watched).
const UPLOAD_LOOK_AGAIN: Duration = Duration::from_secs(10);

/// What the status says of a shard still uploading.
fn upload_observation(shard: &upload::ShardUpload) -> UploadingShard {
    UploadingShard {
        index: shard.index,
        waiting_on: shard.waiting_on(),
        failing: shard.failing(),
    }
}

impl Uploads {
    /// With `spec.thanos` uploading and the final upload not opted out: the shards `fate` deletes
    /// now, pod by pod; those not done are kept (removed from `fate.deleted`).
    pub fn plan(
        name: &str,
        valid: &ValidSprom,
        observed: &Observed,
        fate: &mut retention::Plan,
        now: Timestamp,
    ) -> Self {
        let mut uploads = Self::default();
        if !valid.thanos.as_ref().is_some_and(ValidThanos::final_upload) {
            return uploads;
        }
        fate.deleted.retain(|(index, _)| {
            let replicas = observed
                .stateful_sets
                .get(index)
                .and_then(|sts| sts.replicas)
                .unwrap_or(valid.replicas);
            let pods = observed
                .uploads
                .get(index)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let shard =
                upload::ShardUpload::of(*index, &shard_name(name, *index), replicas, pods, now);
            if shard.done() {
                uploads.done.push(*index);
                return true;
            }
            uploads.draining.push(shard);
            false
        });
        uploads
    }

    /// Events: each attempt started (after a failed one, with its error), and the shards deleted
    /// once uploaded.
    pub fn events(&self, events: &mut PendingEvents) {
        for shard in &self.draining {
            for (pod, step) in &shard.pods {
                match step {
                    upload::Step::Start { number: 1, .. } => events.normal(
                        reason::SHARD_UPLOAD_STARTED,
                        "Upload",
                        format!(
                            "shard {}: pod {pod} snapshots its TSDB and uploads it before the shard is deleted",
                            shard.index
                        ),
                    ),
                    upload::Step::Start { number, .. } => events.warning(
                        reason::SHARD_UPLOAD_FAILED,
                        "Upload",
                        format!(
                            "shard {}: pod {pod}'s upload attempt {} failed; attempt {number} starts",
                            shard.index,
                            number - 1
                        ),
                    ),
                    upload::Step::GaveUp(why) => {
                        events.warning(reason::SHARD_UPLOAD_FAILED, "Upload", why.clone())
                    }
                    upload::Step::Wait { .. } | upload::Step::Uploaded => {}
                }
            }
        }
        if !self.done.is_empty() {
            events.normal(
                reason::SHARDS_UPLOADED,
                "Delete",
                format!(
                    "shard(s) {} deleted: every pod's TSDB, its head included, is in the object store",
                    list(&self.done)
                ),
            );
        }
    }

    /// What the status says of the shards still uploading.
    pub fn observations(&self) -> Vec<UploadingShard> {
        self.draining.iter().map(upload_observation).collect()
    }

    /// The writes of the shards still uploading: their retired configuration, and each
    /// attempt's start; and their names (their children are wanted).
    pub fn writes(
        &self,
        input: &BuildInput<'_>,
        observed: &Observed,
    ) -> Result<(Vec<Write>, BTreeSet<String>), Invalid> {
        let mut writes = Vec::new();
        let mut wanted = BTreeSet::new();
        for shard in &self.draining {
            let zone = observed
                .stateful_sets
                .get(&shard.index)
                .and_then(|sts| sts.zone.as_deref());
            // Retired, as a retained shard is: it scrapes nothing more while it uploads.
            let config = build::retained_config(input, shard.index, zone)
                .map_err(|error| invalid_scrape_config(&error))?;
            wanted.insert(shard_name(input.name, shard.index));
            writes.extend(changed([Child::Secret(Box::new(config))], observed));
            for (pod, step) in &shard.pods {
                let upload::Step::Start {
                    number,
                    path,
                    ip,
                    image,
                } = step
                else {
                    continue;
                };
                let image = image.as_deref();
                let Some(container) = super::container::upload_container(
                    input,
                    shard.index,
                    zone,
                    pod,
                    *number,
                    image,
                ) else {
                    continue;
                };
                writes.push(Write::StartUpload {
                    pod: pod.clone(),
                    ip: ip.clone(),
                    path: path.clone(),
                    container: Box::new(container),
                });
            }
        }
        Ok((writes, wanted))
    }
}
