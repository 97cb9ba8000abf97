//! Structured logging through `tracing`.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter {filter:?}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("a global log subscriber is already installed")]
    Install(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Parses a `RUST_LOG`-style filter (`info`, `info,kube=warn,zau_controller=debug`).
pub fn filter(directives: &str) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::try_new(directives).map_err(|source| TelemetryError::Filter {
        filter: directives.to_owned(),
        source,
    })
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat, directives: &str) -> Result<(), TelemetryError> {
    let filter = filter(directives)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        // Flattened so `zone`, `pods`… are top-level keys a log query can select on.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Plain => builder.try_init(),
    }
    .map_err(TelemetryError::Install)?;
    for notice in crate::cli::take_notices() {
        tracing::warn!("{notice}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn accepts_levels_and_directives() {
        assert!(filter("info").is_ok());
        assert!(filter("info,kube=warn,zau_controller=debug").is_ok());
    }

    #[test]
    fn rejects_garbage_filters() {
        assert!(matches!(
            filter("kube=notalevel"),
            Err(TelemetryError::Filter { .. })
        ));
    }

    #[test]
    fn second_init_is_reported_not_ignored() {
        // The first may fail too if another test installed a subscriber first; the second never
        // succeeds.
        let _first = init(LogFormat::Json, "warn");
        assert!(matches!(
            init(LogFormat::Plain, "warn"),
            Err(TelemetryError::Install(_))
        ));
    }
}
