//! A bound on how deep a PromQL expression can nest, read from its text before it is parsed.
//!
//! PromQL parsers build, walk, print and drop the expression tree recursively, so an
//! expression nested deep enough (3,000 parentheses fit in 6 KB; an object may hold 1.5 MB)
//! overflows the stack of the thread that parses it and aborts the whole process. Every
//! PromQL text from a user or a backend is measured here first and refused past
//! [`MAX_DEPTH`], with no recursion: the scan is one pass with a stack of counters.
//!
//! The measure is an upper bound of the tree's depth: each bracket opens a level, and every
//! operator of a level (a binary or unary operator character, `and`, `or`, `unless`,
//! `atan2`) may add one more above the deepest thing inside it, as a chain `a + a + … + a`
//! nests without a bracket. Quoted strings and comments are skipped.

/// The deepest expression accepted: far past what rules are written with (a few tens), and a
/// fraction of what the parser walks on a 2 MiB thread stack (a tokio worker's): in a test
/// build, 999 levels pass and 3,000 overflow it.
pub const MAX_DEPTH: usize = 512;

/// Ok, or why `text` nests too deep to be parsed safely (past `limit`).
pub fn check(text: &str, limit: usize) -> Result<(), String> {
    crate::yaml_depth::within(
        "the expression",
        "operators and brackets",
        depth(text),
        limit,
    )
}

/// A level being read: its operators, and the deepest level closed inside it.
#[derive(Default, Clone, Copy)]
struct Level {
    operators: usize,
    deepest_inside: usize,
}

impl Level {
    fn depth(self) -> usize {
        self.operators
            .saturating_add(self.deepest_inside)
            .saturating_add(1)
    }
}

/// The upper bound of `text`'s tree depth described in the module's documentation.
pub fn depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut levels = vec![Level::default()];
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        match byte {
            b'"' | b'\'' => at = string_end(bytes, at, byte, true),
            b'`' => at = string_end(bytes, at, byte, false),
            b'#' => at = string_end(bytes, at, b'\n', false),
            b'(' | b'[' | b'{' => levels.push(Level::default()),
            b')' | b']' | b'}' => {
                if levels.len() > 1
                    && let Some(closed) = levels.pop()
                    && let Some(parent) = levels.last_mut()
                {
                    parent.deepest_inside = parent.deepest_inside.max(closed.depth());
                }
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' => {
                count_operator(&mut levels);
            }
            byte if byte.is_ascii_alphabetic() || byte == b'_' => {
                let start = at - 1;
                while bytes
                    .get(at)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b':')
                {
                    at += 1;
                }
                let word = &bytes[start..at];
                if [&b"and"[..], b"or", b"unless", b"atan2"]
                    .iter()
                    .any(|keyword| word.eq_ignore_ascii_case(keyword))
                {
                    count_operator(&mut levels);
                }
            }
            _ => {}
        }
    }
    // Levels left open count as closed at the end: the parser refuses them anyway.
    while levels.len() > 1 {
        if let Some(closed) = levels.pop()
            && let Some(parent) = levels.last_mut()
        {
            parent.deepest_inside = parent.deepest_inside.max(closed.depth());
        }
    }
    levels.first().map_or(1, |top| top.depth())
}

fn count_operator(levels: &mut [Level]) {
    if let Some(level) = levels.last_mut() {
        level.operators = level.operators.saturating_add(1);
    }
}

/// The index just past the `close` that ends a string or comment opened before `at` (with
/// backslash escapes when `escapes`), or the text's end.
fn string_end(bytes: &[u8], mut at: usize, close: u8, escapes: bool) -> usize {
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        if byte == close {
            return at;
        }
        if escapes && byte == b'\\' {
            at += 1;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_bounds_the_nesting_of_brackets_and_operator_chains() {
        for (text, expected) in [
            ("up", 1),
            ("up == 0", 3),
            ("sum(rate(x[5m]))", 4),
            ("a + b + c", 3),
            ("(a + b) * c", 4),
            ("(((up)))", 4),
            ("up{job=\"((((((\"}", 3),
            ("up{job='a\\'(('}", 3),
            ("up # ((((((\n", 1),
            ("a and b or c unless d", 4),
            ("sum by (job) (up) > bool 0", 3),
            ("((up", 3),
            ("up))", 1),
        ] {
            assert_eq!(depth(text), expected, "{text}");
        }
    }

    #[test]
    fn deep_texts_are_refused_in_linear_time_whatever_their_shape() {
        let n = 100_000;
        let parens = format!("{}up{}", "(".repeat(n), ")".repeat(n));
        let chain = vec!["up"; n].join(" + ");
        let unary = format!("{}1", "-".repeat(n));
        let keywords = vec!["up"; n].join(" or ");
        let brackets = "[".repeat(n);
        for text in [parens, chain, unary, keywords, brackets] {
            let error = check(&text, MAX_DEPTH).unwrap_err();
            assert!(error.contains("more than the 512 accepted"), "{error}");
        }
        assert!(check("sum(rate(http_requests_total[5m])) by (job) > 0", MAX_DEPTH).is_ok());
    }
}
