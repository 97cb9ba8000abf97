//! A `RulesResponse` message decoded from its bytes straight into the `zone_rules` model, to the
//! same values as decoding the generated messages and converting them ([`crate::convert`]) but
//! without the generated messages in between: a label set is read into one packed set rather
//! than two strings a label (the answers of 100 backends hold millions of labels), short texts
//! stay inline. Unknown fields are skipped as protobuf requires; a message that does not parse is
//! an error, never a panic. The messages nest to a fixed depth, so nothing here recurses on the
//! input.

use zone_rules::model::{AlertingRule, Labels, RecordingRule};
use zone_rules::{Alert, Rule, RuleGroup, Stamp};

use crate::convert::{GO_ZERO_SECONDS, state_text};

/// What one message of a Rules stream holds.
#[derive(Debug, PartialEq)]
pub enum Response {
    Group(RuleGroup),
    Warning(String),
    /// Neither (a kind of result this side does not know): skipped.
    Empty,
}

/// Why a message does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Rules message: {0}")]
pub struct WireError(&'static str);

type Result<T> = std::result::Result<T, WireError>;

/// The message `bytes` (one `RulesResponse`, as a stream carries it).
pub fn decode_response(bytes: &[u8]) -> Result<Response> {
    let mut reader = Reader(bytes);
    let mut response = Response::Empty;
    while let Some((field, kind)) = reader.key()? {
        match (field, kind) {
            (1, _) => response = Response::Group(group(reader.message(kind)?)?),
            (2, _) => response = Response::Warning(reader.text(kind)?.to_string()),
            _ => reader.skip(kind)?,
        }
    }
    Ok(response)
}

/// Wire types.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

/// The bytes of one message, read front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next field's number and wire type; `None` at the end.
    fn key(&mut self) -> Result<Option<(u32, u8)>> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| WireError("a field number too large"))?;
        if field == 0 {
            return Err(WireError("field number 0"));
        }
        // The low three bits, so the cast keeps all of it.
        Ok(Some((field, (key & 7) as u8)))
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for (i, byte) in self.0.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err(WireError("a truncated or overlong varint"))
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let (bytes, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(WireError("a truncated fixed-width field"))?;
        self.0 = rest;
        Ok(*bytes)
    }

    fn f64(&mut self) -> Result<f64> {
        self.fixed::<8>().map(f64::from_le_bytes)
    }

    /// A length-delimited field's bytes.
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| WireError("a length too large"))?;
        if len > self.0.len() {
            return Err(WireError("a length past the end"));
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(bytes)
    }

    fn str(&mut self) -> Result<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError("a string not UTF-8"))
    }

    /// An `int64` (two's complement in a varint).
    fn i64(&mut self) -> Result<i64> {
        self.varint().map(|v| v as i64)
    }

    /// An `int32` or enum value (sign-extended to 64 bits on the wire, truncated back).
    fn i32(&mut self) -> Result<i32> {
        self.varint().map(|v| v as i32)
    }

    /// A `string` field's value (its wire type checked).
    fn text(&mut self, kind: u8) -> Result<&'a str> {
        check_kind(kind, LEN)?;
        self.str()
    }

    /// An embedded message's bytes (its wire type checked).
    fn message(&mut self, kind: u8) -> Result<&'a [u8]> {
        check_kind(kind, LEN)?;
        self.bytes()
    }

    /// A `double` field's value (its wire type checked).
    fn double(&mut self, kind: u8) -> Result<f64> {
        check_kind(kind, I64)?;
        self.f64()
    }

    /// An `int64` field's value (its wire type checked).
    fn int64(&mut self, kind: u8) -> Result<i64> {
        check_kind(kind, VARINT)?;
        self.i64()
    }

    /// An `int32` or enum field's value (its wire type checked).
    fn int32(&mut self, kind: u8) -> Result<i32> {
        check_kind(kind, VARINT)?;
        self.i32()
    }

    fn skip(&mut self, kind: u8) -> Result<()> {
        match kind {
            VARINT => self.varint().map(drop),
            I64 => self.fixed::<8>().map(drop),
            LEN => self.bytes().map(drop),
            I32 => self.fixed::<4>().map(drop),
            _ => Err(WireError("a group or unknown wire type")),
        }
    }
}

/// A field's value of the wire type its declaration says; any other is malformed.
fn check_kind(kind: u8, wanted: u8) -> Result<()> {
    if kind == wanted {
        Ok(())
    } else {
        Err(WireError("a field of the wrong wire type"))
    }
}

fn group(bytes: &[u8]) -> Result<RuleGroup> {
    let mut reader = Reader(bytes);
    // Scratch space for the label sets of every rule, kept from one rule to the next.
    let mut pairs = Pairs::default();
    let mut group = RuleGroup {
        last_evaluation: go_zero(),
        ..RuleGroup::default()
    };
    while let Some((field, kind)) = reader.key()? {
        match field {
            1 => group.name = reader.text(kind)?.into(),
            2 => group.file = reader.text(kind)?.into(),
            3 => {
                if let Some(rule) = rule(reader.message(kind)?, &mut pairs)? {
                    group.rules.push(rule);
                }
            }
            4 => group.interval = reader.double(kind)?,
            5 => group.evaluation_time = reader.double(kind)?,
            6 => group.last_evaluation = stamp(reader.message(kind)?)?,
            9 => group.limit = reader.int64(kind)?,
            _ => reader.skip(kind)?,
        }
    }
    Ok(group)
}

/// The rule of a `Rule` message; none when it holds neither kind.
fn rule<'a>(bytes: &'a [u8], pairs: &mut Pairs<'a>) -> Result<Option<Rule>> {
    let mut reader = Reader(bytes);
    let mut rule = None;
    while let Some((field, kind)) = reader.key()? {
        match (field, kind) {
            (1, LEN) => rule = Some(Rule::Recording(recording(reader.bytes()?, pairs)?)),
            (2, LEN) => rule = Some(Rule::Alerting(alerting(reader.bytes()?, pairs)?)),
            (1 | 2, _) => return Err(WireError("a field of the wrong wire type")),
            _ => reader.skip(kind)?,
        }
    }
    Ok(rule)
}

fn alerting<'a>(bytes: &'a [u8], pairs: &mut Pairs<'a>) -> Result<AlertingRule> {
    let mut reader = Reader(bytes);
    let mut state = 0;
    let mut rule = AlertingRule {
        alerts: Some(Vec::new()),
        last_evaluation: go_zero(),
        ..AlertingRule::default()
    };
    while let Some((field, kind)) = reader.key()? {
        match field {
            1 => state = reader.int32(kind)?,
            2 => rule.name = reader.text(kind)?.into(),
            3 => rule.query = reader.text(kind)?.to_string(),
            4 => rule.duration = reader.double(kind)?,
            5 => pairs.read(reader.message(kind)?, 0)?,
            6 => pairs.read(reader.message(kind)?, 1)?,
            7 => {
                let instance = instance(reader.message(kind)?, pairs)?;
                rule.alerts.get_or_insert_with(Vec::new).push(instance);
            }
            8 => rule.health = reader.text(kind)?.into(),
            9 => rule.last_error = reader.text(kind)?.to_string(),
            10 => rule.evaluation_time = reader.double(kind)?,
            11 => rule.last_evaluation = stamp(reader.message(kind)?)?,
            12 => rule.keep_firing_for = reader.double(kind)?,
            _ => reader.skip(kind)?,
        }
    }
    rule.state = state_text(state).into();
    rule.labels = pairs.take(0);
    rule.annotations = pairs.take(1);
    Ok(rule)
}

fn recording<'a>(bytes: &'a [u8], pairs: &mut Pairs<'a>) -> Result<RecordingRule> {
    let mut reader = Reader(bytes);
    let mut rule = RecordingRule {
        last_evaluation: go_zero(),
        ..RecordingRule::default()
    };
    while let Some((field, kind)) = reader.key()? {
        match field {
            1 => rule.name = reader.text(kind)?.into(),
            2 => rule.query = reader.text(kind)?.to_string(),
            3 => pairs.read(reader.message(kind)?, 0)?,
            4 => rule.health = reader.text(kind)?.into(),
            5 => rule.last_error = reader.text(kind)?.to_string(),
            6 => rule.evaluation_time = reader.double(kind)?,
            7 => rule.last_evaluation = stamp(reader.message(kind)?)?,
            _ => reader.skip(kind)?,
        }
    }
    rule.labels = pairs.take(0);
    Ok(rule)
}

/// An alert instance; `pairs` is scratch space its label sets are read into.
fn instance<'a>(bytes: &'a [u8], pairs: &mut Pairs<'a>) -> Result<Alert> {
    let mut reader = Reader(bytes);
    let mut state = 0;
    let mut alert = Alert::default();
    // The instance's sets in slots 2 and 3: the rule's own (0 and 1) may still be filling.
    while let Some((field, kind)) = reader.key()? {
        match field {
            1 => pairs.read(reader.message(kind)?, 2)?,
            2 => pairs.read(reader.message(kind)?, 3)?,
            3 => state = reader.int32(kind)?,
            4 => alert.active_at = Some(stamp(reader.message(kind)?)?),
            5 => alert.value = reader.text(kind)?.into(),
            _ => reader.skip(kind)?,
        }
    }
    alert.state = state_text(state).into();
    alert.labels = pairs.take(2);
    alert.annotations = pairs.take(3);
    Ok(alert)
}

/// The label sets of one message being read, as slices of its bytes: four slots (a rule's
/// labels and annotations, an instance's labels and annotations), each taken once complete. A
/// set may come in several pieces (a repeated embedded message merges), so pieces add up.
#[derive(Default)]
struct Pairs<'a> {
    slots: [Vec<(&'a str, &'a str)>; 4],
}

impl<'a> Pairs<'a> {
    /// Adds the labels of the `LabelSet` `bytes` to `slot`.
    fn read(&mut self, bytes: &'a [u8], slot: usize) -> Result<()> {
        let mut reader = Reader(bytes);
        while let Some((field, kind)) = reader.key()? {
            if field != 1 {
                reader.skip(kind)?;
                continue;
            }
            let mut label = Reader(reader.message(kind)?);
            let (mut name, mut value) = ("", "");
            while let Some((field, kind)) = label.key()? {
                match field {
                    1 => name = label.text(kind)?,
                    2 => value = label.text(kind)?,
                    _ => label.skip(kind)?,
                }
            }
            self.slots[slot].push((name, value));
        }
        Ok(())
    }

    /// The set in `slot`, which is left empty.
    fn take(&mut self, slot: usize) -> Labels {
        let labels = Labels::from_pairs(&self.slots[slot]);
        self.slots[slot].clear();
        labels
    }
}

fn go_zero() -> Stamp {
    Stamp::from_unix(GO_ZERO_SECONDS, 0).unwrap_or_default()
}

/// A `google.protobuf.Timestamp` as Prometheus writes it; out of range: Go's zero time.
fn stamp(bytes: &[u8]) -> Result<Stamp> {
    let mut reader = Reader(bytes);
    let (mut seconds, mut nanos) = (0i64, 0i32);
    while let Some((field, kind)) = reader.key()? {
        match field {
            1 => seconds = reader.int64(kind)?,
            2 => nanos = reader.int32(kind)?,
            _ => reader.skip(kind)?,
        }
    }
    Ok(u32::try_from(nanos)
        .ok()
        .and_then(|nanos| Stamp::from_unix(seconds, nanos))
        .unwrap_or_else(go_zero))
}

#[cfg(test)]
mod tests;
