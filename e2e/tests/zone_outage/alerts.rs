//! The mixin's alerts through the outage: a Prometheus on this host evaluates the
//! PrometheusRule of config/monitoring, as shipped, over the metrics of the deployed controllers'
//! replicas (both of each, by pod IP), scraped every 5 s under the job names its rules select. The outage must raise
//! `ZoneAwareZoneDark` and `ZoneAwareZoneShardsDown` for zone-b, each once, resolved after the
//! return; any other alert that fires in the run is a false alert.

use std::collections::{BTreeMap, BTreeSet};

use e2e::prometheus::{Major, PrometheusProcess};

use super::*;

/// The scrape and evaluation interval.
const EVERY: Duration = Duration::from_secs(5);
/// The alerts the outage must raise for the dark zone, once each.
pub const EXPECTED: [&str; 2] = ["ZoneAwareZoneDark", "ZoneAwareZoneShardsDown"];

pub struct Alerts {
    prometheus: PrometheusProcess,
    from: Timestamp,
}

/// An alert (`name zone`) → how many separate times it fired.
pub type Fired = BTreeMap<String, usize>;

/// `name zone` of an alert's labels (the zone empty when it has none).
fn key(labels: &Value) -> String {
    format!(
        "{} {}",
        labels["alertname"].as_str().unwrap_or("?"),
        labels["zone"].as_str().unwrap_or_default()
    )
    .trim_end()
    .to_string()
}

fn expected() -> BTreeSet<String> {
    EXPECTED
        .iter()
        .map(|name| format!("{name} {DARK}"))
        .collect()
}

impl Alerts {
    /// The Prometheus scraping every replica of each of `controllers` under its binary's name as
    /// the job (the federator's over HTTPS, its certificate not checked: these figures are about
    /// alerts), every target up and every rule group of the mixin loaded.
    pub async fn start(controllers: &super::deployed::Controllers<'_>) -> Alerts {
        let path = e2e::deploy::repo_root().join("config/monitoring/prometheus-rule.yaml");
        let rule = std::fs::read_to_string(path).unwrap();
        let spec = e2e::identity::yaml_to_json(&rule)[0]["spec"].clone();
        let groups = spec["groups"].as_array().map_or(0, Vec::len);
        let mut scrape = Vec::new();
        let mut targets = 0;
        for job in e2e::deploy::controllers() {
            let replicas = controllers.metrics_targets(&job).await;
            targets += replicas.len();
            let mut config = json!({"job_name": job, "static_configs": [{"targets": replicas}]});
            if job == "rules-federator" {
                config["scheme"] = json!("https");
                config["tls_config"] = json!({"insecure_skip_verify": true});
            }
            scrape.push(config);
        }
        let every = format!("{}s", EVERY.as_secs());
        let config = json!({
            "global": {"scrape_interval": every, "evaluation_interval": every},
            "rule_files": ["rules.json"],
            "scrape_configs": scrape,
        });
        let rules = spec.to_string();
        let prometheus = PrometheusProcess::start_with_files(
            Major::V3,
            "zone-outage-alerts",
            &config.to_string(),
            &[("rules.json", &rules)],
            &[],
        )
        .await;
        let loaded = prometheus
            .rule_groups()
            .await
            .as_array()
            .map_or(0, Vec::len);
        assert!(
            groups > 0 && loaded == groups,
            "{loaded} of {groups} groups"
        );
        wait_for("every controller scraped up", TIMEOUT, || async {
            let up = prometheus.query("up == 1").await["result"]
                .as_array()
                .map_or(0, Vec::len);
            (up == targets)
                .then_some(())
                .ok_or(format!("{up} of {targets} up"))
        })
        .await;
        Alerts {
            prometheus,
            from: Timestamp::now(),
        }
    }

    /// The alerts firing now.
    async fn firing(&self) -> BTreeSet<String> {
        let data = self
            .prometheus
            .query(r#"ALERTS{alertstate="firing"}"#)
            .await;
        data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sample| key(&sample["metric"]))
            .collect()
    }

    /// Waits until every alert of [`EXPECTED`] fires for the dark zone: when.
    pub async fn wait_firing(&self) -> Timestamp {
        self.wait_until("the dark zone's alerts firing", |firing, expected| {
            firing.is_superset(expected)
        })
        .await
    }

    /// Waits until no alert of [`EXPECTED`] fires: when.
    pub async fn wait_resolved(&self) -> Timestamp {
        self.wait_until("the dark zone's alerts resolved", |firing, expected| {
            firing.is_disjoint(expected)
        })
        .await
    }

    /// Waits until `check(firing now, expected)` holds: when.
    async fn wait_until(
        &self,
        what: &str,
        check: impl Fn(&BTreeSet<String>, &BTreeSet<String>) -> bool,
    ) -> Timestamp {
        let expected = expected();
        wait_for(what, TIMEOUT, || async {
            let firing = self.firing().await;
            check(&firing, &expected)
                .then_some(())
                .ok_or(format!("firing: {firing:?}"))
        })
        .await;
        Timestamp::now()
    }

    /// Every alert that fired since the start, and how many separate times (a gap of over two
    /// evaluations between its firing samples starts another).
    pub async fn fired(&self) -> Fired {
        let (from, to) = (self.from.as_second(), Timestamp::now().as_second());
        let step = EVERY.as_secs_f64();
        let data = self
            .prometheus
            .query_range(
                r#"ALERTS{alertstate="firing"}"#,
                from as f64,
                to as f64,
                step,
            )
            .await;
        let mut fired = Fired::new();
        for series in data["result"].as_array().into_iter().flatten() {
            let times: Vec<f64> = series["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|value| value[0].as_f64())
                .collect();
            let spans = 1 + times
                .windows(2)
                .filter(|w| w[1] - w[0] > 2.0 * step)
                .count();
            *fired.entry(key(&series["metric"])).or_default() += spans;
        }
        fired
    }
}

/// The alerts that should not have fired, or fired more than once: each extra firing counts.
pub fn false_alerts(fired: &Fired) -> usize {
    let expected = expected();
    fired
        .iter()
        .map(|(alert, times)| {
            if expected.contains(alert) {
                times - 1
            } else {
                *times
            }
        })
        .sum()
}
