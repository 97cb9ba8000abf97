//! Why a shard's StatefulSet has fewer pods than it should, when the API server refuses them: a
//! missing ServiceAccount, a ResourceQuota, Pod Security admission. The StatefulSet controller
//! says so only in a `FailedCreate` event of the StatefulSet (its status just counts the pods it
//! has), so the status reads that event, for the shards short of pods only.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client};
use zone_api::sprom::contract;

use super::ObservedStatefulSet;

/// How old a refusal may be and still count: the StatefulSet controller repeats it while it
/// keeps failing (its back-off is at most a few minutes), so an older one is of a cause since
/// fixed, or of an earlier StatefulSet of the same name.
const FRESH_FOR: Duration = Duration::from_secs(10 * 60);

/// The most of a refusal's message a status carries.
const MESSAGE_MAX: usize = 512;

/// The events asked for per StatefulSet: the controller repeats a refusal as one event (its
/// count goes up), one per pod name at most.
const EVENTS_MAX: u32 = 50;

/// The latest refusal of each shard short of pods (by shard index) among `stateful_sets` of
/// `name` in `namespace`. A list that fails is logged and leaves the shard out: the status then
/// says only that the shard is not ready, as before.
pub async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
    stateful_sets: &BTreeMap<u32, ObservedStatefulSet>,
) -> BTreeMap<u32, String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut refused = BTreeMap::new();
    for (index, sts) in stateful_sets {
        if !sts.short_of_pods() {
            continue;
        }
        let sts_name = contract::shard_name(name, *index);
        let params = ListParams::default()
            .fields(&format!(
                "involvedObject.kind=StatefulSet,involvedObject.name={sts_name},reason=FailedCreate"
            ))
            .limit(EVENTS_MAX);
        match events.list(&params).await {
            Ok(list) => {
                if let Some(message) = latest(&list.items, Timestamp::now()) {
                    refused.insert(*index, message);
                }
            }
            Err(error) => {
                tracing::info!(namespace, stateful_set = sts_name, %error, "its events could not be listed");
            }
        }
    }
    refused
}

/// The message of the latest of `events` seen within [`FRESH_FOR`] of `now`, cut to
/// [`MESSAGE_MAX`] bytes (at a character boundary).
pub fn latest(events: &[Event], now: Timestamp) -> Option<String> {
    let oldest = now.checked_sub(FRESH_FOR).ok()?;
    events
        .iter()
        .filter_map(|event| Some((last_seen(event)?, event.message.as_deref()?)))
        .filter(|(at, _)| *at >= oldest)
        .max_by_key(|(at, _)| *at)
        .map(|(_, message)| cut(message.trim()))
}

/// When an event was last seen: its last timestamp, else its event time (the events.k8s.io
/// form), else when it was first seen.
fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|series| series.last_observed_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
}

fn cut(message: &str) -> String {
    let kept = zone_operator::events::truncate(message, MESSAGE_MAX);
    match kept.len() == message.len() {
        true => message.to_string(),
        false => format!("{kept}…"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn event(message: &str, last: Option<i64>, micro: Option<i64>) -> Event {
        Event {
            message: Some(message.to_string()),
            last_timestamp: last.map(|s| Time(at(s))),
            event_time: micro.map(|s| MicroTime(at(s))),
            ..Event::default()
        }
    }

    #[test]
    fn the_latest_fresh_refusal_is_taken() {
        let now = at(10_000);
        let events = [
            event("older", Some(9_000), None),
            event(" newest \n", Some(9_900), None),
            event("micro", None, Some(9_500)),
        ];
        assert_eq!(latest(&events, now).as_deref(), Some("newest"));
    }

    #[test]
    fn a_refusal_older_than_the_bound_or_without_a_time_is_not() {
        let now = at(10_000);
        let stale = event("stale", Some(10_000 - 601), None);
        let timeless = event("timeless", None, None);
        assert_eq!(latest(&[stale, timeless], now), None);
        assert_eq!(latest(&[], now), None);
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = latest(&[event(&long, Some(1), None)], at(2)).unwrap();
        assert!(cut.len() <= MESSAGE_MAX + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
