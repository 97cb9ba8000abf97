//! serde's messages without the values they quote.
//!
//! serde names the value it could not take ("invalid type: string \"hunter2\", expected struct
//! SecretKeySelector"), and a value written where a reference belongs is often the secret
//! itself. Messages reach statuses, Events and logs, readable by many more than the Secret, so
//! every quoted or backquoted text before ", expected" becomes `…`; what was expected, and the
//! field names serde reports (missing field, duplicate field), stay.

use std::fmt::Display;

/// `error`'s message with the values it quotes left out.
pub fn serde_error(error: &dyn Display) -> String {
    let message = error.to_string();
    let (found, expected) = match message.rfind(", expected") {
        Some(at) => message.split_at(at),
        None if message.starts_with("invalid ") || message.starts_with("unknown ") => {
            (message.as_str(), "")
        }
        None => return message,
    };
    // serde quotes the value once, and does not escape a backquote inside backquotes: from
    // the first quote to the last of the same kind is the value.
    let Some(first) = found.find(['"', '`']) else {
        return message;
    };
    let quote = &found[first..=first];
    match found.rfind(quote) {
        Some(last) if last > first => {
            format!("{}…{}{expected}", &found[..=first], &found[last..])
        }
        _ => format!("{}…{quote}{expected}", &found[..=first]),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Reference {
        name: String,
        key: String,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Plain,
    }

    fn message<T: for<'de> Deserialize<'de> + std::fmt::Debug>(value: serde_json::Value) -> String {
        serde_error(&serde_json::from_value::<T>(value).unwrap_err())
    }

    #[test]
    fn quoted_values_are_left_out_and_what_was_expected_stays() {
        let secret = "hunter2\"\\`s3cret";
        for (text, expected) in [
            (
                message::<Reference>(serde_json::json!(secret)),
                "invalid type: string \"…\", expected struct Reference",
            ),
            (
                message::<Reference>(serde_json::json!({"name": "a", "key": "b", secret: 1})),
                "unknown field `…`, expected `name` or `key`",
            ),
            (
                message::<Mode>(serde_json::json!(secret)),
                "unknown variant `…`, expected `Plain`",
            ),
            (
                message::<u8>(serde_json::json!(-271828)),
                "invalid value: integer `…`, expected u8",
            ),
            (
                message::<Reference>(serde_json::json!({"name": "a"})),
                "missing field `key`",
            ),
        ] {
            assert_eq!(text, expected);
        }
    }
}
