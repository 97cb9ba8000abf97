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

#[derive(Default)]
pub struct AccessCache {
    answers: Mutex<Answers>,
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
        let user = format!("system:serviceaccount:{namespace}:{service_account}");
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let mut missing = Vec::new();
        let checks = needed
            .iter()
            .flat_map(|needed| ["list", "watch"].map(|verb| (needed, verb)));
        for (needed, verb) in checks {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                    ]),
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(needed.group.into()),
                        resource: Some(needed.resource.into()),
                        namespace: needed.namespace.clone(),
                        verb: Some(verb.into()),
                        ..ResourceAttributes::default()
                    }),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            match api.create(&PostParams::default(), &review).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
                Ok(_) => missing.push(needed.describe(verb)),
                Err(error) => {
                    tracing::warn!(%error, user, "cannot review the Prometheus ServiceAccount's access");
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
