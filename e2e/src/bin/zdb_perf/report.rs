//! The report: the classes' latency, server-side and CPU tables, the memory, and the verdict
//! on the targets.

use std::time::Duration;

use crate::drive::{ClassResult, Measured};
use crate::figures::fmt_ms;
use crate::settings::Settings;
use crate::storm::StormResult;
use crate::storm::native::{self, NativeResult};

/// Decision reasons of an eviction refused because the webhook is overloaded, not by a budget.
pub const OVERLOAD_REFUSALS: [&str; 3] = ["/TooManyConflicts", "/DeadlineExceeded", "/Shed"];

/// What the report of the classes shows.
pub struct Report<'a> {
    pub settings: &'a Settings,
    pub selected: usize,
    /// Connections the driver opened to the webhook.
    pub opened: usize,
    pub pod_time: Duration,
    pub status_time: Duration,
    pub measured: &'a Measured,
    /// Whether the API server's CPU time is known.
    pub apiserver: bool,
}

/// Prints the classes' figures: the set-up, the client-side latency, the server side and CPU,
/// the decisions, and the controller's memory.
pub fn report(r: &Report) {
    let settings = r.settings;
    println!();
    println!(
        "ZDB webhook: {} selected pods in {} budgets (+3 unselected); AdmissionReviews over HTTPS on loopback, open loop; {} connection(s) opened",
        r.selected, settings.sets, r.opened
    );
    println!(
        "{} pods created and Ready in {:.1} s; controller ready with every budget computed {:.1} s after its start",
        r.selected,
        r.pod_time.as_secs_f64(),
        r.status_time.as_secs_f64()
    );
    latency_table(r);
    server_table(r);
    println!();
    for c in &r.measured.results {
        notes(c);
    }
    memory(r);
}

fn latency_table(r: &Report) {
    println!();
    println!("client-side latency (ms, from the scheduled send to the parsed answer):");
    println!(
        "{:<20} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>7}",
        "class", "sent", "req/s", "p50", "p90", "p99", "max", "429", "wrong", "late", "target"
    );
    for c in &r.measured.results {
        let target = if c.gated {
            let ok = c.percentile(99.0) <= r.settings.p99_ms;
            if ok { "met" } else { "MISSED" }.to_string()
        } else {
            "-".to_string()
        };
        println!(
            "{:<20} {:>6} {:>7.1} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>7}",
            c.name,
            c.sent,
            c.achieved_rate(),
            fmt_ms(c.percentile(50.0)),
            fmt_ms(c.percentile(90.0)),
            fmt_ms(c.percentile(99.0)),
            fmt_ms(c.latencies.last().copied().unwrap_or(f64::NAN)),
            c.refused,
            c.unexpected,
            c.late_sends,
            target,
        );
    }
}

fn server_table(r: &Report) {
    println!();
    println!(
        "server side (the webhook's zone_aware_zdb_webhook_duration_seconds) and CPU per request:"
    );
    println!(
        "{:<20} {:>8} {:>9} {:>7} {:>7} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "class",
        "answers",
        "mean ms",
        "<=5ms",
        "<=10ms",
        "p99 <=ms",
        "ctrl cpu",
        "apisrv cpu",
        "driver cpu",
        "host busy"
    );
    for c in &r.measured.results {
        let Some(s) = &c.server else { continue };
        let apiserver = if r.apiserver {
            format!("{:.2} ms", c.cpu_ms_per_request(c.usage.apiserver_ticks))
        } else {
            "-".to_string()
        };
        println!(
            "{:<20} {:>8} {:>9} {:>6.1}% {:>6.1}% {:>9} {:>7.2} ms {:>10} {:>7.2} ms {:>8.0}%",
            c.name,
            s.count,
            fmt_ms(s.mean_ms),
            s.within_5ms * 100.0,
            s.within_10ms * 100.0,
            fmt_ms(s.p99_bound_ms),
            c.cpu_ms_per_request(c.usage.controller_ticks),
            apiserver,
            c.cpu_ms_per_request(c.usage.driver_ticks),
            c.host_busy_percent(),
        );
    }
}

/// A class's decisions, its rounds and an example of its unexpected answers.
fn notes(c: &ClassResult) {
    if let Some(s) = &c.server {
        let decisions: Vec<String> = s
            .decisions
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        println!(
            "{:<20} decisions: {}; status controller meanwhile: {} reconciliations, {} ms",
            c.name,
            decisions.join(" "),
            s.reconciles,
            fmt_ms(s.reconcile_ms)
        );
    }
    if c.rounds > 1 {
        println!(
            "{:<20} {} rounds of distinct pods, budgets recreated between them; req/s over the rounds' send time",
            c.name, c.rounds
        );
    }
    if let Some(example) = &c.example {
        println!("{:<20} e.g.: {example}", c.name);
    }
}

fn memory(r: &Report) {
    println!();
    let (rss0, hwm0) = r.measured.memory_before;
    let (rss1, hwm1) = r.measured.memory_after;
    println!(
        "zdb-controller memory with {} selected pods (MiB): before the load VmRSS {rss0:.1} (VmHWM {hwm0:.1}); after the load above (denied, unselected, allowed @{}/s) VmRSS {rss1:.1} (VmHWM {hwm1:.1})",
        r.selected, r.settings.allowed_rate
    );
    println!(
        "429 = allowed evictions refused with 429 under load (write conflicts, load shed at once, or the webhook's decision deadline: see the decisions); wrong = other answers than expected or errors; late = sends more than one interval behind schedule (driver starved of CPU); ctrl/apisrv/driver cpu = CPU time of the controller / the API server / this driver during the class per request (the API server's includes whatever else it served meanwhile); host busy = the whole machine during the class"
    );
}

/// Prints every missed target; true when none was missed.
pub fn verdict(
    settings: &Settings,
    running: bool,
    results: &[ClassResult],
    rss: f64,
    storm: &[String],
) -> bool {
    let mut missed = storm.to_vec();
    if !running {
        missed.push("zdb-controller exited during the run".to_string());
    }
    for c in results {
        if c.unexpected > 0 {
            missed.push(format!("{}: {} unexpected answers", c.name, c.unexpected));
        }
        let p99 = c.percentile(99.0);
        if c.gated && (p99.is_nan() || p99 > settings.p99_ms) {
            missed.push(format!(
                "{}: p99 {} ms > {} ms",
                c.name,
                fmt_ms(p99),
                settings.p99_ms
            ));
        }
        if let (false, Some(server)) = (c.gated, &c.server) {
            // Every allowed answer must have come from the status write.
            let recorded = server
                .decisions
                .get("allowed/Recorded")
                .copied()
                .unwrap_or(0.0);
            let allowed = (c.sent - c.refused - c.unexpected) as f64;
            if (recorded - allowed).abs() > 0.5 {
                missed.push(format!(
                    "{}: {recorded} recorded for {allowed} allowed answers",
                    c.name
                ));
            }
            // Refusals under load are expected there; a budget's denial is not.
            let denials: Vec<String> = server
                .decisions
                .iter()
                .filter(|(key, _)| key.starts_with("denied/"))
                .filter(|(key, _)| !OVERLOAD_REFUSALS.iter().any(|r| key.ends_with(r)))
                .map(|(key, n)| format!("{key}={n}"))
                .collect();
            if !denials.is_empty() {
                missed.push(format!(
                    "{}: refused by the budget: {}",
                    c.name,
                    denials.join(" ")
                ));
            }
        }
    }
    if rss.is_nan() || rss > settings.rss_mib {
        missed.push(format!("VmRSS {rss:.1} MiB > {} MiB", settings.rss_mib));
    }
    for miss in &missed {
        println!("MISSED: {miss}");
    }
    if missed.is_empty() {
        println!(
            "zdb perf: targets met (p99 <= {} ms for denied, unselected, no-budget-ns; VmRSS <= {} MiB; storm: no violation, every answer in time, VmRSS <= {} MiB per replica)",
            settings.p99_ms, settings.rss_mib, settings.storm.rss_mib
        );
    }
    missed.is_empty()
}

/// Prints the report of the classes and of the storms and every missed target; true when none
/// was missed (`running`: the controller ran to the end).
pub fn conclude(
    r: &Report,
    storms: &[StormResult],
    natives: &[NativeResult],
    running: bool,
) -> bool {
    report(r);
    let storm = &r.settings.storm;
    let mut missed = Vec::new();
    for zdb in storms {
        zdb.report(storm);
        missed.extend(zdb.missed(storm));
    }
    for native in natives {
        native.report(storm);
    }
    for (zdb, native) in native::pairs(storms, natives) {
        missed.extend(native::compare(zdb, native, storm));
    }
    let measured = r.measured;
    verdict(
        r.settings,
        running,
        &measured.results,
        measured.memory_after.0,
        &missed,
    )
}
