//! The status one reconcile builds, with the events it will publish once that status is
//! written, and the one way every controller reports a spec it cannot act on.
//!
//! The three controllers had grown three copies of the invalid-spec report that had already
//! drifted (one published its event under another action); [`Draft::refuse`] is the only one.

use kube::runtime::controller::Action;
use zone_api::conditions::Conditions;

use crate::events::PendingEvents;

/// The action of the Warning event an invalid spec gets, in every controller.
pub const VALIDATE_ACTION: &str = "Validate";

/// A status being built by one reconcile, and the events it will publish once it is written (an
/// event that describes a status the API server refused would mislead).
#[derive(Debug, Default, PartialEq)]
pub struct Draft<S> {
    pub status: S,
    pub events: PendingEvents,
}

impl<S> Draft<S> {
    /// A draft starting from `status`, with no events yet.
    pub fn new(status: S) -> Self {
        Self {
            status,
            events: PendingEvents::default(),
        }
    }
}

/// Why a spec cannot be acted on (the domain's type, reported here).
pub use zone_api::conditions::Invalid;

/// What an invalid spec blocks, per controller: the condition set False while the spec is
/// invalid (`Progressing`, `Ready`, `Available`) and the message it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub condition: &'static str,
    pub consequence: &'static str,
}

impl<S: Conditions> Draft<S> {
    /// Reports `invalid`: `Invalid` True with its reason and message, `blocked.condition` False
    /// with the same reason and `blocked.consequence`, and one Warning event (action
    /// [`VALIDATE_ACTION`]) per generation and message. Everything else the status held stays.
    /// Returns the action of a reconcile that waits for a change: retrying cannot fix a spec.
    pub fn refuse(&mut self, invalid: Invalid, blocked: Blocked) -> Action {
        let new = self.status.record_invalid(
            invalid.reason,
            &invalid.message,
            blocked.condition,
            blocked.consequence,
        );
        if new {
            self.events
                .warning(invalid.reason, VALIDATE_ACTION, invalid.message);
        }
        Action::await_change()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use zone_api::conditions::INVALID;

    use super::*;

    /// A status with conditions and more: a ShardedPrometheus's.
    type Status = zone_api::sprom::ShardedPrometheusStatus;

    const BLOCKED: Blocked = Blocked {
        condition: "Ready",
        consequence: "nothing is enforced until this is fixed",
    };

    fn draft(generation: i64) -> Draft<Status> {
        Draft::new(Status {
            observed_generation: generation,
            shards: 3,
            ..Status::default()
        })
    }

    #[test]
    fn an_invalid_spec_sets_both_conditions_and_one_warning() {
        let mut draft = draft(2);
        let action = draft.refuse(Invalid::new("InvalidSpec", "spec.x: bad"), BLOCKED);
        assert_eq!(action, Action::await_change());
        let invalid = draft.status.condition(INVALID).unwrap();
        assert_eq!(
            (invalid.status.as_str(), invalid.reason.as_str()),
            ("True", "InvalidSpec")
        );
        assert_eq!(invalid.message, "spec.x: bad");
        assert_eq!(invalid.observed_generation, Some(2));
        let ready = draft.status.condition("Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert_eq!(ready.message, BLOCKED.consequence);
        assert_eq!(draft.status.shards, 3, "the rest of the status stays");
        let events = draft.events.events();
        assert_eq!(events.len(), 1);
        assert!(events[0].warning);
        assert_eq!(
            (events[0].reason, events[0].action, events[0].note.as_str()),
            ("InvalidSpec", VALIDATE_ACTION, "spec.x: bad")
        );
    }

    #[test]
    fn a_repeated_complaint_gets_no_second_event() {
        // (case, generation of the second reconcile, its message, events it publishes)
        let cases = [
            ("same generation and message", 2, "spec.x: bad", 0),
            ("another message", 2, "spec.y: bad", 1),
            ("a new generation", 3, "spec.x: bad", 1),
        ];
        for (name, generation, message, events) in cases {
            let mut first = draft(2);
            first.refuse(Invalid::new("InvalidSpec", "spec.x: bad"), BLOCKED);
            let mut second = Draft::new(Status {
                observed_generation: generation,
                ..first.status.clone()
            });
            second.refuse(Invalid::new("InvalidSpec", message), BLOCKED);
            assert_eq!(second.events.events().len(), events, "{name}");
        }
    }
}
