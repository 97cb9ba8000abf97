//! A short RE2 regex matching exactly a set of bucket numbers, written as numeric ranges.
//!
//! [`owners`](super::owners::owners) hands out buckets in contiguous runs, so a shard's set is a
//! few ranges; `34[2-9]|3[5-9][0-9]|4[0-9]{2}|50[0-9]|51[0-1]` reads better in a ConfigMap than
//! 170 alternatives, and Prometheus matches it just as exactly.

/// The regex (no anchors: Prometheus anchors relabel regexes itself) matching the decimal form
/// of exactly the numbers in `buckets`. An empty set gives a regex that matches nothing.
pub fn bucket_regex(buckets: &[u32]) -> String {
    let mut sorted = buckets.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut alternatives = Vec::new();
    let mut runs = sorted.iter().peekable();
    while let Some(&start) = runs.next() {
        let mut end = start;
        while runs.peek().is_some_and(|next| **next == end + 1) {
            end += 1;
            runs.next();
        }
        alternatives.extend(range_regex(start, end));
    }
    if alternatives.is_empty() {
        // RE2 has no `(?!)`; an empty character class never matches.
        return "[^\\s\\S]".to_string();
    }
    if alternatives.len() == 1 {
        return alternatives.remove(0);
    }
    format!("(?:{})", alternatives.join("|"))
}

/// Alternatives matching the decimal numbers `lo..=hi`, split by number of digits first.
fn range_regex(lo: u32, hi: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = lo;
    while start <= hi {
        let digits = start.to_string().len() as u32;
        let last_of_width = 10u32.saturating_pow(digits).saturating_sub(1);
        let end = hi.min(last_of_width);
        out.extend(same_width(
            start.to_string().as_bytes(),
            end.to_string().as_bytes(),
        ));
        match end.checked_add(1) {
            Some(next) => start = next,
            None => break,
        }
    }
    out
}

/// Alternatives for `lo..=hi`, both written with the same number of digits.
fn same_width(lo: &[u8], hi: &[u8]) -> Vec<String> {
    let (Some((&lo_first, lo_rest)), Some((&hi_first, hi_rest))) =
        (lo.split_first(), hi.split_first())
    else {
        return vec![String::new()];
    };
    let prefixed = |first: u8, tails: Vec<String>| -> Vec<String> {
        tails
            .into_iter()
            .map(|tail| format!("{}{tail}", char::from(first)))
            .collect()
    };
    if lo_first == hi_first {
        return prefixed(lo_first, same_width(lo_rest, hi_rest));
    }
    let rest = lo_rest.len();
    let any_tail = match rest {
        0 => String::new(),
        1 => "[0-9]".to_string(),
        n => format!("[0-9]{{{n}}}"),
    };
    let lo_full = lo_rest.iter().all(|d| *d == b'0');
    let hi_full = hi_rest.iter().all(|d| *d == b'9');
    let mut out = Vec::new();
    let mut middle_start = lo_first;
    let mut middle_end = hi_first;
    if !lo_full {
        out.extend(prefixed(lo_first, same_width(lo_rest, &vec![b'9'; rest])));
        middle_start += 1;
    }
    if !hi_full {
        middle_end -= 1;
    }
    if middle_start <= middle_end {
        out.push(format!(
            "{}{any_tail}",
            digit_class(middle_start, middle_end)
        ));
    }
    if !hi_full {
        out.extend(prefixed(hi_first, same_width(&vec![b'0'; rest], hi_rest)));
    }
    out
}

fn digit_class(from: u8, to: u8) -> String {
    if from == to {
        char::from(from).to_string()
    } else {
        format!("[{}-{}]", char::from(from), char::from(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex::Regex;

    fn matches_exactly(buckets: &[u32]) {
        let pattern = bucket_regex(buckets);
        let regex = Regex::new(&format!("^(?s:{pattern})$")).unwrap();
        for n in 0..2000u32 {
            assert_eq!(
                regex.is_match(&n.to_string()),
                buckets.contains(&n),
                "{n} against {pattern}"
            );
        }
    }

    #[test]
    fn ranges_read_as_ranges() {
        assert_eq!(bucket_regex(&[7]), "7");
        assert_eq!(
            bucket_regex(&(0..1024).collect::<Vec<_>>()),
            "(?:[0-9]|[1-9][0-9]|[1-9][0-9]{2}|10[0-1][0-9]|102[0-3])"
        );
        assert_eq!(
            bucket_regex(&(342..=511).collect::<Vec<_>>()),
            "(?:34[2-9]|3[5-9][0-9]|4[0-9]{2}|50[0-9]|51[0-1])"
        );
        assert_eq!(bucket_regex(&[1, 3]), "(?:1|3)");
    }

    #[test]
    fn edge_sets_match_exactly() {
        matches_exactly(&[]);
        matches_exactly(&[0]);
        matches_exactly(&(0..1024).collect::<Vec<_>>());
        matches_exactly(&(9..=10).collect::<Vec<_>>());
        matches_exactly(&(99..=1000).collect::<Vec<_>>());
        matches_exactly(&[0, 9, 10, 99, 100, 999, 1000, 1023]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_set_matches_exactly(buckets in proptest::collection::vec(0u32..1024, 0..40)) {
            matches_exactly(&buckets);
        }

        #[test]
        fn any_range_matches_exactly(lo in 0u32..1024, len in 0u32..1024) {
            let hi = (lo + len).min(1023);
            matches_exactly(&(lo..=hi).collect::<Vec<_>>());
        }
    }
}
