//! The merged answer written as JSON, byte for byte what serde_json writes for the model's
//! `Serialize` (pinned by a property test), faster: most strings of an answer need no escape,
//! and are checked eight bytes at a time and copied whole instead of escaped byte by byte.
//! A string that needs an escape is written by serde_json itself.

use crate::model::{Alert, AlertingRule, Labels, RecordingRule, Rule, RuleGroup, Stamp};

/// A value of the model written onto the end of a buffer of JSON.
pub trait WriteJson {
    fn write_json(&self, out: &mut Vec<u8>);
}

/// Whether any byte of `text` is one serde_json escapes: a control character, `"` or `\`.
fn needs_escape(text: &[u8]) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH != 0;
    let mut chunks = text.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0;
        if control
            || has_zero(word ^ (ONES * u64::from(b'"')))
            || has_zero(word ^ (ONES * u64::from(b'\\')))
        {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\')
}

#[inline]
fn string(out: &mut Vec<u8>, text: &str) {
    if needs_escape(text.as_bytes()) {
        // Writing to a Vec cannot fail, nor can a string be refused.
        let _ = serde_json::to_writer(&mut *out, text);
    } else {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// `,"name":value`: a number (a float that is not finite is written `null`, as serde_json does).
#[inline]
fn number<T: serde::Serialize>(out: &mut Vec<u8>, name: &str, value: T) {
    key_next(out, name);
    // A number to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, &value);
}

/// `,"name":"value"`.
#[inline]
fn text(out: &mut Vec<u8>, name: &str, value: &str) {
    key_next(out, name);
    string(out, value);
}

/// `,"name":"instant"`.
#[inline]
fn stamp(out: &mut Vec<u8>, name: &str, value: &Stamp) {
    key_next(out, name);
    value.with_text(|value| string(out, value));
}

/// `"name":` (names are the model's own, none needs an escape).
#[inline]
fn key(out: &mut Vec<u8>, name: &str) {
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

impl WriteJson for Labels {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (name, value)) in self.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, name);
            out.push(b':');
            string(out, value);
        }
        out.push(b'}');
    }
}

impl WriteJson for Alert {
    fn write_json(&self, out: &mut Vec<u8>) {
        key_first(out, "labels");
        self.labels.write_json(out);
        key_next(out, "annotations");
        self.annotations.write_json(out);
        text(out, "state", &self.state);
        if let Some(at) = &self.active_at {
            stamp(out, "activeAt", at);
        }
        if let Some(since) = &self.keep_firing_since {
            stamp(out, "keepFiringSince", since);
        }
        text(out, "value", &self.value);
        out.push(b'}');
    }
}

/// `{"name":`.
#[inline]
fn key_first(out: &mut Vec<u8>, name: &str) {
    out.push(b'{');
    key(out, name);
}

/// `,"name":`.
#[inline]
fn key_next(out: &mut Vec<u8>, name: &str) {
    out.push(b',');
    key(out, name);
}

/// [`evaluation`] of a rule of either kind (both name those fields alike).
macro_rules! evaluation {
    ($out:expr, $rule:expr) => {
        evaluation(
            $out,
            &$rule.health,
            &$rule.last_error,
            &$rule.last_evaluation,
            $rule.evaluation_time,
        )
    };
}

fn alerting(out: &mut Vec<u8>, rule: &AlertingRule) {
    text(out, "state", &rule.state);
    text(out, "name", &rule.name);
    text(out, "query", &rule.query);
    number(out, "duration", rule.duration);
    number(out, "keepFiringFor", rule.keep_firing_for);
    key_next(out, "labels");
    rule.labels.write_json(out);
    key_next(out, "annotations");
    rule.annotations.write_json(out);
    key_next(out, "alerts");
    match &rule.alerts {
        None => out.extend_from_slice(b"null"),
        Some(alerts) => list(out, alerts),
    }
    evaluation!(out, rule);
}

fn recording(out: &mut Vec<u8>, rule: &RecordingRule) {
    text(out, "name", &rule.name);
    text(out, "query", &rule.query);
    key_next(out, "labels");
    rule.labels.write_json(out);
    evaluation!(out, rule);
}

/// The fields every rule ends with: its health, last error (when there is one), evaluation time
/// and last evaluation.
fn evaluation(
    out: &mut Vec<u8>,
    health: &str,
    last_error: &str,
    last_evaluation: &Stamp,
    time: f64,
) {
    text(out, "health", health);
    if !last_error.is_empty() {
        text(out, "lastError", last_error);
    }
    number(out, "evaluationTime", time);
    stamp(out, "lastEvaluation", last_evaluation);
}

impl WriteJson for Rule {
    fn write_json(&self, out: &mut Vec<u8>) {
        // The kind first, as serde writes an internally tagged enum.
        key_first(out, "type");
        match self {
            Rule::Alerting(rule) => {
                out.extend_from_slice(b"\"alerting\"");
                alerting(out, rule);
            }
            Rule::Recording(rule) => {
                out.extend_from_slice(b"\"recording\"");
                recording(out, rule);
            }
        }
        out.push(b'}');
    }
}

fn list<T: WriteJson>(out: &mut Vec<u8>, items: &[T]) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item.write_json(out);
    }
    out.push(b']');
}

impl WriteJson for RuleGroup {
    fn write_json(&self, out: &mut Vec<u8>) {
        key_first(out, "name");
        string(out, &self.name);
        text(out, "file", &self.file);
        key_next(out, "rules");
        list(out, &self.rules);
        number(out, "interval", self.interval);
        number(out, "limit", self.limit);
        number(out, "evaluationTime", self.evaluation_time);
        stamp(out, "lastEvaluation", &self.last_evaluation);
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// Text of every kind an answer holds: plain, with quotes, backslashes, control
    /// characters and non-ASCII, short and longer than a word.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_:0-9 ./{}$-]{0,40}",
            "[a-z\"\\\\\\n\\t\\u{1}\\u{7f}é→ ]{0,20}",
            Just(String::new()),
        ]
    }

    /// An instant: any text, or one in the form Prometheus writes (held as the instant).
    fn instant() -> impl Strategy<Value = Stamp> {
        prop_oneof![
            text().prop_map(Stamp::from),
            (
                0i64..4_000_000_000,
                prop_oneof![Just(0), 0..1_000_000_000i32]
            )
                .prop_map(|(seconds, nanos)| {
                    let at = jiff::Timestamp::new(seconds, nanos).unwrap_or_default();
                    Stamp::from(at.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string())
                }),
        ]
    }

    fn labels() -> impl Strategy<Value = Labels> {
        prop::collection::vec((text(), text()), 0..4).prop_map(|pairs| pairs.into_iter().collect())
    }

    fn seconds() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(15.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            -1e9..1e9f64
        ]
    }

    fn alert() -> impl Strategy<Value = Alert> {
        (
            labels(),
            labels(),
            text(),
            prop::option::of(instant()),
            prop::option::of(instant()),
            text(),
        )
            .prop_map(
                |(labels, annotations, state, active_at, keep_firing_since, value)| Alert {
                    labels,
                    annotations,
                    state: state.into(),
                    active_at,
                    keep_firing_since,
                    value: value.into(),
                },
            )
    }

    fn rule() -> impl Strategy<Value = Rule> {
        let alerting = (
            (text(), text(), text(), seconds(), seconds()),
            (labels(), labels()),
            prop::option::of(prop::collection::vec(alert(), 0..3)),
            (text(), text(), seconds(), instant()),
        )
            .prop_map(
                |(
                    (state, name, query, duration, keep_firing_for),
                    (labels, annotations),
                    alerts,
                    (health, last_error, evaluation_time, last_evaluation),
                )| {
                    Rule::Alerting(AlertingRule {
                        state: state.into(),
                        name: name.into(),
                        query,
                        duration,
                        keep_firing_for,
                        labels,
                        annotations,
                        alerts,
                        health: health.into(),
                        last_error,
                        evaluation_time,
                        last_evaluation,
                    })
                },
            );
        let recording = (
            text(),
            text(),
            labels(),
            (text(), text(), seconds(), instant()),
        )
            .prop_map(
                |(name, query, labels, (health, last_error, evaluation_time, last_evaluation))| {
                    Rule::Recording(RecordingRule {
                        name: name.into(),
                        query,
                        labels,
                        health: health.into(),
                        last_error,
                        evaluation_time,
                        last_evaluation,
                    })
                },
            );
        prop_oneof![alerting, recording]
    }

    fn group() -> impl Strategy<Value = RuleGroup> {
        (
            text(),
            text(),
            prop::collection::vec(rule(), 0..4),
            seconds(),
            any::<i64>(),
            seconds(),
            instant(),
        )
            .prop_map(
                |(name, file, rules, interval, limit, evaluation_time, last_evaluation)| {
                    RuleGroup {
                        name,
                        file,
                        rules,
                        interval,
                        limit,
                        evaluation_time,
                        last_evaluation,
                    }
                },
            )
    }

    fn written(value: &impl WriteJson) -> String {
        let mut out = Vec::new();
        value.write_json(&mut out);
        String::from_utf8(out).unwrap()
    }

    proptest! {
        #[test]
        fn groups_are_written_as_serde_writes_them(group in group()) {
            prop_assert_eq!(written(&group), serde_json::to_string(&group).unwrap());
        }

        #[test]
        fn alerts_are_written_as_serde_writes_them(alert in alert()) {
            prop_assert_eq!(written(&alert), serde_json::to_string(&alert).unwrap());
        }
    }

    /// Each byte serde_json escapes is found wherever it sits in a word, and no other is.
    #[test]
    fn every_byte_that_needs_an_escape_is_found() {
        for byte in 0..=255u8 {
            let escaped = byte < 0x20 || byte == b'"' || byte == b'\\';
            for at in 0..17 {
                let mut text = vec![b'a'; 17];
                text[at] = byte;
                assert_eq!(needs_escape(&text), escaped, "byte {byte:#x} at {at}");
            }
        }
    }
}
