//! Why a Prometheus API endpoint gave no answer.

use std::time::Duration;

/// Why an endpoint gave nothing; a caller's warning, condition or log names the endpoint and
/// this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("HTTP {0}: {1}")]
    Status(u16, String),
    #[error("unreadable answer: {0}")]
    BadJson(String),
    /// Prometheus's `"status": "error"`: its `errorType` (when given) and `error`.
    #[error("it answered with an error: {0}")]
    ErrorAnswer(String),
    #[error("bad URL {0:?}")]
    Url(String),
    /// The answer was cut: past the cap on the bytes read (`compressed`), or on the bytes
    /// gunzipped or read plain (`uncompressed`).
    #[error("answer over the {what} cap of {cap} bytes; cut")]
    TooLarge { what: &'static str, cap: u64 },
}

impl ApiError {
    /// The metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Timeout(_) => "timeout",
            ApiError::Connect(_) => "connect",
            ApiError::Status(..) => "status",
            ApiError::BadJson(_) => "bad_json",
            ApiError::ErrorAnswer(_) => "error_answer",
            ApiError::Url(_) => "url",
            ApiError::TooLarge { .. } => "too_large",
        }
    }
}
