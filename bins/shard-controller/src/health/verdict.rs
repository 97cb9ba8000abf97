//! Whether each shard's Prometheus runs the configuration applied to it (pure): the verdict on
//! every probed pod, and the `ConfigLoaded` condition they add up to.

use std::fmt;
use std::time::Duration;

use zone_api::sprom::reason;

use super::fingerprint::Fingerprint;

/// How many shards a `ConfigLoaded` message names, and how many pods per shard; the rest are
/// counted.
pub const SHARDS_LISTED: usize = 10;
pub const PODS_LISTED: usize = 3;

/// What one Prometheus pod answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProbe {
    pub pod: String,
    pub answer: Answer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Its last reload failed (`reloadConfigSuccess` false): it refused its configuration file
    /// or a rule file, and runs the configuration it loaded at `last_config_time`.
    Refused { last_config_time: Option<String> },
    /// Its last reload succeeded; the configuration it serves.
    Running { served: Fingerprint },
    /// It could not be asked.
    Unreachable(ProbeError),
}

/// Why a pod could not be asked (kinds only: the status must not change with the wording of a
/// socket error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeError {
    Timeout(Duration),
    Connect,
    Status(u16),
    Unreadable,
    TooLarge,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Timeout(after) => write!(f, "no answer within {}s", after.as_secs()),
            ProbeError::Connect => f.write_str("cannot connect"),
            ProbeError::Status(503) => f.write_str("not ready (HTTP 503)"),
            ProbeError::Status(code) => write!(f, "HTTP {code}"),
            ProbeError::Unreadable => f.write_str("unreadable answer"),
            ProbeError::TooLarge => f.write_str("answer too large"),
        }
    }
}

/// The verdict on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodVerdict {
    /// It runs the applied configuration (or nothing was applied to compare with).
    Loaded,
    /// It runs another configuration, but the applied one changed less than the grace ago: the
    /// kubelet may not have copied the Secret into the pod yet. `left`: until the grace ends.
    Loading {
        left: Duration,
    },
    /// Its last reload failed; it keeps running the configuration loaded at `since`.
    Refused {
        since: Option<String>,
    },
    /// It runs another configuration longer than the grace after the applied one changed.
    NotLoaded {
        differs: &'static str,
    },
    NotProbed(ProbeError),
}

/// The verdicts on the pods of one active shard (none: no pod running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    pub index: u32,
    pub pods: Vec<(String, PodVerdict)>,
}

/// How long ago the configuration of a shard changed, for the grace: `recorded` is the
/// fingerprint the controller last applied with the age of that change (`None`: before the
/// controller started), `built` the one it applies now, `secret_changed` whether the Secret it
/// writes now differs from the one in the cluster.
pub fn since_change(
    recorded: Option<(&Fingerprint, Option<Duration>)>,
    built: Option<&Fingerprint>,
    secret_changed: bool,
) -> Option<Duration> {
    match recorded {
        Some((fingerprint, age)) if Some(fingerprint) == built => age,
        Some(_) => Some(Duration::ZERO),
        None if secret_changed => Some(Duration::ZERO),
        None => None,
    }
}

/// The verdict on a pod that answered `answer`, for a shard whose applied configuration is
/// `applied`, changed `since_change` ago (`None`: long ago).
pub fn pod_verdict(
    answer: &Answer,
    applied: Option<&Fingerprint>,
    since_change: Option<Duration>,
    grace: Duration,
) -> PodVerdict {
    match answer {
        Answer::Unreachable(error) => PodVerdict::NotProbed(*error),
        Answer::Refused { last_config_time } => PodVerdict::Refused {
            since: last_config_time.clone(),
        },
        Answer::Running { served } => {
            let Some(differs) = applied.and_then(|applied| applied.differs_from(served)) else {
                return PodVerdict::Loaded;
            };
            match since_change.and_then(|since| grace.checked_sub(since)) {
                Some(left) if !left.is_zero() => PodVerdict::Loading { left },
                _ => PodVerdict::NotLoaded { differs },
            }
        }
    }
}

/// When a verdict changes by itself: the end of the earliest grace still running.
pub fn next_change(shards: &[ShardConfig]) -> Option<Duration> {
    shards
        .iter()
        .flat_map(|shard| &shard.pods)
        .filter_map(|(_, verdict)| match verdict {
            PodVerdict::Loading { left } => Some(*left),
            _ => None,
        })
        .min()
}

/// The `ConfigLoaded` condition: `status` None is Unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLoaded {
    pub status: Option<bool>,
    pub reason: &'static str,
    pub message: String,
}

/// `ConfigLoaded` over the active shards: False `ReloadFailed` when a pod refused its
/// configuration, else False `ConfigNotLoaded` when one runs another past the grace, else
/// Unknown `NotProbed` when no pod answered, else True. Messages name at most
/// [`SHARDS_LISTED`] shards and [`PODS_LISTED`] pods per shard; `zone` gives a shard's zone.
pub fn config_loaded<'z>(
    shards: &[ShardConfig],
    zone: impl Fn(u32) -> Option<&'z str>,
) -> ConfigLoaded {
    let shard_name = |index: u32| match zone(index) {
        Some(zone) if !zone.is_empty() => format!("shard {index} ({zone})"),
        _ => format!("shard {index}"),
    };
    let failing: Vec<(u32, String)> = shards
        .iter()
        .filter_map(|shard| failure(shard).map(|text| (shard.index, text)))
        .collect();
    let refused = shards.iter().any(|shard| {
        shard
            .pods
            .iter()
            .any(|(_, v)| matches!(v, PodVerdict::Refused { .. }))
    });
    if !failing.is_empty() {
        let listed = failing
            .iter()
            .map(|(index, text)| format!("{}: {text}", shard_name(*index)));
        return ConfigLoaded {
            status: Some(false),
            reason: match refused {
                true => reason::RELOAD_FAILED,
                false => reason::CONFIG_NOT_LOADED,
            },
            message: bounded(listed, failing.len(), "shard(s)"),
        };
    }
    let answered = shards
        .iter()
        .flat_map(|shard| &shard.pods)
        .filter(|(_, v)| !matches!(v, PodVerdict::NotProbed(_)))
        .count();
    let unasked: Vec<String> = shards
        .iter()
        .filter_map(|shard| {
            unasked(shard).map(|text| format!("{}: {text}", shard_name(shard.index)))
        })
        .collect();
    if answered == 0 {
        let message = match unasked.is_empty() {
            true => "no active shard to ask".to_string(),
            false => format!(
                "no Prometheus pod could be asked: {}",
                bounded(unasked.iter().cloned(), unasked.len(), "shard(s)")
            ),
        };
        return ConfigLoaded {
            status: None,
            reason: reason::NOT_PROBED,
            message,
        };
    }
    ConfigLoaded {
        status: Some(true),
        reason: reason::CONFIG_LOADED,
        message: loaded_message(shards, answered, &unasked),
    }
}

/// `ConfigLoaded`'s message when every pod asked runs its shard's configuration or the one
/// before (still within the grace).
fn loaded_message(shards: &[ShardConfig], answered: usize, unasked: &[String]) -> String {
    let loading = shards
        .iter()
        .flat_map(|shard| &shard.pods)
        .filter(|(_, v)| matches!(v, PodVerdict::Loading { .. }))
        .count();
    let mut message = format!(
        "every Prometheus pod asked ({answered}) runs the configuration applied to its shard"
    );
    if loading > 0 {
        message = format!(
            "{} of {answered} Prometheus pod(s) asked run the configuration applied to their \
             shard; {loading} still run(s) the one before, which is expected for a while after \
             a change (the kubelet copies a changed Secret into a pod within about a minute)",
            answered - loading
        );
    }
    if !unasked.is_empty() {
        message.push_str(&format!(
            "; not asked: {}",
            bounded(unasked.iter().cloned(), unasked.len(), "shard(s)")
        ));
    }
    message
}

/// What is wrong with a shard's pods: those that refused the configuration, then those that
/// run another one past the grace.
fn failure(shard: &ShardConfig) -> Option<String> {
    let refused: Vec<(&str, &Option<String>)> = shard
        .pods
        .iter()
        .filter_map(|(pod, v)| match v {
            PodVerdict::Refused { since } => Some((pod.as_str(), since)),
            _ => None,
        })
        .collect();
    let not_loaded: Vec<(&str, &'static str)> = shard
        .pods
        .iter()
        .filter_map(|(pod, v)| match v {
            PodVerdict::NotLoaded { differs } => Some((pod.as_str(), *differs)),
            _ => None,
        })
        .collect();
    let mut parts = Vec::new();
    match refused.as_slice() {
        [] => {}
        [(pod, Some(since))] => parts.push(format!(
            "pod {pod} refused the configuration or a rule file (last reload failed); the \
             configuration it loaded at {since} is still running"
        )),
        _ => parts.push(format!(
            "{} refused the configuration or a rule file (last reload failed); the previous \
             configuration is still running",
            pods(refused.iter().map(|(pod, _)| *pod))
        )),
    }
    if let Some((_, differs)) = not_loaded.first() {
        parts.push(format!(
            "{} still run(s) another configuration than the one applied ({differs} differ) \
             past the time a changed Secret takes to reach a pod",
            pods(not_loaded.iter().map(|(pod, _)| *pod))
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Why none of a shard's pods could be asked, if none could.
fn unasked(shard: &ShardConfig) -> Option<String> {
    if shard.pods.is_empty() {
        return Some("no running pod".to_string());
    }
    let errors: Vec<(&str, &ProbeError)> = shard
        .pods
        .iter()
        .map(|(pod, v)| match v {
            PodVerdict::NotProbed(error) => Some((pod.as_str(), error)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let listed = errors
        .iter()
        .map(|(pod, error)| format!("pod {pod}: {error}"));
    Some(bounded(listed, errors.len(), "pod(s)"))
}

/// `pod a`, `pods a, b`, `pods a, b, c and 2 more`.
fn pods<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = names.len();
    let listed: Vec<&str> = names.take(PODS_LISTED).collect();
    let mut text = match total {
        1 => format!("pod {}", listed.join(", ")),
        _ => format!("pods {}", listed.join(", ")),
    };
    if total > PODS_LISTED {
        text.push_str(&format!(" and {} more", total - PODS_LISTED));
    }
    text
}

/// The first [`SHARDS_LISTED`] of `items` joined by `; `, and how many more of `total`.
fn bounded(items: impl Iterator<Item = String>, total: usize, what: &str) -> String {
    let mut text = items.take(SHARDS_LISTED).collect::<Vec<_>>().join("; ");
    if total > SHARDS_LISTED {
        text.push_str(&format!("; and {} more {what}", total - SHARDS_LISTED));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GRACE: Duration = Duration::from_secs(150);

    fn print(yaml: &str) -> Fingerprint {
        Fingerprint::of_yaml(yaml).unwrap()
    }

    fn running(yaml: &str) -> Answer {
        Answer::Running {
            served: print(yaml),
        }
    }

    const TWO_JOBS: &str = "scrape_configs:\n- job_name: a\n- job_name: b\n";
    const ONE_JOB: &str = "scrape_configs:\n- job_name: a\n";

    #[test]
    fn a_pod_is_judged_by_its_reload_then_its_configuration_then_the_grace() {
        let applied = print(TWO_JOBS);
        let secs = |s| Some(Duration::from_secs(s));
        let cases = [
            (running(TWO_JOBS), secs(5), PodVerdict::Loaded),
            (
                running(ONE_JOB),
                secs(30),
                PodVerdict::Loading {
                    left: Duration::from_secs(120),
                },
            ),
            (
                running(ONE_JOB),
                secs(150),
                PodVerdict::NotLoaded {
                    differs: "scrape jobs",
                },
            ),
            (
                running(ONE_JOB),
                None,
                PodVerdict::NotLoaded {
                    differs: "scrape jobs",
                },
            ),
            (
                Answer::Refused {
                    last_config_time: Some("2026-01-01T00:00:00Z".into()),
                },
                secs(1),
                PodVerdict::Refused {
                    since: Some("2026-01-01T00:00:00Z".into()),
                },
            ),
            (
                Answer::Unreachable(ProbeError::Connect),
                None,
                PodVerdict::NotProbed(ProbeError::Connect),
            ),
        ];
        for (answer, since, expected) in cases {
            assert_eq!(
                pod_verdict(&answer, Some(&applied), since, GRACE),
                expected,
                "{answer:?} {since:?}"
            );
        }
        assert_eq!(
            pod_verdict(&running(ONE_JOB), None, None, GRACE),
            PodVerdict::Loaded,
            "nothing applied yet to compare with"
        );
    }

    #[test]
    fn the_grace_starts_when_the_fingerprint_changes_or_the_secret_is_rewritten() {
        let (old, new) = (print(ONE_JOB), print(TWO_JOBS));
        let minute = Some(Duration::from_secs(60));
        assert_eq!(since_change(Some((&new, minute)), Some(&new), true), minute);
        assert_eq!(
            since_change(Some((&new, None)), Some(&new), false),
            None,
            "applied before the controller started"
        );
        assert_eq!(
            since_change(Some((&old, minute)), Some(&new), false),
            Some(Duration::ZERO),
            "being applied now"
        );
        assert_eq!(since_change(None, Some(&new), true), Some(Duration::ZERO));
        assert_eq!(since_change(None, Some(&new), false), None);
    }

    fn shard(index: u32, pods: &[(&str, PodVerdict)]) -> ShardConfig {
        ShardConfig {
            index,
            pods: pods
                .iter()
                .map(|(pod, v)| (pod.to_string(), v.clone()))
                .collect(),
        }
    }

    fn zones(index: u32) -> Option<&'static str> {
        ["zone-a", "zone-b", "zone-c"].get(index as usize).copied()
    }

    fn refused() -> PodVerdict {
        PodVerdict::Refused {
            since: Some("2026-01-01T00:00:00Z".into()),
        }
    }

    #[test]
    fn a_refused_configuration_names_each_shard_pod_and_what_still_runs() {
        let shards = [
            shard(0, &[("p-0-0", refused())]),
            shard(1, &[("p-1-0", PodVerdict::Loaded)]),
            shard(
                2,
                &[
                    ("p-2-0", refused()),
                    (
                        "p-2-1",
                        PodVerdict::NotLoaded {
                            differs: "rule files",
                        },
                    ),
                ],
            ),
        ];
        let condition = config_loaded(&shards, zones);
        assert_eq!(
            (condition.status, condition.reason),
            (Some(false), reason::RELOAD_FAILED)
        );
        assert!(
            condition.message.starts_with(
                "shard 0 (zone-a): pod p-0-0 refused the configuration or a rule file (last \
                 reload failed); the configuration it loaded at 2026-01-01T00:00:00Z is still \
                 running; shard 2 (zone-c): pod p-2-0 refused"
            ),
            "{}",
            condition.message
        );
        assert!(condition.message.contains(
            "pod p-2-1 still run(s) another configuration than the one applied (rule files differ)"
        ));
        assert!(!condition.message.contains("shard 1"));
    }

    #[test]
    fn another_configuration_past_the_grace_is_config_not_loaded() {
        let shards = [shard(
            1,
            &[(
                "p-1-0",
                PodVerdict::NotLoaded {
                    differs: "scrape jobs",
                },
            )],
        )];
        let condition = config_loaded(&shards, |_| None);
        assert_eq!(
            (condition.status, condition.reason),
            (Some(false), reason::CONFIG_NOT_LOADED)
        );
        assert!(
            condition
                .message
                .starts_with("shard 1: pod p-1-0 still run(s)")
        );
    }

    #[test]
    fn messages_name_ten_shards_and_three_pods_each_and_count_the_rest() {
        let pods: Vec<(String, PodVerdict)> = (0..5)
            .map(|i| (format!("p-{i}"), PodVerdict::Refused { since: None }))
            .collect();
        let shards: Vec<ShardConfig> = (0..25)
            .map(|index| ShardConfig {
                index,
                pods: pods.clone(),
            })
            .collect();
        let condition = config_loaded(&shards, |_| Some("zone-a"));
        assert_eq!(condition.message.matches("refused").count(), SHARDS_LISTED);
        assert!(condition.message.contains("shard 9 (zone-a)"));
        assert!(!condition.message.contains("shard 10 "));
        assert!(condition.message.ends_with("; and 15 more shard(s)"));
        assert!(
            condition
                .message
                .contains("pods p-0, p-1, p-2 and 2 more refused")
        );
        assert!(
            condition.message.len() < 3000,
            "{}",
            condition.message.len()
        );
        // The same bound when nothing could be asked.
        let unreachable: Vec<ShardConfig> = (0..25)
            .map(|index| shard(index, &[("p", PodVerdict::NotProbed(ProbeError::Connect))]))
            .collect();
        let condition = config_loaded(&unreachable, |_| None);
        assert_eq!(
            (condition.status, condition.reason),
            (None, reason::NOT_PROBED)
        );
        assert!(condition.message.ends_with("; and 15 more shard(s)"));
        assert_eq!(
            condition.message.matches("cannot connect").count(),
            SHARDS_LISTED
        );
    }

    #[test]
    fn nothing_asked_is_unknown_and_pods_within_the_grace_do_not_fail_it() {
        let condition = config_loaded(&[shard(0, &[]), shard(1, &[])], zones);
        assert_eq!(
            (
                condition.status,
                condition.reason,
                condition.message.as_str()
            ),
            (
                None,
                reason::NOT_PROBED,
                "no Prometheus pod could be asked: shard 0 (zone-a): no running pod; shard 1 \
                 (zone-b): no running pod"
            )
        );
        let loading = PodVerdict::Loading {
            left: Duration::from_secs(10),
        };
        let shards = [
            shard(
                0,
                &[("p-0-0", PodVerdict::Loaded), ("p-0-1", loading.clone())],
            ),
            shard(
                1,
                &[("p-1-0", PodVerdict::NotProbed(ProbeError::Status(503)))],
            ),
        ];
        let condition = config_loaded(&shards, zones);
        assert_eq!(
            (condition.status, condition.reason),
            (Some(true), reason::CONFIG_LOADED)
        );
        assert!(
            condition
                .message
                .starts_with("1 of 2 Prometheus pod(s) asked run"),
            "{}",
            condition.message
        );
        assert!(
            condition
                .message
                .ends_with("; not asked: shard 1 (zone-b): pod p-1-0: not ready (HTTP 503)"),
            "{}",
            condition.message
        );
        assert_eq!(next_change(&shards), Some(Duration::from_secs(10)));
        let all = [shard(0, &[("p-0-0", PodVerdict::Loaded)])];
        assert_eq!(
            config_loaded(&all, zones).message,
            "every Prometheus pod asked (1) runs the configuration applied to its shard"
        );
        assert_eq!(next_change(&all), None);
    }
}
