//! Which alerts pause a rollout (pure): `alertGate.matchers` parsed as a PromQL selector, the
//! pending/firing choice and the zone scope, applied to an answer.

use std::collections::BTreeSet;

use promql_parser::label::Matcher;
use promql_parser::parser::{self, Expr};

use super::fetch::{Alert, GateError};

/// How many alerts a message names; the rest are counted.
pub const NAMED_ALERTS: usize = 5;

/// `alertGate.matchers`, parsed: ANDed matchers over an alert's labels (a label an alert does
/// not carry is the empty string, as in PromQL).
#[derive(Debug, Clone)]
pub struct Selector {
    matchers: Vec<Matcher>,
    text: String,
}

impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Selector {
    /// Parses `{name op "value", ...}` (=, !=, =~, !~; regexes fully anchored, as in PromQL). A
    /// metric name, `or`, offset and `@` have no meaning for alerts and are refused. The error
    /// is one line, for `spec.alertGate.matchers: <error>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        zone_topology::promql_depth::check(text, zone_topology::promql_depth::MAX_DEPTH)?;
        let expr = parser::parse(text)
            .map_err(|error| error.split_whitespace().collect::<Vec<_>>().join(" "))?;
        let Expr::VectorSelector(selector) = expr else {
            return Err(format!(
                "{text:?} is not a selector: write label matchers in braces, like {{severity=\"critical\"}}"
            ));
        };
        if let Some(name) = &selector.name {
            return Err(format!(
                "{text:?} names a metric ({name}): alerts are selected by labels; write {{alertname=\"{name}\"}}"
            ));
        }
        if selector.offset.is_some() || selector.at.is_some() {
            return Err(format!("{text:?}: offset and @ have no meaning for alerts"));
        }
        if !selector.matchers.or_matchers.is_empty() {
            return Err(format!(
                "{text:?}: \"or\" is not supported; use a regex (label=~\"a|b\")"
            ));
        }
        let matchers = selector.matchers.matchers;
        if matchers.is_empty() {
            return Err(format!("{text:?} has no matcher: give at least one"));
        }
        Ok(Self {
            matchers,
            text: text.to_string(),
        })
    }

    /// The selector as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, alert: &Alert) -> bool {
        self.matchers.iter().all(|matcher| {
            matcher.is_match(alert.labels.get(&matcher.name).map_or("", String::as_str))
        })
    }
}

/// Everything that decides which alerts of an answer pause.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub selector: Selector,
    pub include_pending: bool,
    /// RolloutZone: the zone label, and the zones whose alerts count (alerts without the label
    /// count too). None: every zone (Any).
    pub zones: Option<(String, BTreeSet<String>)>,
}

/// What the gate says about the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No matching alert fires: proceed.
    Clear,
    /// Matching alerts: `named` (up to [`NAMED_ALERTS`] distinct names, sorted) of `count`.
    Firing { named: Vec<String>, count: usize },
    /// No clear answer: pause (fail safe).
    Unavailable(GateError),
}

impl Rules {
    /// Whether `alert` pauses the rollout.
    pub fn pauses(&self, alert: &Alert) -> bool {
        let state = match alert.state.as_str() {
            "firing" => true,
            "pending" => self.include_pending,
            _ => false,
        };
        state && self.in_scope(alert) && self.selector.matches(alert)
    }

    fn in_scope(&self, alert: &Alert) -> bool {
        let Some((label, zones)) = &self.zones else {
            return true;
        };
        match alert.labels.get(label).map(String::as_str) {
            None | Some("") => true,
            Some(zone) => zones.contains(zone),
        }
    }

    /// The verdict on an answer (pure).
    pub fn verdict(&self, answer: &Result<Vec<Alert>, GateError>) -> Verdict {
        let alerts = match answer {
            Ok(alerts) => alerts,
            Err(error) => return Verdict::Unavailable(error.clone()),
        };
        let matching: Vec<&Alert> = alerts.iter().filter(|a| self.pauses(a)).collect();
        if matching.is_empty() {
            return Verdict::Clear;
        }
        let names: BTreeSet<String> = matching.iter().map(|alert| self.display(alert)).collect();
        Verdict::Firing {
            named: names.into_iter().take(NAMED_ALERTS).collect(),
            count: matching.len(),
        }
    }

    /// `alertname`, with its zone when it has one: `HighErrorRate{zone="zone-a"}`.
    fn display(&self, alert: &Alert) -> String {
        let name = alert
            .labels
            .get("alertname")
            .map_or("(no alertname)", String::as_str);
        let label = self
            .zones
            .as_ref()
            .map_or("zone", |(label, _)| label.as_str());
        match alert.labels.get(label).filter(|z| !z.is_empty()) {
            Some(zone) => format!("{name}{{{label}=\"{zone}\"}}"),
            None => name.to_string(),
        }
    }
}

/// `a, b, c and 4 more` (pure).
pub fn alert_list(named: &[String], count: usize) -> String {
    let mut text = named.join(", ");
    if count > named.len() {
        text.push_str(&format!(" and {} more", count - named.len()));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use zone_operator::prom_api::ApiError;

    /// Matchers nested 100,000 deep are refused with a one-line error, on a thread with a
    /// tokio worker's 2 MiB stack: parsed unchecked, they overflow it and abort the
    /// controller.
    #[test]
    fn deep_matchers_are_refused_not_a_crash() {
        let n = 100_000;
        let texts = [
            format!(
                "{}{{severity=\"critical\"}}{}",
                "(".repeat(n),
                ")".repeat(n)
            ),
            format!("{{{}}}", vec!["a=\"b\""; n].join(" or ")),
        ];
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for text in texts {
                    let error = Selector::parse(&text).unwrap_err();
                    assert!(error.starts_with("the expression nests"), "{error}");
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    fn alert(labels: &[(&str, &str)], state: &str) -> Alert {
        Alert {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            state: state.to_string(),
            active_at: None,
        }
    }

    fn rules(matchers: &str) -> Rules {
        Rules {
            selector: Selector::parse(matchers).unwrap(),
            include_pending: false,
            zones: None,
        }
    }

    #[test]
    fn the_four_operators_match_as_in_promql() {
        let web_a = alert(
            &[
                ("alertname", "HighErrors"),
                ("app", "web"),
                ("severity", "critical"),
            ],
            "firing",
        );
        let api = alert(&[("alertname", "Latency"), ("app", "api")], "firing");
        // (selector, matches web_a, matches api)
        let cases = [
            (r#"{app="web"}"#, true, false),
            (r#"{alertname!="", app!="web"}"#, false, true),
            (r#"{app=~"we.*"}"#, true, false),
            // Anchored: "e" alone does not match "web".
            (r#"{app=~"e"}"#, false, false),
            (r#"{alertname=~".+", app!~"web|db"}"#, false, true),
            (r#"{severity="critical", app="web"}"#, true, false),
            // A label the alert lacks is "" (beside a matcher that needs a value, as PromQL
            // wants).
            (r#"{alertname=~".+", severity=""}"#, false, true),
            (r#"{alertname=~".+", severity!="critical"}"#, false, true),
            (r#"{alertname=~"High.+|Lat.+"}"#, true, true),
        ];
        for (selector, web, other) in cases {
            let selector = Selector::parse(selector).unwrap();
            assert_eq!(selector.matches(&web_a), web, "{} on web", selector.text());
            assert_eq!(selector.matches(&api), other, "{} on api", selector.text());
        }
    }

    #[test]
    fn selectors_without_meaning_for_alerts_are_refused_with_a_reason() {
        let cases = [
            ("", ""),
            ("{}", ""),
            (
                r#"{severity!="critical"}"#,
                "at least one non-empty matcher",
            ),
            ("up", "names a metric (up)"),
            (r#"up{job="a"}"#, "alertname=\"up\""),
            (r#"{a="b"} offset 5m"#, "offset"),
            (r#"{a="b" or c="d"}"#, "\"or\" is not supported"),
            (r#"sum({a="b"})"#, "is not a selector"),
            (r#"{a=~"("}"#, ""),
            (r#"{a="b""#, ""),
        ];
        for (text, expected) in cases {
            let error = Selector::parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains('\n'), "{text}: one line: {error}");
        }
        assert!(Selector::parse(r#" {severity="critical"} "#).is_ok());
    }

    #[test]
    fn only_firing_alerts_pause_unless_pending_ones_are_included() {
        let firing = alert(&[("alertname", "A"), ("sev", "x")], "firing");
        let pending = alert(&[("alertname", "B"), ("sev", "x")], "pending");
        let inactive = alert(&[("alertname", "C"), ("sev", "x")], "inactive");
        let mut gate = rules(r#"{sev="x"}"#);
        assert!(gate.pauses(&firing));
        assert!(!gate.pauses(&pending));
        assert!(!gate.pauses(&inactive));
        gate.include_pending = true;
        assert!(gate.pauses(&pending));
        assert!(!gate.pauses(&inactive));
    }

    #[test]
    fn rollout_zone_scope_keeps_the_zone_s_alerts_and_zoneless_ones() {
        let a = alert(&[("alertname", "E"), ("zone", "zone-a")], "firing");
        let b = alert(&[("alertname", "E"), ("zone", "zone-b")], "firing");
        let none = alert(&[("alertname", "E")], "firing");
        let empty = alert(&[("alertname", "E"), ("zone", "")], "firing");
        let mut gate = rules(r#"{alertname="E"}"#);
        for each in [&a, &b, &none, &empty] {
            assert!(gate.pauses(each), "Any: every zone");
        }
        gate.zones = Some(("zone".into(), ["zone-a".to_string()].into()));
        assert!(gate.pauses(&a));
        assert!(!gate.pauses(&b), "another zone's alert");
        assert!(gate.pauses(&none), "no zone label: counts");
        assert!(gate.pauses(&empty), "an empty zone label is no zone");
        // Another label name.
        gate.zones = Some(("az".into(), ["zone-a".to_string()].into()));
        assert!(
            gate.pauses(&b),
            "the zone label is az: zone=zone-b is just a label"
        );
    }

    #[test]
    fn the_verdict_names_at_most_five_alerts_and_counts_them_all() {
        let gate = Rules {
            zones: Some(("zone".into(), ["zone-a".to_string()].into())),
            ..rules(r#"{severity="critical"}"#)
        };
        let mut alerts: Vec<Alert> = (0..7)
            .map(|i| {
                alert(
                    &[
                        ("alertname", &format!("Alert{i}")),
                        ("severity", "critical"),
                        ("zone", "zone-a"),
                    ],
                    "firing",
                )
            })
            .collect();
        alerts.push(alert(
            &[("alertname", "Other"), ("severity", "warning")],
            "firing",
        ));
        alerts.push(alert(
            &[
                ("alertname", "B"),
                ("severity", "critical"),
                ("zone", "zone-b"),
            ],
            "firing",
        ));
        let verdict = gate.verdict(&Ok(alerts));
        let Verdict::Firing { named, count } = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(count, 7);
        assert_eq!(named.len(), NAMED_ALERTS);
        assert_eq!(named[0], r#"Alert0{zone="zone-a"}"#);
        assert_eq!(
            alert_list(&named, count),
            r#"Alert0{zone="zone-a"}, Alert1{zone="zone-a"}, Alert2{zone="zone-a"}, Alert3{zone="zone-a"}, Alert4{zone="zone-a"} and 2 more"#
        );
        assert_eq!(alert_list(&["A".to_string()], 1), "A");

        assert_eq!(gate.verdict(&Ok(vec![])), Verdict::Clear);
        let error = GateError::Api(ApiError::Connect("refused".into()));
        assert_eq!(
            gate.verdict(&Err(error.clone())),
            Verdict::Unavailable(error)
        );
    }
}
