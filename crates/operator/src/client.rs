//! Building the Kubernetes client from [`RuntimeArgs`](crate::RuntimeArgs).

use std::path::Path;

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}")]
    ReadKubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot merge kubeconfig {path} into the previous files")]
    MergeKubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path} is unusable (context {context:?})")]
    UseKubeconfig {
        path: String,
        context: Option<String>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot load context {context:?} from $KUBECONFIG or ~/.kube/config")]
    DefaultKubeconfig {
        context: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig found and not running in a pod")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot create a client from the configuration")]
    Build(#[source] kube::Error),
}

/// Installs aws-lc-rs as the process-wide rustls crypto provider. Idempotent.
///
/// rustls only chooses a provider by itself when exactly one is compiled in. kube uses aws-lc-rs
/// here, but a binary that also links the AWS SDK (or anything pulling `ring`) ends up with two,
/// and the first TLS handshake then fails at run time. Installing one explicitly removes the
/// guess; if another part of the process already installed a provider, that one is kept.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return;
    }
    // Err means another thread installed one between the check and here: fine either way.
    let _already_installed = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Connects with, in order: the given kubeconfig path(s) and optional context; the default
/// kubeconfig with the given context; kube's inference (`$KUBECONFIG` or `~/.kube/config`, else
/// the in-cluster service account).
///
/// `user_agent` names the process in the API server's audit log (e.g.
/// `zau-controller/0.1.0 (pod-name)`), so an operator can tell which replica removed a pod.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    user_agent: Option<&str>,
) -> Result<Client, ClientError> {
    install_crypto_provider();
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let mut config = match (kubeconfig, context) {
        (Some(paths), _) => {
            let merged = read_kubeconfigs(paths)?;
            Config::from_custom_kubeconfig(merged, &options)
                .await
                .map_err(|source| ClientError::UseKubeconfig {
                    path: paths.display().to_string(),
                    context: options.context.clone(),
                    source,
                })?
        }
        (None, Some(context)) => Config::from_kubeconfig(&options).await.map_err(|source| {
            ClientError::DefaultKubeconfig {
                context: context.to_owned(),
                source,
            }
        })?,
        (None, None) => Config::infer().await.map_err(ClientError::Infer)?,
    };
    // kube's default retry layer resends 429 with backoff for minutes. A 429 is an answer the
    // controllers act on (an eviction denied by a disruption budget shrinks the batch), and
    // their own requeues already retry transient errors.
    config.default_retry = false;
    if let Some(agent) = user_agent
        && let Ok(value) = axum::http::HeaderValue::from_str(agent)
    {
        config.headers.push((axum::http::header::USER_AGENT, value));
    }
    Client::try_from(config).map_err(ClientError::Build)
}

/// A client for a process running without Kubernetes: nothing is read or connected, and every
/// request fails at once with a 503 whose message is `reason`. A request nobody planned for is
/// then a clear error instead of a connection to a cluster that was never configured, and code
/// that holds a client (events, [`RuntimeParts`](crate::RuntimeParts)) needs no `Option`.
pub fn disconnected(reason: &str) -> Client {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": reason,
        "reason": "ServiceUnavailable",
        "code": 503,
    });
    let refuse = axum::Router::new().fallback(move || {
        let status = status.clone();
        async move {
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(status),
            )
        }
    });
    Client::new(refuse, "default")
}

/// Reads a `KUBECONFIG`-style list (`a:b:c`), merging as kubectl does: the first file to set a
/// value wins. The flag takes its default from `KUBECONFIG`, so lists must work here too.
fn read_kubeconfigs(paths: &Path) -> Result<Kubeconfig, ClientError> {
    let mut merged = Kubeconfig::default();
    for path in std::env::split_paths(paths.as_os_str()).filter(|p| !p.as_os_str().is_empty()) {
        let display = path.display().to_string();
        let next = Kubeconfig::read_from(&path).map_err(|source| ClientError::ReadKubeconfig {
            path: display.clone(),
            source,
        })?;
        merged = merged
            .merge(next)
            .map_err(|source| ClientError::MergeKubeconfig {
                path: display,
                source,
            })?;
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn write_kubeconfig(dir: &Path, file: &str, context: &str, server: &str) -> std::path::PathBuf {
        let path = dir.join(file);
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {context}\n\
             clusters:\n- name: {context}\n  cluster:\n    server: {server}\n\
             users:\n- name: {context}\n  user:\n    token: abc\n\
             contexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {context}\n    namespace: ns-{context}\n"
        );
        std::fs::write(&path, yaml).unwrap();
        path
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("zone-operator-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn crypto_provider_install_is_idempotent() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[tokio::test]
    async fn connects_with_an_explicit_context_from_a_kubeconfig_list() {
        let dir = temp_dir("list");
        let a = write_kubeconfig(&dir, "a.yaml", "alpha", "https://127.0.0.1:6443");
        let b = write_kubeconfig(&dir, "b.yaml", "beta", "https://127.0.0.1:7443");
        let list = std::env::join_paths([&a, &b]).unwrap();

        let first = connect(Some(Path::new(&list)), None, None).await.unwrap();
        assert_eq!(
            first.default_namespace(),
            "ns-alpha",
            "first file's current-context wins"
        );

        let second = connect(Some(Path::new(&list)), Some("beta"), None)
            .await
            .unwrap();
        assert_eq!(second.default_namespace(), "ns-beta");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_disconnected_client_fails_every_request_with_its_reason() {
        let client = disconnected("started without Kubernetes");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, "default");
        match pods.list(&kube::api::ListParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 503);
                assert_eq!(status.message, "started without Kubernetes");
            }
            other => panic!("expected the refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn reports_a_missing_kubeconfig_and_an_unknown_context() {
        let dir = temp_dir("missing");
        let missing = dir.join("nope.yaml");
        assert!(matches!(
            connect(Some(&missing), None, None).await,
            Err(ClientError::ReadKubeconfig { .. })
        ));
        let a = write_kubeconfig(&dir, "a.yaml", "alpha", "https://127.0.0.1:6443");
        assert!(matches!(
            connect(Some(&a), Some("gamma"), None).await,
            Err(ClientError::UseKubeconfig { .. })
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
