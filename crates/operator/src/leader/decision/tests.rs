#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const FIFTEEN: Duration = Duration::from_secs(15);

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).unwrap()
}

fn lease(holder: Option<&str>, renewed: Option<i64>, duration: Option<i32>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("zau-controller".into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed.map(|s| MicroTime(at(s))),
            acquire_time: renewed.map(|s| MicroTime(at(s - 100))),
            lease_duration_seconds: duration,
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn missing_lease_is_created() {
    assert_eq!(decide(None, "me", at(0), FIFTEEN), Decision::Create);
}

#[test]
fn free_lease_is_acquired() {
    let released = lease(None, Some(0), Some(1));
    assert_eq!(
        decide(Some(&released), "me", at(0), FIFTEEN),
        Decision::Acquire { previous: None }
    );
    let empty_holder = lease(Some(""), Some(0), Some(15));
    assert_eq!(
        decide(Some(&empty_holder), "me", at(0), FIFTEEN),
        Decision::Acquire { previous: None }
    );
    let no_spec = Lease {
        spec: None,
        ..lease(None, None, None)
    };
    assert_eq!(
        decide(Some(&no_spec), "me", at(0), FIFTEEN),
        Decision::Acquire { previous: None }
    );
}

#[test]
fn own_lease_is_renewed_even_when_expired() {
    // Same identity after a container restart in the same pod: the old process is gone.
    let mine = lease(Some("me"), Some(0), Some(15));
    assert_eq!(decide(Some(&mine), "me", at(5), FIFTEEN), Decision::Renew);
    assert_eq!(decide(Some(&mine), "me", at(500), FIFTEEN), Decision::Renew);
}

#[test]
fn valid_lease_of_another_replica_is_respected() {
    let theirs = lease(Some("other"), Some(0), Some(15));
    assert_eq!(
        decide(Some(&theirs), "me", at(14), FIFTEEN),
        Decision::HeldByOther {
            holder: "other".into(),
            expires: at(15)
        }
    );
}

#[test]
fn expired_lease_of_another_replica_is_taken_over() {
    let theirs = lease(Some("other"), Some(0), Some(15));
    let taken = Decision::Acquire {
        previous: Some("other".into()),
    };
    assert_eq!(decide(Some(&theirs), "me", at(16), FIFTEEN), taken);
    // Exactly at expiry the holder's time is up.
    assert_eq!(decide(Some(&theirs), "me", at(15), FIFTEEN), taken);
}

#[test]
fn the_lease_duration_is_the_holders_not_ours() {
    let long = lease(Some("other"), Some(0), Some(60));
    assert!(matches!(
        decide(Some(&long), "me", at(30), FIFTEEN),
        Decision::HeldByOther { .. }
    ));
    let missing_duration = lease(Some("other"), Some(0), None);
    assert!(matches!(
        decide(Some(&missing_duration), "me", at(10), FIFTEEN),
        Decision::HeldByOther { .. }
    ));
    assert!(matches!(
        decide(Some(&missing_duration), "me", at(20), FIFTEEN),
        Decision::Acquire { .. }
    ));
}

#[test]
fn a_holder_without_any_time_counts_as_expired() {
    let timeless = lease(Some("other"), None, Some(15));
    assert_eq!(
        decide(Some(&timeless), "me", at(0), FIFTEEN),
        Decision::Acquire {
            previous: Some("other".into())
        }
    );
}

#[test]
fn renew_keeps_acquire_time_and_transitions() {
    let mine = lease(Some("me"), Some(0), Some(15));
    let spec = claimed_spec(mine.spec.as_ref(), &Decision::Renew, "me", at(5), 15).unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    assert_eq!(spec.renew_time, Some(MicroTime(at(5))));
    assert_eq!(spec.acquire_time, Some(MicroTime(at(-100))));
    assert_eq!(spec.lease_transitions, Some(4));
    assert_eq!(spec.lease_duration_seconds, Some(15));
}

#[test]
fn takeover_counts_a_transition() {
    let theirs = lease(Some("other"), Some(0), Some(15));
    let decision = decide(Some(&theirs), "me", at(20), FIFTEEN);
    let spec = claimed_spec(theirs.spec.as_ref(), &decision, "me", at(20), 15).unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    assert_eq!(spec.lease_transitions, Some(5));
    assert_eq!(spec.acquire_time, Some(MicroTime(at(20))));
    assert_eq!(spec.renew_time, Some(MicroTime(at(20))));
}

#[test]
fn create_starts_at_zero_transitions() {
    let spec = claimed_spec(None, &Decision::Create, "me", at(0), 15).unwrap();
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    assert_eq!(
        claimed_spec(
            None,
            &Decision::HeldByOther {
                holder: "x".into(),
                expires: at(0)
            },
            "me",
            at(0),
            15
        ),
        None
    );
}

#[test]
fn claims_keep_fields_we_do_not_manage() {
    let mut theirs = lease(Some("other"), Some(0), Some(15));
    if let Some(spec) = theirs.spec.as_mut() {
        spec.preferred_holder = Some("me".into());
        spec.strategy = Some("OldestEmulationVersion".into());
    }
    let decision = decide(Some(&theirs), "me", at(30), FIFTEEN);
    let spec = claimed_spec(theirs.spec.as_ref(), &decision, "me", at(30), 15).unwrap();
    assert_eq!(spec.preferred_holder.as_deref(), Some("me"));
    assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
}

#[test]
fn release_frees_the_lease_for_the_standby() {
    let mine = lease(Some("me"), Some(0), Some(15));
    let released = released_spec(mine.spec.as_ref().unwrap(), at(3));
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_transitions, Some(4));
    let after = Lease {
        spec: Some(released),
        ..mine
    };
    assert_eq!(
        decide(Some(&after), "standby", at(3), FIFTEEN),
        Decision::Acquire { previous: None }
    );
}

#[test]
fn holds_requires_our_identity_and_a_safety_margin() {
    let five = Duration::from_secs(5);
    let mine = lease(Some("me"), Some(0), Some(15));
    assert!(holds(Some(&mine), "me", at(5), FIFTEEN, five));
    assert!(
        !holds(Some(&mine), "me", at(10), FIFTEEN, five),
        "5s left is not more than the 5s margin"
    );
    assert!(!holds(Some(&mine), "me", at(20), FIFTEEN, five), "expired");
    assert!(!holds(Some(&mine), "other", at(1), FIFTEEN, five));
    assert!(!holds(None, "me", at(1), FIFTEEN, five), "deleted lease");
    let released = lease(None, Some(0), Some(15));
    assert!(!holds(Some(&released), "me", at(1), FIFTEEN, five));
}
