//! The API server's audit log: ground truth for who did what to which pod, and when (microsecond
//! timestamps), independent of what a controller says it did.

use std::path::{Path, PathBuf};

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
    /// Why a request failed (an admission webhook's denial, say).
    #[serde(default)]
    pub message: String,
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

    /// The response's message (empty when the log has none).
    pub fn message(&self) -> &str {
        self.response_status
            .as_ref()
            .map_or("", |s| s.message.as_str())
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
    events(path, |_| true)
}

/// [`read`], keeping only the lines that contain `needle` (e.g. a test namespace's name): the
/// others are not parsed, which spares a test polling a log of many megabytes most of the work.
pub fn read_containing(path: &Path, needle: &str) -> Vec<AuditEvent> {
    events(path, |line| line.contains(needle))
}

/// The completed requests of the log's lines that `keep` selects, from its rotated backups (the
/// API server renames a full log, `--audit-log-maxsize`, to `<stem>-<timestamp>.<ext>` beside it),
/// oldest first, then from the file itself: a rotation in the middle of a test loses none of its
/// events.
fn events(path: &Path, keep: impl Fn(&str) -> bool) -> Vec<AuditEvent> {
    let mut files = rotated(path);
    files.push(path.to_path_buf());
    let mut events = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        events.extend(
            text.lines()
                .filter(|line| keep(line))
                .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
                .filter(|event| event.stage == "ResponseComplete"),
        );
    }
    events
}

/// The rotated backups of the log at `path`, oldest first (their timestamps sort as text).
fn rotated(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem().and_then(|s| s.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{stem}-");
    let suffix = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| format!(".{e}"))
        .unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut backups: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|file| {
            file.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&suffix))
        })
        .collect();
    backups.sort();
    backups
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line(namespace: &str, name: &str, at: &str) -> String {
        format!(
            r#"{{"verb":"delete","stage":"ResponseComplete","stageTimestamp":"{at}","objectRef":{{"resource":"pods","namespace":"{namespace}","name":"{name}"}}}}"#
        )
    }

    #[test]
    fn a_rotated_log_keeps_its_events_oldest_first() {
        let dir = std::env::temp_dir().join(format!("zac-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, lines: &[String]| {
            std::fs::write(dir.join(file), lines.join("\n") + "\n").unwrap();
        };
        write(
            "audit-2026-11-27T21-43-38.788.log",
            &[
                line("a", "web-0", "2026-11-27T21:43:00Z"),
                line("b", "x", "2026-11-27T21:43:01Z"),
            ],
        );
        write(
            "audit-2026-11-27T21-40-00.000.log",
            &[line("a", "web-9", "2026-11-27T21:39:00Z")],
        );
        write("audit.log", &[line("a", "web-1", "2026-11-27T21:44:00Z")]);
        write(
            "other-2026.log",
            &[line("a", "not-audit", "2026-11-27T21:45:00Z")],
        );

        let names = |events: Vec<AuditEvent>| -> Vec<String> {
            events.iter().map(|e| e.object_name().to_owned()).collect()
        };
        let path = dir.join("audit.log");
        assert_eq!(
            names(read_containing(&path, r#""namespace":"a""#)),
            ["web-9", "web-0", "web-1"]
        );
        assert_eq!(names(read(&path)), ["web-9", "web-0", "x", "web-1"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
