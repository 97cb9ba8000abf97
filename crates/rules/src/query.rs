//! The parameters of `/api/v1/rules`, read and applied exactly as Prometheus 3 does
//! (`web/api/v1/api.go`): the same checks in the same order, the same error messages, the same
//! filters and the same pagination token.

use std::collections::BTreeSet;

use promql_parser::label::Matcher;
use promql_parser::parser::{self, Expr};
use sha2::{Digest, Sha256};

use crate::model::{Alert, AlertDiscovery, Labels, Rule, RuleDiscovery, RuleGroup};

/// A parameter Prometheus refuses: HTTP 400, `errorType: bad_data`, this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadData(pub String);

fn invalid_param(parameter: &str, message: impl std::fmt::Display) -> BadData {
    BadData(format!("invalid parameter {parameter:?}: {message}"))
}

/// Which rules `type` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuleType {
    #[default]
    All,
    Alert,
    Record,
}

/// The parameters of one `/api/v1/rules` request.
#[derive(Debug, Clone, Default)]
pub struct RulesQuery {
    pub rule_type: RuleType,
    /// ORed sets of ANDed matchers, against each rule's labels.
    pub matcher_sets: Vec<Vec<Matcher>>,
    pub rule_names: BTreeSet<String>,
    pub rule_groups: BTreeSet<String>,
    pub files: BTreeSet<String>,
    pub exclude_alerts: bool,
    /// `group_limit` and the token of the first group of the page.
    pub page: Option<(usize, Option<String>)>,
    /// The `match[]` values as given, to send on to backends.
    pub raw_matchers: Vec<String>,
}

/// The first value of `name`, as Go's `URL.Query().Get`.
fn first<'a>(pairs: &'a [(String, String)], name: &str) -> &'a str {
    pairs
        .iter()
        .find(|(key, _)| key == name)
        .map_or("", |(_, value)| value.as_str())
}

fn all(pairs: &[(String, String)], name: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
        .collect()
}

/// Go's `strconv.ParseBool`.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// One `match[]` value: a vector selector, as Prometheus's `ParseMetricSelector`; `or` in the
/// braces gives several sets.
pub fn parse_selector(text: &str) -> Result<Vec<Vec<Matcher>>, BadData> {
    zone_topology::promql_depth::check(text, zone_topology::promql_depth::MAX_DEPTH)
        .map_err(|error| BadData(format!("1:1: parse error: {error}")))?;
    let expr = parser::parse(text).map_err(BadData)?;
    let Expr::VectorSelector(selector) = expr else {
        return Err(BadData(format!(
            "1:1: parse error: expected a vector selector, got {text:?}"
        )));
    };
    if selector.offset.is_some() || selector.at.is_some() {
        return Err(BadData(format!(
            "1:1: parse error: unexpected offset or @ modifier in selector {text:?}"
        )));
    }
    let mut sets = if selector.matchers.or_matchers.is_empty() {
        vec![selector.matchers.matchers.clone()]
    } else {
        selector.matchers.or_matchers.clone()
    };
    if let Some(name) = &selector.name {
        for set in &mut sets {
            set.push(Matcher::new(
                promql_parser::label::MatchOp::Equal,
                "__name__",
                name,
            ));
        }
    }
    for set in &sets {
        if set.iter().all(|m| m.is_match("")) {
            return Err(BadData(
                "match[] must contain at least one non-empty matcher".to_string(),
            ));
        }
    }
    Ok(sets)
}

/// Reads the parameters (a request's query pairs, in order) as Prometheus does.
pub fn parse_rules_query(pairs: &[(String, String)]) -> Result<RulesQuery, BadData> {
    let raw_matchers = all(pairs, "match[]");
    let mut matcher_sets = Vec::new();
    for text in &raw_matchers {
        matcher_sets.extend(parse_selector(text)?);
    }
    let rule_type = rule_type(pairs)?;
    let exclude_alerts = exclude_alerts(pairs)?;
    let page = page(pairs)?;
    Ok(RulesQuery {
        rule_type,
        matcher_sets,
        rule_names: all(pairs, "rule_name[]").into_iter().collect(),
        rule_groups: all(pairs, "rule_group[]").into_iter().collect(),
        files: all(pairs, "file[]").into_iter().collect(),
        exclude_alerts,
        page,
        raw_matchers,
    })
}

/// `type`: alerting or recording rules only, or both when absent.
fn rule_type(pairs: &[(String, String)]) -> Result<RuleType, BadData> {
    match first(pairs, "type").to_lowercase().as_str() {
        "" => Ok(RuleType::All),
        "alert" => Ok(RuleType::Alert),
        "record" => Ok(RuleType::Record),
        other => Err(invalid_param(
            "type",
            format!("not supported value {other:?}"),
        )),
    }
}

/// `exclude_alerts`, as Go's `strconv.ParseBool` reads it; false when absent.
fn exclude_alerts(pairs: &[(String, String)]) -> Result<bool, BadData> {
    let exclude = first(pairs, "exclude_alerts").to_lowercase();
    match exclude.as_str() {
        "" => Ok(false),
        text => parse_bool(text).ok_or_else(|| {
            invalid_param(
                "exclude_alerts",
                format!(
                    "error converting exclude_alerts: strconv.ParseBool: parsing {text:?}: invalid syntax"
                ),
            )
        }),
    }
}

/// `group_limit` and `group_next_token`: the page asked for, if any.
fn page(pairs: &[(String, String)]) -> Result<Option<(usize, Option<String>)>, BadData> {
    let limit = first(pairs, "group_limit");
    let token = first(pairs, "group_next_token");
    if !token.is_empty() && limit.is_empty() {
        return Err(invalid_param(
            "group_next_token",
            "group_limit needs to be present in order to paginate over the groups",
        ));
    }
    if limit.is_empty() {
        return Ok(None);
    }
    let parsed: i64 = limit.parse().map_err(|_| {
        let why = if limit
            .trim_start_matches(['-', '+'])
            .chars()
            .all(|c| c.is_ascii_digit())
            && !limit.trim_start_matches(['-', '+']).is_empty()
        {
            "value out of range"
        } else {
            "invalid syntax"
        };
        invalid_param(
            "group_limit",
            format!(
                "group_limit needs to be a valid number: strconv.ParseInt: parsing {limit:?}: {why}"
            ),
        )
    })?;
    if parsed > i64::from(i32::MAX) || parsed < i64::from(i32::MIN) {
        return Err(invalid_param(
            "group_limit",
            format!(
                "group_limit needs to be a valid number: strconv.ParseInt: parsing {limit:?}: value out of range"
            ),
        ));
    }
    if parsed <= 0 {
        return Err(invalid_param(
            "group_limit",
            "group_limit needs to be greater than 0",
        ));
    }
    let size = usize::try_from(parsed).unwrap_or(usize::MAX);
    Ok(Some((size, (!token.is_empty()).then(|| token.to_string()))))
}

/// Prometheus's page token of a group: hex SHA-256 of `file;name`.
pub fn group_token(file: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{file};{name}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn matches(labels: &Labels, set: &[Matcher]) -> bool {
    set.iter()
        .all(|m| m.is_match(labels.get(&m.name).unwrap_or("")))
}

fn matches_any(labels: &Labels, sets: &[Vec<Matcher>]) -> bool {
    sets.is_empty() || sets.iter().any(|set| matches(labels, set))
}

impl RulesQuery {
    fn keeps_group(&self, group: &RuleGroup) -> bool {
        (self.rule_groups.is_empty() || self.rule_groups.contains(&group.name))
            && (self.files.is_empty() || self.files.contains(&group.file))
    }

    fn keeps_rule(&self, rule: &Rule) -> bool {
        let typed = matches!(
            (self.rule_type, rule),
            (RuleType::All, _)
                | (RuleType::Alert, Rule::Alerting(_))
                | (RuleType::Record, Rule::Recording(_))
        );
        typed
            && matches_any(rule.labels(), &self.matcher_sets)
            && (self.rule_names.is_empty() || self.rule_names.contains(rule.name()))
    }

    /// Applies the filters and the page to `groups` (sorted by file and name, as Prometheus
    /// keeps them).
    pub fn apply(&self, groups: Vec<RuleGroup>) -> Result<RuleDiscovery, BadData> {
        let mut result = RuleDiscovery::default();
        let (limit, token) = match &self.page {
            Some((limit, token)) => (Some(*limit), token.as_deref()),
            None => (None, None),
        };
        let mut found_token = token.is_none();
        for mut group in groups {
            if !found_token {
                if token != Some(group_token(&group.file, &group.name).as_str()) {
                    continue;
                }
                found_token = true;
            }
            if !self.keeps_group(&group) {
                continue;
            }
            group.rules.retain(|rule| self.keeps_rule(rule));
            if self.exclude_alerts {
                for rule in &mut group.rules {
                    if let Rule::Alerting(rule) = rule {
                        rule.alerts = None;
                    }
                }
            }
            if group.rules.is_empty() {
                continue;
            }
            if limit.is_some_and(|limit| result.groups.len() == limit) {
                result.group_next_token = group_token(&group.file, &group.name);
                break;
            }
            result.groups.push(group);
        }
        if let Some(token) = token
            && !found_token
        {
            return Err(invalid_param(
                "group_next_token",
                format!("invalid group_next_token '{token}'. were rule groups changed?"),
            ));
        }
        Ok(result)
    }
}

/// `/api/v1/alerts`: every instance of every alerting rule, in rule order.
pub fn alerts(groups: &[RuleGroup]) -> AlertDiscovery {
    into_alerts(groups.to_vec())
}

/// [`alerts`], taking the groups: the instances move out of them, nothing is copied.
pub fn into_alerts(groups: Vec<RuleGroup>) -> AlertDiscovery {
    let alerts: Vec<Alert> = groups
        .into_iter()
        .flat_map(|group| group.rules)
        .filter_map(|rule| match rule {
            Rule::Alerting(rule) => rule.alerts,
            Rule::Recording(_) => None,
        })
        .flatten()
        .collect();
    AlertDiscovery { alerts }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AlertingRule, RecordingRule};

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn error(query: &[(&str, &str)]) -> String {
        parse_rules_query(&pairs(query)).unwrap_err().0
    }

    /// A `match[]` nested 100,000 deep is a 400, on a thread with a tokio worker's 2 MiB
    /// stack: parsed unchecked, it overflows it and aborts the federator.
    #[test]
    fn a_deep_selector_is_bad_data_not_a_crash() {
        let n = 100_000;
        let texts = [
            format!("{}up{}", "{".repeat(n), "}".repeat(n)),
            format!("{}up{}", "(".repeat(n), ")".repeat(n)),
            format!("up{{{}}}", vec!["a=\"b\""; n].join(" or ")),
        ];
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for text in texts {
                    let BadData(error) = parse_selector(&text).unwrap_err();
                    assert!(
                        error.starts_with("1:1: parse error: the expression nests"),
                        "{error}"
                    );
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn bad_parameters_get_prometheus_messages() {
        assert_eq!(
            error(&[("type", "ALL")]),
            r#"invalid parameter "type": not supported value "all""#
        );
        assert_eq!(
            error(&[("exclude_alerts", "yes")]),
            r#"invalid parameter "exclude_alerts": error converting exclude_alerts: strconv.ParseBool: parsing "yes": invalid syntax"#
        );
        assert_eq!(
            error(&[("group_next_token", "abc")]),
            r#"invalid parameter "group_next_token": group_limit needs to be present in order to paginate over the groups"#
        );
        assert_eq!(
            error(&[("group_limit", "0")]),
            r#"invalid parameter "group_limit": group_limit needs to be greater than 0"#
        );
        assert_eq!(
            error(&[("group_limit", "x")]),
            r#"invalid parameter "group_limit": group_limit needs to be a valid number: strconv.ParseInt: parsing "x": invalid syntax"#
        );
        assert!(error(&[("match[]", "{a=~\"(\"}")]).contains("illegal regex"));
        assert!(error(&[("match[]", "{a=~\".*\"}")]).contains("at least one non-empty matcher"));
        assert!(error(&[("match[]", "up + 1")]).contains("expected a vector selector"));
        assert!(
            parse_rules_query(&pairs(&[("type", "Alert"), ("exclude_alerts", "TRUE")])).is_ok()
        );
    }

    #[test]
    fn the_token_is_prometheus_s() {
        // printf 'a.yaml;g' | sha256sum
        assert_eq!(
            group_token("a.yaml", "g"),
            "f12d34cdcb2b2d0c08b0fe64262eeae4f06d1e8999a422314c114a4fd62532a3"
        );
    }

    fn recording(name: &str, labels: &[(&str, &str)]) -> Rule {
        Rule::Recording(RecordingRule {
            name: name.into(),
            query: "1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            health: "ok".into(),
            ..RecordingRule::default()
        })
    }

    fn alerting(name: &str) -> Rule {
        Rule::Alerting(AlertingRule {
            name: name.into(),
            state: "firing".into(),
            query: "1".into(),
            health: "ok".into(),
            alerts: Some(vec![Alert {
                state: "firing".into(),
                ..Alert::default()
            }]),
            ..AlertingRule::default()
        })
    }

    fn groups() -> Vec<RuleGroup> {
        ["a", "b", "c"]
            .iter()
            .map(|name| RuleGroup {
                name: name.to_string(),
                file: "f.yaml".into(),
                rules: vec![
                    recording(&format!("{name}_r"), &[("team", name)]),
                    alerting(&format!("{name}_x")),
                ],
                ..RuleGroup::default()
            })
            .collect()
    }

    fn apply(query: &[(&str, &str)]) -> Result<RuleDiscovery, BadData> {
        parse_rules_query(&pairs(query)).unwrap().apply(groups())
    }

    #[test]
    fn match_sets_are_ored_and_matchers_within_a_set_anded() {
        let result = apply(&[("match[]", r#"{team="a"}"#), ("match[]", r#"{team="c"}"#)]).unwrap();
        let names: Vec<&str> = result
            .groups
            .iter()
            .flat_map(|g| g.rules.iter().map(Rule::name))
            .collect();
        assert_eq!(names, ["a_r", "c_r"]);
        let result = apply(&[("match[]", r#"{team="a", other="x"}"#)]).unwrap();
        assert!(
            result.groups.is_empty(),
            "groups left without rules are dropped"
        );
    }

    #[test]
    fn type_names_and_excluded_alerts() {
        let result = apply(&[
            ("type", "alert"),
            ("exclude_alerts", "true"),
            ("rule_name[]", "b_x"),
        ])
        .unwrap();
        assert_eq!(result.groups.len(), 1);
        let Rule::Alerting(rule) = &result.groups[0].rules[0] else {
            panic!()
        };
        assert_eq!(rule.name, "b_x");
        assert_eq!(rule.alerts, None);
        assert_eq!(alerts(&groups()).alerts.len(), 3);
        assert_eq!(alerts(&result.groups).alerts.len(), 0);
    }

    #[test]
    fn pages_follow_the_token() {
        let first = apply(&[("group_limit", "2")]).unwrap();
        assert_eq!(first.groups.len(), 2);
        assert_eq!(first.group_next_token, group_token("f.yaml", "c"));
        let token = first.group_next_token.clone();
        let second = apply(&[("group_limit", "2"), ("group_next_token", &token)]).unwrap();
        assert_eq!(second.groups.len(), 1);
        assert_eq!(second.groups[0].name, "c");
        assert!(second.group_next_token.is_empty());
        let bad = apply(&[("group_limit", "2"), ("group_next_token", "nope")]).unwrap_err();
        assert_eq!(
            bad.0,
            r#"invalid parameter "group_next_token": invalid group_next_token 'nope'. were rule groups changed?"#
        );
    }
}
