//! The rules-federator as a process on 127.0.0.1, shared by the federator test binaries.

use e2e::localstack::free_port;
use e2e::process::ControllerProcess;

/// Starts the rules-federator on a free port of 127.0.0.1 over the static `endpoints`, with the
/// `extra` flags and the environment `env`; returns the process and its port.
pub fn federator(
    endpoints: &[String],
    extra: &[&str],
    env: &[(&str, String)],
) -> (ControllerProcess, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["--listen-address", listen.as_str()];
    for endpoint in endpoints {
        args.extend(["--endpoint", endpoint.as_str()]);
    }
    args.extend(extra);
    (
        ControllerProcess::start("rules-federator", &args, env),
        port,
    )
}
