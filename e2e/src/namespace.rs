//! A temporary namespace per test: labelled, and deleted when the test ends.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::cluster::{Cluster, DeleteOnDrop};
use crate::wait_for;

/// Label on every namespace the e2e tests create (and the webhook tests select on).
pub const E2E_LABEL: &str = "zonecontrol.k8s.aws/e2e";

pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    _delete: DeleteOnDrop,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestNamespace {
    /// Creates `e2e-<prefix>-<unique>` and waits for its default ServiceAccount (pods are refused
    /// until the controller-manager has created it).
    pub async fn create(cluster: &Cluster, prefix: &str) -> TestNamespace {
        let config = cluster.config().await;
        let client = &Client::try_from(config.clone()).expect("kube client");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let unique = format!("{:x}{}", nanos, COUNTER.fetch_add(1, Ordering::Relaxed));
        let name = format!("e2e-{prefix}-{unique}");
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(E2E_LABEL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create namespace");
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || {
                let accounts = accounts.clone();
                async move {
                    match accounts.get_opt("default").await {
                        Ok(Some(_)) => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                }
            },
        )
        .await;
        TestNamespace {
            _delete: DeleteOnDrop::new::<Namespace>(config, &name, DeleteParams::background()),
            name,
            client: client.clone(),
        }
    }

    /// The unique part of the name (`e2e-<prefix>-<suffix>`): a suffix for the names of objects
    /// of this test outside its namespace.
    pub fn suffix(&self) -> &str {
        self.name
            .rsplit_once('-')
            .map_or(&self.name, |(_, suffix)| suffix)
    }

    /// Deletes the namespace and waits (up to `timeout`) until it is gone, its pods with it: the
    /// next measurement starts on an idle cluster.
    pub async fn delete_and_wait(self, timeout: Duration) {
        let name = self.name.clone();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        drop(self); // deletes the namespace
        wait_for(&format!("namespace {name} deleted"), timeout, || async {
            match namespaces.get_opt(&name).await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("still there".to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

/// Waits (up to `timeout`) until no namespace is being deleted, and returns how long that took.
/// Deleting a namespace of thousands of pods keeps the control plane busy for minutes: a
/// measurement started meanwhile would measure that too. Panics naming them at the timeout.
pub async fn wait_until_no_namespace_terminates(client: &Client, timeout: Duration) -> Duration {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = std::time::Instant::now();
    wait_for("no namespace being deleted", timeout, || {
        let namespaces = namespaces.clone();
        async move {
            let listed = namespaces
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            let terminating: Vec<String> = listed
                .items
                .iter()
                .filter(|ns| {
                    ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
                })
                .filter_map(|ns| ns.metadata.name.clone())
                .collect();
            if terminating.is_empty() {
                Ok(())
            } else {
                Err(format!("still being deleted: {}", terminating.join(", ")))
            }
        }
    })
    .await;
    started.elapsed()
}
