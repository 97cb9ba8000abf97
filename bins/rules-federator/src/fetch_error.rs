//! Why one backend gave nothing: the fan-out's and the body reader's one error type.

use std::time::Duration;

/// Why one backend gave nothing; the warning names the backend and this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("HTTP {0}: {1}")]
    Status(u16, String),
    #[error("unreadable answer: {0}")]
    BadJson(String),
    #[error("it answered with an error: {0}")]
    Backend(String),
    #[error("bad URL {0:?}")]
    Url(String),
    /// The answer was cut: past `--max-backend-body-bytes` (`compressed`, the bytes read) or
    /// `--max-backend-uncompressed-bytes` (`uncompressed`, the bytes gunzipped or read plain).
    #[error("answer over the {what} cap of {cap} bytes; cut")]
    TooLarge { what: &'static str, cap: u64 },
}

impl FetchError {
    /// The metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::Timeout(_) => "timeout",
            FetchError::Connect(_) => "connect",
            FetchError::Status(..) => "status",
            FetchError::BadJson(_) => "bad_json",
            FetchError::Backend(_) => "backend_error",
            FetchError::Url(_) => "url",
            FetchError::TooLarge { .. } => "too_large",
        }
    }
}
