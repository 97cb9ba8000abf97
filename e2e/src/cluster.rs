//! The cluster under test: the local zonal cluster's `e2e/.cluster/env`, or any cluster named by
//! `E2E_KUBECONFIG` / `KUBECONFIG` (e.g. kind for `make e2e-kind`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use kube::api::DeleteParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

pub struct Cluster {
    pub kubeconfig: PathBuf,
    /// Variables of `e2e/.cluster/env` (empty for other clusters).
    pub env: BTreeMap<String, String>,
}

/// The e2e crate's directory in the checkout under test: cargo names it to the test process at
/// run time. The path compiled in is only the fallback: a target dir shared by two checkouts can
/// hand one a test binary built in the other.
pub fn e2e_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `expression` as bash prints it after sourcing `script` (a path below `e2e/`), with the cache
/// home `xdg` (the value of `XDG_CACHE_HOME`, `None` when unset). Sourced rather than parsed: a
/// value is whatever the scripts' shell expressions make it, exactly as for build.sh and
/// images.sh. Panics when the script fails or the value is empty.
pub fn sourced(script: &str, expression: &str, xdg: Option<&str>) -> String {
    let path = e2e_dir().join(script);
    let mut bash = std::process::Command::new("bash");
    bash.arg("-c")
        .arg(format!(r#"source "$1" && printf %s "{expression}""#))
        .arg("bash")
        .arg(&path);
    match xdg {
        Some(xdg) => bash.env("XDG_CACHE_HOME", xdg),
        None => bash.env_remove("XDG_CACHE_HOME"),
    };
    let output = bash
        .output()
        .unwrap_or_else(|e| panic!("sourcing {}: {e}", path.display()));
    let value = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && !value.is_empty(),
        "{expression} of {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    value
}

fn env_file() -> PathBuf {
    e2e_dir().join(".cluster/env")
}

/// Parses the `export NAME="value"` lines of the env file.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_string(), value.trim_matches('"').to_string()))
        .collect()
}

impl Cluster {
    pub fn get() -> Cluster {
        // rustls needs one process-wide crypto provider; kube and the AWS SDK both use aws-lc-rs.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        if let Ok(path) = std::env::var("E2E_KUBECONFIG") {
            return Cluster {
                kubeconfig: path.into(),
                env: BTreeMap::new(),
            };
        }
        match std::fs::read_to_string(env_file()) {
            Ok(text) => {
                let env = parse_env(&text);
                let kubeconfig = env.get("KUBECONFIG").cloned().unwrap_or_default().into();
                Cluster { kubeconfig, env }
            }
            Err(_) => match std::env::var("KUBECONFIG") {
                Ok(path) => Cluster {
                    kubeconfig: path.into(),
                    env: BTreeMap::new(),
                },
                Err(_) => panic!(
                    "no cluster: run `make cluster-up` first (or set E2E_KUBECONFIG); {} is missing",
                    env_file().display()
                ),
            },
        }
    }

    pub async fn config(&self) -> Config {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        // Tests assert on 429s (denied evictions); kube's retry layer would resend them for
        // minutes before reporting.
        config.default_retry = false;
        config
    }

    pub async fn client(&self) -> Client {
        Client::try_from(self.config().await).expect("kube client")
    }

    pub fn var(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }

    /// The LocalStack endpoint (CloudWatch), from the env file or `AWS_ENDPOINT_URL`.
    pub fn aws_endpoint(&self) -> String {
        self.var("AWS_ENDPOINT_URL")
            .expect("AWS_ENDPOINT_URL: LocalStack is not configured")
    }

    /// A CloudWatch client for LocalStack with the test credentials.
    pub async fn cloudwatch(&self) -> aws_sdk_cloudwatch::Client {
        cloudwatch_at(&self.aws_endpoint()).await
    }

    /// The API server's audit log, if this is the local zonal cluster.
    pub fn audit_log(&self) -> Option<PathBuf> {
        self.var("E2E_AUDIT_LOG").map(PathBuf::from)
    }
}

/// A CloudWatch client for the LocalStack at `endpoint`, with the test credentials.
pub async fn cloudwatch_at(endpoint: &str) -> aws_sdk_cloudwatch::Client {
    {
        let credentials =
            aws_sdk_cloudwatch::config::Credentials::new("test", "test", None, None, "e2e");
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(credentials)
            .endpoint_url(endpoint)
            .load()
            .await;
        aws_sdk_cloudwatch::Client::new(&config)
    }
}

/// Runs `cleanup` to completion from `Drop`, which cannot be async. It gets its own thread,
/// runtime and client: a client made on the test's runtime would deadlock there, since that
/// runtime is blocked in this very drop.
pub fn cleanup_blocking<F, Fut>(config: Config, cleanup: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let handle = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            if let Ok(client) = Client::try_from(config) {
                cleanup(client).await;
            }
        });
    });
    let _ = handle.join();
}

/// The deletion a [`DeleteOnDrop`] runs, on a client of its own.
type Deletion = Box<dyn FnOnce(Client) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Deletes one cluster-scoped object when dropped: a test's clean-up, run whether the test passed
/// or panicked.
pub struct DeleteOnDrop {
    config: Config,
    deletion: Option<Deletion>,
}

impl DeleteOnDrop {
    /// Deletes the `K` named `name` with `params` (e.g. background propagation) when dropped.
    pub fn new<K>(config: Config, name: &str, params: DeleteParams) -> DeleteOnDrop
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + 'static,
    {
        let name = name.to_string();
        let deletion: Deletion = Box::new(move |client| {
            Box::pin(async move {
                let _ = Api::<K>::all(client).delete(&name, &params).await;
            })
        });
        DeleteOnDrop {
            config,
            deletion: Some(deletion),
        }
    }
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Some(deletion) = self.deletion.take() {
            cleanup_blocking(self.config.clone(), deletion);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_lines_are_parsed() {
        let env = parse_env(
            "# comment\nexport KUBECONFIG=\"/x/kubeconfig\"\nexport AWS_REGION=us-east-1\nexport PATH=\"/bin:$PATH\"\n",
        );
        assert_eq!(env["KUBECONFIG"], "/x/kubeconfig");
        assert_eq!(env["AWS_REGION"], "us-east-1");
    }
}
