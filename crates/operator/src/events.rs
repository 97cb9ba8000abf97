//! Kubernetes Events (`events.k8s.io/v1`) for the objects a controller acts on, so
//! `kubectl describe zau web` tells the story of a rollout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

/// The API server rejects an Event whose note exceeds 1 kB; a denial message that names many
/// blocking pods could, so notes are cut to fit instead of losing the whole event.
pub const MAX_NOTE_BYTES: usize = 1024;

/// `reason` and `action` are limited to 128 characters by the API server.
pub const MAX_REASON_BYTES: usize = 128;

/// Why an event was not published.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("cannot publish event {reason} for {kind}/{name}")]
    Publish {
        reason: String,
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Publishes events as `<controller>` / `<instance>`. Cheap to clone; clones share the
/// deduplication cache (repeated events become a series instead of new objects).
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
    firsts: Arc<Mutex<HashMap<Identical, First>>>,
}

/// How long a repeat joins the series of its first event: the recorder's own cache time.
const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);

/// At most this many first publications are remembered (a few hundred bytes each): beyond it, an
/// event with a new note is published as is, so a storm of distinct notes (a shadow-mode budget
/// under a drain, say) cannot grow the memory without bound.
pub const MAX_REMEMBERED: usize = 1024;

/// What makes two events the same: the objects (without resourceVersion), type, reason, action
/// and note.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Identical {
    regarding: [Option<String>; 6],
    related: Option<[Option<String>; 6]>,
    type_: EventType,
    reason: String,
    action: String,
    note: Option<String>,
}

/// The references an event was first published with, and when it was last repeated.
struct First {
    regarding: ObjectReference,
    related: Option<ObjectReference>,
    last: Instant,
}

/// An object's identity in a reference: everything but its resourceVersion.
fn identity(object: &ObjectReference) -> [Option<String>; 6] {
    [
        object.api_version.clone(),
        object.kind.clone(),
        object.namespace.clone(),
        object.name.clone(),
        object.uid.clone(),
        object.field_path.clone(),
    ]
}

impl EventPublisher {
    /// `controller` is the reporting controller (e.g. `zau-controller`), `instance` this
    /// replica's identity.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            firsts: Arc::default(),
        }
    }

    /// The references to publish `event` with: those of its first publication when it repeats
    /// one (same objects, type, reason, action and note) within [`REPEAT_WINDOW`]. The recorder
    /// turns a repeat into a series only under equal references, resourceVersion included, and
    /// the status write a reconcile makes between two repeats (a stale read deciding the same
    /// refusal again, say) changes it: without this, each repeat would be a new Event.
    fn references(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> (ObjectReference, Option<ObjectReference>) {
        let related = event.secondary.as_ref();
        let key = Identical {
            regarding: identity(regarding),
            related: related.map(identity),
            type_: event.type_,
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
        };
        let now = Instant::now();
        let mut firsts = self
            .firsts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        firsts.retain(|_, first| now.duration_since(first.last) < REPEAT_WINDOW);
        if firsts.len() >= MAX_REMEMBERED && !firsts.contains_key(&key) {
            return (regarding.clone(), related.cloned());
        }
        let first = firsts.entry(key).or_insert_with(|| First {
            regarding: regarding.clone(),
            related: related.cloned(),
            last: now,
        });
        first.last = now;
        (first.regarding.clone(), first.related.clone())
    }

    /// Publishes an event and reports failure.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<&str>,
    ) -> Result<(), EventsError> {
        self.publish_related(regarding, None, type_, reason, action, note)
            .await
    }

    /// As [`EventPublisher::publish`], about `regarding` and `related` (another object the event
    /// is about: a rejected monitor, say). Events are deduplicated by regarding, related, reason
    /// and action, not by note: events of one reason about several objects need `related`, or
    /// they collapse into one series that keeps the first note. An identical repeat is a series
    /// also when the object's resourceVersion changed in between.
    pub async fn publish_related(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<&str>,
    ) -> Result<(), EventsError> {
        let mut event = Event {
            type_,
            reason: truncate(reason, MAX_REASON_BYTES).to_owned(),
            action: truncate(action, MAX_REASON_BYTES).to_owned(),
            note: note.map(|n| truncate(n, MAX_NOTE_BYTES).to_owned()),
            secondary: related.cloned(),
        };
        let (regarding, related) = self.references(&event, regarding);
        event.secondary = related;
        self.recorder
            .publish(&event, &regarding)
            .await
            .map_err(|source| EventsError::Publish {
                reason: reason.to_owned(),
                kind: regarding.kind.clone().unwrap_or_default(),
                name: regarding.name.clone().unwrap_or_default(),
                source,
            })
    }

    /// A `Normal` event, best effort: events explain what happened, so failing to write one
    /// is logged and never fails the reconcile that caused it.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.best_effort(regarding, None, EventType::Normal, reason, action, note)
            .await;
    }

    /// A `Warning` event, best effort (see [`EventPublisher::normal`]).
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.best_effort(regarding, None, EventType::Warning, reason, action, note)
            .await;
    }

    async fn best_effort(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        if let Err(error) = self
            .publish_related(regarding, related, type_, reason, action, Some(note))
            .await
        {
            tracing::warn!(error = %crate::controller::ErrorChain(&error), "event not published");
        }
    }
}

/// Events decided during a reconcile, published once its status is written (an event that
/// describes a status the API server refused would mislead).
#[derive(Debug, Default, PartialEq)]
pub struct PendingEvents {
    events: Vec<PendingEvent>,
}

/// One event of [`PendingEvents`].
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    /// Another object the event is about (see [`EventPublisher::publish_related`]).
    pub related: Option<ObjectReference>,
}

impl PendingEvents {
    pub fn normal(&mut self, reason: &'static str, action: &'static str, note: impl Into<String>) {
        self.push(false, reason, action, note.into());
    }

    pub fn warning(&mut self, reason: &'static str, action: &'static str, note: impl Into<String>) {
        self.push(true, reason, action, note.into());
    }

    /// A `Warning` about `related` too: one event (and series) per related object.
    pub fn warning_about(
        &mut self,
        related: ObjectReference,
        reason: &'static str,
        action: &'static str,
        note: impl Into<String>,
    ) {
        self.push(true, reason, action, note.into());
        if let Some(event) = self.events.last_mut() {
            event.related = Some(related);
        }
    }

    fn push(&mut self, warning: bool, reason: &'static str, action: &'static str, note: String) {
        self.events.push(PendingEvent {
            warning,
            reason,
            action,
            note,
            related: None,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events so far, in order.
    pub fn events(&self) -> &[PendingEvent] {
        &self.events
    }

    /// Publishes every event about `regarding`, best effort, in order.
    pub async fn publish(self, publisher: &EventPublisher, regarding: &ObjectReference) {
        for event in self.events {
            let type_ = if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            publisher
                .best_effort(
                    regarding,
                    event.related.as_ref(),
                    type_,
                    event.reason,
                    event.action,
                    &event.note,
                )
                .await;
        }
    }
}

/// The longest prefix of `text` within `max` bytes that ends on a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate("Evicted", MAX_REASON_BYTES), "Evicted");
    }

    #[test]
    fn long_notes_are_cut_to_the_api_limit() {
        let note = "pod web-12 blocks zone-b; ".repeat(100);
        let cut = truncate(&note, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), MAX_NOTE_BYTES);
        assert!(note.starts_with(cut));
    }

    #[test]
    fn never_splits_a_character() {
        // "é" is two bytes: a cut at an odd byte must step back, not panic.
        let text = "é".repeat(10);
        assert_eq!(truncate(&text, 5), "éé");
    }
}
