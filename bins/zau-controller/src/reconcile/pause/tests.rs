#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use serde_json::json;
use zone_topology::Zone;

fn spec(value: serde_json::Value) -> ZoneAwareUpdateSpec {
    let mut object = json!({"statefulset": "web"});
    for (key, field) in value.as_object().unwrap() {
        object[key] = field.clone();
    }
    serde_json::from_value(object).unwrap()
}

fn alarm_spec(alarm: &str, ignore_alarm: bool) -> ZoneAwareUpdateSpec {
    spec(json!({"pauseRolloutAlarm": alarm, "ignoreAlarm": ignore_alarm}))
}

fn paused(reason: &str, by: &str) -> ZoneAwareUpdateStatus {
    let mut status = ZoneAwareUpdateStatus {
        paused_rollout: true,
        paused_by: by.to_string(),
        ..ZoneAwareUpdateStatus::default()
    };
    status.set_condition(condition::PAUSED, true, reason, "x");
    status
}

fn hold(source: &'static str, reason: &'static str, message: &str) -> Hold {
    Hold {
        source,
        reason,
        message: message.to_string(),
    }
}

fn recorded(
    spec: &ZoneAwareUpdateSpec,
    previous: &ZoneAwareUpdateStatus,
    holds: &[Hold],
) -> (bool, Draft) {
    let mut draft = Draft {
        status: previous.clone(),
        ..Draft::default()
    };
    let paused = record(spec, previous, holds, true, &mut draft);
    (paused, draft)
}

fn event_reasons(draft: &Draft) -> Vec<&'static str> {
    draft.events.events().iter().map(|e| e.reason).collect()
}

#[test]
fn the_alarm_decides_whether_a_due_batch_waits() {
    let firing = AlarmState::Firing {
        reason: "errors > 5".into(),
    };
    let unavailable = AlarmState::Unavailable {
        error: "timeout".into(),
    };
    // (case, previous, state, paused reason after, events)
    let cases = [
        (
            "clear",
            ZoneAwareUpdateStatus::default(),
            AlarmState::Clear,
            None,
            vec![],
        ),
        (
            "firing",
            ZoneAwareUpdateStatus::default(),
            firing.clone(),
            Some(reason::ALARM_FIRING),
            vec!["RolloutPaused"],
        ),
        (
            "still firing: no second event",
            paused(reason::ALARM_FIRING, "Alarm"),
            firing.clone(),
            Some(reason::ALARM_FIRING),
            vec![],
        ),
        (
            "a status of the previous release (no pausedBy): no second event",
            paused(reason::ALARM_FIRING, ""),
            firing,
            Some(reason::ALARM_FIRING),
            vec![],
        ),
        (
            "firing becomes unreadable",
            paused(reason::ALARM_FIRING, "Alarm"),
            unavailable,
            Some(reason::ALARM_UNAVAILABLE),
            vec!["RolloutPaused"],
        ),
        (
            "missing",
            ZoneAwareUpdateStatus::default(),
            AlarmState::NotFound,
            Some(reason::ALARM_NOT_FOUND),
            vec!["RolloutPaused"],
        ),
        (
            "cleared after a pause",
            paused(reason::ALARM_FIRING, "Alarm"),
            AlarmState::Clear,
            None,
            vec!["RolloutResumed"],
        ),
    ];
    let spec = alarm_spec("a", false);
    for (name, previous, state, paused_by, events) in cases {
        let holds: Vec<Hold> = alarm_hold("a", &state).into_iter().collect();
        let (is_paused, draft) = recorded(&spec, &previous, &holds);
        assert_eq!(is_paused, paused_by.is_some(), "{name}: waits");
        assert_eq!(
            draft.status.true_reason(condition::PAUSED),
            paused_by,
            "{name}"
        );
        assert_eq!(draft.status.paused_rollout, paused_by.is_some(), "{name}");
        assert_eq!(
            draft.status.paused_by,
            if paused_by.is_some() { "Alarm" } else { "" },
            "{name}"
        );
        assert_eq!(event_reasons(&draft), events, "{name}: events");
    }
}

#[test]
fn ignore_alarm_says_what_it_silences() {
    for (spec, message) in [
        (
            alarm_spec("a", true),
            "ignoreAlarm is set: alarm a is not consulted",
        ),
        (
            spec(json!({"pauseRolloutAlarm": "a", "ignoreAlarm": true,
                "alertGate": {"url": "http://p", "matchers": "{a=\"b\"}"}})),
            "ignoreAlarm is set: alarm a and the alert gate are not consulted",
        ),
        (
            spec(json!({"ignoreAlarm": true,
                "alertGate": {"url": "http://p", "matchers": "{a=\"b\"}"}})),
            "ignoreAlarm is set: the alert gate is not consulted",
        ),
        (alarm_spec("a", false), ""),
    ] {
        let (is_paused, draft) = recorded(&spec, &ZoneAwareUpdateStatus::default(), &[]);
        assert!(!is_paused);
        let condition = draft.status.condition(condition::PAUSED).unwrap();
        assert_eq!(condition.message, message);
        assert_eq!(condition.reason, reason::NOT_PAUSED);
    }
}

/// Several sources: pausedBy lists them in the fixed order, the reason is the first's, the
/// message has every one; an event on each change of the set, none while it stays.
#[test]
fn sources_combine_in_order_with_one_event_per_change() {
    let spec = spec(json!({}));
    let alert = hold(pause_source::ALERT, reason::ALERT_FIRING, "E firing");
    let manual = manual_hold(true, None).unwrap();
    let bake = hold(pause_source::BAKE, reason::BAKING, "baking");
    let alarm = alarm_hold("a", &AlarmState::NotFound).unwrap();

    // Given out of order: recorded in order.
    let (is_paused, draft) = recorded(
        &spec,
        &ZoneAwareUpdateStatus::default(),
        &[bake.clone(), manual.clone(), alert.clone()],
    );
    assert!(is_paused);
    assert_eq!(draft.status.paused_by, "Alert,Manual,Bake");
    let condition = draft.status.condition(condition::PAUSED).unwrap();
    assert_eq!(condition.reason, reason::ALERT_FIRING);
    assert_eq!(
        condition.message,
        "E firing; spec.paused is set: no pod is removed until it is unset; baking"
    );
    let events = draft.events.events();
    assert_eq!(event_reasons(&draft), ["RolloutPaused"]);
    assert!(
        events[0]
            .note
            .starts_with("paused by Alert, Manual, Bake: E firing"),
        "{}",
        events[0].note
    );
    assert!(events[0].warning);
    assert_eq!(
        draft.status.true_reason(condition::PROGRESSING),
        Some(reason::PAUSED)
    );

    // The same sources again: no event.
    let (_, again) = recorded(&spec, &draft.status, &[alert.clone(), manual.clone(), bake]);
    assert!(event_reasons(&again).is_empty());

    // The bake ends, the alarm goes missing: one event, the alarm's reason first.
    let (_, changed) = recorded(&spec, &draft.status, &[alert, manual.clone(), alarm]);
    assert_eq!(changed.status.paused_by, "Alarm,Alert,Manual");
    assert_eq!(
        changed.status.true_reason(condition::PAUSED),
        Some(reason::ALARM_NOT_FOUND)
    );
    assert_eq!(event_reasons(&changed), ["RolloutPaused"]);

    // Manual alone is a Normal event, and resuming names what held it.
    let (_, manual_only) = recorded(&spec, &ZoneAwareUpdateStatus::default(), &[manual]);
    assert!(!manual_only.events.events()[0].warning);
    let (is_paused, resumed) = recorded(&spec, &changed.status, &[]);
    assert!(!is_paused);
    assert_eq!(resumed.status.paused_by, "");
    assert!(!resumed.status.paused_rollout);
    assert_eq!(
        resumed.status.true_reason(condition::PAUSED),
        None,
        "Paused is False"
    );
    assert_eq!(event_reasons(&resumed), ["RolloutResumed"]);
    assert_eq!(
        resumed.events.events()[0].note,
        "the rollout resumes: no longer paused by Alarm, Alert, Manual"
    );
}

/// A dark zone holds every batch, first among the sources, with a Warning; a zone just back
/// holds until its pods had time to report Ready; nothing holds afterwards.
#[test]
fn a_dark_or_returning_zone_holds_the_rollout_first() {
    let spec = spec(json!({}));
    let dark = BTreeMap::from([("zone-b".to_string(), 3)]);
    let zone = zone_hold(&dark, &BTreeMap::new()).unwrap();
    assert_eq!(
        zone.message,
        "zone zone-b (3 nodes, none Ready) dark: no pod is removed, in any zone, until it is back"
    );
    let manual = manual_hold(true, None).unwrap();
    let (is_paused, draft) = recorded(&spec, &ZoneAwareUpdateStatus::default(), &[manual, zone]);
    assert!(is_paused);
    assert_eq!(draft.status.paused_by, "Zone,Manual");
    assert_eq!(
        draft.status.true_reason(condition::PAUSED),
        Some(reason::ZONE_DARK)
    );
    assert!(draft.events.events()[0].warning);

    let back: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let returning = BTreeMap::from([("zone-b".to_string(), back)]);
    let settling = zone_hold(&BTreeMap::new(), &returning).unwrap();
    assert_eq!(
        settling.message,
        "zone zone-b is back since 2026-01-01T00:00:00Z: its pods report Ready again until 2026-01-01T00:01:00Z"
    );
    assert_eq!(zone_hold(&BTreeMap::new(), &BTreeMap::new()), None);
    let (_, resumed) = recorded(&spec, &draft.status, &[]);
    assert_eq!(event_reasons(&resumed), ["RolloutResumed"]);
    assert_eq!(
        resumed.events.events()[0].note,
        "the rollout resumes: no longer paused by Zone, Manual"
    );
}

/// A dry run's Paused condition is left to the dry run (it is not a pause source).
#[test]
fn a_dry_run_pause_is_not_overwritten() {
    let spec = spec(json!({"dryRun": true}));
    let mut previous = ZoneAwareUpdateStatus::default();
    previous.set_condition(condition::PAUSED, true, reason::DRY_RUN, "dry run");
    let (_, draft) = recorded(&spec, &previous, &[]);
    assert_eq!(
        draft.status.true_reason(condition::PAUSED),
        Some(reason::DRY_RUN)
    );
    assert!(event_reasons(&draft).is_empty());
}

#[test]
fn gate_messages_name_the_alerts_or_the_error() {
    let firing = Verdict::Firing {
        named: vec!["A".into(), "B{zone=\"zone-a\"}".into()],
        count: 3,
    };
    let held = gate_hold("http://f/api/v1/alerts", "{sev=\"x\"}", false, &firing).unwrap();
    assert_eq!(held.reason, reason::ALERT_FIRING);
    assert_eq!(
        held.message,
        "3 alerts matching {sev=\"x\"} firing at http://f/api/v1/alerts: A, B{zone=\"zone-a\"} and 1 more"
    );
    let down = Verdict::Unavailable(GateError::Api(ApiError::Connect(
        "connection refused".into(),
    )));
    let held = gate_hold("http://f/api/v1/alerts", "{}", true, &down).unwrap();
    assert_eq!(held.reason, reason::ALERT_GATE_UNAVAILABLE);
    assert_eq!(
        held.message,
        "alert gate http://f/api/v1/alerts gives no clear answer, pausing to be safe: cannot connect: connection refused"
    );
    assert_eq!(gate_hold("x", "{}", false, &Verdict::Clear), None);
}

fn rollout_pod(name: &str, zone: &str, revision: &str, ready: bool) -> RolloutPod {
    RolloutPod {
        name: name.into(),
        ordinal: 0,
        zone: Zone::known(zone),
        revision: revision.into(),
        update_revision: "new".into(),
        ready,
        terminating: false,
    }
}

#[test]
fn a_bake_is_due_before_the_first_batch_of_a_later_zone() {
    let bake = Some(Duration::from_secs(300));
    let batch = |zone: &str, pods: &[&str], step| Batch {
        zone: Zone::known(zone),
        pods: pods.iter().map(|p| (*p).to_string()).collect(),
        step,
        next_step: step + 1,
    };
    // zone-a done (web-0, web-1 new and ready), zone-b untouched.
    let pods = [
        rollout_pod("web-0", "zone-a", "new", true),
        rollout_pod("web-1", "zone-a", "new", true),
        rollout_pod("web-2", "zone-b", "old", true),
        rollout_pod("web-3", "zone-b", "old", true),
    ];
    let next_zone = batch("zone-b", &["web-3"], 2);
    assert!(bake_due(bake, &next_zone, &pods));
    assert!(!bake_due(None, &next_zone, &pods), "no bakeTime");
    assert!(
        !bake_due(bake, &batch("zone-b", &["web-3"], 0), &pods),
        "the rollout's first zone"
    );
    // zone-b started: its next batches are not held.
    let started = [
        rollout_pod("web-0", "zone-a", "new", true),
        rollout_pod("web-2", "zone-b", "old", true),
        rollout_pod("web-3", "zone-b", "new", true),
    ];
    assert!(!bake_due(bake, &batch("zone-b", &["web-2"], 3), &started));
    // Replacing a pod that is down already is repair: never held.
    let down = [
        rollout_pod("web-0", "zone-a", "new", true),
        rollout_pod("web-3", "zone-b", "old", false),
    ];
    assert!(!bake_due(bake, &batch("zone-b", &["web-3"], 2), &down));
}

#[test]
fn the_bake_runs_from_the_recorded_time() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let five = Duration::from_secs(300);
    let until = bake_until(None, now, five);
    assert_eq!(until.as_second() - now.as_second(), 300);
    // A fraction of a second rounds up: stored to the second, the bake never ends early.
    let later = Timestamp::new(1_800_000_000, 400_000_000).unwrap();
    assert_eq!(bake_until(None, later, five).as_second(), 1_800_000_301);
    // Recorded earlier: kept (a reconcile later does not restart the bake).
    let recorded = Time(Timestamp::from_second(1_800_000_100).unwrap());
    assert_eq!(bake_until(Some(&recorded), now, five), recorded.0);
    // bakeTime shortened to 1m meanwhile: from now.
    assert_eq!(
        bake_until(Some(&recorded), now, Duration::from_secs(60)).as_second(),
        1_800_000_060
    );
    let (held, left) = bake_hold("zone-b", recorded.0, now).unwrap();
    assert_eq!(left, Duration::from_secs(100));
    assert_eq!(held.source, pause_source::BAKE);
    assert!(
        held.message
            .contains("zone zone-b starts at 2027-01-15T08:01:40Z"),
        "{}",
        held.message
    );
    assert_eq!(bake_hold("zone-b", now, now), None, "over");
    assert_eq!(bake_hold("zone-b", now, recorded.0), None, "past");
}

#[test]
fn rollout_zone_scope_covers_the_updated_zones_while_baking() {
    let status = ZoneAwareUpdateStatus {
        old_replicas: [
            ("zone-a".to_string(), 0),
            ("zone-b".to_string(), 2),
            ("zone-c".to_string(), 2),
        ]
        .into(),
        ..ZoneAwareUpdateStatus::default()
    };
    assert_eq!(
        scope_zones(Some("zone-b"), false, &status),
        BTreeSet::from(["zone-b".to_string()])
    );
    assert_eq!(
        scope_zones(Some("zone-b"), true, &status),
        BTreeSet::from(["zone-a".to_string(), "zone-b".to_string()])
    );
    assert!(scope_zones(None, false, &status).is_empty());
}

/// A pause another controller sets says why, in the Paused message.
#[test]
fn a_pause_set_by_another_controller_says_why() {
    let why = "shard 0 (zone-a) does not load its configuration";
    let held = manual_hold(true, Some(why)).unwrap();
    assert_eq!(held.source, pause_source::MANUAL);
    assert!(held.message.contains(why), "{}", held.message);
    assert_eq!(manual_hold(false, Some(why)), None);
    assert_eq!(
        manual_hold(true, Some(" ")).unwrap().message,
        manual_hold(true, None).unwrap().message
    );
}
