//! AdmissionReview in and out: what is being evicted (and whether it is a dry run), and the
//! response the API server and `kubectl drain` understand.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;

/// What the webhook judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: String,
    /// The pod (an Eviction is named after its pod).
    pub pod: String,
    /// Nothing will be persisted: decide, record nothing.
    pub dry_run: bool,
    /// Who asks for it, as the API server authenticated them (`userInfo.username`; empty when
    /// it names nobody).
    pub user: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("the body is not an AdmissionReview")]
    Json(#[source] serde_json::Error),
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// A parsed request: the eviction to judge, or `None` for anything else this webhook is sent
/// by a too-wide configuration (answered "allowed").
pub fn parse(
    body: &[u8],
) -> Result<(AdmissionRequest<DynamicObject>, Option<Eviction>), ParseError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(ParseError::Json)?;
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| ParseError::NoRequest)?;
    let is_eviction = request.operation == Operation::Create
        && request.resource.resource == "pods"
        && request.resource.group.is_empty()
        && request.sub_resource.as_deref() == Some("eviction");
    let eviction = match (&request.namespace, is_eviction) {
        (Some(namespace), true) => Some(Eviction {
            namespace: namespace.clone(),
            pod: request.name.clone(),
            dry_run: request.dry_run || options_dry_run(request.object.as_ref()),
            user: request.user_info.username.clone().unwrap_or_default(),
        }),
        _ => None,
    };
    Ok((request, eviction))
}

/// `deleteOptions.dryRun: ["All"]` of the Eviction: where `kubectl drain --dry-run=server` puts
/// it (the request's `dryRun` reflects only the query parameter).
fn options_dry_run(eviction: Option<&DynamicObject>) -> bool {
    eviction
        .and_then(|e| e.data.get("deleteOptions"))
        .and_then(|o| o.get("dryRun"))
        .and_then(|d| d.as_array())
        .is_some_and(|values| values.iter().any(|v| v.as_str() == Some("All")))
}

/// Allowed, with optional warnings shown to the client (kubectl prints them).
pub fn allow(
    request: &AdmissionRequest<DynamicObject>,
    warnings: Vec<String>,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Denied with 429 TooManyRequests, set explicitly: `deny()` alone yields 400, on which
/// `kubectl drain` gives up, while it retries a 429. No retryAfterSeconds: client-go would
/// resend silently instead of letting the caller decide.
pub fn deny(request: &AdmissionRequest<DynamicObject>, message: &str) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = 429;
    response.result.reason = "TooManyRequests".to_string();
    response.result.status = Some(StatusSummary::Failure);
    response
}

/// The response body.
pub fn review_json(response: AdmissionResponse) -> serde_json::Value {
    serde_json::to_value(response.into_review()).unwrap_or_else(
        |_| serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::{Value, json};

    fn review(dry_run: bool, delete_options: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "subResource": "eviction",
                "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "requestSubResource": "eviction",
                "name": "web-3",
                "namespace": "apps",
                "operation": "CREATE",
                "userInfo": {"username": "admin", "groups": ["system:masters"]},
                "object": {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": "web-3", "namespace": "apps"},
                    "deleteOptions": delete_options,
                },
                "oldObject": null,
                "dryRun": dry_run,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            }
        }))
        .unwrap()
    }

    #[test]
    fn an_eviction_is_recognised() {
        let (_, eviction) = parse(&review(false, json!({}))).unwrap();
        assert_eq!(
            eviction,
            Some(Eviction {
                namespace: "apps".into(),
                pod: "web-3".into(),
                dry_run: false,
                user: "admin".into(),
            })
        );
    }

    #[test]
    fn dry_run_comes_from_the_delete_options_or_the_request() {
        let (_, eviction) = parse(&review(false, json!({"dryRun": ["All"]}))).unwrap();
        assert!(eviction.unwrap().dry_run, "kubectl drain --dry-run=server");
        let (_, eviction) = parse(&review(true, json!({}))).unwrap();
        assert!(eviction.unwrap().dry_run, "?dryRun=All");
        let (_, eviction) = parse(&review(false, json!({"dryRun": []}))).unwrap();
        assert!(!eviction.unwrap().dry_run);
    }

    #[test]
    fn other_requests_are_not_evictions() {
        let mut value: Value = serde_json::from_slice(&review(false, json!({}))).unwrap();
        value["request"]["subResource"] = json!("status");
        let (_, eviction) = parse(&serde_json::to_vec(&value).unwrap()).unwrap();
        assert_eq!(eviction, None);
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }

    #[test]
    fn a_denial_is_a_429_too_many_requests_without_retry_after() {
        let (request, _) = parse(&review(false, json!({}))).unwrap();
        let body = review_json(deny(&request, "zone zone-a is disrupted (web-1)"));
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        let response = &body["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 429);
        assert_eq!(response["status"]["reason"], "TooManyRequests");
        assert_eq!(
            response["status"]["message"],
            "zone zone-a is disrupted (web-1)"
        );
        assert!(response["status"].get("details").is_none());
        assert!(!body.to_string().contains("retryAfterSeconds"));
    }

    #[test]
    fn an_allowance_carries_the_uid_and_warnings() {
        let (request, _) = parse(&review(false, json!({}))).unwrap();
        let body = review_json(allow(&request, vec!["shadow mode".into()]));
        assert_eq!(body["response"]["allowed"], true);
        assert_eq!(
            body["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(body["response"]["warnings"][0], "shadow mode");
    }
}
