//! The gate against a real local alerts endpoint: every way an answer fails (each pauses), TLS
//! and the token, and the shared cache (one poll per interval for every reader, the smallest
//! interval wins, a changed answer triggers its readers, an unread endpoint stops being polled).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use zone_api::ZoneAwareUpdate;

use zone_operator::prom_api::ApiError;

use super::fetch::{Endpoint, GateError, TlsSettings};
use super::polls::GatePolls;
use super::selector::{Rules, Selector, Verdict};
use super::test_server::{FakePrometheus, Reply, TestCa, alerts, quiet};

const INTERVAL: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_millis(250);

fn zau(name: &str) -> ObjectRef<ZoneAwareUpdate> {
    ObjectRef::new(name).within("apps")
}

fn endpoint(base: &str) -> Endpoint {
    Endpoint {
        url: format!("{base}/api/v1/alerts"),
        token: None,
        tls: None,
    }
}

fn critical() -> Rules {
    Rules {
        selector: Selector::parse(r#"{severity="critical"}"#).unwrap(),
        include_pending: false,
        zones: None,
    }
}

/// Polls `check` every 20 ms until it holds or `within` has passed.
async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each unclear answer is an error, so the verdict is Unavailable (a pause), never Clear.
#[tokio::test]
async fn every_unclear_answer_pauses() {
    // A port nothing listens on: bound, then released.
    let refused = FakePrometheus::gone();
    let cases: [(Option<Reply>, &str); 6] = [
        (None, "connect"),
        (Some(Reply::json(500, "internal error")), "status"),
        (Some(Reply::Hang), "timeout"),
        (Some(Reply::json(200, "{\"status\":")), "bad_json"),
        (
            Some(Reply::json(
                422,
                r#"{"status":"error","errorType":"bad_data","error":"nope"}"#,
            )),
            "error_answer",
        ),
        (Some(Reply::Close), "connect"),
    ];
    let polls = GatePolls::new(None, None);
    let mut servers = Vec::new();
    for (reply, kind) in cases {
        let base = match reply {
            None => refused.clone(),
            Some(reply) => {
                let server = FakePrometheus::start(reply).await;
                let base = server.url.clone();
                servers.push(server);
                base
            }
        };
        let started = Instant::now();
        let answer = polls
            .answer(&endpoint(&base), zau("web"), INTERVAL, TIMEOUT)
            .await;
        let error = answer.result.clone().unwrap_err();
        assert_eq!(error.kind(), kind, "{base}: {error}");
        assert!(
            matches!(critical().verdict(&answer.result), Verdict::Unavailable(_)),
            "{kind}"
        );
        // Bounded by the timeout (plus scheduling slack), never hanging.
        assert!(
            started.elapsed() < TIMEOUT * 4,
            "{kind}: {:?}",
            started.elapsed()
        );
        assert!(!error.to_string().contains('\n'), "one line: {error}");
    }
    let timeout = GateError::timeout(TIMEOUT).to_string();
    assert_eq!(timeout, "no answer within 250ms");
}

/// HTTPS with the CA of a Secret and the server name given (the endpoint is dialled by IP);
/// another CA is refused (and pauses); insecureSkipVerify accepts it. The token goes along.
#[tokio::test]
async fn https_is_verified_against_the_ca_for_the_server_name() {
    let ca = TestCa::new("gate CA");
    let other_ca = TestCa::new("gate CA").pem;
    let server = FakePrometheus::https(
        alerts(&[(&[("alertname", "A"), ("severity", "critical")], "firing")]),
        &ca.serving(&["rules-federator.zone-aware-system.svc"]),
        None,
    )
    .await;
    let https = |ca: Option<&str>, insecure: bool| Endpoint {
        url: format!("{}/api/v1/alerts", server.url),
        token: Some("s3cret".into()),
        tls: Some(TlsSettings {
            ca_pem: ca.map(str::to_string),
            server_name: Some("rules-federator.zone-aware-system.svc".into()),
            insecure_skip_verify: insecure,
        }),
    };
    let polls = GatePolls::new(None, None);
    let verified = polls
        .answer(
            &https(Some(&ca.pem), false),
            zau("a"),
            INTERVAL,
            Duration::from_secs(2),
        )
        .await;
    assert_eq!(
        critical().verdict(&verified.result),
        Verdict::Firing {
            named: vec!["A".into()],
            count: 1
        }
    );
    assert_eq!(
        server.seen()[0].authorization.as_deref(),
        Some("Bearer s3cret")
    );
    let refused = polls
        .answer(
            &https(Some(&other_ca), false),
            zau("a"),
            INTERVAL,
            Duration::from_secs(2),
        )
        .await;
    match &refused.result {
        Err(GateError::Api(ApiError::Connect(message))) => {
            assert!(message.contains("invalid peer certificate"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let insecure = polls
        .answer(
            &https(None, true),
            zau("a"),
            INTERVAL,
            Duration::from_secs(2),
        )
        .await;
    assert!(insecure.result.is_ok(), "{:?}", insecure.result);
}

/// Two rollouts reading one endpoint share its polls: the second read is served from the cache,
/// and the endpoint sees one request per interval, whoever reads. Another token is another
/// endpoint (it may see other alerts).
#[tokio::test]
async fn readers_of_one_endpoint_share_its_polls() {
    let server = FakePrometheus::start(quiet()).await;
    let shared = endpoint(&server.url);
    let polls = GatePolls::new(None, None);
    let first = polls.answer(&shared, zau("a"), INTERVAL, TIMEOUT).await;
    let second = polls.answer(&shared, zau("b"), INTERVAL, TIMEOUT).await;
    assert_eq!(first.result, Ok(vec![]));
    assert!(
        std::sync::Arc::ptr_eq(&first, &second),
        "the second reader got the cached answer"
    );
    assert_eq!(server.seen().len(), 1, "one request for both readers");

    eventually("four polls", Duration::from_secs(5), || {
        server.seen().len() >= 4
    })
    .await;
    // Both keep reading; the polls stay one per interval.
    let _ = polls.answer(&shared, zau("a"), INTERVAL, TIMEOUT).await;
    let _ = polls.answer(&shared, zau("b"), INTERVAL, TIMEOUT).await;
    let seen = server.seen();
    // From the second request on (the first one also made the client), on average: a request
    // that reaches the server late shortens one gap, never the average of several.
    let gaps = u32::try_from(seen.len() - 2).unwrap();
    let average = (seen[seen.len() - 1].at - seen[1].at) / gaps;
    assert!(
        average >= INTERVAL - Duration::from_millis(50),
        "polls {average:?} apart on average, interval {INTERVAL:?}"
    );
    assert_eq!(polls.polled(), 1);

    let other = Endpoint {
        token: Some("other".into()),
        ..shared.clone()
    };
    let before = server.seen().len();
    let _ = polls.answer(&other, zau("c"), INTERVAL, TIMEOUT).await;
    assert_eq!(polls.polled(), 2, "another token is another endpoint");
    let seen = server.seen();
    assert!(seen.len() > before);
    assert!(
        seen.iter()
            .any(|s| s.authorization.as_deref() == Some("Bearer other"))
    );
}

/// The endpoint is polled at the smallest interval of its readers: a reader asking every
/// 100 ms speeds up polls that were every 10 s, at once.
#[tokio::test]
async fn the_smallest_interval_of_the_readers_wins() {
    let server = FakePrometheus::start(quiet()).await;
    let shared = endpoint(&server.url);
    let polls = GatePolls::new(None, None);
    let _ = polls
        .answer(&shared, zau("slow"), Duration::from_secs(10), TIMEOUT)
        .await;
    assert_eq!(server.seen().len(), 1);
    let fast = Duration::from_millis(100);
    let _ = polls
        .answer(&shared, zau("fast"), fast, Duration::from_millis(100))
        .await;
    let since = Instant::now();
    eventually("polls every 100 ms", Duration::from_secs(3), || {
        server.seen().len() >= 5
    })
    .await;
    assert!(
        since.elapsed() < Duration::from_secs(3),
        "not at the 10 s interval"
    );
}

/// A changed answer sends every reader to the reconcile queue (an alert starts firing: paused
/// within one poll, not at the next requeue); an unchanged one sends nothing. Measures the
/// latency from the alert appearing at the endpoint to the trigger.
#[tokio::test]
async fn a_changed_answer_triggers_its_readers() {
    let server = FakePrometheus::start(quiet()).await;
    let shared = endpoint(&server.url);
    let (sender, mut triggers) = mpsc::unbounded();
    let polls = GatePolls::new(Some(sender), None);
    let _ = polls.answer(&shared, zau("a"), INTERVAL, TIMEOUT).await;
    let _ = polls.answer(&shared, zau("b"), INTERVAL, TIMEOUT).await;
    // The first answer triggers once (a reader may have given up waiting for it).
    let first = tokio::time::timeout(Duration::from_secs(2), triggers.next())
        .await
        .unwrap()
        .unwrap();
    while triggers.try_recv().is_ok() {}
    let before = server.seen().len();
    eventually("two more polls", Duration::from_secs(5), || {
        server.seen().len() >= before + 2
    })
    .await;
    assert!(
        triggers.try_recv().is_err(),
        "an unchanged answer triggers nothing (first trigger was {first:?})"
    );

    let fired = Instant::now();
    server.set(alerts(&[(
        &[("alertname", "E"), ("severity", "critical")],
        "firing",
    )]));
    let mut triggered = Vec::new();
    while triggered.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(3), triggers.next())
            .await
            .expect("a trigger within one poll")
            .unwrap();
        triggered.push(next.name);
    }
    let latency = fired.elapsed();
    triggered.sort();
    assert_eq!(triggered, ["a", "b"]);
    assert!(
        latency <= INTERVAL + Duration::from_secs(1),
        "trigger {latency:?} after the alert"
    );
    eprintln!("alert to trigger: {latency:?} (interval {INTERVAL:?})");
    let answer = polls.answer(&shared, zau("a"), INTERVAL, TIMEOUT).await;
    assert!(matches!(
        critical().verdict(&answer.result),
        Verdict::Firing { count: 1, .. }
    ));
}

/// A rollout that stops reading (finished, deleted) is forgotten; with no reader left the
/// endpoint is not polled any more.
#[tokio::test]
async fn an_endpoint_nobody_reads_stops_being_polled() {
    let server = FakePrometheus::start(quiet()).await;
    let shared = endpoint(&server.url);
    let polls = GatePolls::new(None, None);
    let _ = polls.answer(&shared, zau("a"), INTERVAL, TIMEOUT).await;
    let _ = polls.answer(&shared, zau("b"), INTERVAL, TIMEOUT).await;
    polls.forget(&zau("a"));
    let before = server.seen().len();
    eventually("still polled for b", Duration::from_secs(5), || {
        server.seen().len() > before
    })
    .await;
    assert_eq!(polls.polled(), 1);
    polls.forget(&zau("b"));
    eventually("the endpoint dropped", Duration::from_secs(2), || {
        polls.polled() == 0
    })
    .await;
    let after = server.seen().len();
    tokio::time::sleep(INTERVAL * 3).await; // an observation window, not synchronisation
    assert_eq!(server.seen().len(), after, "polled with nobody reading");
}

/// A reader whose own interval shrinks (its spec changed) speeds the polls up at once too.
#[tokio::test]
async fn a_reader_shortening_its_interval_wakes_the_poller() {
    let server = FakePrometheus::start(quiet()).await;
    let shared = endpoint(&server.url);
    let polls = GatePolls::new(None, None);
    let _ = polls
        .answer(&shared, zau("a"), Duration::from_secs(10), TIMEOUT)
        .await;
    assert_eq!(server.seen().len(), 1);
    let _ = polls
        .answer(
            &shared,
            zau("a"),
            Duration::from_millis(100),
            Duration::from_millis(100),
        )
        .await;
    eventually("polls every 100 ms", Duration::from_secs(3), || {
        server.seen().len() >= 4
    })
    .await;
}
