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

/// Keys of the self-signed Secret (`kubernetes.io/tls` plus the CA).
pub const CA_KEY: &str = "ca.crt";
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

/// A freshly generated CA and serving certificate.
pub struct Generated {
    pub ca: Vec<u8>,
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

/// A CA named `ca_name` and a serving certificate for `service.namespace.svc` signed by it.
pub fn generate(ca_name: &str, service: &str, namespace: &str) -> Result<Generated, TlsError> {
    let ca_key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(TlsError::Generate)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key).map_err(TlsError::Generate)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut params =
        CertificateParams::new(serving_names(service, namespace)).map_err(TlsError::Generate)?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{service}.{namespace}.svc"));
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(TlsError::Generate)?;
    Ok(Generated {
        ca: ca_cert.pem().into_bytes(),
        pair: PemPair {
            // The chain a client verifies against the caBundle: the serving certificate alone.
            cert: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
        },
    })
}

fn from_secret(secret: &Secret) -> Option<Generated> {
    let data = secret.data.as_ref()?;
    let get = |key: &str| data.get(key).map(|b| b.0.clone()).filter(|b| !b.is_empty());
    Some(Generated {
        ca: get(CA_KEY)?,
        pair: PemPair {
            cert: get(CERT_KEY)?,
            key: get(KEY_KEY)?,
        },
    })
}

fn secret_data(generated: &Generated) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (CA_KEY.to_string(), ByteString(generated.ca.clone())),
        (
            CERT_KEY.to_string(),
            ByteString(generated.pair.cert.clone()),
        ),
        (KEY_KEY.to_string(), ByteString(generated.pair.key.clone())),
    ])
}

/// Where the self-signed certificate lives and what it is for.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The binary that serves it: the Secret's `app.kubernetes.io/name`.
    pub app: String,
    /// The CA's common name.
    pub ca_name: String,
    pub secret_name: String,
    pub secret_namespace: String,
    pub service_name: String,
    pub service_namespace: String,
    /// The ValidatingWebhookConfiguration whose caBundle must trust the CA (webhooks only).
    pub webhook_config_name: Option<String>,
}

/// The CA and serving certificate of the Secret, creating (or completing) it if needed.
pub async fn ensure_secret(client: &Client, settings: &SelfSigned) -> Result<Generated, TlsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &settings.secret_namespace);
    let error = |source| TlsError::Secret {
        namespace: settings.secret_namespace.clone(),
        name: settings.secret_name.clone(),
        source,
    };
    for _ in 0..3 {
        let existing = api.get_opt(&settings.secret_name).await.map_err(error)?;
        if let Some(generated) = existing.as_ref().and_then(from_secret) {
            return Ok(generated);
        }
        let generated = generate(
            &settings.ca_name,
            &settings.service_name,
            &settings.service_namespace,
        )?;
        let result = match existing {
            // Present but incomplete (created by hand?): fill it, conditional on what we read.
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
                tracing::info!(secret = %settings.secret_name, namespace = %settings.secret_namespace, "created the webhook CA and serving certificate");
                return Ok(generated);
            }
            // Another replica won the race: serve its certificate.
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn generated_certificates_load() {
        let generated = generate("test CA", "zdb-webhook", "zone-aware-system").unwrap();
        let key = generated.pair.certified_key().unwrap();
        assert_eq!(key.cert.len(), 1);
        assert!(String::from_utf8_lossy(&generated.ca).contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn a_mismatched_key_is_refused() {
        let one = generate("test CA", "a", "ns").unwrap();
        let two = generate("test CA", "b", "ns").unwrap();
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
        let first = generate("test CA", "a", "ns").unwrap();
        write_version("..v1", &first);
        std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/tls.crt", dir.join(CERT_KEY)).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", dir.join(KEY_KEY)).unwrap();

        let mut last = read_dir(&dir).unwrap();
        let store = CertStore::new(last.certified_key().unwrap());
        let served = store.current().cert[0].clone();
        assert!(!reload_dir(&dir, &store, &mut last), "unchanged content");

        let second = generate("test CA", "b", "ns").unwrap();
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
}
