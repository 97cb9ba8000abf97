//! Leader election against an in-memory Lease API that enforces resourceVersion conflicts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use support::FakeLeaseApi;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zone_operator::{LeaderElector, LeaderError, LeaderHandle, LeaderStatus, LeaseConfig};

const NAMESPACE: &str = "zone-system";
const LEASE: &str = "zau-controller";
/// Generous: a test waits on state changes, never on this, unless something is broken.
const PATIENCE: Duration = Duration::from_secs(10);

struct Replica {
    handle: LeaderHandle,
    stop: CancellationToken,
    task: JoinHandle<Result<(), LeaderError>>,
}

fn start(api: &FakeLeaseApi, identity: &str, lease_duration: Duration, renew: Duration) -> Replica {
    let config = LeaseConfig {
        name: LEASE.into(),
        namespace: NAMESPACE.into(),
        identity: identity.into(),
        lease_duration,
        renew_interval: renew,
    };
    let (elector, handle) = LeaderElector::new(api.client(NAMESPACE), config).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(stop.clone()));
    Replica { handle, stop, task }
}

fn quick(api: &FakeLeaseApi, identity: &str) -> Replica {
    start(
        api,
        identity,
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
}

/// Whether `handle` acquires the lease within [`PATIENCE`] (panics if it has not decided by then).
async fn acquired(handle: &LeaderHandle) -> bool {
    tokio::time::timeout(PATIENCE, handle.acquired())
        .await
        .expect("decided within PATIENCE")
}

async fn until(handle: &LeaderHandle, what: impl Fn(&LeaderStatus) -> bool) -> LeaderStatus {
    let mut status = handle.watch();
    tokio::time::timeout(PATIENCE, status.wait_for(|s| what(s)))
        .await
        .expect("status never reached")
        .expect("elector gone")
        .clone()
}

fn existing(holder: &str, renewed: Timestamp, seconds: i32, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

#[tokio::test]
async fn creates_a_missing_lease_and_releases_it_on_stop() {
    let api = FakeLeaseApi::new();
    let a = quick(&api, "a");
    assert!(acquired(&a.handle).await);
    assert!(a.handle.is_leader());
    assert_eq!(api.holder().as_deref(), Some("a"));
    assert_eq!(api.transitions(), Some(0));
    assert_eq!(
        api.lease().unwrap().spec.unwrap().lease_duration_seconds,
        Some(30)
    );
    assert!(a.handle.confirm().await.unwrap());

    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    assert_eq!(a.handle.status(), LeaderStatus::Stopped);
    assert!(!a.handle.is_leader());
    assert_eq!(api.holder(), None, "released on graceful stop");
}

#[tokio::test]
async fn renewals_keep_the_lease_fresh() {
    let api = FakeLeaseApi::new();
    let a = quick(&api, "a");
    until(&a.handle, |s| matches!(s, LeaderStatus::Leading { .. })).await;
    let first = api.lease().unwrap().spec.unwrap().renew_time.unwrap();
    let writes = api.writes();
    // Each renewal publishes a new deadline; wait for three of them.
    let mut status = a.handle.watch();
    for _ in 0..3 {
        tokio::time::timeout(PATIENCE, status.changed())
            .await
            .unwrap()
            .unwrap();
    }
    let spec = api.lease().unwrap().spec.unwrap();
    assert!(spec.renew_time.unwrap() > first);
    assert!(api.writes() >= writes + 3);
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(
        spec.lease_transitions,
        Some(0),
        "renewals are not transitions"
    );
    a.stop.cancel();
}

#[tokio::test]
async fn a_valid_lease_of_another_replica_is_respected() {
    let api = FakeLeaseApi::new();
    api.put(existing("other", Timestamp::now(), 30, 2));
    let b = quick(&api, "b");
    let status = until(&b.handle, |s| {
        matches!(s, LeaderStatus::Standby { holder: Some(_) })
    })
    .await;
    assert_eq!(
        status,
        LeaderStatus::Standby {
            holder: Some("other".into())
        }
    );
    assert!(!b.handle.is_leader());
    assert!(!b.handle.confirm().await.unwrap());
    assert_eq!(api.holder().as_deref(), Some("other"));
    assert_eq!(api.writes(), 0, "a standby never writes a held lease");

    b.stop.cancel();
    b.task.await.unwrap().unwrap();
    assert_eq!(
        api.holder().as_deref(),
        Some("other"),
        "stop releases only our own lease"
    );
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_a_transition() {
    let api = FakeLeaseApi::new();
    let long_ago = Timestamp::now() - SignedDuration::from_secs(60);
    api.put(existing("dead", long_ago, 15, 4));
    let b = quick(&api, "b");
    assert!(acquired(&b.handle).await);
    assert_eq!(api.holder().as_deref(), Some("b"));
    assert_eq!(api.transitions(), Some(5));
    b.stop.cancel();
}

#[tokio::test]
async fn the_standby_takes_over_right_after_a_release() {
    let api = FakeLeaseApi::new();
    let a = quick(&api, "a");
    assert!(acquired(&a.handle).await);
    let b = quick(&api, "b");
    until(
        &b.handle,
        |s| matches!(s, LeaderStatus::Standby { holder: Some(h) } if h == "a"),
    )
    .await;

    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    // The lease lasts 30 s: acquiring within PATIENCE proves the release, not expiry, freed it.
    assert!(acquired(&b.handle).await);
    assert_eq!(api.holder().as_deref(), Some("b"));
    assert_eq!(api.transitions(), Some(1));
    b.stop.cancel();
}

#[tokio::test]
async fn racing_replicas_elect_exactly_one() {
    let api = FakeLeaseApi::new();
    let replicas: Vec<_> = ["a", "b", "c"].iter().map(|id| quick(&api, id)).collect();
    for replica in &replicas {
        until(&replica.handle, |s| {
            matches!(
                s,
                LeaderStatus::Leading { .. } | LeaderStatus::Standby { holder: Some(_) }
            )
        })
        .await;
    }
    let leaders: Vec<_> = replicas
        .iter()
        .filter(|r| r.handle.is_leader())
        .map(|r| r.handle.identity().unwrap().to_owned())
        .collect();
    assert_eq!(leaders.len(), 1, "{leaders:?}");
    assert_eq!(api.holder(), Some(leaders[0].clone()));
    for replica in &replicas {
        replica.stop.cancel();
    }
}

#[tokio::test]
async fn confirm_catches_a_stolen_lease_and_fires_lost() {
    let api = FakeLeaseApi::new();
    let a = quick(&api, "a");
    assert!(acquired(&a.handle).await);
    api.steal("intruder", 30);

    assert!(!a.handle.confirm().await.unwrap());
    assert!(!a.handle.is_leader());
    tokio::time::timeout(PATIENCE, a.handle.lost())
        .await
        .unwrap();
    match a.task.await.unwrap() {
        Err(LeaderError::Lost { holder }) => assert_eq!(holder.as_deref(), Some("intruder")),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(
        api.holder().as_deref(),
        Some("intruder"),
        "never clears another's lease"
    );
}

#[tokio::test]
async fn the_elector_notices_a_stolen_lease_on_its_own() {
    let api = FakeLeaseApi::new();
    let a = quick(&api, "a");
    assert!(acquired(&a.handle).await);
    api.steal("intruder", 30);
    tokio::time::timeout(PATIENCE, a.handle.lost())
        .await
        .unwrap();
    assert!(matches!(
        a.task.await.unwrap(),
        Err(LeaderError::Lost { .. })
    ));
}

#[tokio::test]
async fn an_api_outage_ends_leadership_before_the_lease_expires() {
    let api = FakeLeaseApi::new();
    let lease_duration = Duration::from_secs(3);
    let a = start(&api, "a", lease_duration, Duration::from_millis(500));
    assert!(acquired(&a.handle).await);
    let renewed = api.lease().unwrap().spec.unwrap().renew_time.unwrap().0;

    api.set_outage(true);
    tokio::time::timeout(PATIENCE, a.handle.lost())
        .await
        .unwrap();
    let stopped_acting = Timestamp::now();
    // Others may take over at renewTime + leaseDuration; the leader must have stopped before.
    let takeover = renewed + SignedDuration::try_from(lease_duration).unwrap();
    assert!(
        stopped_acting < takeover,
        "stopped at {stopped_acting}, others could take over at {takeover}"
    );
    assert!(!a.handle.is_leader());
    assert!(!a.handle.confirm().await.unwrap());
    assert!(matches!(
        a.task.await.unwrap(),
        Err(LeaderError::Lost { holder: None })
    ));
}
