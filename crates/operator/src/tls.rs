//! Serving certificates of the HTTPS servers (admission webhooks, the rules API).
//!
//! - self-signed: a CA and a serving certificate live in one Secret. The first replica creates
//!   it; a replica that loses the creation race reads the winner's. Every replica serves from the
//!   Secret and, for a webhook, keeps the webhook configuration's `caBundle` equal to its CA —
//!   one CA for all replicas, or the last writer of the caBundle would break the others.
//! - `--cert-dir`: `tls.crt` / `tls.key` as mounted from a Secret (cert-manager). The kubelet
//!   rotates a mounted Secret by swapping a `..data` symlink, so the files are re-read by path
//!   (following the symlinks) and compared by content, never watched by inode.
//!
//! Either way the TLS server asks [`CertStore`] for the certificate on every handshake, so a new
//! one is served without a restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::json;

use crate::controller::ErrorChain;

pub mod renewal;
pub use renewal::{Assessment, CertValidity};

/// Keys of the self-signed Secret (`kubernetes.io/tls` plus the CA and its key, with which a
/// serving certificate is renewed under the same CA, so the caBundle need not change).
pub const CA_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no certificate in the PEM data")]
    NoCertificate,
    #[error("cannot parse the PEM data")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error("the key does not fit the certificate, or is of an unsupported type")]
    Key(#[source] rustls::Error),
    #[error("cannot generate a certificate")]
    Generate(#[source] rcgen::Error),
    #[error("unix time {0} is out of range for a certificate")]
    Time(i64),
    #[error("the Secret has no CA key to sign a renewal with")]
    NoCaKey,
    #[error("cannot read or write Secret {namespace}/{name}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read or patch ValidatingWebhookConfiguration {name}")]
    WebhookConfig {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// PEM certificate chain and key, as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl PemPair {
    pub fn certified_key(&self) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(TlsError::Pem)?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(TlsError::Pem)?;
        CertifiedKey::from_der(chain, key, &rustls::crypto::aws_lc_rs::default_provider())
            .map_err(TlsError::Key)
    }
}

/// The certificate served now; swapped when a new one is loaded.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    pub fn new(key: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(key)),
        }
    }

    pub fn swap(&self, key: CertifiedKey) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(key);
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The CA certificates of `pem`, to verify clients' certificates with (a server's client CA
/// file): an error naming what is wrong when one is unreadable or unusable, or none is there.
pub fn client_roots(pem: &[u8]) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate = certificate.map_err(|e| format!("unreadable PEM: {e}"))?;
        roots
            .add(certificate)
            .map_err(|e| format!("a certificate is unusable as a CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no PEM certificate in it".to_string());
    }
    Ok(Arc::new(roots))
}

/// Reads `tls.crt` and `tls.key` of `dir`.
pub fn read_dir(dir: &Path) -> Result<PemPair, TlsError> {
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read(&path).map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    Ok(PemPair {
        cert: read(CERT_KEY)?,
        key: read(KEY_KEY)?,
    })
}

/// Re-reads the directory; returns the new pair when its content changed and is usable. A
/// half-written or broken pair is logged and the current certificate kept.
pub fn reload_dir(dir: &Path, store: &CertStore, last: &mut PemPair) -> bool {
    let pair = match read_dir(dir) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "cannot re-read the serving certificate; keeping the current one");
            return false;
        }
    };
    if pair == *last {
        return false;
    }
    match pair.certified_key() {
        Ok(key) => {
            store.swap(key);
            *last = pair;
            tracing::info!(dir = %dir.display(), "serving a new certificate");
            true
        }
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "new serving certificate unusable; keeping the current one");
            false
        }
    }
}

/// A CA (a PEM bundle: the current CA first, maybe the previous one while it is valid), its key
/// and a serving certificate signed by it.
#[derive(Clone, PartialEq, Eq)]
pub struct Generated {
    pub ca: Vec<u8>,
    /// None in a Secret made by an earlier version: its CA cannot sign a renewal.
    pub ca_key: Option<Vec<u8>>,
    pub pair: PemPair,
}

/// The names the serving certificate is valid for.
pub fn serving_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "127.0.0.1".to_string(),
        "localhost".to_string(),
    ]
}

fn offset_time(unix: i64) -> Result<time::OffsetDateTime, TlsError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|_| TlsError::Time(unix))
}

/// Valid from a little before `now` (clocks differ, see [`renewal::CLOCK_SKEW`]) for `validity`.
fn set_period(
    params: &mut CertificateParams,
    now: i64,
    validity: std::time::Duration,
) -> Result<(), TlsError> {
    let secs = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    params.not_before = offset_time(now.saturating_sub(secs(renewal::CLOCK_SKEW)))?;
    params.not_after = offset_time(now.saturating_add(secs(validity)))?;
    Ok(())
}

/// A serving certificate for `service.namespace.svc` valid from `now` for `validity`, signed by
/// `issuer`.
fn serving_pair(
    issuer: &Issuer<'_, KeyPair>,
    service: &str,
    namespace: &str,
    validity: CertValidity,
    now: i64,
) -> Result<PemPair, TlsError> {
    let key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut params =
        CertificateParams::new(serving_names(service, namespace)).map_err(TlsError::Generate)?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{service}.{namespace}.svc"));
    set_period(&mut params, now, validity.validity)?;
    let cert = params.signed_by(&key, issuer).map_err(TlsError::Generate)?;
    Ok(PemPair {
        // The chain a client verifies against the caBundle: the serving certificate alone.
        cert: cert.pem().into_bytes(),
        key: key.serialize_pem().into_bytes(),
    })
}

/// A CA named `ca_name` (valid [`renewal::CA_VALIDITY`]) and a serving certificate for
/// `service.namespace.svc` signed by it, valid from `now` (unix seconds) for `validity`;
/// `keep_ca` (an earlier CA) is trusted next to it in the bundle.
pub fn generate(
    ca_name: &str,
    service: &str,
    namespace: &str,
    validity: CertValidity,
    now: i64,
    keep_ca: Option<&[u8]>,
) -> Result<Generated, TlsError> {
    let ca_key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(TlsError::Generate)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    set_period(&mut ca_params, now, renewal::CA_VALIDITY)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(TlsError::Generate)?;
    let ca_key_pem = ca_key.serialize_pem().into_bytes();
    let issuer = Issuer::new(ca_params, ca_key);
    let pair = serving_pair(&issuer, service, namespace, validity, now)?;
    let mut ca = ca_cert.pem().into_bytes();
    if let Some(old) = keep_ca {
        ca.extend_from_slice(old);
    }
    Ok(Generated {
        ca,
        ca_key: Some(ca_key_pem),
        pair,
    })
}

/// A new serving certificate signed by the CA of `current` (which must have its key): the CA
/// and bundle stay as they are, so the API server trusts it at once.
pub fn renew(
    current: &Generated,
    service: &str,
    namespace: &str,
    validity: CertValidity,
    now: i64,
) -> Result<Generated, TlsError> {
    let key_pem = current
        .ca_key
        .as_deref()
        .and_then(|key| std::str::from_utf8(key).ok())
        .ok_or(TlsError::NoCaKey)?;
    let ca_key = KeyPair::from_pem(key_pem).map_err(TlsError::Generate)?;
    let ca_pem = renewal::first_pem_block(&current.ca).ok_or(TlsError::NoCertificate)?;
    let ca_pem = String::from_utf8(ca_pem).map_err(|_| TlsError::NoCertificate)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(TlsError::Generate)?;
    Ok(Generated {
        ca: current.ca.clone(),
        ca_key: current.ca_key.clone(),
        pair: serving_pair(&issuer, service, namespace, validity, now)?,
    })
}

fn from_secret(secret: &Secret) -> Option<Generated> {
    let data = secret.data.as_ref()?;
    let get = |key: &str| data.get(key).map(|b| b.0.clone()).filter(|b| !b.is_empty());
    Some(Generated {
        ca: get(CA_KEY)?,
        ca_key: get(CA_KEY_KEY),
        pair: PemPair {
            cert: get(CERT_KEY)?,
            key: get(KEY_KEY)?,
        },
    })
}

fn secret_data(generated: &Generated) -> BTreeMap<String, ByteString> {
    let mut data = BTreeMap::from([
        (CA_KEY.to_string(), ByteString(generated.ca.clone())),
        (
            CERT_KEY.to_string(),
            ByteString(generated.pair.cert.clone()),
        ),
        (KEY_KEY.to_string(), ByteString(generated.pair.key.clone())),
    ]);
    if let Some(key) = &generated.ca_key {
        data.insert(CA_KEY_KEY.to_string(), ByteString(key.clone()));
    }
    data
}

/// Where the self-signed certificate lives and what it is for.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The binary that serves it: the Secret's `app.kubernetes.io/name`.
    pub app: String,
    /// The CA's common name.
    pub ca_name: String,
    pub secret_name: String,
    /// Empty: the client's default namespace (the pod's).
    pub secret_namespace: String,
    pub service_name: String,
    /// Empty: as the Secret's.
    pub service_namespace: String,
    /// The ValidatingWebhookConfiguration whose caBundle must trust the CA (webhooks only).
    pub webhook_config_name: Option<String>,
    /// How long a serving certificate is valid and when it is renewed.
    pub validity: CertValidity,
}

impl SelfSigned {
    /// These settings with an empty Secret namespace set to `namespace`, and an empty Service
    /// namespace to the Secret's.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        if self.secret_namespace.is_empty() {
            self.secret_namespace = namespace.to_string();
        }
        if self.service_namespace.is_empty() {
            self.service_namespace = self.secret_namespace.clone();
        }
        self
    }
}

/// What a Secret's certificate needs at `now`, and the new content when it needs one.
fn next_content(
    settings: &SelfSigned,
    existing: Option<&Generated>,
    now: i64,
) -> Result<Option<Generated>, TlsError> {
    let names = serving_names(&settings.service_name, &settings.service_namespace);
    let (service, namespace) = (&settings.service_name, &settings.service_namespace);
    let fresh = |keep_ca: Option<&[u8]>| {
        generate(
            &settings.ca_name,
            service,
            namespace,
            settings.validity,
            now,
            keep_ca,
        )
    };
    let Some(current) = existing else {
        return fresh(None).map(Some);
    };
    match renewal::assess(current, &names, settings.validity, now) {
        Assessment::Keep { .. } => Ok(None),
        Assessment::Renew { why } => {
            tracing::info!(secret = %settings.secret_name, namespace = %settings.secret_namespace, why = %why, "renewing the serving certificate under its CA");
            renew(current, service, namespace, settings.validity, now).map(Some)
        }
        Assessment::Replace { why, keep_ca } => {
            tracing::warn!(secret = %settings.secret_name, namespace = %settings.secret_namespace, why = %why, "replacing the CA and serving certificate");
            fresh(keep_ca.as_deref()).map(Some)
        }
    }
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The CA and serving certificate of the Secret, creating it if needed, and renewing or
/// replacing what it holds when the API server would not accept it for the Service's names (or
/// soon would not: see [`renewal::assess`]). Writes are conditional on the version read: of two
/// replicas renewing at once one wins, the other reads and serves the winner's.
pub async fn ensure_secret(client: &Client, settings: &SelfSigned) -> Result<Generated, TlsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &settings.secret_namespace);
    let error = |source| TlsError::Secret {
        namespace: settings.secret_namespace.clone(),
        name: settings.secret_name.clone(),
        source,
    };
    for _ in 0..3 {
        let existing = api.get_opt(&settings.secret_name).await.map_err(error)?;
        let current = existing.as_ref().and_then(from_secret);
        let Some(generated) = next_content(settings, current.as_ref(), unix_now())? else {
            // Nothing to write: what is stored is served.
            return current.ok_or(TlsError::NoCertificate);
        };
        let result = match existing {
            // Present but incomplete, invalid or due: replaced, conditional on what we read.
            Some(mut secret) => {
                secret.data = Some(secret_data(&generated));
                secret.metadata.managed_fields = None;
                api.replace(&settings.secret_name, &PostParams::default(), &secret)
                    .await
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.secret_name.clone()),
                        namespace: Some(settings.secret_namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/name".to_string(),
                            settings.app.clone(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".to_string()),
                    data: Some(secret_data(&generated)),
                    ..Secret::default()
                };
                api.create(&PostParams::default(), &secret).await
            }
        };
        match result {
            Ok(_) => {
                tracing::info!(secret = %settings.secret_name, namespace = %settings.secret_namespace, "stored the CA and serving certificate");
                return Ok(generated);
            }
            // Another replica wrote first: read and judge its certificate.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(source) => return Err(error(source)),
        }
    }
    // Three lost races in a row: read what is there now.
    api.get(&settings.secret_name)
        .await
        .map_err(error)
        .and_then(|secret| from_secret(&secret).ok_or(TlsError::NoCertificate))
}

/// Sets the caBundle of every webhook of the configuration to `ca` where it differs; `Ok(false)`
/// when the configuration does not exist (yet).
pub async fn sync_ca_bundle(client: &Client, name: &str, ca: &[u8]) -> Result<bool, TlsError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let error = |source| TlsError::WebhookConfig {
        name: name.to_string(),
        source,
    };
    let Some(config) = api.get_opt(name).await.map_err(error)? else {
        return Ok(false);
    };
    let stale: Vec<_> = config
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca))
        .map(|w| json!({"name": w.name, "clientConfig": {"caBundle": ByteString(ca.to_vec())}}))
        .collect();
    if stale.is_empty() {
        return Ok(true);
    }
    // Strategic merge: webhooks merge by name, so only caBundle changes.
    let patch = json!({"webhooks": stale});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(error)?;
    tracing::info!(config = %name, webhooks = stale.len(), "caBundle updated");
    Ok(true)
}

#[cfg(test)]
mod tests;
