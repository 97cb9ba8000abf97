//! A bound on how deep a YAML document can nest, read from its text before it is parsed.
//!
//! The YAML parser reads a whole document before serde sees it, and its time grows with the
//! square of the nesting: a rule file of 200 KB nested 100,000 deep (`[[[…`) took a minute of
//! CPU in a test build, before serde's own recursion limit (128) refused it. Every YAML text from
//! a user or a backend is measured here first and refused past [`MAX_DEPTH`], in one pass.
//!
//! The measure is an upper bound of the nesting: the deepest flow collection (`[`, `{`, outside
//! quoted scalars and comments) plus, for the line it is on, the block nesting that line can
//! open: its indentation and each block indicator (`- `, `? `) that starts it.

/// The deepest document accepted: past serde's recursion limit (128), so nothing serde would
/// take is refused, and far below what makes the parser slow.
pub const MAX_DEPTH: usize = 256;

/// Ok, or why `text` nests too deep to be parsed (past `limit`).
pub fn check(text: &str, limit: usize) -> Result<(), String> {
    within(
        "the document",
        "indentation and brackets",
        depth(text),
        limit,
    )
}

/// Ok, or why `what` (nesting `depth` levels deep, counting `counted`) is refused past `limit`:
/// the one message of both depth checks (this one and [`crate::promql_depth::check`]).
pub(crate) fn within(what: &str, counted: &str, depth: usize, limit: usize) -> Result<(), String> {
    if depth > limit {
        return Err(format!(
            "{what} nests {depth} levels deep ({counted} counted), more than the {limit} accepted"
        ));
    }
    Ok(())
}

/// The upper bound of `text`'s nesting described in the module's documentation.
pub fn depth(text: &str) -> usize {
    let mut deepest = 0usize;
    let mut flow = 0usize;
    let mut quote: Option<char> = None;
    for line in text.lines() {
        let mut block = line.len() - line.trim_start_matches(' ').len();
        let mut rest = line.trim_start_matches(' ');
        while let Some(after) = rest
            .strip_prefix("- ")
            .or_else(|| rest.strip_prefix("? "))
            .or_else(|| (rest == "-").then_some(""))
        {
            let spaces = after.len() - after.trim_start_matches(' ').len();
            block = block.saturating_add(1 + spaces);
            rest = after.trim_start_matches(' ');
        }
        let mut chars = line.chars().peekable();
        // The character before, and the last one that is not a space: a quote opens a quoted
        // scalar only where a scalar starts (`it's` is plain text).
        let mut previous = ' ';
        let mut significant = ' ';
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(open), c) if c == open => {
                    // '' inside single quotes is an escaped quote.
                    if open == '\'' && chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        quote = None;
                    }
                }
                (Some(_), _) => {}
                (None, '"' | '\'')
                    if matches!(previous, ' ' | '[' | '{' | ',')
                        && matches!(significant, ' ' | ':' | '-' | '?' | '[' | '{' | ',') =>
                {
                    quote = Some(c);
                }
                (None, '#') if previous == ' ' || previous == '\t' => break,
                (None, '[' | '{') => {
                    flow = flow.saturating_add(1);
                    deepest = deepest.max(flow.saturating_add(block));
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
            previous = c;
            if c != ' ' {
                significant = c;
            }
        }
        deepest = deepest.max(block.saturating_add(flow));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_bounds_flow_and_block_nesting() {
        for (text, expected) in [
            ("groups: []", 1),
            ("groups:\n- name: a\n  rules:\n  - expr: up\n", 3),
            ("a: [[[1]]]", 3),
            ("a: \"[[[[\"", 0),
            ("a: '[[''[['", 0),
            ("a: 1 # [[[[", 0),
            ("a: b#[[", 2),
            ("- - - - x", 4),
            ("a: it's [[", 2),
            ("a:'[[", 2),
            ("a: [\n  [\n    [1]]]\n", 7),
        ] {
            assert_eq!(depth(text), expected, "{text:?}");
        }
    }

    #[test]
    fn deep_documents_are_refused_whatever_their_shape() {
        let n = 100_000;
        for text in [
            "[".repeat(n),
            format!("a: {}", "{a: ".repeat(n)),
            "- ".repeat(n),
            format!("{}a: 1", " ".repeat(n)),
        ] {
            let error = check(&text, MAX_DEPTH).unwrap_err();
            assert!(error.contains("more than the 256 accepted"), "{error}");
        }
        let rules = "groups:\n- name: api\n  rules:\n  - alert: Down\n    expr: up == 0\n    \
                     labels: {severity: page}\n";
        assert!(check(rules, MAX_DEPTH).is_ok());
    }
}
