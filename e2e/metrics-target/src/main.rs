//! A tiny Prometheus scrape target for pods on the local zonal cluster's real nodes.
//!
//! `metrics-target serve [ADDR]` answers `GET /metrics` (text exposition format: a request counter,
//! an info series naming the pod, node and zone from the environment, and the application error
//! counter `app_errors_total`) and `GET /healthz`.
//! `metrics-target fetch URL` GETs an `http://` URL and prints the body: run with `kubectl exec`,
//! it shows that one pod reaches another across nodes. std only, so it builds static in seconds.
//!
//! `app_errors_total` grows at `ERRORS_PER_SECOND` (default 0: it stays 0), so a pod template
//! with that variable set is a faulty revision: `rate(app_errors_total[...]) > 0` for its pods.
//! `PUT /errors?per_second=N` changes the rate from then on (the counter keeps its value), as a
//! fault that ends without the pod being replaced.
//!
//! `GET /gap` says how long the target went unscraped at most (the longest time between two
//! `GET /metrics`, or from the last reset to the first) and how many scrapes it answered, since
//! `PUT /gap` (or the start): what a rollout of the Prometheus pods scraping it cost in coverage.
//!
//! `GET /served` says how many bytes of `/metrics` bodies it has served since it started, in all
//! (`served_bytes_total N`) and to each client address (`served_bytes{client="IP"} N`): the
//! scrape traffic a shard-controller's ledger must report, per scraping Prometheus pod.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// A client that never finishes its request does not hold a thread for ever.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The environment variable of the rate at which `app_errors_total` grows, errors per second.
const ERRORS_ENV: &str = "ERRORS_PER_SECOND";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(args.get(1).map_or(DEFAULT_LISTEN, String::as_str)),
        Some("fetch") => match args.get(1) {
            Some(url) => fetch(url),
            None => Err("fetch needs a URL".to_string()),
        },
        _ => Err("usage: metrics-target serve [ADDR] | fetch http://HOST:PORT/PATH".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("metrics-target: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// A counter of errors growing at a rate that may change: its value is what it had when the rate
/// last changed plus the rate times the time since. It never decreases.
#[derive(Debug, Clone, Copy)]
struct ErrorCounter {
    at_change: f64,
    since: Instant,
    per_second: f64,
}

impl ErrorCounter {
    fn new(per_second: f64, now: Instant) -> ErrorCounter {
        ErrorCounter {
            at_change: 0.0,
            since: now,
            per_second,
        }
    }

    fn value(&self, now: Instant) -> f64 {
        self.at_change + self.per_second * now.saturating_duration_since(self.since).as_secs_f64()
    }

    fn set_rate(&mut self, per_second: f64, now: Instant) {
        self.at_change = self.value(now);
        self.since = now;
        self.per_second = per_second;
    }
}

/// A rate of errors per second: a finite number, not negative.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 0.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a rate of errors per second (a number >= 0)"
        )),
    }
}

/// The rate of [`ERRORS_ENV`]: 0 when unset or empty.
fn rate_from_env(value: Option<&str>) -> Result<f64, String> {
    match value {
        None => Ok(0.0),
        Some(text) if text.trim().is_empty() => Ok(0.0),
        Some(text) => parse_rate(text).map_err(|e| format!("{ERRORS_ENV}: {e}")),
    }
}

struct State {
    /// Requests of /metrics answered, by path.
    requests: BTreeMap<String, u64>,
    errors: ErrorCounter,
    gaps: Gaps,
    /// Bytes of `/metrics` bodies served, by client IP.
    served: BTreeMap<String, u64>,
}

impl State {
    fn new(errors_per_second: f64) -> State {
        let now = Instant::now();
        State {
            requests: BTreeMap::new(),
            errors: ErrorCounter::new(errors_per_second, now),
            gaps: Gaps::new(now),
            served: BTreeMap::new(),
        }
    }

    /// `GET /served`: the bytes served, in all and by client.
    fn served_report(&self) -> String {
        let total: u64 = self.served.values().sum();
        let mut text = format!("served_bytes_total {total}\n");
        for (client, bytes) in &self.served {
            text.push_str(&format!(
                "served_bytes{{client=\"{}\"}} {bytes}\n",
                escape(client)
            ));
        }
        text
    }
}

/// The longest time without a scrape since `since`.
struct Gaps {
    since: Instant,
    last: Instant,
    longest: Duration,
    scrapes: u64,
}

impl Gaps {
    fn new(now: Instant) -> Gaps {
        Gaps {
            since: now,
            last: now,
            longest: Duration::ZERO,
            scrapes: 0,
        }
    }

    fn scraped(&mut self, now: Instant) {
        self.longest = self.longest.max(now.saturating_duration_since(self.last));
        self.last = now;
        self.scrapes += 1;
    }

    /// Up to `now`: the time since the last scrape counts too.
    fn report(&self, now: Instant) -> String {
        let longest = self.longest.max(now.saturating_duration_since(self.last));
        format!(
            "longest_gap_seconds {:.3}\nscrapes {}\nwindow_seconds {:.3}\n",
            longest.as_secs_f64(),
            self.scrapes,
            now.saturating_duration_since(self.since).as_secs_f64()
        )
    }
}

type Shared = Arc<Mutex<State>>;

fn serve(addr: &str) -> Result<(), String> {
    let rate = rate_from_env(std::env::var(ERRORS_ENV).ok().as_deref())?;
    let listener = TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?;
    eprintln!("metrics-target: serving on {addr}, {rate} errors per second");
    let state: Shared = Arc::new(Mutex::new(State::new(rate)));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let state = state.clone();
        std::thread::spawn(move || {
            if let Err(e) = answer(stream, &state) {
                eprintln!("metrics-target: {e}");
            }
        });
    }
    Ok(())
}

/// `per_second=N` of a query string.
fn rate_in_query(query: &str) -> Result<f64, String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("per_second="))
        .ok_or_else(|| "the query needs per_second=N".to_string())
        .and_then(parse_rate)
}

fn answer(stream: TcpStream, state: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers are read and ignored.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let client = stream
        .peer_addr()
        .map(|peer| peer.ip().to_string())
        .unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let lock = || {
        state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let mut state = lock();
            *state.requests.entry(path.to_string()).or_default() += 1;
            state.gaps.scraped(Instant::now());
            let body = exposition(&state.requests, state.errors.value(Instant::now()));
            *state.served.entry(client).or_default() += body.len() as u64;
            ("200 OK", "text/plain; version=0.0.4", body)
        }
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/gap") => ("200 OK", "text/plain", lock().gaps.report(Instant::now())),
        ("GET", "/served") => ("200 OK", "text/plain", lock().served_report()),
        ("PUT", "/gap") => {
            lock().gaps = Gaps::new(Instant::now());
            ("200 OK", "text/plain", "reset\n".to_string())
        }
        ("PUT", "/errors") => match rate_in_query(query) {
            Ok(rate) => {
                lock().errors.set_rate(rate, Instant::now());
                eprintln!("metrics-target: now {rate} errors per second");
                (
                    "200 OK",
                    "text/plain",
                    format!("{rate} errors per second\n"),
                )
            }
            Err(reason) => ("400 Bad Request", "text/plain", format!("{reason}\n")),
        },
        ("GET" | "PUT", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET, or PUT /errors or /gap\n".to_string(),
        ),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

fn exposition(counts: &BTreeMap<String, u64>, errors: f64) -> String {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let mut text = String::from(
        "# HELP metrics_target_info The pod serving these metrics.\n# TYPE metrics_target_info gauge\n",
    );
    text.push_str(&format!(
        "metrics_target_info{{pod=\"{}\",node=\"{}\",zone=\"{}\"}} 1\n",
        escape(&var("POD_NAME")),
        escape(&var("NODE_NAME")),
        escape(&var("ZONE"))
    ));
    text.push_str("# HELP metrics_target_requests_total Requests answered, by path.\n");
    text.push_str("# TYPE metrics_target_requests_total counter\n");
    for (path, count) in counts {
        text.push_str(&format!(
            "metrics_target_requests_total{{path=\"{}\"}} {count}\n",
            escape(path)
        ));
    }
    text.push_str("# HELP app_errors_total Errors of the application since the process started.\n");
    text.push_str("# TYPE app_errors_total counter\n");
    text.push_str(&format!("app_errors_total {errors}\n"));
    text
}

/// A label value in the text format: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn fetch(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut stream = TcpStream::connect(authority).map_err(|e| format!("{authority}: {e}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{url}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("{url}: {e}"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{url}: {status}"));
    }
    print!("{body}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on 127.0.0.1 answering `requests` connections, with errors at `rate`.
    fn server(rate: f64, requests: usize) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state: Shared = Arc::new(Mutex::new(State::new(rate)));
        std::thread::spawn(move || {
            for stream in listener.incoming().take(requests) {
                answer(stream.unwrap(), &state).unwrap();
            }
        });
        addr
    }

    /// `METHOD path` over HTTP/1.0: the status line and the body.
    fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (String, String) {
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    /// The value of the unlabelled sample `metric` in a text exposition.
    fn sample(text: &str, metric: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{metric} ")))
            .unwrap_or_else(|| panic!("no {metric} in {text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn the_longest_gap_between_scrapes_is_kept_until_reset() {
        let start = Instant::now();
        let mut gaps = Gaps::new(start);
        gaps.scraped(start + Duration::from_secs(1));
        gaps.scraped(start + Duration::from_secs(6));
        gaps.scraped(start + Duration::from_secs(8));
        let report = gaps.report(start + Duration::from_secs(9));
        assert!(
            report.starts_with("longest_gap_seconds 5.000\nscrapes 3\n"),
            "{report}"
        );
        // Unscraped since: the wait up to now counts.
        let report = gaps.report(start + Duration::from_secs(20));
        assert!(
            report.starts_with("longest_gap_seconds 12.000\n"),
            "{report}"
        );
        let addr = server(0.0, 4);
        assert!(request(addr, "PUT", "/gap").0.contains("200"));
        request(addr, "GET", "/metrics");
        let (status, body) = request(addr, "GET", "/gap");
        assert!(
            status.contains("200") && body.contains("scrapes 1\n"),
            "{status} {body}"
        );
    }

    #[test]
    fn served_counts_the_bytes_of_metrics_bodies_by_client() {
        let addr = server(0.0, 4);
        let first = request(addr, "GET", "/metrics").1;
        let second = request(addr, "GET", "/metrics").1;
        // Not counted: only /metrics bodies are scrape traffic.
        request(addr, "GET", "/gap");
        let (status, body) = request(addr, "GET", "/served");
        let bytes = (first.len() + second.len()) as f64;
        assert!(status.contains("200"), "{status}");
        assert_eq!(sample(&body, "served_bytes_total"), bytes, "{body}");
        assert_eq!(
            sample(&body, "served_bytes{client=\"127.0.0.1\"}"),
            bytes,
            "{body}"
        );
    }

    #[test]
    fn serves_metrics_and_fetch_reads_them() {
        let addr = server(0.0, 2);
        fetch(&format!("http://{addr}/metrics")).unwrap();
        let missing = fetch(&format!("http://{addr}/nope")).unwrap_err();
        assert!(missing.contains("404"), "{missing}");
    }

    #[test]
    fn exposition_counts_requests_and_escapes_labels() {
        let counts = BTreeMap::from([("/metrics".to_string(), 3)]);
        let text = exposition(&counts, 2.5);
        assert!(text.contains("metrics_target_requests_total{path=\"/metrics\"} 3\n"));
        assert!(text.contains("# TYPE app_errors_total counter\napp_errors_total 2.5\n"));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn the_error_counter_grows_at_its_rate_and_keeps_its_value_when_the_rate_changes() {
        let start = Instant::now();
        let at = |seconds: f64| start + Duration::from_secs_f64(seconds);
        let mut counter = ErrorCounter::new(2.0, start);
        assert_eq!(counter.value(at(0.0)), 0.0);
        assert_eq!(counter.value(at(1.5)), 3.0);
        counter.set_rate(0.0, at(2.0));
        assert_eq!(counter.value(at(2.0)), 4.0);
        assert_eq!(counter.value(at(60.0)), 4.0, "a rate of 0 stops it");
        counter.set_rate(1.0, at(60.0));
        assert_eq!(counter.value(at(61.0)), 5.0, "it goes on from its value");
        // A counter whose rate was never set stays 0: a healthy revision.
        assert_eq!(ErrorCounter::new(0.0, start).value(at(3600.0)), 0.0);
    }

    #[test]
    fn the_rate_comes_from_the_environment_and_refuses_nonsense() {
        assert_eq!(rate_from_env(None), Ok(0.0));
        assert_eq!(rate_from_env(Some("")), Ok(0.0));
        assert_eq!(rate_from_env(Some(" 2.5 ")), Ok(2.5));
        for bad in ["-1", "NaN", "inf", "many"] {
            let error = rate_from_env(Some(bad)).unwrap_err();
            assert!(error.starts_with("ERRORS_PER_SECOND: "), "{error}");
        }
        assert_eq!(rate_in_query("x=1&per_second=7"), Ok(7.0));
        assert!(rate_in_query("rate=7").is_err());
    }

    #[test]
    fn put_errors_changes_the_rate_of_the_served_counter() {
        let addr = server(0.0, 8);
        let (status, body) = request(addr, "GET", "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(sample(&body, "app_errors_total"), 0.0);
        assert_eq!(
            request(addr, "PUT", "/errors?per_second=1000000").0,
            "HTTP/1.1 200 OK"
        );
        let grown = sample(&request(addr, "GET", "/metrics").1, "app_errors_total");
        assert!(grown > 0.0, "{grown}");
        assert_eq!(
            request(addr, "PUT", "/errors?per_second=0").0,
            "HTTP/1.1 200 OK"
        );
        let stopped = sample(&request(addr, "GET", "/metrics").1, "app_errors_total");
        assert!(
            stopped >= grown,
            "a counter never decreases: {stopped} < {grown}"
        );
        let later = sample(&request(addr, "GET", "/metrics").1, "app_errors_total");
        assert_eq!(later, stopped, "a rate of 0 stops it");
        assert_eq!(
            request(addr, "PUT", "/errors").0,
            "HTTP/1.1 400 Bad Request"
        );
        assert_eq!(
            request(addr, "POST", "/errors?per_second=1").0,
            "HTTP/1.1 405 Method Not Allowed"
        );
    }
}
