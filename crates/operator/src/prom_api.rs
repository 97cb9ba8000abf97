//! One client of Prometheus's HTTP API, for every binary that reads one: the zau gate's alerts,
//! the shard prober's runtime and configuration, the federator's rules and alerts.
//!
//! - [`tls`]: how `https://` endpoints are dialled (roots, the name verified, a client
//!   certificate, or no verification at all);
//! - [`ApiClient`]: one GET with a bearer token, gzip when asked, and the body cut at its caps
//!   ([`body`]); the caller cuts the whole exchange at its timeout;
//! - [`Answer::decode`]: Prometheus's envelope (`status`, `data`, `errorType`, `error`);
//! - [`ApiError`]: why there is no answer, one type with its metric label ([`ApiError::kind`]).

pub mod body;
mod client;
mod error;
pub mod tls;

pub use body::BodyCaps;
pub use client::{Answer, ApiClient};
pub use error::ApiError;
