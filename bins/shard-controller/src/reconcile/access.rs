//! Whether the Prometheus pods' ServiceAccount may discover targets: a SubjectAccessReview per
//! permission Kubernetes discovery needs. Without them Prometheus logs "forbidden" and shows an
//! empty target list — here it becomes a `Degraded` reason instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use zone_topology::sharding::ROLES_NEEDING_NODE_METADATA;

/// One permission Kubernetes discovery needs: list and watch `resource` of API `group`, in
/// `namespace` (`None`: every namespace, or a cluster-scoped resource).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Needed {
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
}

impl Needed {
    fn describe(&self, verb: &str) -> String {
        match &self.namespace {
            Some(namespace) => format!("{verb} {} in {namespace}", self.resource),
            None => format!("{verb} {}", self.resource),
        }
    }
}

/// What each Kubernetes discovery role reads: (API group, resource), as Prometheus's
/// `discovery/kubernetes` informers do.
fn role_resources(role: &str) -> &'static [(&'static str, &'static str)] {
    match role {
        "node" => &[("", "nodes")],
        "pod" => &[("", "pods")],
        "service" => &[("", "services")],
        "endpoints" => &[("", "endpoints"), ("", "services"), ("", "pods")],
        "endpointslice" => &[
            ("discovery.k8s.io", "endpointslices"),
            ("", "services"),
            ("", "pods"),
        ],
        "ingress" => &[("networking.k8s.io", "ingresses")],
        _ => &[],
    }
}

/// The permissions the `kubernetes_sd_configs` of the user's `scrape_configs` need once rendered,
/// for a Prometheus running in `own_namespace`: each role's resources in the namespaces it names
/// (every namespace when it names none), and nodes when node metadata is attached (by the user,
/// or by the controller's default).
pub fn needed(
    scrape_configs: &[serde_json::Map<String, serde_json::Value>],
    own_namespace: &str,
) -> BTreeSet<Needed> {
    let mut needed = BTreeSet::new();
    let sd_configs = scrape_configs
        .iter()
        .filter_map(|config| config.get("kubernetes_sd_configs")?.as_array())
        .flatten();
    for sd in sd_configs {
        let role = sd.get("role").and_then(|r| r.as_str()).unwrap_or_default();
        let names = sd.get("namespaces");
        let mut namespaces: Vec<Option<String>> = names
            .and_then(|n| n.get("names"))
            .and_then(|n| n.as_array())
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str())
                    .map(|n| Some(n.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        if names
            .and_then(|n| n.get("own_namespace"))
            .and_then(|o| o.as_bool())
            == Some(true)
        {
            namespaces.push(Some(own_namespace.to_string()));
        }
        if namespaces.is_empty() {
            namespaces.push(None);
        }
        for (group, resource) in role_resources(role) {
            let cluster_scoped = *resource == "nodes";
            for namespace in &namespaces {
                needed.insert(Needed {
                    group,
                    resource,
                    namespace: if cluster_scoped {
                        None
                    } else {
                        namespace.clone()
                    },
                });
            }
        }
        // As rendered: node metadata is attached to these roles unless the user said otherwise.
        let attach_node = match sd
            .get("attach_metadata")
            .and_then(|a| a.get("node"))
            .and_then(|n| n.as_bool())
        {
            Some(explicit) => explicit,
            None => ROLES_NEEDING_NODE_METADATA.contains(&role),
        };
        if attach_node {
            needed.insert(Needed {
                group: "",
                resource: "nodes",
                namespace: None,
            });
        }
    }
    needed
}

/// Answers are kept this long: RBAC changes are picked up within it (a resource whose
/// ServiceAccount lacks access is reconciled again after it), and a reconcile storm does not
/// become a SubjectAccessReview storm.
pub const CACHE_FOR: Duration = Duration::from_secs(30);

/// (namespace/ServiceAccount, what was asked) → when it was asked, and what it lacks.
type Answers = BTreeMap<(String, String), (Instant, Vec<String>)>;

/// The answers of the reviews of the shards' ServiceAccounts, each kept [`CACHE_FOR`].
#[derive(Default)]
pub struct AccessCache {
    answers: Mutex<Answers>,
    reads: Mutex<Reads>,
}

impl AccessCache {
    /// The permissions of `needed` that `namespace/service_account` lacks, as "list pods", …
    /// (empty: none). A review the API server refuses to answer is not a finding: it returns
    /// empty and is logged, so a controller without the permission to ask degrades to not
    /// knowing.
    pub async fn missing(
        &self,
        client: &Client,
        namespace: &str,
        service_account: &str,
        needed: &BTreeSet<Needed>,
    ) -> Vec<String> {
        let key = (
            format!("{namespace}/{service_account}"),
            format!("{needed:?}"),
        );
        if let Ok(answers) = self.answers.lock()
            && let Some((at, missing)) = answers.get(&key)
            && at.elapsed() < CACHE_FOR
        {
            return missing.clone();
        }
        let mut missing = Vec::new();
        let checks = needed
            .iter()
            .flat_map(|needed| ["list", "watch"].map(|verb| (needed, verb)));
        for (needed, verb) in checks {
            let attributes = ResourceAttributes {
                group: Some(needed.group.into()),
                resource: Some(needed.resource.into()),
                namespace: needed.namespace.clone(),
                verb: Some(verb.into()),
                ..ResourceAttributes::default()
            };
            match review(client, namespace, service_account, attributes).await {
                Ok(true) => {}
                Ok(false) => missing.push(needed.describe(verb)),
                Err(error) => {
                    tracing::warn!(%error, namespace, service_account, "cannot review the Prometheus ServiceAccount's access");
                    return Vec::new();
                }
            }
        }
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(key, (Instant::now(), missing.clone()));
        }
        missing
    }
}

/// One object of another namespace that a ShardedPrometheus would put into its shards'
/// configuration: `get` on it is what the shards' ServiceAccount must be allowed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Read {
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Read {
    /// What the ServiceAccount lacks, for a rejection: "may not get secrets/creds in team-b".
    pub fn describe(&self, namespace: &str, service_account: &str) -> String {
        let resource = match self.group {
            "" => self.resource.to_string(),
            group => format!("{}.{group}", self.resource),
        };
        format!(
            "ServiceAccount {namespace}/{service_account} may not get {resource} {}/{} (an object \
             of another namespace is used only when the shards' ServiceAccount may read it)",
            self.namespace, self.name
        )
    }
}

/// (namespace/ServiceAccount, the object) → when it was asked, and whether it may get it.
type Reads = BTreeMap<(String, Read), (Instant, bool)>;

impl AccessCache {
    /// Of `reads`, those `namespace/service_account` may not `get`. Unlike [`Self::missing`],
    /// a review that cannot be made is an error: an object of another namespace is never used
    /// on a guess.
    pub async fn denied(
        &self,
        client: &Client,
        namespace: &str,
        service_account: &str,
        reads: Vec<Read>,
    ) -> Result<BTreeSet<Read>, kube::Error> {
        let subject = format!("{namespace}/{service_account}");
        let mut denied = BTreeSet::new();
        for read in reads {
            let key = (subject.clone(), read);
            let cached = self.reads.lock().ok().and_then(|answers| {
                let (at, allowed) = answers.get(&key)?;
                (at.elapsed() < CACHE_FOR).then_some(*allowed)
            });
            let allowed = match cached {
                Some(allowed) => allowed,
                None => {
                    let attributes = ResourceAttributes {
                        group: Some(key.1.group.into()),
                        resource: Some(key.1.resource.into()),
                        namespace: Some(key.1.namespace.clone()),
                        name: Some(key.1.name.clone()),
                        verb: Some("get".into()),
                        ..ResourceAttributes::default()
                    };
                    let allowed = review(client, namespace, service_account, attributes).await?;
                    if let Ok(mut answers) = self.reads.lock() {
                        answers.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
                        answers.insert(key.clone(), (Instant::now(), allowed));
                    }
                    allowed
                }
            };
            if !allowed {
                denied.insert(key.1);
            }
        }
        Ok(denied)
    }
}

/// A SubjectAccessReview: may `namespace/service_account` do what `attributes` say?
async fn review(
    client: &Client,
    namespace: &str,
    service_account: &str,
    attributes: ResourceAttributes,
) -> Result<bool, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{namespace}:{service_account}"
            )),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ]),
            resource_attributes: Some(attributes),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn configs(value: serde_json::Value) -> Vec<serde_json::Map<String, serde_json::Value>> {
        serde_json::from_value(value).unwrap()
    }

    fn described(needed: &BTreeSet<Needed>) -> Vec<String> {
        needed.iter().map(|n| n.describe("list")).collect()
    }

    #[test]
    fn each_role_needs_what_its_discovery_reads_where_it_reads_it() {
        let configs = configs(json!([
            {"job_name": "a", "kubernetes_sd_configs": [
                {"role": "pod"},
                {"role": "endpointslice", "namespaces": {"names": ["apps"], "own_namespace": true}},
            ]},
            {"job_name": "b", "static_configs": [{"targets": ["x:1"]}]},
        ]));
        assert_eq!(
            described(&needed(&configs, "monitoring")),
            [
                "list nodes",
                "list pods",
                "list pods in apps",
                "list pods in monitoring",
                "list services in apps",
                "list services in monitoring",
                "list endpointslices in apps",
                "list endpointslices in monitoring",
            ]
        );
        assert!(
            needed(&configs[1..], "monitoring").is_empty(),
            "static jobs need nothing"
        );
    }
}
