#![allow(clippy::unwrap_used)]
use prost::Message;

use super::*;
use crate::convert::tests::group;
use crate::thanos;

/// The bytes of a `RulesResponse` holding `group`.
fn encoded(group: &RuleGroup) -> Vec<u8> {
    thanos::RulesResponse {
        result: Some(thanos::rules_response::Result::Group(group.into())),
    }
    .encode_to_vec()
}

/// What the generated messages and the conversion make of `bytes`: what this module must
/// equal.
fn converted(bytes: &[u8]) -> Response {
    match thanos::RulesResponse::decode(bytes).unwrap().result {
        Some(thanos::rules_response::Result::Group(group)) => Response::Group(group.into()),
        Some(thanos::rules_response::Result::Warning(warning)) => Response::Warning(warning),
        None => Response::Empty,
    }
}

#[test]
fn a_group_decodes_as_the_generated_messages_and_the_conversion_make_it() {
    let bytes = encoded(&group());
    let decoded = decode_response(&bytes).unwrap();
    assert_eq!(decoded, converted(&bytes));
    assert_eq!(decoded, Response::Group(group()));
}

#[test]
fn warnings_and_empty_messages() {
    let warning = thanos::RulesResponse {
        result: Some(thanos::rules_response::Result::Warning(
            "endpoint ruler-1: unreachable".into(),
        )),
    }
    .encode_to_vec();
    assert_eq!(
        decode_response(&warning).unwrap(),
        Response::Warning("endpoint ruler-1: unreachable".into())
    );
    assert_eq!(decode_response(&[]).unwrap(), Response::Empty);
}

/// A label (its own message) with `name` and `value`, as a `LabelSet`'s field 1.
fn label(name: &str, value: &str) -> thanos::Label {
    thanos::Label {
        name: name.into(),
        value: value.into(),
    }
}

/// Label sets out of order or with a name twice (not what Thanos sends, but what the wire
/// allows) read as the conversion reads them: sorted, the last of a name winning; a `LabelSet`
/// field given twice adds up, as protobuf merges a repeated embedded message.
#[test]
fn label_sets_in_any_order_read_as_the_conversion_reads_them() {
    let mut wire = thanos::RuleGroup::from(&group());
    let Some(thanos::rule::Result::Alert(alert)) = &mut wire.rules[0].result else {
        panic!("an alerting rule first");
    };
    alert.labels = Some(thanos::LabelSet {
        labels: vec![
            label("zone", "a"),
            label("severity", "page"),
            label("zone", "b"),
        ],
    });
    let bytes = thanos::RulesResponse {
        result: Some(thanos::rules_response::Result::Group(wire)),
    }
    .encode_to_vec();
    let decoded = decode_response(&bytes).unwrap();
    assert_eq!(decoded, converted(&bytes));
    let Response::Group(group) = decoded else {
        panic!("a group")
    };
    let Rule::Alerting(rule) = &group.rules[0] else {
        panic!("an alerting rule")
    };
    let labels: Vec<_> = rule.labels.iter().collect();
    assert_eq!(labels, [("severity", "page"), ("zone", "b")]);
}

/// Fields this side does not know (a newer Thanos) are skipped at every level.
#[test]
fn unknown_fields_are_skipped() {
    let plain = thanos::RuleGroup::from(&group()).encode_to_vec();
    // Fields 12 to 15, which the group does not declare, one of each wire type: 8 bytes, a
    // string, 4 bytes, a varint; and field 100 (a two-byte key).
    let mut extended = plain.clone();
    extended.extend([(12 << 3) | 1, 1, 2, 3, 4, 5, 6, 7, 8]);
    extended.extend([(13 << 3) | 2, 3, b'n', b'e', b'w']);
    extended.extend([(14 << 3) | 5, 1, 2, 3, 4]);
    extended.extend([15 << 3, 1]);
    prost::encoding::encode_varint(100 << 3, &mut extended);
    extended.push(1);
    let mut response = vec![(1 << 3) | 2];
    prost::encoding::encode_varint(extended.len() as u64, &mut response);
    response.extend(&extended);
    response.extend([(9 << 3), 7]);
    assert_eq!(
        decode_response(&response).unwrap(),
        Response::Group(group())
    );
}

/// Every cut of a valid message and every byte flipped: an error or a value, never a panic; a
/// cut inside a field is an error.
#[test]
fn malformed_messages_are_errors_not_panics() {
    let bytes = encoded(&group());
    for cut in 1..bytes.len() {
        assert!(
            decode_response(&bytes[..cut]).is_err(),
            "cut at {cut} of {}",
            bytes.len()
        );
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2_000 {
        let mut flipped = bytes.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % flipped.len() as u64) as usize;
            flipped[at] = (state >> 32) as u8;
        }
        let _ = decode_response(&flipped);
    }
    assert_eq!(
        decode_response(&[(1 << 3) | 2, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        Err(WireError("a length past the end"))
    );
    assert!(decode_response(&[0x0b]).is_err(), "a group wire type");
    assert!(
        decode_response(&[(1 << 3), 1]).is_err(),
        "a group as a varint"
    );
}
