//! rules-federator: one Prometheus-compatible `/api/v1/rules` and `/api/v1/alerts` over every
//! shard and replica of a sharded Prometheus (static endpoints and/or discovered pods), merged
//! and deduplicated by `zone-rules`. Stateless: every replica serves.
#![forbid(unsafe_code)]

/// The name in the user agent and the runtime's logs.
pub(crate) const NAME: &str = "rules-federator";

mod backends;
mod cli;
mod merge;
mod metrics;
mod serve;
mod served;

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = zone_operator::cli::parse::<cli::Args>();
    let (runtime, federator) = match serve::start(&args).await {
        Ok(started) => started,
        Err(error) => return zone_operator::report_exit(&error),
    };
    match runtime.run(federator).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => zone_operator::report_exit(&error),
    }
}
