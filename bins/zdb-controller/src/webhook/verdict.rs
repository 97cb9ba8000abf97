//! The answer to one eviction: shared by the judge, the batches and the queues of a budget's
//! evictions.

/// The answer to one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Metric label (bounded, see `metrics::reason`).
    pub reason: &'static str,
    /// The denial message, or a warning for an allowed eviction.
    pub message: Option<String>,
}

pub(super) fn allowed(reason: &'static str) -> Verdict {
    Verdict {
        allowed: true,
        reason,
        message: None,
    }
}

pub(super) fn denied(reason: &'static str, message: String) -> Verdict {
    Verdict {
        allowed: false,
        reason,
        message: Some(message),
    }
}
