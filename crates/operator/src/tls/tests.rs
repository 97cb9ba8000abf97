#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use std::time::Duration;

/// A fixed "now" (unix seconds, 2026-11-23).
const NOW: i64 = 1_795_000_000;
const HOUR: i64 = 3600;

fn names() -> Vec<String> {
    serving_names("zdb-webhook", "zone-aware-system")
}

/// A serving certificate valid for an hour, renewed 10 minutes before it ends.
fn hour() -> CertValidity {
    CertValidity::new(Duration::from_secs(3600), Duration::from_secs(600)).unwrap()
}

fn made_at(at: i64) -> Generated {
    generate(
        "test CA",
        "zdb-webhook",
        "zone-aware-system",
        hour(),
        at,
        None,
    )
    .unwrap()
}

#[test]
fn generated_certificates_load() {
    let generated = generate(
        "test CA",
        "zdb-webhook",
        "zone-aware-system",
        CertValidity::default(),
        NOW,
        None,
    )
    .unwrap();
    let key = generated.pair.certified_key().unwrap();
    assert_eq!(key.cert.len(), 1);
    assert!(String::from_utf8_lossy(&generated.ca).contains("BEGIN CERTIFICATE"));
}

#[test]
fn a_mismatched_key_is_refused() {
    let one = generate("test CA", "a", "ns", CertValidity::default(), NOW, None).unwrap();
    let two = generate("test CA", "b", "ns", CertValidity::default(), NOW, None).unwrap();
    let mixed = PemPair {
        cert: one.pair.cert,
        key: two.pair.key,
    };
    assert!(mixed.certified_key().is_err());
}

/// The kubelet's layout: `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`; rotation
/// creates a new timestamped directory and swaps the `..data` symlink.
#[test]
fn reload_follows_a_data_symlink_swap() {
    let dir = std::env::temp_dir().join(format!("operator-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write_version = |name: &str, generated: &Generated| {
        let version = dir.join(name);
        std::fs::create_dir_all(&version).unwrap();
        std::fs::write(version.join(CERT_KEY), &generated.pair.cert).unwrap();
        std::fs::write(version.join(KEY_KEY), &generated.pair.key).unwrap();
    };
    let first = generate("test CA", "a", "ns", CertValidity::default(), NOW, None).unwrap();
    write_version("..v1", &first);
    std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tls.crt", dir.join(CERT_KEY)).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", dir.join(KEY_KEY)).unwrap();

    let mut last = read_dir(&dir).unwrap();
    let store = CertStore::new(last.certified_key().unwrap());
    let served = store.current().cert[0].clone();
    assert!(!reload_dir(&dir, &store, &mut last), "unchanged content");

    let second = generate("test CA", "b", "ns", CertValidity::default(), NOW, None).unwrap();
    write_version("..v2", &second);
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    assert!(reload_dir(&dir, &store, &mut last));
    assert_ne!(store.current().cert[0], served);

    // A broken update keeps the current certificate.
    std::fs::write(dir.join("..v2").join(KEY_KEY), b"garbage").unwrap();
    assert!(!reload_dir(&dir, &store, &mut last));
    assert_eq!(
        store.current().cert[0].as_ref(),
        {
            let pair = PemPair {
                cert: second.pair.cert.clone(),
                key: second.pair.key.clone(),
            };
            pair.certified_key().unwrap().cert[0].clone()
        }
        .as_ref()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fresh_certificate_is_kept_until_its_renewal_time_before_it_ends() {
    let generated = made_at(NOW);
    let renew_at = NOW + HOUR - 600;
    assert_eq!(
        renewal::assess(&generated, &names(), hour(), NOW),
        Assessment::Keep { renew_at }
    );
    assert_eq!(
        renewal::assess(&generated, &names(), hour(), renew_at - 1),
        Assessment::Keep { renew_at }
    );
    // Due at the renewal time, still before it expires: renewed under the same CA.
    let Assessment::Renew { why } = renewal::assess(&generated, &names(), hour(), renew_at) else {
        panic!("not renewed at its renewal time")
    };
    assert!(why.contains("due"), "{why}");
}

#[test]
fn an_expired_or_not_yet_valid_certificate_is_renewed() {
    let generated = made_at(NOW);
    let Assessment::Renew { why } = renewal::assess(&generated, &names(), hour(), NOW + HOUR + 1)
    else {
        panic!("an expired certificate was kept")
    };
    assert!(why.contains("expired"), "{why}");
    // A serving certificate from the future (a clock that was far ahead), under a valid CA.
    let future = renew(
        &generated,
        "zdb-webhook",
        "zone-aware-system",
        hour(),
        NOW + 2 * HOUR,
    )
    .unwrap();
    let Assessment::Renew { why } = renewal::assess(&future, &names(), hour(), NOW) else {
        panic!("a certificate not valid yet was kept")
    };
    assert!(why.contains("not valid yet"), "{why}");
    // The whole Secret from the future: its CA cannot sign now either, so both are replaced.
    assert!(matches!(
        renewal::assess(&made_at(NOW + 2 * HOUR), &names(), hour(), NOW),
        Assessment::Replace { keep_ca: None, .. }
    ));
    // Made by a replica whose clock runs a minute ahead: served.
    let ahead = made_at(NOW + 60);
    assert!(matches!(
        renewal::assess(&ahead, &names(), hour(), NOW),
        Assessment::Keep { .. }
    ));
}

#[test]
fn a_certificate_without_the_service_names_is_renewed() {
    let other = generate("test CA", "other", "zone-aware-system", hour(), NOW, None).unwrap();
    let Assessment::Renew { why } = renewal::assess(&other, &names(), hour(), NOW) else {
        panic!("a certificate for another Service was kept")
    };
    assert!(why.contains("zdb-webhook.zone-aware-system.svc"), "{why}");
    // The renewal, under the same CA, is for the right names.
    let renewed = renew(&other, "zdb-webhook", "zone-aware-system", hour(), NOW).unwrap();
    assert_eq!(
        renewed.ca, other.ca,
        "the CA (and so the caBundle) is unchanged"
    );
    assert!(renewed.pair != other.pair);
    assert!(matches!(
        renewal::assess(&renewed, &names(), hour(), NOW),
        Assessment::Keep { .. }
    ));
}

#[test]
fn a_secret_whose_ca_cannot_sign_is_replaced_keeping_a_valid_old_ca_trusted() {
    // An earlier version stored no CA key: the CA cannot sign a renewal.
    let mut legacy = made_at(NOW);
    legacy.ca_key = None;
    let Assessment::Replace { why, keep_ca } = renewal::assess(&legacy, &names(), hour(), NOW)
    else {
        panic!("a Secret without a CA key was kept")
    };
    assert!(why.contains("no CA key"), "{why}");
    let keep_ca = keep_ca.expect("the old CA is valid, so it stays trusted");
    let replaced = generate(
        "test CA",
        "zdb-webhook",
        "zone-aware-system",
        hour(),
        NOW,
        Some(&keep_ca),
    )
    .unwrap();
    let bundle = String::from_utf8(replaced.ca.clone()).unwrap();
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2, "{bundle}");
    assert!(bundle.ends_with(std::str::from_utf8(&keep_ca).unwrap()));
    assert!(matches!(
        renewal::assess(&replaced, &names(), hour(), NOW),
        Assessment::Keep { .. }
    ));

    // A CA key that does not fit the CA certificate.
    let mut mixed = made_at(NOW);
    mixed.ca_key = made_at(NOW).ca_key;
    assert!(matches!(
        renewal::assess(&mixed, &names(), hour(), NOW),
        Assessment::Replace { .. }
    ));
}

#[test]
fn a_ca_that_ends_before_a_renewal_would_is_replaced() {
    let generated = made_at(NOW);
    let near_its_end = NOW + i64::try_from(renewal::CA_VALIDITY.as_secs()).unwrap() - 60;
    assert!(matches!(
        renewal::assess(&generated, &names(), hour(), near_its_end),
        Assessment::Replace {
            keep_ca: Some(_),
            ..
        }
    ));
}

#[test]
fn renewal_flags_leave_room_to_renew() {
    assert!(CertValidity::new(Duration::from_secs(120), Duration::from_secs(60)).is_ok());
    assert!(CertValidity::new(Duration::from_secs(120), Duration::from_secs(120)).is_err());
    assert!(CertValidity::new(Duration::from_secs(120), Duration::from_secs(5)).is_err());
    // A certificate shorter-lived than the margin (made with other flags) is renewed a third
    // of its life before it ends, not at once.
    assert_eq!(renewal::renew_at(0, 300, hour()), 200);
    assert_eq!(renewal::renew_at(0, 3600, hour()), 3000);
}
