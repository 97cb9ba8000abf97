//! What the perf drivers (`src/bin/*_perf.rs`) share: settings from the environment,
//! nearest-rank percentiles, a process's memory and CPU time from `/proc`, and running a
//! measurement until SIGINT or SIGTERM (whose guards then delete its namespaces and stop its
//! controller).

use std::collections::BTreeMap;
use std::future::Future;
use std::process::ExitCode;

/// The environment variable `name` parsed, or `default` when unset; panics on a value that does
/// not parse.
pub fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a valid value")),
        Err(_) => default,
    }
}

/// The `q` quantile (0 to 1, nearest rank) of ascending `sorted` values; NaN when there are none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// VmRSS and VmHWM of process `pid`, in KiB (`None` once it is gone).
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The CPU time (user + system) process `pid` used so far, in seconds; panics once it is gone.
#[allow(clippy::cast_precision_loss)]
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process's stat");
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of stat(5), i.e. 12 and 13 after the command.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// KiB in MiB.
#[allow(clippy::cast_precision_loss)]
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs `measurement` to its end, or until SIGINT or SIGTERM: then it is dropped (its guards
/// delete its namespaces and stop its controller) and the signal is named (`interrupted`,
/// `terminated`).
pub async fn until_signalled<F: Future>(measurement: F) -> Result<F::Output, &'static str> {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
    tokio::select! {
        output = measurement => Ok(output),
        _ = tokio::signal::ctrl_c() => Err("interrupted"),
        _ = terminate.recv() => Err("terminated"),
    }
}

/// Runs `measurement`, which returns its targets by name and whether each was met, until its
/// end ([`until_signalled`]); prints `{driver}: {targets:?}` and succeeds when every target is
/// met, fails otherwise or on SIGINT or SIGTERM (named on stderr).
pub async fn exit_on_targets<F>(driver: &str, measurement: F) -> ExitCode
where
    F: Future<Output = BTreeMap<&'static str, bool>>,
{
    let met = match until_signalled(measurement).await {
        Ok(met) => met,
        Err(signal) => {
            eprintln!("{driver}: {signal}");
            return ExitCode::FAILURE;
        }
    };
    println!("{driver}: {met:?}");
    if met.values().all(|m| *m) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), 5.0);
        assert_eq!(quantile(&values, 0.99), 10.0);
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
