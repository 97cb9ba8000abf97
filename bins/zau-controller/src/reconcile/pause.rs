//! **pause**: what holds a rollout, in the order `status.pausedBy` lists them:
//!
//! - **Zone**: a zone has nodes and none of them is Ready (an outage): nothing is removed, in
//!   any zone, until it is back (docs/outages.md);
//! - **Alarm**: `pauseRolloutAlarm` in ALARM, missing, or unreadable;
//! - **Alert**: alerts matching `alertGate.matchers` fire (in scope), or the gate gives no clear
//!   answer;
//! - **Manual**: `spec.paused`;
//! - **Bake**: a zone completed less than `bakeTime` ago and the next zone's first batch is due.
//!
//! `ignoreAlarm` silences the alarm and the gate (neither is asked). The sources are asked
//! here; what they mean for the status, the events and the requeue is pure ([`record`], [`bake`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use zone_api::conditions::Conditions;
use zone_api::zau::{ALARM_REASONS, PAUSED_BECAUSE_ANNOTATION, ZoneScope, condition};
use zone_api::zau::{GateTarget, ValidAlertGate};
use zone_api::zau::{pause_source, reason};
use zone_api::{ZoneAwareUpdateSpec, ZoneAwareUpdateStatus};
use zone_topology::rollout::{Batch, RolloutPod};

use super::context::ResolvedGate;
use super::observe::Observed;
use super::{Draft, Step};
use crate::alarm::AlarmState;
use zone_operator::prom_api::ApiError;

use crate::gate::{GateError, Rules, Verdict, alert_list, resolve};

/// One source holding the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// One of [`pause_source::ORDER`].
    pub source: &'static str,
    /// The Paused condition's reason when this source is the first.
    pub reason: &'static str,
    pub message: String,
}

/// Every reason of the Paused condition that a source sets (not the dry run's).
const PAUSE_REASONS: [&str; 8] = [
    reason::ZONE_DARK,
    ALARM_REASONS[0],
    ALARM_REASONS[1],
    ALARM_REASONS[2],
    reason::ALERT_FIRING,
    reason::ALERT_GATE_UNAVAILABLE,
    reason::MANUALLY_PAUSED,
    reason::BAKING,
];

/// How long a zone back from an outage still holds rollouts: its pods report Ready again within
/// seconds of their kubelet; until then the planner would take them for pods down and replace
/// them, a removal the outage did not need.
pub const ZONE_SETTLE: Duration = Duration::from_secs(60);

/// What dark and returning zones mean (pure). `dark` maps each zone without a Ready node to its
/// number of nodes: its pods cannot go (their kubelet is gone, an eviction leaves them
/// terminating for as long as the outage lasts), and a pod of another zone removed now would be
/// a second zone down. `returning` maps each zone back for less than [`ZONE_SETTLE`] to when.
pub fn zone_hold(
    dark: &BTreeMap<String, usize>,
    returning: &BTreeMap<String, Timestamp>,
) -> Option<Hold> {
    let mut parts = Vec::new();
    if !dark.is_empty() {
        parts.push(format!(
            "zone {} dark: no pod is removed, in any zone, until {} back",
            zone_views::nodes::describe_dark(dark),
            if dark.len() == 1 { "it is" } else { "they are" },
        ));
    }
    for (zone, since) in returning {
        let until = since
            .checked_add(SignedDuration::try_from(ZONE_SETTLE).unwrap_or(SignedDuration::ZERO))
            .unwrap_or(*since);
        parts.push(format!(
            "zone {zone} is back since {since}: its pods report Ready again until {until}"
        ));
    }
    (!parts.is_empty()).then(|| Hold {
        source: pause_source::ZONE,
        reason: reason::ZONE_DARK,
        message: parts.join("; "),
    })
}

/// What the alarm's state means (pure).
pub fn alarm_hold(alarm: &str, state: &AlarmState) -> Option<Hold> {
    let (why, message) = match state {
        AlarmState::Clear => return None,
        AlarmState::Firing { reason: why } => (
            reason::ALARM_FIRING,
            format!("alarm {alarm} is in ALARM: {why}"),
        ),
        AlarmState::NotFound => (
            reason::ALARM_NOT_FOUND,
            format!(
                "alarm {alarm} does not exist in CloudWatch (neither a metric nor a composite alarm); the rollout waits until it exists"
            ),
        ),
        AlarmState::Unavailable { error } => (
            reason::ALARM_UNAVAILABLE,
            format!("alarm {alarm} cannot be read, pausing to be safe: {error}"),
        ),
    };
    Some(Hold {
        source: pause_source::ALARM,
        reason: why,
        message,
    })
}

/// What the gate's verdict means (pure); `endpoint` names where it asked.
pub fn gate_hold(endpoint: &str, selector: &str, pending: bool, verdict: &Verdict) -> Option<Hold> {
    match verdict {
        Verdict::Clear => None,
        Verdict::Firing { named, count } => Some(Hold {
            source: pause_source::ALERT,
            reason: reason::ALERT_FIRING,
            message: format!(
                "{count} alert{s} matching {selector} {verb} at {endpoint}: {list}",
                s = if *count == 1 { "" } else { "s" },
                verb = if pending {
                    "firing or pending"
                } else {
                    "firing"
                },
                list = alert_list(named, *count),
            ),
        }),
        Verdict::Unavailable(error) => Some(Hold {
            source: pause_source::ALERT,
            reason: reason::ALERT_GATE_UNAVAILABLE,
            message: format!(
                "alert gate {endpoint} gives no clear answer, pausing to be safe: {error}"
            ),
        }),
    }
}

/// `spec.paused`, with why when the controller that set it says so ([`PAUSED_BECAUSE_ANNOTATION`]).
pub fn manual_hold(paused: bool, because: Option<&str>) -> Option<Hold> {
    if !paused {
        return None;
    }
    let message = match because.map(str::trim).filter(|why| !why.is_empty()) {
        Some(why) => format!("spec.paused is set ({why}): no pod is removed until it is unset"),
        None => "spec.paused is set: no pod is removed until it is unset".to_string(),
    };
    Some(Hold {
        source: pause_source::MANUAL,
        reason: reason::MANUALLY_PAUSED,
        message,
    })
}

/// The bake before `batch` (pure): due when a bake time is set, this rollout has already
/// removed Ready pods (the step counts them, across zones), the batch's zone has no pod at the
/// update revision yet (its first batch), and the batch takes down a Ready pod (replacing pods
/// that are down already is repair, never held).
pub fn bake_due(bake_time: Option<Duration>, batch: &Batch, pods: &[RolloutPod]) -> bool {
    let Some(_) = bake_time else {
        return false;
    };
    let zone_started = pods
        .iter()
        .any(|pod| pod.zone == batch.zone && pod.is_updated());
    let takes_ready = pods
        .iter()
        .any(|pod| pod.ready && batch.pods.contains(&pod.name));
    batch.step > 0 && !zone_started && takes_ready
}

/// When the next zone may start (pure): the time recorded when the bake began, or `now` +
/// `bake_time` for a bake beginning now; a shorter bake time set meanwhile counts from now.
pub fn bake_until(recorded: Option<&Time>, now: Timestamp, bake_time: Duration) -> Timestamp {
    let from_now = now
        .checked_add(SignedDuration::try_from(bake_time).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    // To the second, as the API server stores it: rounded up, so the bake never ends early.
    let seconds = from_now.as_second() + i64::from(from_now.subsec_nanosecond() > 0);
    let from_now = Timestamp::from_second(seconds).unwrap_or(from_now);
    match recorded {
        Some(Time(recorded)) => (*recorded).min(from_now),
        None => from_now,
    }
}

/// The bake's hold while `now` is before `until` (pure), with the time left.
pub fn bake_hold(zone: &str, until: Timestamp, now: Timestamp) -> Option<(Hold, Duration)> {
    let left = Duration::try_from(until.duration_since(now)).ok()?;
    (!left.is_zero()).then(|| {
        (
            Hold {
                source: pause_source::BAKE,
                reason: reason::BAKING,
                message: format!("baking: zone {zone} starts at {until}"),
            },
            left,
        )
    })
}

/// Records what holds the rollout (pure): `pausedRollout`, `pausedBy`, the Paused condition
/// (reason of the first source, every source's message), and an event on each change of what
/// holds it (paused by X, resumed). `batch_due`: a batch would be removed now, so Progressing
/// says it is paused. Returns whether the rollout is paused.
pub fn record(
    spec: &ZoneAwareUpdateSpec,
    previous: &ZoneAwareUpdateStatus,
    holds: &[Hold],
    batch_due: bool,
    draft: &mut Draft,
) -> bool {
    let previous_reason = previous.true_reason(condition::PAUSED);
    // A status written before pausedBy existed was paused by its alarm only.
    let previous_by = if previous.paused_by.is_empty()
        && previous_reason.is_some_and(|r| ALARM_REASONS.contains(&r))
    {
        pause_source::ALARM
    } else {
        previous.paused_by.as_str()
    };
    let was_paused =
        !previous_by.is_empty() || previous_reason.is_some_and(|r| PAUSE_REASONS.contains(&r));
    let sources: Vec<&str> = pause_source::ORDER
        .into_iter()
        .filter(|source| holds.iter().any(|h| h.source == *source))
        .collect();
    let next = &mut draft.status;
    next.paused_by = sources.join(",");
    let Some(first) = pause_source::ORDER
        .iter()
        .find_map(|source| holds.iter().find(|h| h.source == *source))
    else {
        next.paused_rollout = false;
        if was_paused || next.true_reason(condition::PAUSED).is_none() {
            next.set_condition(condition::PAUSED, false, reason::NOT_PAUSED, ignored(spec));
        }
        if was_paused {
            let by = if previous_by.is_empty() {
                "a pause source".to_string()
            } else {
                previous_by.replace(',', ", ")
            };
            draft.events.normal(
                "RolloutResumed",
                "Resume",
                format!("the rollout resumes: no longer paused by {by}"),
            );
        }
        return false;
    };
    let message = pause_source::ORDER
        .iter()
        .filter_map(|source| holds.iter().find(|h| h.source == *source))
        .map(|h| h.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if previous_by != next.paused_by || previous_reason != Some(first.reason) {
        let text = format!("paused by {}: {message}", sources.join(", "));
        let alarming = sources
            .iter()
            .any(|s| [pause_source::ZONE, pause_source::ALARM, pause_source::ALERT].contains(s));
        if alarming {
            draft.events.warning("RolloutPaused", "Pause", text);
        } else {
            draft.events.normal("RolloutPaused", "Pause", text);
        }
    }
    next.paused_rollout = true;
    next.set_condition(condition::PAUSED, true, first.reason, message);
    if batch_due {
        next.set_condition(
            condition::PROGRESSING,
            true,
            reason::PAUSED,
            format!(
                "a batch is due but the rollout is paused by {}",
                sources.join(", ")
            ),
        );
    }
    true
}

/// The NotPaused message: what `ignoreAlarm` silences.
fn ignored(spec: &ZoneAwareUpdateSpec) -> String {
    if !spec.ignore_alarm {
        return String::new();
    }
    let alarm = spec.pause_rollout_alarm.trim();
    match (alarm.is_empty(), spec.alert_gate.is_some()) {
        (false, false) => format!("ignoreAlarm is set: alarm {alarm} is not consulted"),
        (false, true) => {
            format!("ignoreAlarm is set: alarm {alarm} and the alert gate are not consulted")
        }
        (true, true) => "ignoreAlarm is set: the alert gate is not consulted".to_string(),
        (true, false) => String::new(),
    }
}

/// The zones whose alerts count under `zoneScope: RolloutZone` (pure): the zone being rolled
/// out, and while baking the zones already updated (the bake watches them).
pub fn scope_zones(
    zone: Option<&str>,
    baking: bool,
    status: &ZoneAwareUpdateStatus,
) -> BTreeSet<String> {
    let mut zones: BTreeSet<String> = zone.map(str::to_string).into_iter().collect();
    if baking {
        zones.extend(
            status
                .old_replicas
                .iter()
                .filter(|(_, old)| **old == 0)
                .map(|(zone, _)| zone.clone()),
        );
    }
    zones
}

/// How `gate` is named in messages before (or without) resolving it.
fn describe(gate: &ValidAlertGate, namespace: &str) -> String {
    match &gate.target {
        GateTarget::Url(url) => format!("{url}{}api/v1/alerts", gate.path_prefix),
        GateTarget::Service {
            namespace: service_namespace,
            name,
            port,
            ..
        } => {
            let port = match port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => n.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
            };
            format!(
                "Service {}/{name} port {port}",
                service_namespace.as_deref().unwrap_or(namespace)
            )
        }
    }
}

impl Step<'_> {
    /// Every source holding the rollout now. `batch_due`: a batch would be removed now, so the
    /// alarm is read fresh; otherwise its last state serves for an alarm poll interval. `bake`:
    /// the bake's hold, decided by the caller.
    pub(super) async fn holds(
        &self,
        observed: &Observed,
        zones: BTreeSet<String>,
        batch_due: bool,
        bake: Option<Hold>,
    ) -> Vec<Hold> {
        let mut holds = Vec::new();
        let nodes = &self.ctx.caches.zones;
        holds.extend(zone_hold(
            &nodes.dark_zones(),
            &nodes.returning_zones(ZONE_SETTLE),
        ));
        holds.extend(self.alarm_hold(batch_due).await);
        holds.extend(self.gate_hold(observed, zones).await);
        let because = self.zau.annotations().get(PAUSED_BECAUSE_ANNOTATION);
        holds.extend(manual_hold(
            observed.valid.paused,
            because.map(String::as_str),
        ));
        holds.extend(bake);
        holds
    }

    /// The requeue of a rollout in progress: the alarm poll, or the gate's when it is shorter.
    pub(super) fn poll_interval(&self, observed: &Observed) -> Duration {
        let alarm = self.ctx.settings.alarm_poll_interval;
        match &observed.valid.alert_gate {
            Some(gate) if !self.zau.spec.ignore_alarm => alarm.min(gate.poll_interval),
            _ => alarm,
        }
    }

    async fn alarm_hold(&self, fresh: bool) -> Option<Hold> {
        let alarm = self.zau.spec.pause_rollout_alarm.trim();
        if alarm.is_empty() || self.zau.spec.ignore_alarm {
            return None;
        }
        let poll = self.ctx.settings.alarm_poll_interval;
        let cached = self.ctx.remember(self.uid, |m| {
            m.alarm
                .clone()
                .filter(|(at, _)| !fresh && at.elapsed() < poll)
        });
        let state = match cached {
            Some((_, state)) => state,
            None => {
                let state = self.ctx.alarms.alarm_state(alarm).await;
                self.ctx.remember(self.uid, |m| {
                    m.alarm = Some((Instant::now(), state.clone()));
                });
                state
            }
        };
        alarm_hold(alarm, &state)
    }

    async fn gate_hold(&self, observed: &Observed, zones: BTreeSet<String>) -> Option<Hold> {
        let me = ObjectRef::from_obj(self.zau);
        let (Some(gate), Some(selector)) = (&observed.valid.alert_gate, &observed.selector) else {
            self.ctx.gates.forget(&me);
            return None;
        };
        if self.zau.spec.ignore_alarm {
            self.ctx.gates.forget(&me);
            return None;
        }
        let endpoint = match self.gate_endpoint(gate).await {
            Ok(endpoint) => endpoint,
            Err(error) => {
                let verdict = Verdict::Unavailable(error);
                return gate_hold(
                    &describe(gate, self.namespace),
                    selector.text(),
                    gate.include_pending,
                    &verdict,
                );
            }
        };
        let answer = self
            .ctx
            .gates
            .answer(&endpoint, me, gate.poll_interval, gate.timeout)
            .await;
        if matches!(answer.result, Err(GateError::Api(ApiError::Connect(_)))) {
            // The Service's pod may have moved: resolve it again next time.
            self.ctx.remember(self.uid, |m| m.gate_endpoint = None);
        }
        let rules = Rules {
            selector: selector.clone(),
            include_pending: gate.include_pending,
            zones: (gate.zone_scope == ZoneScope::RolloutZone)
                .then(|| (gate.zone_label.clone(), zones)),
        };
        gate_hold(
            &endpoint.url,
            selector.text(),
            gate.include_pending,
            &rules.verdict(&answer.result),
        )
    }

    /// The endpoint of `gate`: as resolved less than a poll interval ago, or resolved now.
    async fn gate_endpoint(
        &self,
        gate: &ValidAlertGate,
    ) -> Result<crate::gate::Endpoint, GateError> {
        let cached = self.ctx.remember(self.uid, |m| {
            m.gate_endpoint
                .as_ref()
                .filter(|r| r.gate == *gate && r.at.elapsed() < gate.poll_interval)
                .map(|r| r.endpoint.clone())
        });
        if let Some(endpoint) = cached {
            return Ok(endpoint);
        }
        let endpoint = resolve::endpoint(&self.ctx.client, self.namespace, gate).await?;
        self.ctx.remember(self.uid, |m| {
            m.gate_endpoint = Some(ResolvedGate {
                gate: gate.clone(),
                at: Instant::now(),
                endpoint: endpoint.clone(),
            });
        });
        Ok(endpoint)
    }
}

#[cfg(test)]
mod tests;
