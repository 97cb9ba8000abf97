//! What the federator reads: the backends, static `--endpoint` URLs, DNS names and the pods
//! discovery finds ([`endpoints`], [`dns`]), dialled over HTTP(S) ([`connector`], with the bearer
//! token of [`token`]) or Thanos's gRPC Rules API ([`grpc`]), fetched concurrently, each cut at
//! its timeout ([`fetch`]). What they answer is merged by [`crate::merge`].

pub mod connector;
pub mod dns;
pub mod endpoints;
pub mod fetch;
pub mod grpc;
#[cfg(test)]
pub mod testing;
pub mod token;
