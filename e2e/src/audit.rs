//! The API server's audit log: ground truth for who did what to which pod, and when (microsecond
//! timestamps), independent of what a controller says it did.

use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub verb: String,
    #[serde(default)]
    pub user_agent: String,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    pub stage: String,
    /// When the API server received the request (the client's moment of acting).
    #[serde(default)]
    pub request_received_timestamp: String,
    /// When the API server answered it.
    pub stage_timestamp: String,
    #[serde(default)]
    pub user: User,
    /// The client's address as the API server saw it: a pod's IP for a controller in a pod.
    #[serde(default, rename = "sourceIPs")]
    pub source_ips: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub subresource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: u16,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct User {
    #[serde(default)]
    pub username: String,
}

impl AuditEvent {
    /// The response's status code (0 when the log has none).
    pub fn code(&self) -> u16 {
        self.response_status.as_ref().map_or(0, |s| s.code)
    }

    /// Whether the request succeeded (2xx).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code())
    }

    /// Whether `program` sent the request (its user agent is `<program>/...`, as Kubernetes
    /// clients name themselves).
    pub fn sent_by(&self, program: &str) -> bool {
        self.user_agent
            .strip_prefix(program)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// The name of the object of the request.
    pub fn object_name(&self) -> &str {
        self.object_ref.as_ref().map_or("", |o| o.name.as_str())
    }
}

/// Completed requests of the log, in order; unparseable lines are skipped.
pub fn read(path: &Path) -> Vec<AuditEvent> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
        .filter(|event| event.stage == "ResponseComplete")
        .collect()
}

/// [`read`], keeping only the lines that contain `needle` (e.g. a test namespace's name): the
/// others are not parsed, which spares a test polling a log of many megabytes most of the work.
pub fn read_containing(path: &Path, needle: &str) -> Vec<AuditEvent> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|line| line.contains(needle))
        .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
        .filter(|event| event.stage == "ResponseComplete")
        .collect()
}

/// Evictions (`create pods/eviction`) and pod deletions in `namespace`.
pub fn removals<'a>(
    events: &'a [AuditEvent],
    namespace: &'a str,
) -> impl Iterator<Item = &'a AuditEvent> {
    events.iter().filter(move |event| {
        let Some(object) = &event.object_ref else {
            return false;
        };
        object.namespace == namespace
            && object.resource == "pods"
            && ((event.verb == "create" && object.subresource == "eviction")
                || (event.verb == "delete" && object.subresource.is_empty()))
    })
}
