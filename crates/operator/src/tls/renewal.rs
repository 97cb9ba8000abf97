//! Whether the self-signed certificate of a Secret can be served, and until when: pure checks of
//! the stored PEM data against the names the API server dials and the time.
//!
//! The CA is long-lived and its key is kept in the Secret, so the serving certificate is renewed
//! under the same CA: the webhook configuration's caBundle does not change, and the API server
//! trusts the renewed certificate from its first handshake (no admission call fails). The CA is
//! replaced only when it cannot sign (no key, a key that does not fit, expired) — then the new CA
//! is added to the bundle next to the old one while the old one is still valid.

use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::Generated;

/// How long a CA lives. Every CA change is a caBundle change, which the API server learns a
/// moment after the replicas could serve under the new CA; a CA that outlives every serving
/// certificate by far keeps renewals off the caBundle. Its key sits in the Secret next to the
/// serving key, which already lets its reader impersonate the webhook.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Clocks of the replicas and the API server differ a little: a certificate starts this long
/// before it is made, and one starting less than this in the future is taken as valid.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// The shortest renewal margin: a replica re-reads the Secret every 10 s, so each must see the
/// renewed certificate several times over before the old one expires.
pub const MIN_RENEW_BEFORE: Duration = Duration::from_secs(30);

/// How long a serving certificate is valid, and how long before its end it is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertValidity {
    pub validity: Duration,
    pub renew_before: Duration,
}

impl Default for CertValidity {
    /// A year, renewed a month before it ends (what cert-manager's defaults come to, roughly).
    fn default() -> Self {
        Self {
            validity: Duration::from_secs(365 * 24 * 3600),
            renew_before: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidityError {
    #[error("renew-before {renew_before:?} must be at least {MIN_RENEW_BEFORE:?}")]
    RenewTooLate { renew_before: Duration },
    #[error(
        "renew-before {renew_before:?} must be shorter than the validity {validity:?}, or a new \
         certificate would be due at once"
    )]
    RenewBeforeValidity {
        validity: Duration,
        renew_before: Duration,
    },
}

impl CertValidity {
    /// Checked flags: a margin the replicas can act on, inside the validity.
    pub fn new(validity: Duration, renew_before: Duration) -> Result<Self, ValidityError> {
        if renew_before < MIN_RENEW_BEFORE {
            return Err(ValidityError::RenewTooLate { renew_before });
        }
        if renew_before >= validity {
            return Err(ValidityError::RenewBeforeValidity {
                validity,
                renew_before,
            });
        }
        Ok(Self {
            validity,
            renew_before,
        })
    }
}

/// What to do with the certificate of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Serve it; replace it from `renew_at` (unix seconds) on.
    Keep { renew_at: i64 },
    /// A new serving certificate signed by the Secret's CA (the caBundle stays as it is).
    Renew { why: String },
    /// A new CA and serving certificate; `keep_ca` is the old CA, still valid, kept in the
    /// bundle so replicas serving its certificate stay trusted until they switch.
    Replace {
        why: String,
        keep_ca: Option<Vec<u8>>,
    },
}

/// Validity of one certificate, unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Period {
    not_before: i64,
    not_after: i64,
}

fn period(der: &CertificateDer<'_>) -> Option<Period> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let validity = cert.validity();
    Some(Period {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

fn certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

fn secs(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

/// Why the CA of `generated` cannot sign serving certificates valid until `until`, if it cannot.
fn ca_unusable(generated: &Generated, now: i64, until: i64) -> Option<String> {
    let Some(ca_key) = generated.ca_key.as_deref() else {
        return Some("the Secret has no CA key (made by an earlier version?)".to_string());
    };
    let Some(ca) = certs(&generated.ca).into_iter().next() else {
        return Some("the Secret's ca.crt holds no certificate".to_string());
    };
    let Some(ca_period) = period(&ca) else {
        return Some("the Secret's CA certificate cannot be parsed".to_string());
    };
    let fits = std::str::from_utf8(ca_key)
        .ok()
        .and_then(|pem| rcgen::KeyPair::from_pem(pem).ok())
        .zip(x509_parser::parse_x509_certificate(ca.as_ref()).ok())
        .is_some_and(|(key, (_, cert))| {
            rcgen::PublicKeyData::der_bytes(&key) == &*cert.public_key().subject_public_key.data
        });
    if !fits {
        return Some("the Secret's CA key does not fit its CA certificate".to_string());
    }
    if ca_period.not_before > now + secs(CLOCK_SKEW) {
        return Some("the CA is not valid yet".to_string());
    }
    if ca_period.not_after <= until {
        return Some("the CA expires before a new serving certificate would".to_string());
    }
    None
}

/// Why the serving certificate is not what the API server accepts for every name, if it is not:
/// the key fits, the chain to the Secret's CA holds at `now`, every name is covered.
fn serving_unusable(generated: &Generated, names: &[String], now: i64) -> Option<String> {
    if let Err(error) = generated.pair.certified_key() {
        return Some(format!(
            "the serving certificate or key is unusable: {error}"
        ));
    }
    let Some(leaf) = certs(&generated.pair.cert).into_iter().next() else {
        return Some("tls.crt holds no certificate".to_string());
    };
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs(&generated.ca));
    if added == 0 {
        return Some("ca.crt holds no usable CA certificate".to_string());
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier =
        match WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build() {
            Ok(verifier) => verifier,
            Err(error) => return Some(format!("the CA cannot verify: {error}")),
        };
    let at = |secs: i64| {
        UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
    };
    for name in names {
        let Ok(server_name) = ServerName::try_from(name.as_str()) else {
            return Some(format!("{name:?} is not a DNS name or IP address"));
        };
        let verify = |time| verifier.verify_server_cert(&leaf, &[], &server_name, &[], time);
        let verified = match verify(at(now)) {
            // Made by a replica whose clock runs a little ahead: taken within the skew.
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidYet
                | rustls::CertificateError::NotValidYetContext { .. },
            )) => verify(at(now.saturating_add(secs(CLOCK_SKEW)))),
            verified => verified,
        };
        if let Err(error) = verified {
            return Some(format!("not valid for {name}: {error}"));
        }
    }
    None
}

/// What to do with the certificate of a Secret at `now` (unix seconds): serve it while it is
/// what the API server accepts for every one of `names` and not due; renew it under its CA when
/// the CA can sign; replace both otherwise.
pub fn assess(
    generated: &Generated,
    names: &[String],
    validity: CertValidity,
    now: i64,
) -> Assessment {
    let renewed_until = now.saturating_add(secs(validity.validity));
    let serving = serving_unusable(generated, names, now);
    if let Some(why) = ca_unusable(generated, now, renewed_until) {
        let why = match serving {
            Some(serving) => format!("{why}; {serving}"),
            None => why,
        };
        return Assessment::Replace {
            why,
            keep_ca: still_valid_ca(generated, now),
        };
    }
    if let Some(why) = serving {
        return Assessment::Renew { why };
    }
    let Some(leaf) = certs(&generated.pair.cert)
        .into_iter()
        .next()
        .as_ref()
        .and_then(period)
    else {
        return Assessment::Renew {
            why: "the serving certificate cannot be parsed".to_string(),
        };
    };
    let renew_at = renew_at(leaf.not_before, leaf.not_after, validity);
    if now >= renew_at {
        return Assessment::Renew {
            why: format!(
                "due: it expires at {} (unix), renewed {:?} before",
                leaf.not_after, validity.renew_before
            ),
        };
    }
    Assessment::Keep { renew_at }
}

/// When a certificate valid from `not_before` to `not_after` is replaced: `renew_before` ahead
/// of its end, or, for one shorter-lived than that margin (made with other flags), a third of
/// its life ahead.
pub fn renew_at(not_before: i64, not_after: i64, validity: CertValidity) -> i64 {
    let life = not_after.saturating_sub(not_before);
    let margin = secs(validity.renew_before);
    let margin = if margin >= life { life / 3 } else { margin };
    not_after.saturating_sub(margin)
}

/// The first CA of the bundle while it is valid, to keep trusting through a CA change (only the
/// first: a bundle never grows past two CAs).
fn still_valid_ca(generated: &Generated, now: i64) -> Option<Vec<u8>> {
    let ca = certs(&generated.ca).into_iter().next()?;
    let ca_period = period(&ca)?;
    (ca_period.not_before <= now && now < ca_period.not_after)
        .then(|| first_pem_block(&generated.ca))
        .flatten()
}

/// The first `CERTIFICATE` block of PEM text, with its end line.
pub(super) fn first_pem_block(pem: &[u8]) -> Option<Vec<u8>> {
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::str::from_utf8(pem).ok()?;
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = start + text[start..].find(END)? + END.len();
    Some(format!("{}\n", &text[start..end]).into_bytes())
}
