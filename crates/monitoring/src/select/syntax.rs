//! The syntax Kubernetes requires of label keys and values in a selector (the API server's
//! `IsQualifiedName` and `IsValidLabelValue`): a selector that breaks it is refused upstream
//! before anything is listed, so it is refused here too instead of silently matching nothing.

use super::Problem;

/// The longest label value, and the longest name part of a key.
const MAX_NAME: usize = 63;
/// The longest key prefix (a DNS subdomain).
const MAX_PREFIX: usize = 253;

/// `[prefix/]name`: prefix a lowercase DNS subdomain, name 1 to 63 alphanumerics, `-`, `_`,
/// `.`, starting and ending alphanumeric.
pub(super) fn check_key(key: &str) -> Result<(), Problem> {
    let invalid = |why: &str| Problem::InvalidKey {
        key: key.to_string(),
        why: why.to_string(),
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(invalid("the prefix before '/' is empty"));
        }
        if name.contains('/') {
            return Err(invalid("more than one '/'"));
        }
        if prefix.len() > MAX_PREFIX {
            return Err(invalid("the prefix is longer than 253 characters"));
        }
        if !is_dns_subdomain(prefix) {
            return Err(invalid(
                "the prefix is not a lowercase DNS subdomain (lowercase alphanumerics, '-' and \
                 '.', each part starting and ending alphanumeric)",
            ));
        }
    }
    if name.is_empty() {
        return Err(invalid("the name is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(invalid("the name is longer than 63 characters"));
    }
    if !is_name(name) {
        return Err(invalid(
            "the name must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

/// Empty, or up to 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub(super) fn check_value(value: &str) -> Result<(), Problem> {
    let invalid = |why: &str| Problem::InvalidValue {
        value: value.to_string(),
        why: why.to_string(),
    };
    if value.len() > MAX_NAME {
        return Err(invalid("longer than 63 characters"));
    }
    if !value.is_empty() && !is_name(value) {
        return Err(invalid(
            "must be empty or alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

/// Non-empty, alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Dot-separated parts, each lowercase alphanumerics and `-`, starting and ending alphanumeric.
fn is_dns_subdomain(prefix: &str) -> bool {
    prefix.split('.').all(|part| {
        let bytes = part.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}
