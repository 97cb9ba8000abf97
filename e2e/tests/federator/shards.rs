//! The backends of the federator test binaries that run real Prometheus: two shards of two
//! replicas on 127.0.0.1 loading the rule files below, and the wait until their merged answer
//! has settled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use e2e::process::http_get_from;
use e2e::prometheus::PrometheusProcess;
use e2e::wait_for;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Rules both shards load: a recording rule, an alert that fires, one pending for an hour, one
/// that never fires; `common` is also the name of a group in `b.yaml`.
const A_YAML: &str = r#"groups:
- name: common
  interval: 1s
  rules:
  - record: job:up:sum
    expr: sum by (job) (up)
  - alert: AlwaysFiring
    expr: vector(1)
    labels: {severity: page, team: a}
  - alert: PendingLong
    expr: vector(1)
    for: 1h
    labels: {team: b}
  - alert: NeverFires
    expr: vector(1) == 2
    labels: {team: a}
"#;
const B_YAML: &str = r#"groups:
- name: common
  interval: 1s
  rules:
  - record: b:one
    expr: vector(1)
    labels: {team: b}
"#;
/// Only shard 1 has this one.
const ONLY_YAML: &str = r#"groups:
- name: extra
  interval: 1s
  rules:
  - alert: OnlyOnShardOne
    expr: vector(1)
    labels: {team: c}
"#;

pub struct Rules {
    dir: PathBuf,
}

impl Rules {
    /// The rule files in a directory of `test`'s own (the tests run in parallel in one process,
    /// and each removes its directory when it ends; Prometheus re-reads the files every second).
    pub fn write(test: &str) -> Rules {
        let dir =
            std::env::temp_dir().join(format!("e2e-federator-rules-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [
            ("a.yaml", A_YAML),
            ("b.yaml", B_YAML),
            ("only.yaml", ONLY_YAML),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Rules { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Rules {
    /// The rule files of shard `shard`: both load `a.yaml` and `b.yaml`, shard 1 also
    /// `only.yaml`.
    pub fn of_shard(&self, shard: u32) -> Vec<String> {
        let mut files = vec![self.path("a.yaml"), self.path("b.yaml")];
        if shard == 1 {
            files.push(self.path("only.yaml"));
        }
        files
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Prometheus configuration: external labels `prometheus_replica` and (given one) `shard`,
/// evaluation every second, `files` as rule files.
pub fn config(shard: Option<u32>, replica: &str, files: &[String]) -> String {
    let mut labels = format!("    prometheus_replica: {replica}\n");
    if let Some(shard) = shard {
        labels.push_str(&format!("    shard: \"{shard}\"\n"));
    }
    let files: String = files.iter().map(|f| format!("  - {f}\n")).collect();
    format!("global:\n  evaluation_interval: 1s\n  external_labels:\n{labels}rule_files:\n{files}")
}

/// Shards 0 and 1, replicas `<prefix>-<shard>-a` and `-b`, loading `rules` (see
/// [`Rules::of_shard`]): the processes and their endpoints as the federator's `--endpoint`s.
pub async fn two_shards_of_two_replicas(
    rules: &Rules,
    prefix: &str,
) -> (Vec<PrometheusProcess>, Vec<String>) {
    let mut backends = Vec::new();
    let mut endpoints = Vec::new();
    for shard in [0u32, 1] {
        let files = rules.of_shard(shard);
        for replica in ["a", "b"] {
            let name = format!("{prefix}-{shard}-{replica}");
            let process =
                PrometheusProcess::start(&name, &config(Some(shard), &name, &files), &[]).await;
            endpoints.push(format!("{}#shard={shard}&replica={name}", process.url()));
            backends.push(process);
        }
    }
    (backends, endpoints)
}

/// Settled: every rule of every replica evaluated (each group on its own schedule), the
/// always-firing alert firing on both shards. Returns the federator's answer.
pub async fn merged_rules_settled(port: u16) -> Value {
    wait_for("the merged rules, settled", TIMEOUT, || async {
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (code, body) = http_get_from(address, "/api/v1/rules").await?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        let rules: Vec<Value> = value["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let unevaluated = rules
            .iter()
            .filter(|r| r["health"] != "ok" || r["state"] == "unknown")
            .count();
        let firing = rules
            .iter()
            .filter(|r| r["name"] == "AlwaysFiring" && r["state"] == "firing")
            .count();
        (code == 200 && firing == 2 && unevaluated == 0)
            .then_some(value)
            .ok_or(format!("{code}: {firing} firing"))
    })
    .await
}
