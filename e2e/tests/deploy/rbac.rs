//! The shipped RBAC as tables of SubjectAccessReview cases: who may do what, and where.

use e2e::identity::ServiceAccountIdentity;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// Where a case asks: cluster-wide (no namespace), in the test's own namespace (where the
/// controllers' leases and Secrets live), or in some application's namespace.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    All,
    Own,
    Other,
}

use Scope::{All, Other, Own};

impl Scope {
    /// The namespace asked about, with `own` the test's namespace.
    pub fn namespace(self, own: &str) -> Option<&str> {
        match self {
            All => None,
            Own => Some(own),
            Other => Some("some-app"),
        }
    }
}

/// `(verb, group, resource[/subresource], scope, name, expected to be allowed)`.
pub type AccessCase = (
    &'static str,
    &'static str,
    &'static str,
    Scope,
    Option<&'static str>,
    bool,
);

/// `(user, verb, zonecontrol.k8s.aws resource[/subresource], scope, expected to be allowed)`:
/// namespace editors (alice) may create and change the three kinds, viewers (bob) only read them.
pub type UserCase = (&'static str, &'static str, &'static str, Scope, bool);

pub const USER_CASES: &[UserCase] = &[
    ("alice", "create", "zoneawareupdates", Own, true),
    ("alice", "update", "zonedisruptionbudgets", Own, true),
    ("alice", "delete", "shardedprometheuses", Own, true),
    ("alice", "create", "zoneawareupdates", Other, false),
    ("alice", "update", "shardedprometheuses/status", Own, false),
    ("bob", "list", "zonedisruptionbudgets", Own, true),
    ("bob", "get", "shardedprometheuses/status", Own, true),
    ("bob", "watch", "zoneawareupdates", Own, true),
    ("bob", "create", "zonedisruptionbudgets", Own, false),
    ("bob", "delete", "shardedprometheuses", Own, false),
];

const ZC: &str = "zonecontrol.k8s.aws";
const COORDINATION: &str = "coordination.k8s.io";
const EVENTS: &str = "events.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const MONITORING: &str = "monitoring.coreos.com";

pub const ZAU_CASES: &[AccessCase] = &[
    ("watch", ZC, "zoneawareupdates", All, None, true),
    ("patch", ZC, "zoneawareupdates/status", Other, None, true),
    ("update", ZC, "zoneawareupdates/status", Other, None, true),
    ("update", ZC, "zoneawareupdates", Other, None, false),
    ("watch", "apps", "statefulsets", All, None, true),
    ("update", "apps", "statefulsets/status", Other, None, true),
    ("update", "apps", "statefulsets", Other, None, false),
    ("patch", "apps", "statefulsets", Other, None, false),
    ("watch", "", "pods", All, None, true),
    ("create", "", "pods/eviction", Other, None, true),
    ("delete", "", "pods", Other, None, false),
    ("list", "", "nodes", All, None, true),
    ("create", EVENTS, "events", Other, None, true),
    ("patch", EVENTS, "events", Other, None, true),
    ("create", COORDINATION, "leases", Own, None, true),
    (
        "update",
        COORDINATION,
        "leases",
        Own,
        Some("zau-controller"),
        true,
    ),
    (
        "update",
        COORDINATION,
        "leases",
        Own,
        Some("someone-else"),
        false,
    ),
    (
        "get",
        COORDINATION,
        "leases",
        Other,
        Some("zau-controller"),
        false,
    ),
    ("get", "", "secrets", Own, Some("zdb-webhook-tls"), false),
    ("watch", ZC, "zonedisruptionbudgets", All, None, false),
];

pub const ZDB_CASES: &[AccessCase] = &[
    ("watch", ZC, "zonedisruptionbudgets", All, None, true),
    (
        "update",
        ZC,
        "zonedisruptionbudgets/status",
        Other,
        None,
        true,
    ),
    (
        "patch",
        ZC,
        "zonedisruptionbudgets/status",
        Other,
        None,
        true,
    ),
    ("update", ZC, "zonedisruptionbudgets", Other, None, false),
    ("watch", "", "pods", All, None, true),
    ("create", "", "pods/eviction", Other, None, false),
    ("delete", "", "pods", Other, None, false),
    ("get", "apps", "replicasets", Other, None, true),
    ("get", "apps", "deployments/scale", Other, None, true),
    ("get", "apps", "statefulsets/scale", Other, None, true),
    ("get", "example.com", "widgets/scale", Other, None, true),
    ("update", "apps", "deployments/scale", Other, None, false),
    ("list", "", "nodes", All, None, true),
    ("create", EVENTS, "events", Other, None, true),
    ("create", COORDINATION, "leases", Own, None, true),
    (
        "update",
        COORDINATION,
        "leases",
        Own,
        Some("zdb-controller"),
        true,
    ),
    ("create", "", "secrets", Own, None, true),
    ("get", "", "secrets", Own, Some("zdb-webhook-tls"), true),
    ("update", "", "secrets", Own, Some("zdb-webhook-tls"), true),
    ("get", "", "secrets", Own, Some("other-secret"), false),
    ("get", "", "secrets", Other, Some("zdb-webhook-tls"), false),
    ("list", "", "secrets", Own, None, false),
    (
        "patch",
        ADMISSION,
        "validatingwebhookconfigurations",
        All,
        Some("zone-aware-eviction-webhook"),
        true,
    ),
    (
        "patch",
        ADMISSION,
        "validatingwebhookconfigurations",
        All,
        Some("another-webhook"),
        false,
    ),
    (
        "delete",
        ADMISSION,
        "validatingwebhookconfigurations",
        All,
        Some("zone-aware-eviction-webhook"),
        false,
    ),
    // The failurePolicy switch reads its own configuration (and no list of all of them) and
    // its own pod's Ready condition.
    (
        "get",
        ADMISSION,
        "validatingwebhookconfigurations",
        All,
        Some("zone-aware-eviction-webhook"),
        true,
    ),
    (
        "list",
        ADMISSION,
        "validatingwebhookconfigurations",
        All,
        None,
        false,
    ),
    ("get", "", "pods", Own, None, true),
];

pub const SHARD_CASES: &[AccessCase] = &[
    ("watch", ZC, "shardedprometheuses", All, None, true),
    ("patch", ZC, "shardedprometheuses/status", Other, None, true),
    ("update", ZC, "shardedprometheuses", Other, None, false),
    ("patch", ZC, "shardedprometheuses", Other, None, false),
    ("watch", "apps", "statefulsets", All, None, true),
    ("patch", "apps", "statefulsets", Other, None, true),
    ("delete", "apps", "statefulsets", Other, None, true),
    ("update", "apps", "statefulsets/status", Other, None, false),
    ("patch", "", "configmaps", Other, None, true),
    ("delete", "", "services", Other, None, true),
    // ConfigMaps: the rule-file children, and every ConfigMap watched (metadata) and read
    // where a monitor or spec.ruleFiles references one. Writes only by server-side apply.
    ("get", "", "configmaps", Other, None, true),
    ("list", "", "configmaps", All, None, true),
    ("watch", "", "configmaps", All, None, true),
    ("delete", "", "configmaps", Other, None, true),
    ("update", "", "configmaps", Other, None, false),
    ("deletecollection", "", "configmaps", Other, None, false),
    // Secrets: each shard's prometheus.yml holds the monitors' credentials, inlined from the
    // Secrets the monitors reference in their namespaces (read, and watched as metadata).
    ("get", "", "secrets", Other, None, true),
    ("list", "", "secrets", All, None, true),
    ("watch", "", "secrets", All, None, true),
    ("create", "", "secrets", Other, None, true),
    ("patch", "", "secrets", Other, None, true),
    ("delete", "", "secrets", Other, None, true),
    ("update", "", "secrets", Other, None, false),
    ("deletecollection", "", "secrets", Other, None, false),
    // No way from there to other credentials: no tokens, no exec.
    ("create", "", "serviceaccounts/token", Other, None, false),
    ("create", "", "pods/exec", Other, None, false),
    // Namespaces: what the namespace selectors select, read only.
    ("list", "", "namespaces", All, None, true),
    ("watch", "", "namespaces", All, None, true),
    ("patch", "", "namespaces", All, None, false),
    ("delete", "", "namespaces", All, None, false),
    // prometheus-operator's objects: read, never written.
    ("get", MONITORING, "servicemonitors", Other, None, true),
    ("list", MONITORING, "podmonitors", All, None, true),
    ("watch", MONITORING, "prometheusrules", All, None, true),
    ("watch", MONITORING, "scrapeconfigs", All, None, true),
    ("update", MONITORING, "servicemonitors", Other, None, false),
    ("delete", MONITORING, "podmonitors", Other, None, false),
    ("patch", MONITORING, "prometheusrules", Other, None, false),
    ("create", MONITORING, "scrapeconfigs", Other, None, false),
    ("list", MONITORING, "prometheuses", All, None, false),
    ("list", "", "nodes", All, None, true),
    ("patch", "", "nodes", All, None, false),
    // Its Prometheus pods are read (the ConfigLoaded prober) and annotated with their
    // configuration's digest (so the kubelet copies a changed Secret at once), never
    // deleted or created.
    ("list", "", "pods", All, None, true),
    ("watch", "", "pods", Other, None, true),
    ("patch", "", "pods", Other, None, true),
    ("get", "", "pods", Other, None, false),
    ("delete", "", "pods", Other, None, false),
    ("create", "", "pods", Other, None, false),
    ("create", "", "pods/exec", Other, None, false),
    (
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        All,
        None,
        true,
    ),
    ("create", EVENTS, "events", Other, None, true),
    ("create", COORDINATION, "leases", Own, None, true),
    (
        "update",
        COORDINATION,
        "leases",
        Own,
        Some("shard-controller"),
        true,
    ),
    (
        "update",
        COORDINATION,
        "leases",
        Own,
        Some("zau-controller"),
        false,
    ),
    ("watch", ZC, "zoneawareupdates", All, None, false),
];

pub const FEDERATOR_CASES: &[AccessCase] = &[
    ("list", "", "pods", Other, None, true),
    ("watch", "", "pods", All, None, true),
    ("get", "", "pods", Other, None, false),
    ("delete", "", "pods", Other, None, false),
    ("get", "", "secrets", Other, None, false),
    // --tls-self-signed-secret: its serving certificate's Secret, and no other.
    ("create", "", "secrets", Own, None, true),
    ("get", "", "secrets", Own, Some("rules-federator-tls"), true),
    (
        "update",
        "",
        "secrets",
        Own,
        Some("rules-federator-tls"),
        true,
    ),
    (
        "delete",
        "",
        "secrets",
        Own,
        Some("rules-federator-tls"),
        false,
    ),
    ("get", "", "secrets", Own, Some("zdb-webhook-tls"), false),
    ("list", "", "secrets", Own, None, false),
    ("list", "", "configmaps", Other, None, false),
    ("create", COORDINATION, "leases", Own, None, false),
    // --auth=kubernetes: each caller's token and permission reviewed.
    (
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        All,
        None,
        true,
    ),
    (
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        All,
        None,
        true,
    ),
    ("watch", ZC, "shardedprometheuses", All, None, false),
];

/// Whether `user` in `groups` may `verb` the resource, asked through a SubjectAccessReview.
#[allow(clippy::too_many_arguments)]
async fn review(
    client: &Client,
    user: String,
    groups: Vec<String>,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user),
            groups: Some(groups),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    answer.status.unwrap().allowed
}

/// Whether the user `user` (no groups but `system:authenticated`) may `verb` the
/// `zonecontrol.k8s.aws` resource, asked through a SubjectAccessReview.
pub async fn user_allowed(
    client: &Client,
    user: &str,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let groups = vec!["system:authenticated".into()];
    review(
        client,
        user.into(),
        groups,
        verb,
        ZC,
        resource,
        namespace,
        None,
    )
    .await
}

/// The cases of `cases` where `identity` is not allowed what the design says, asked through
/// SubjectAccessReviews; `own` is the test's namespace.
pub async fn differences(
    client: &Client,
    identity: &ServiceAccountIdentity,
    cases: &[AccessCase],
    own: &str,
) -> Vec<String> {
    let groups = vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", identity.namespace),
        "system:authenticated".into(),
    ];
    let mut wrong = Vec::new();
    for (verb, group, resource, scope, name, expected) in cases {
        let namespace = scope.namespace(own);
        let user = identity.username();
        let got = review(
            client,
            user,
            groups.clone(),
            verb,
            group,
            resource,
            namespace,
            *name,
        )
        .await;
        if got != *expected {
            wrong.push(format!(
                "{} {verb} {group}/{resource} ns={namespace:?} name={name:?}: allowed={got}, want {expected}",
                identity.service_account
            ));
        }
    }
    wrong
}
