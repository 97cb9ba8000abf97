//! Callers authenticated and authorized by Kubernetes, as kube-rbac-proxy and controller-runtime's
//! metrics filter do it: the bearer token goes to a TokenReview, the user it names to a
//! SubjectAccessReview for one resource attribute (or for the request's path, as a non-resource
//! URL), and the decision is cached for a short while so a dashboard refreshing every few seconds
//! does not cost two API requests per panel.
//!
//! The server needs `create` on `tokenreviews` (authentication.k8s.io) and `subjectaccessreviews`
//! (authorization.k8s.io); a caller needs the verb on the attribute (RBAC).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::controller::ErrorChain;

/// Decisions kept at most: every distinct token (times path, in non-resource mode) is one entry.
/// Past it the expired ones go, then all: a flood of made-up tokens costs reviews, not memory.
pub const CACHE_ENTRIES: usize = 4096;

/// A token longer than this is refused without a review (a service-account JWT is ~1 KiB; an
/// OIDC one a few): neither the API server nor the cache gets megabyte keys.
pub const MAX_TOKEN_BYTES: usize = 16 << 10;

/// What the SubjectAccessReview asks about.
#[derive(Clone, Debug, PartialEq)]
pub enum Attributes {
    /// The request's path as a non-resource URL (RBAC `nonResourceURLs`), as controller-runtime's
    /// metrics filter asks.
    NonResource { verb: String },
    /// A fixed resource attribute, whatever the path, as kube-rbac-proxy's
    /// `--resource-attributes` (e.g. `get` on `shardedprometheuses/alerts` in a namespace).
    // Boxed: it is ten optional strings, and the enum is cloned into nothing hot.
    Resource(Box<ResourceAttributes>),
}

/// Why `--authz-resource` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributesError {
    #[error("{0:?}: expected key=value")]
    NotAPair(String),
    #[error("unknown key {0:?} (namespace, group, version, resource, subresource, name)")]
    Key(String),
    #[error("no resource= given")]
    NoResource,
}

impl Attributes {
    /// `namespace=monitoring,group=zonecontrol.k8s.aws,resource=shardedprometheuses,
    /// subresource=alerts,name=prometheus` (every key but `resource` optional), asked with `verb`.
    pub fn parse_resource(text: &str, verb: &str) -> Result<Self, AttributesError> {
        let mut attributes = ResourceAttributes {
            verb: Some(verb.to_string()),
            ..Default::default()
        };
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| AttributesError::NotAPair(pair.to_string()))?;
            let value = Some(value.trim().to_string());
            match key.trim() {
                "namespace" => attributes.namespace = value,
                "group" => attributes.group = value,
                "version" => attributes.version = value,
                "resource" => attributes.resource = value,
                "subresource" => attributes.subresource = value,
                "name" => attributes.name = value,
                other => return Err(AttributesError::Key(other.to_string())),
            }
        }
        if attributes.resource.as_deref().is_none_or(str::is_empty) {
            return Err(AttributesError::NoResource);
        }
        Ok(Attributes::Resource(Box::new(attributes)))
    }
}

/// The answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve it; `user` for the logs.
    Allowed { user: String },
    /// No token, or one the API server does not accept: 401.
    Unauthenticated(String),
    /// A user without the permission: 403.
    Forbidden { user: String, reason: String },
    /// The API server could not be asked (not cached): 503, the caller may retry.
    Unavailable(String),
}

/// TokenReview + SubjectAccessReview with a bounded cache; cheap to share behind an `Arc`.
pub struct KubeAuth {
    client: Client,
    attributes: Attributes,
    /// How long an allowed decision is reused: a revoked RoleBinding takes this long to bite.
    allowed_ttl: Duration,
    /// How long a refusal is reused: short, so a caller just granted access waits little, long
    /// enough that a client retrying in a loop does not hammer the API server.
    denied_ttl: Duration,
    cache: Mutex<HashMap<(String, String), (Decision, Instant)>>,
    /// The audiences a token must be issued for (empty: the API server's own).
    audiences: Vec<String>,
}

impl KubeAuth {
    pub fn new(
        client: Client,
        attributes: Attributes,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        Self {
            client,
            attributes,
            allowed_ttl,
            denied_ttl,
            cache: Mutex::new(HashMap::new()),
            audiences: Vec::new(),
        }
    }

    /// Accepts only tokens issued for one of `audiences` (`kubectl create token --audience`):
    /// a token given to this server is then no key to the API server, and a token for the API
    /// server (every pod's default one) is none to this server.
    pub fn with_audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    /// The decision for a request to `path` carrying `authorization` (the header's value).
    pub async fn check(&self, authorization: Option<&str>, path: &str) -> Decision {
        let Some(token) = authorization
            .and_then(|value| value.strip_prefix("Bearer ").map(str::trim))
            .filter(|token| !token.is_empty())
        else {
            return Decision::Unauthenticated("no bearer token".to_string());
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Decision::Unauthenticated("token too long".to_string());
        }
        let key = (token.to_string(), self.key_path(path));
        if let Some(cached) = self.cached(&key) {
            return cached;
        }
        let decision = self.review(token, path).await;
        self.remember_decision(key, &decision);
        decision
    }

    /// The decision for a request to `path` of a caller whose identity the transport proved
    /// (a client certificate verified against a trusted CA: its subject's common name is the
    /// user, its organizations the groups, as the API server reads one): only whether the user
    /// may (a SubjectAccessReview), cached as token decisions are.
    pub async fn check_user(&self, user: &str, groups: &[String], path: &str) -> Decision {
        if user.is_empty() {
            return Decision::Unauthenticated(
                "a client certificate without a common name".to_string(),
            );
        }
        // Not a token: a key no token can equal (tokens have no NUL).
        let key = (
            format!("\0x509\0{user}\0{}", groups.join("\0")),
            self.key_path(path),
        );
        if let Some(cached) = self.cached(&key) {
            return cached;
        }
        let info = UserInfo {
            username: Some(user.to_string()),
            groups: Some(groups.to_vec()),
            ..UserInfo::default()
        };
        let decision = self.authorize(info, path).await;
        self.remember_decision(key, &decision);
        decision
    }

    /// The path matters only when it is what is authorized.
    fn key_path(&self, path: &str) -> String {
        match self.attributes {
            Attributes::NonResource { .. } => path.to_string(),
            Attributes::Resource(_) => String::new(),
        }
    }

    /// Keeps `decision` for its time to live (none for an unavailable one: asked again).
    fn remember_decision(&self, key: (String, String), decision: &Decision) {
        let ttl = match decision {
            Decision::Allowed { .. } => Some(self.allowed_ttl),
            Decision::Unauthenticated(_) | Decision::Forbidden { .. } => Some(self.denied_ttl),
            Decision::Unavailable(_) => None,
        };
        if let Some(ttl) = ttl.filter(|ttl| !ttl.is_zero()) {
            self.remember(key, decision.clone(), ttl);
        }
    }

    fn cached(&self, key: &(String, String)) -> Option<Decision> {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(decision, _)| decision.clone())
    }

    fn remember(&self, key: (String, String), decision: Decision, ttl: Duration) {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, (_, until)| *until > now);
        }
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, (decision, now + ttl));
    }

    async fn review(&self, token: &str, path: &str) -> Decision {
        match self.authenticate(token).await {
            Ok(user) => self.authorize(user, path).await,
            Err(decision) => decision,
        }
    }

    /// Who the token is of (a TokenReview), for one of the audiences; otherwise the decision.
    async fn authenticate(&self, token: &str) -> Result<UserInfo, Decision> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await;
        let status = match reviewed {
            Ok(review) => review.status.unwrap_or_default(),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "TokenReview failed");
                return Err(Decision::Unavailable("cannot review the token".to_string()));
            }
        };
        // An authenticator that ignores audiences answers with none: not good enough.
        let for_audience = self.audiences.is_empty()
            || status
                .audiences
                .iter()
                .flatten()
                .any(|audience| self.audiences.contains(audience));
        match status.user {
            Some(_) if status.authenticated == Some(true) && !for_audience => {
                Err(Decision::Unauthenticated(format!(
                    "token not issued for the audience {}",
                    self.audiences.join(" or ")
                )))
            }
            Some(user) if status.authenticated == Some(true) => Ok(user),
            _ => {
                let why = status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "token not accepted".to_string());
                Err(Decision::Unauthenticated(why))
            }
        }
    }

    /// Whether `user` may do what the attributes name (a SubjectAccessReview), on `path` for
    /// non-resource attributes.
    async fn authorize(&self, user: UserInfo, path: &str) -> Decision {
        let name = user.username.clone().unwrap_or_default();
        let mut spec = SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            ..Default::default()
        };
        match &self.attributes {
            Attributes::NonResource { verb } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.clone()),
                });
            }
            Attributes::Resource(attributes) => {
                spec.resource_attributes = Some(ResourceAttributes::clone(attributes));
            }
        }
        let access = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await;
        match reviewed {
            Ok(SubjectAccessReview {
                status: Some(status),
                ..
            }) if status.allowed && status.denied != Some(true) => Decision::Allowed { user: name },
            Ok(review) => {
                let reason = review
                    .status
                    .and_then(|s| s.reason.filter(|r| !r.is_empty()))
                    .unwrap_or_else(|| "no RBAC rule allows it".to_string());
                Decision::Forbidden { user: name, reason }
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), user = %name, "SubjectAccessReview failed");
                Decision::Unavailable("cannot review the access".to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_resource_attribute_is_read_from_key_value_pairs() {
        let parsed = Attributes::parse_resource(
            "namespace=monitoring, group=zonecontrol.k8s.aws,resource=shardedprometheuses,subresource=alerts,name=prometheus",
            "get",
        )
        .unwrap();
        assert_eq!(
            parsed,
            Attributes::Resource(Box::new(ResourceAttributes {
                namespace: Some("monitoring".into()),
                group: Some("zonecontrol.k8s.aws".into()),
                resource: Some("shardedprometheuses".into()),
                subresource: Some("alerts".into()),
                name: Some("prometheus".into()),
                verb: Some("get".into()),
                ..Default::default()
            }))
        );
        assert_eq!(
            Attributes::parse_resource("group=x", "get"),
            Err(AttributesError::NoResource)
        );
        assert_eq!(
            Attributes::parse_resource("resource=pods,zone=a", "get"),
            Err(AttributesError::Key("zone".into()))
        );
        assert_eq!(
            Attributes::parse_resource("resource", "get"),
            Err(AttributesError::NotAPair("resource".into()))
        );
    }
}
