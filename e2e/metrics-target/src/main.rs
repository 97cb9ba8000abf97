//! A tiny Prometheus scrape target for pods on the local zonal cluster's real nodes.
//!
//! `metrics-target serve [ADDR]` answers `GET /metrics` (text exposition format: a request counter
//! and an info series naming the pod, node and zone from the environment) and `GET /healthz`.
//! `metrics-target fetch URL` GETs an `http://` URL and prints the body: run with `kubectl exec`,
//! it shows that one pod reaches another across nodes. std only, so it builds static in seconds.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// A client that never finishes its request does not hold a thread for ever.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

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

type Counts = Arc<Mutex<BTreeMap<String, u64>>>;

fn serve(addr: &str) -> Result<(), String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?;
    eprintln!("metrics-target: serving on {addr}");
    let counts: Counts = Arc::default();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let counts = counts.clone();
        std::thread::spawn(move || {
            if let Err(e) = answer(stream, &counts) {
                eprintln!("metrics-target: {e}");
            }
        });
    }
    Ok(())
}

fn answer(stream: TcpStream, counts: &Counts) -> std::io::Result<()> {
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
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let mut counts = counts
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *counts.entry(path.to_string()).or_default() += 1;
            ("200 OK", "text/plain; version=0.0.4", exposition(&counts))
        }
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
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

fn exposition(counts: &BTreeMap<String, u64>) -> String {
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

    #[test]
    fn serves_metrics_and_fetch_reads_them() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts: Counts = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(2) {
                answer(stream.unwrap(), &counts).unwrap();
            }
        });
        fetch(&format!("http://{addr}/metrics")).unwrap();
        let missing = fetch(&format!("http://{addr}/nope")).unwrap_err();
        assert!(missing.contains("404"), "{missing}");
    }

    #[test]
    fn exposition_counts_requests_and_escapes_labels() {
        let counts = BTreeMap::from([("/metrics".to_string(), 3)]);
        let text = exposition(&counts);
        assert!(text.contains("metrics_target_requests_total{path=\"/metrics\"} 3\n"));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
