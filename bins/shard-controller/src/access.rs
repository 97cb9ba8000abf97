//! Whether the Prometheus pods' ServiceAccount may discover targets: a SubjectAccessReview per
//! permission Kubernetes discovery needs. Without them Prometheus logs "forbidden" and shows an
//! empty target list — here it becomes a `Degraded` reason instead.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// What discovery of pods with node metadata needs, cluster-wide (`resource`, `verb`).
pub const NEEDED: [(&str, &str); 4] = [
    ("pods", "list"),
    ("pods", "watch"),
    ("nodes", "list"),
    ("nodes", "watch"),
];

/// Answers are kept this long: RBAC changes are picked up within it, and a reconcile storm does
/// not become a SubjectAccessReview storm.
const CACHE_FOR: Duration = Duration::from_secs(60);

/// namespace/ServiceAccount → when it was asked, and what it lacks.
type Answers = BTreeMap<(String, String), (Instant, Vec<String>)>;

#[derive(Default)]
pub struct AccessCache {
    answers: Mutex<Answers>,
}

impl AccessCache {
    /// The permissions `namespace/service_account` lacks, as "list pods", … (empty: none).
    /// A review the API server refuses to answer is not a finding: it returns empty and is
    /// logged, so a controller without the permission to ask degrades to not knowing.
    pub async fn missing(
        &self,
        client: &Client,
        namespace: &str,
        service_account: &str,
    ) -> Vec<String> {
        let key = (namespace.to_string(), service_account.to_string());
        if let Ok(answers) = self.answers.lock()
            && let Some((at, missing)) = answers.get(&key)
            && at.elapsed() < CACHE_FOR
        {
            return missing.clone();
        }
        let user = format!("system:serviceaccount:{namespace}:{service_account}");
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let mut missing = Vec::new();
        for (resource, verb) in NEEDED {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                    ]),
                    resource_attributes: Some(ResourceAttributes {
                        resource: Some(resource.into()),
                        verb: Some(verb.into()),
                        ..ResourceAttributes::default()
                    }),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            match api.create(&PostParams::default(), &review).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
                Ok(_) => missing.push(format!("{verb} {resource}")),
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
