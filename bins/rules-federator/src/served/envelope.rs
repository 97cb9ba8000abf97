//! Prometheus's error envelope, in which every refusal of the API (a bad request, a missing or
//! refused token, an overload) is answered so Grafana shows the reason.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Prometheus's error envelope with its status code.
pub(crate) fn error(code: StatusCode, error_type: &str, message: &str) -> Response {
    (
        code,
        Json(json!({"status": "error", "errorType": error_type, "error": message})),
    )
        .into_response()
}
