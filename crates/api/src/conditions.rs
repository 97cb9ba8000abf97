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

/// Whether `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
