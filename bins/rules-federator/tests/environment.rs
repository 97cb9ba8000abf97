//! The built binary's start under the environment a pod can be given: a Service named
//! `discover` in its namespace makes the kubelet set `DISCOVER_PORT=tcp://<ip>:<port>`, which
//! the old unprefixed fallback of `--discover-port` read and could not parse.

#![allow(clippy::expect_used)]

use std::process::{Command, Output};

/// Runs the federator with `env` set and a kubeconfig that does not exist: it stops right after
/// reading its flags, at the first connection to the API server.
fn start_with(env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rules-federator"));
    command
        .args([
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--log-format",
            "plain",
        ])
        .args([
            "--discover-sprom",
            "prometheus",
            "--discover-namespace",
            "default",
        ])
        .env_remove("ZAC_DISCOVER_PORT")
        .env_remove("DISCOVER_PORT")
        .env("NO_COLOR", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("the rules-federator binary runs")
}

fn stderr_and_stdout(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    )
}

#[test]
fn a_service_link_variable_does_not_stop_the_start() {
    let output = start_with(&[("DISCOVER_PORT", "tcp://10.96.0.12:80")]);
    let log = stderr_and_stdout(&output);
    assert!(!log.contains("invalid value"), "{log}");
    assert!(
        log.contains("ignored DISCOVER_PORT=tcp://10.96.0.12:80"),
        "{log}"
    );
    // It got past its flags: what stops it is the missing kubeconfig.
    assert!(log.contains("cannot read kubeconfig"), "{log}");
}

#[test]
fn an_old_name_is_read_with_a_warning_and_a_bad_value_is_refused() {
    let output = start_with(&[("DISCOVER_PORT", "not-a-port")]);
    let log = stderr_and_stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{log}");
    assert!(log.contains("invalid value 'not-a-port'"), "{log}");

    let output = start_with(&[("DISCOVER_PORT", "9091")]);
    let log = stderr_and_stdout(&output);
    assert!(
        log.contains("DISCOVER_PORT is deprecated") && log.contains("set ZAC_DISCOVER_PORT"),
        "{log}"
    );
    assert!(log.contains("cannot read kubeconfig"), "{log}");
}

#[test]
fn the_prefixed_name_is_read() {
    let output = start_with(&[("ZAC_DISCOVER_PORT", "not-a-port")]);
    let log = stderr_and_stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{log}");
    assert!(log.contains("invalid value 'not-a-port'"), "{log}");
}
