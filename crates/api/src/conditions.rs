//! Status conditions shared by every resource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets `condition` in `conditions`, keeping `lastTransitionTime` when the status did not change
/// (so the time says when it last flipped, as Kubernetes conventions ask).
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition) {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        if existing.status == condition.status {
            condition.last_transition_time = existing.last_transition_time.clone();
        }
        *existing = condition;
    } else {
        conditions.push(condition);
    }
}

/// A condition with the given fields, transition time `now`.
pub fn new(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// The condition type every resource sets when its spec cannot be acted on.
pub const INVALID: &str = "Invalid";

/// The summary conditions GitOps tools read (kstatus, which Flux and `kubectl wait` use, and
/// Argo CD health checks written for them): `Ready` True when the object is where its spec
/// wants it; `Reconciling` True while the controller still works towards it (kstatus:
/// InProgress); `Stalled` True when it cannot get there without a change of the spec (kstatus:
/// Failed).
pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

/// Where an object stands, as a kind derives it from its own conditions; each carries the
/// reason and message of the condition it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Summary {
    /// Done: Ready True, Reconciling and Stalled False.
    Ready { reason: String, message: String },
    /// On its way (or held on its way): Ready False, Reconciling True.
    Reconciling { reason: String, message: String },
    /// Stuck until the spec changes: Ready False, Stalled True.
    Stalled { reason: String, message: String },
}

impl Summary {
    /// `Reconciling` from `condition`'s reason and message, or `reason` when it is unset.
    pub fn reconciling_from(condition: Option<&Condition>, reason: &str) -> Self {
        let (reason, message) = condition.map_or((reason, ""), |c| (&c.reason, &c.message));
        Self::Reconciling {
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// Now, to the second: the API server stores times to the second, and a status compared with
/// what it read back must not differ in the sub-second part.
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Why a spec cannot be acted on: the reason and message of the `Invalid` condition (and of its
/// Warning event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// A status with conditions: the helpers every controller uses on it, in one place.
///
/// Implementors give access to the list and to the generation the status describes; the
/// conditions then carry that generation, and [`Conditions::already_reported`] tells a repeated
/// complaint (whose event was published already) from a new one.
pub trait Conditions {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// The generation the status describes (`status.observedGeneration`).
    fn generation(&self) -> Option<i64>;

    /// Sets a condition (observed at [`Conditions::generation`]), keeping its transition time
    /// when its status did not flip.
    fn set_condition(
        &mut self,
        type_: &str,
        value: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        let condition = new(type_, value, reason, message, self.generation(), now());
        set(self.conditions_mut(), condition);
    }

    /// The condition of `type_`, if set.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions().iter().find(|c| c.type_ == type_)
    }

    /// The reason of condition `type_` when it is True.
    fn true_reason(&self, type_: &str) -> Option<&str> {
        self.condition(type_)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.as_str())
    }

    /// Records that the spec cannot be acted on: `Invalid` True with `reason` and `message`,
    /// `blocked` False with the same reason and `consequence`. Returns whether the complaint is
    /// new for this generation (and deserves its Warning event).
    fn record_invalid(
        &mut self,
        reason: &str,
        message: &str,
        blocked: &str,
        consequence: &str,
    ) -> bool {
        let new = !self.already_reported(INVALID, reason, message);
        self.set_condition(INVALID, true, reason, message);
        self.set_condition(blocked, false, reason, consequence);
        new
    }

    /// Sets Ready, Reconciling and Stalled from `summary` (the kind's own conditions set first).
    fn summarize(&mut self, summary: Summary) {
        let (ready, reconciling, stalled, reason, message) = match summary {
            Summary::Ready { reason, message } => (true, false, false, reason, message),
            Summary::Reconciling { reason, message } => (false, true, false, reason, message),
            Summary::Stalled { reason, message } => (false, false, true, reason, message),
        };
        // The reason says where the object stands; the message, on the condition that is True.
        let text = |on: bool| if on { message.clone() } else { String::new() };
        self.set_condition(READY, ready, &reason, text(true));
        self.set_condition(RECONCILING, reconciling, &reason, text(reconciling));
        self.set_condition(STALLED, stalled, &reason, text(stalled));
    }

    /// Whether `type_` is True with this reason and message for this generation: the same
    /// complaint was already made (and its event published).
    fn already_reported(&self, type_: &str, reason: &str, message: &str) -> bool {
        self.condition(type_).is_some_and(|c| {
            c.status == "True"
                && c.reason == reason
                && c.message == message
                && c.observed_generation == self.generation()
        })
    }
}

/// Whether `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Status {
        generation: Option<i64>,
        conditions: Vec<Condition>,
    }

    impl Conditions for Status {
        fn conditions(&self) -> &[Condition] {
            &self.conditions
        }
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.conditions
        }
        fn generation(&self) -> Option<i64> {
            self.generation
        }
    }

    #[test]
    fn complaints_are_recognised_per_generation() {
        let mut status = Status {
            generation: Some(2),
            ..Status::default()
        };
        assert!(!status.already_reported("Invalid", "InvalidSpec", "bad"));
        status.set_condition("Invalid", true, "InvalidSpec", "bad");
        assert!(status.already_reported("Invalid", "InvalidSpec", "bad"));
        assert!(!status.already_reported("Invalid", "InvalidSpec", "worse"));
        assert_eq!(status.true_reason("Invalid"), Some("InvalidSpec"));
        status.generation = Some(3);
        assert!(!status.already_reported("Invalid", "InvalidSpec", "bad"));
        status.set_condition("Invalid", false, "Valid", "");
        assert_eq!(status.true_reason("Invalid"), None);
    }
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            new("Paused", true, "AlarmFiring", "a", Some(1), at(10)),
        );
        set(
            &mut conditions,
            new("Paused", true, "AlarmFiring", "b", Some(2), at(20)),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].message, "b");
        set(
            &mut conditions,
            new("Paused", false, "AlarmOk", "c", Some(2), at(30)),
        );
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert!(!is_true(&conditions, "Paused"));
    }

    /// The three summary conditions' statuses, Ready's reason and the message of the True one.
    fn summarized(status: &impl Conditions) -> (String, String, String) {
        let of = |type_: &str| {
            status
                .condition(type_)
                .map(|c| c.status.clone())
                .unwrap_or_default()
        };
        let ready = status
            .condition(READY)
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        let message = [READY, RECONCILING, STALLED]
            .iter()
            .filter_map(|t| status.condition(t).filter(|c| c.status == "True"))
            .map(|c| c.message.clone())
            .collect();
        (
            format!("{}/{}/{}", of(READY), of(RECONCILING), of(STALLED)),
            ready,
            message,
        )
    }

    #[test]
    fn a_rollout_is_ready_once_complete_and_not_while_paused() {
        use crate::zau::{ZoneAwareUpdateStatus, condition, reason};
        let mut status = ZoneAwareUpdateStatus {
            observed_generation: Some(3),
            ..ZoneAwareUpdateStatus::default()
        };
        status.set_condition(
            condition::PROGRESSING,
            true,
            reason::BATCH_REMOVED,
            "2 pods",
        );
        status.set_condition(
            condition::COMPLETE,
            false,
            reason::IN_PROGRESS,
            "old pods remain",
        );
        status.summarize(status.summary());
        let (flags, why, message) = summarized(&status);
        assert_eq!(
            (flags.as_str(), why.as_str(), message.as_str()),
            ("False/True/False", "BatchRemoved", "2 pods")
        );

        status.set_condition(
            condition::PAUSED,
            true,
            reason::MANUALLY_PAUSED,
            "spec.paused",
        );
        status.summarize(status.summary());
        let (flags, why, _) = summarized(&status);
        assert_eq!(
            (flags.as_str(), why.as_str()),
            ("False/True/False", "ManuallyPaused")
        );

        // Complete wins over a pause: nothing is left to roll.
        status.set_condition(condition::COMPLETE, true, reason::ROLLOUT_COMPLETE, "done");
        status.summarize(status.summary());
        let (flags, why, _) = summarized(&status);
        assert_eq!(
            (flags.as_str(), why.as_str()),
            ("True/False/False", "RolloutComplete")
        );

        status.set_condition(INVALID, true, reason::INVALID_SPEC, "bad selector");
        status.summarize(status.summary());
        let (flags, why, message) = summarized(&status);
        assert_eq!(
            (flags.as_str(), why.as_str(), message.as_str()),
            ("False/False/True", "InvalidSpec", "bad selector")
        );
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
    }

    #[test]
    fn shards_are_ready_when_available_with_their_configuration_loaded() {
        use crate::sprom::{ShardedPrometheusStatus, condition, reason};
        let mut status = ShardedPrometheusStatus::default();
        status.summarize(status.summary());
        assert_eq!(summarized(&status).0, "False/True/False");

        status.set_condition(
            condition::AVAILABLE,
            false,
            reason::SHARDS_NOT_READY,
            "1 of 3",
        );
        status.summarize(status.summary());
        let (flags, why, message) = summarized(&status);
        assert_eq!(
            (flags.as_str(), why.as_str(), message.as_str()),
            ("False/True/False", "ShardsNotReady", "1 of 3")
        );

        status.set_condition(condition::AVAILABLE, true, reason::SHARDS_READY, "all 3");
        status.set_condition(
            condition::CONFIG_LOADED,
            false,
            "ConfigNotLoaded",
            "shard 1 refused it",
        );
        status.summarize(status.summary());
        assert_eq!(summarized(&status).1, "ConfigNotLoaded");
        assert_eq!(summarized(&status).0, "False/True/False");

        // Degraded (how well) does not make it unready.
        status.set_condition(condition::CONFIG_LOADED, true, "ConfigLoaded", "");
        status.set_condition(condition::DEGRADED, true, reason::UNEVEN_ZONES, "uneven");
        status.summarize(status.summary());
        assert_eq!(summarized(&status).0, "True/False/False");

        status.set_condition(INVALID, true, reason::INVALID_SPEC, "bad");
        status.summarize(status.summary());
        assert_eq!(summarized(&status).0, "False/False/True");
    }
}
