//! Thanos's gRPC Rules and Info APIs (`proto/`), as the rules-federator serves and reads them:
//! `thanos.Rules/Rules` and `thanos.info.Info/Info`, wire-compatible with Thanos v0.42.
#![forbid(unsafe_code)]

pub mod convert;
pub mod raw;
pub mod wire;

/// The message runtime the generated code is built on (encoded sizes, decoding).
pub use prost;

/// Package `thanos`: the Rules service and its messages; `thanos.info` within it (its messages
/// name `thanos.LabelSet` as `super::LabelSet`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod thanos {
    tonic::include_proto!("thanos");

    /// Package `thanos.info`: the Info service.
    pub mod info {
        tonic::include_proto!("thanos.info");
    }
}
