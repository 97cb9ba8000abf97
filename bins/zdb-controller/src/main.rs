//! The ZoneDisruptionBudget controller and eviction webhook. Not implemented yet: the planning and budget
//! logic it will run is in `zone-topology`, the CRD types in `zone-api`, the runtime in
//! `zone-operator`. Until then the binary refuses to start, so a deployment never mistakes it for
//! a working controller.
use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("zdb-controller: not implemented yet");
    ExitCode::from(2)
}
