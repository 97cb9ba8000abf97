//! The final upload of a shard a scale-down removed (pure): what each of its pods shows of it,
//! and what comes next. A shard whose sidecars upload to an object store is deleted only once
//! every pod's TSDB, the head included, is there.
//!
//! Per pod: the controller takes a TSDB snapshot (Prometheus's admin API; the head is written
//! as one more block) once the pod runs the retired configuration, then adds an ephemeral
//! container `thanos-upload-<n>` that runs `thanos tools bucket upload-blocks` over the
//! snapshot directory with the pod's external labels. The ephemeral containers are the state:
//! their arguments name the snapshot and their statuses tell how each attempt ended, so a
//! controller restart resumes where the pod says; a failed attempt is followed by another over
//! the same snapshot, after a backoff. The upload skips every block whose `meta.json` is already
//! in the bucket: the blocks the sidecar shipped are not shipped again, nor the blocks an earlier
//! attempt finished.

use k8s_openapi::api::core::v1::{ContainerState, EphemeralContainer, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;
use zone_api::sprom::THANOS_SIDECAR_CONTAINER;

/// The ephemeral containers of the final upload are named this, then the attempt's number.
pub const CONTAINER_PREFIX: &str = zone_api::sprom::THANOS_UPLOAD_CONTAINER_PREFIX;
/// The flag naming the snapshot directory an attempt uploads.
pub const PATH_FLAG: &str = "--path=";
/// After this many failed attempts, no more: the pod spec would grow without end.
pub const MAX_ATTEMPTS: u32 = 30;
/// The first retry's delay; it doubles per attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(15);
const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// How much of a failed attempt's message the status quotes.
const QUOTED_MESSAGE: usize = 300;

/// How one attempt ended, or that it has not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Waiting to start or running.
    Running,
    Succeeded,
    Failed {
        message: String,
        at: Option<Timestamp>,
    },
}

/// One attempt at the final upload: an ephemeral container of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub number: u32,
    /// The snapshot directory it uploads (its `--path`).
    pub path: Option<String>,
    pub outcome: Outcome,
}

/// What a pod shows of its final upload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodUpload {
    pub name: String,
    /// Running, not being deleted, with an IP.
    pub ip: Option<String>,
    /// By number.
    pub attempts: Vec<Attempt>,
    /// The image of the pod's Thanos sidecar: the upload runs it, as the admission policy
    /// requires, whatever the controller's default image is now (it may have changed with an
    /// upgrade since the pod was made).
    pub sidecar_image: Option<String>,
}

/// What comes next for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Start attempt `number`: over `path`, or over a snapshot taken first (None), with the
    /// pod's sidecar's `image` (None: the pod has no sidecar, the spec's image then).
    Start {
        number: u32,
        path: Option<String>,
        ip: String,
        image: Option<String>,
    },
    /// Nothing to do before `until` (None: before something changes); `why` says what waits.
    Wait {
        why: String,
        until: Option<Timestamp>,
    },
    /// The last attempt failed and no other follows (see [`MAX_ATTEMPTS`]).
    GaveUp(String),
    Uploaded,
}

/// The pod's attempts, as its ephemeral containers and their statuses show them.
pub fn read(pod: &Pod) -> PodUpload {
    let running = pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|_| running);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_deref())
        .unwrap_or_default();
    let mut attempts: Vec<Attempt> = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.ephemeral_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|container| {
            let number = attempt_number(&container.name)?;
            let state = statuses
                .iter()
                .find(|status| status.name == container.name)
                .and_then(|status| status.state.as_ref());
            Some(Attempt {
                number,
                path: snapshot_path(container),
                outcome: outcome(state),
            })
        })
        .collect();
    attempts.sort_by_key(|attempt| attempt.number);
    let sidecar_image = pod
        .spec
        .as_ref()
        .and_then(|spec| {
            spec.containers
                .iter()
                .find(|c| c.name == THANOS_SIDECAR_CONTAINER)
        })
        .and_then(|sidecar| sidecar.image.clone());
    PodUpload {
        name: pod.metadata.name.clone().unwrap_or_default(),
        ip,
        attempts,
        sidecar_image,
    }
}

/// The number of the attempt an ephemeral container named `name` is, if it is one.
pub fn attempt_number(name: &str) -> Option<u32> {
    name.strip_prefix(CONTAINER_PREFIX)?.parse().ok()
}

/// The name of attempt `number`'s container.
pub fn container_name(number: u32) -> String {
    format!("{CONTAINER_PREFIX}{number}")
}

fn snapshot_path(container: &EphemeralContainer) -> Option<String> {
    container
        .args
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find_map(|arg| arg.strip_prefix(PATH_FLAG))
        .map(str::to_string)
}

fn outcome(state: Option<&ContainerState>) -> Outcome {
    let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) else {
        return Outcome::Running;
    };
    if terminated.exit_code == 0 {
        return Outcome::Succeeded;
    }
    let message = terminated
        .message
        .as_deref()
        .and_then(last_line)
        .or(terminated.reason.clone())
        .unwrap_or_else(|| format!("exit code {}", terminated.exit_code));
    Outcome::Failed {
        message,
        at: terminated
            .finished_at
            .as_ref()
            .map(|time| time.0)
            .or_else(|| terminated.started_at.as_ref().map(|time| time.0)),
    }
}

/// The last non-empty line of a container's log tail, cut to [`QUOTED_MESSAGE`] characters.
fn last_line(log: &str) -> Option<String> {
    let line = log.lines().rev().find(|line| !line.trim().is_empty())?;
    Some(line.trim().chars().take(QUOTED_MESSAGE).collect())
}

/// The delay before the attempt after `failed` failed attempts.
fn backoff(failed: u32) -> Duration {
    let doublings = failed.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// What comes next for `pod` at `now`.
pub fn step(pod: &PodUpload, now: Timestamp) -> Step {
    let last = pod.attempts.last();
    let (message, at) = match last.map(|attempt| &attempt.outcome) {
        Some(Outcome::Succeeded) => return Step::Uploaded,
        Some(Outcome::Running) => return waiting(format!("pod {} is uploading", pod.name)),
        Some(Outcome::Failed { message, at }) => (message, *at),
        None => (&String::new(), None),
    };
    let Some(ip) = pod.ip.clone() else {
        return waiting(format!("pod {} is not running", pod.name));
    };
    let Some(attempt) = last else {
        return Step::Start {
            number: 1,
            path: None,
            ip,
            image: pod.sidecar_image.clone(),
        };
    };
    let failed = u32::try_from(pod.attempts.len()).unwrap_or(u32::MAX);
    let error = format!(
        "pod {}: upload attempt {} failed: {message}",
        pod.name, attempt.number
    );
    if failed >= MAX_ATTEMPTS {
        return Step::GaveUp(error);
    }
    let due = at.and_then(|at| {
        let delay = SignedDuration::try_from(backoff(failed)).ok()?;
        at.checked_add(delay).ok()
    });
    match due {
        Some(due) if due > now => Step::Wait {
            why: error,
            until: Some(due),
        },
        _ => Step::Start {
            number: attempt.number.saturating_add(1),
            path: attempt.path.clone(),
            ip,
            image: pod.sidecar_image.clone(),
        },
    }
}

/// A wait until something changes (the pod, or its attempt's end, is watched).
fn waiting(why: String) -> Step {
    Step::Wait { why, until: None }
}

/// How long a pod runs the retired configuration before its snapshot: past one round of
/// Prometheus's compaction loop (every minute), so a head that turned compactable during the
/// last scrapes is cut into a block first (the sidecar ships it) instead of into the snapshot
/// and a block both.
pub const SETTLE: Duration = Duration::from_secs(75);

/// Whether a pod serving `config_yaml`, last (re)loaded at `loaded_at` (RFC 3339), may be
/// snapshotted at `now`: it scrapes nothing and has done so for [`SETTLE`]. Else why not.
pub fn ready_for_snapshot(
    config_yaml: &str,
    loaded_at: Option<&str>,
    now: Timestamp,
) -> Result<(), String> {
    let config: serde_json::Value = serde_norway::from_str(config_yaml)
        .map_err(|_| "its served configuration is not YAML".to_string())?;
    let scrapes = config
        .get("scrape_configs")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|jobs| !jobs.is_empty());
    if scrapes {
        return Err("it still runs a configuration that scrapes".to_string());
    }
    let loaded: Timestamp = loaded_at
        .and_then(|at| at.parse().ok())
        .ok_or_else(|| "it tells no configuration time".to_string())?;
    let settled = SignedDuration::try_from(SETTLE)
        .ok()
        .and_then(|settle| loaded.checked_add(settle).ok())
        .unwrap_or(Timestamp::MAX);
    match settled <= now {
        true => Ok(()),
        false => Err(format!(
            "it stopped scraping at {loaded}: snapshot at {settled}"
        )),
    }
}

/// A removed shard's final upload, pod by pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardUpload {
    pub index: u32,
    /// Pod name → its next step; every pod the StatefulSet should have.
    pub pods: Vec<(String, Step)>,
}

impl ShardUpload {
    /// The steps for the pods `<stateful_set>-0 … -(replicas-1)` of shard `index` and any other
    /// pod of it observed, from the pods observed (a missing pod waits).
    pub fn of(
        index: u32,
        stateful_set: &str,
        replicas: u32,
        observed: &[PodUpload],
        now: Timestamp,
    ) -> ShardUpload {
        let names: std::collections::BTreeSet<String> = (0..replicas)
            .map(|ordinal| format!("{stateful_set}-{ordinal}"))
            .chain(observed.iter().map(|pod| pod.name.clone()))
            .collect();
        let pods = names
            .into_iter()
            .map(|name| {
                let step = match observed.iter().find(|pod| pod.name == name) {
                    Some(pod) => step(pod, now),
                    None => waiting(format!("pod {name} does not exist")),
                };
                (name, step)
            })
            .collect();
        ShardUpload { index, pods }
    }

    /// Every pod's TSDB is in the object store: the shard may go.
    pub fn done(&self) -> bool {
        self.pods.iter().all(|(_, step)| *step == Step::Uploaded)
    }

    /// Why the shard is still there, pod by pod (empty when done).
    pub fn waiting_on(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter_map(|(name, step)| match step {
                Step::Start { .. } => Some(format!("pod {name} is starting its upload")),
                Step::Wait { why, .. } => Some(why.clone()),
                Step::GaveUp(why) => Some(format!(
                    "{why}; no more attempts after {MAX_ATTEMPTS}: fix the object store, then \
                     delete the pod to start over"
                )),
                Step::Uploaded => None,
            })
            .collect()
    }

    /// Whether an attempt failed (the last one of some pod).
    pub fn failing(&self) -> bool {
        self.pods.iter().any(|(_, step)| match step {
            Step::Wait { until, .. } => until.is_some(),
            Step::GaveUp(_) => true,
            _ => false,
        })
    }

    /// The earliest retry due.
    pub fn next_retry(&self) -> Option<Timestamp> {
        self.pods
            .iter()
            .filter_map(|(_, step)| match step {
                Step::Wait { until, .. } => *until,
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, PodSpec,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn now() -> Timestamp {
        "2026-11-29T12:00:00Z".parse().unwrap()
    }

    fn running_pod(name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: THANOS_SIDECAR_CONTAINER.into(),
                image: Some("thanos:pod".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.0.0.7".into()),
            ..PodStatus::default()
        });
        pod
    }

    fn with_attempt(mut pod: Pod, number: u32, state: Option<ContainerState>) -> Pod {
        let name = container_name(number);
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.ephemeral_containers
            .get_or_insert_with(Vec::new)
            .push(EphemeralContainer {
                name: name.clone(),
                args: Some(vec![
                    "tools".into(),
                    format!("{PATH_FLAG}/prometheus/snapshots/s1"),
                ]),
                ..EphemeralContainer::default()
            });
        let status = pod.status.get_or_insert_with(PodStatus::default);
        status
            .ephemeral_container_statuses
            .get_or_insert_with(Vec::new)
            .push(ContainerStatus {
                name,
                state,
                ..ContainerStatus::default()
            });
        pod
    }

    fn terminated(code: i32, message: &str, at: &str) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                message: Some(message.into()),
                finished_at: Some(Time(at.parse().unwrap())),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        })
    }

    #[test]
    fn a_snapshot_waits_for_the_retired_configuration_and_one_compaction_round() {
        let retired = "global:\n  external_labels:\n    shard: '2'\n";
        let scraping = "global: {}\nscrape_configs:\n- job_name: x\n";
        let at = |raw: &str| Some(raw.to_string());
        let error = ready_for_snapshot(scraping, at("2026-11-29T11:00:00Z").as_deref(), now());
        assert!(error.unwrap_err().contains("scrapes"));
        let recent = ready_for_snapshot(retired, at("2026-11-29T11:59:00Z").as_deref(), now());
        assert!(recent.unwrap_err().contains("12:00:15"));
        assert_eq!(
            ready_for_snapshot(retired, at("2026-11-29T11:58:45Z").as_deref(), now()),
            Ok(())
        );
        assert!(ready_for_snapshot(retired, None, now()).is_err());
        assert!(ready_for_snapshot("{[", None, now()).is_err());
    }

    #[test]
    fn a_pod_without_attempts_takes_a_snapshot_first() {
        let pod = read(&running_pod("p-0"));
        assert_eq!(
            step(&pod, now()),
            Step::Start {
                number: 1,
                path: None,
                ip: "10.0.0.7".into(),
                image: Some("thanos:pod".into()),
            }
        );
    }

    #[test]
    fn a_running_attempt_is_waited_for_and_a_finished_one_ends_the_pods_part() {
        let running = Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        });
        let pod = read(&with_attempt(running_pod("p-0"), 1, running));
        assert!(matches!(step(&pod, now()), Step::Wait { until: None, .. }));
        let pod = read(&with_attempt(running_pod("p-0"), 1, None));
        assert!(matches!(step(&pod, now()), Step::Wait { until: None, .. }));
        let done = terminated(0, "", "2026-11-29T11:59:00Z");
        let pod = read(&with_attempt(running_pod("p-0"), 1, done));
        assert_eq!(step(&pod, now()), Step::Uploaded);
    }

    #[test]
    fn a_failed_attempt_is_retried_over_the_same_snapshot_after_its_backoff() {
        let failed = terminated(
            1,
            "level=info msg=start\nlevel=error msg=\"dial tcp: connection refused\"\n",
            "2026-11-29T11:59:50Z",
        );
        let pod = read(&with_attempt(running_pod("p-0"), 1, failed));
        match step(&pod, now()) {
            Step::Wait {
                why,
                until: Some(until),
            } => {
                assert!(why.contains("connection refused"), "{why}");
                assert!(!why.contains("msg=start"), "{why}");
                assert_eq!(until, "2026-11-29T12:00:05Z".parse().unwrap());
            }
            other => panic!("{other:?}"),
        }
        let later: Timestamp = "2026-11-29T12:00:05Z".parse().unwrap();
        assert_eq!(
            step(&pod, later),
            Step::Start {
                number: 2,
                path: Some("/prometheus/snapshots/s1".into()),
                ip: "10.0.0.7".into(),
                image: Some("thanos:pod".into()),
            }
        );
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_attempts_end_at_the_limit() {
        assert_eq!(backoff(1), Duration::from_secs(15));
        assert_eq!(backoff(3), Duration::from_secs(60));
        assert_eq!(backoff(40), MAX_BACKOFF);
        let mut pod = running_pod("p-0");
        for number in 1..=MAX_ATTEMPTS {
            pod = with_attempt(pod, number, terminated(2, "boom", "2026-11-29T10:00:00Z"));
        }
        assert!(matches!(step(&read(&pod), now()), Step::GaveUp(_)));
    }

    #[test]
    fn a_pod_that_is_not_running_waits_and_a_missing_one_keeps_the_shard() {
        let mut pod = running_pod("p-0");
        pod.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        });
        assert!(matches!(step(&read(&pod), now()), Step::Wait { .. }));
        let done = read(&with_attempt(
            running_pod("p-0"),
            1,
            terminated(0, "", "2026-11-29T11:00:00Z"),
        ));
        let shard = ShardUpload::of(2, "p", 2, std::slice::from_ref(&done), now());
        assert!(!shard.done());
        assert_eq!(shard.waiting_on(), vec!["pod p-1 does not exist"]);
        // A pod beyond the replicas the StatefulSet says (a scale in flight) counts too.
        let mut extra = read(&running_pod("p-2"));
        extra.attempts.clear();
        assert!(!ShardUpload::of(2, "p", 1, &[done.clone(), extra], now()).done());
        let mut other = done;
        other.name = "p-1".into();
        let both = read(&with_attempt(
            running_pod("p-0"),
            1,
            terminated(0, "", "2026-11-29T11:00:00Z"),
        ));
        assert!(ShardUpload::of(2, "p", 2, &[both, other], now()).done());
    }
}
