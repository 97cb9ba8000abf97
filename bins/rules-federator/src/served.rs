//! What the federator serves: `/api/v1/rules` and `/api/v1/alerts` ([`api`]) and Thanos's gRPC
//! Rules and Info APIs ([`grpc`]), behind the caps and the caller checks of [`guard`]; requests
//! that ask the same thing at once share one answer ([`flight`]), written once ([`answer`]);
//! refusals in Prometheus's error envelope ([`envelope`]).

pub mod answer;
pub mod api;
pub mod envelope;
pub mod flight;
pub mod grpc;
pub mod guard;
