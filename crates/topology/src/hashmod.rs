//! Prometheus's `hashmod` relabel action, bit for bit.
//!
//! Prometheus hashes the joined source values with MD5 and reads the *last* eight bytes of the
//! digest as a big-endian u64 before taking the modulus (`sum64(md5.Sum(...)) % modulus` in
//! `model/relabel/relabel.go`). Reproducing it exactly lets the tests prove which shard keeps a
//! target instead of trusting a model of it.

use md5::{Digest, Md5};

/// `hashmod` of an already-joined value.
///
/// A zero modulus would divide by zero; Prometheus rejects such a config at load time, and so do
/// our rule builders, so here it maps everything to 0 rather than panicking.
pub fn hashmod(value: &str, modulus: u64) -> u64 {
    if modulus == 0 {
        return 0;
    }
    let digest = Md5::digest(value.as_bytes());
    let mut tail = [0u8; 8];
    tail.copy_from_slice(&digest[8..16]);
    u64::from_be_bytes(tail) % modulus
}

/// `hashmod` of several source label values joined with `separator`, as a relabel rule does.
pub fn hashmod_of<'a>(
    values: impl IntoIterator<Item = &'a str>,
    separator: &str,
    modulus: u64,
) -> u64 {
    let joined: Vec<&str> = values.into_iter().collect();
    hashmod(&joined.join(separator), modulus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned against an independent implementation:
    /// `python3 -c 'import hashlib; d=hashlib.md5(S.encode()).digest(); print(int.from_bytes(d[8:16], "big") % M)'`
    #[test]
    fn matches_independent_vectors() {
        let vectors: [(&str, u64, u64); 7] = [
            ("10.0.0.1:9090", 4, 1),
            ("10.0.0.1:9090", 3, 0),
            ("", 7, 1),
            ("10.1.2.3:8080", 12, 6),
            ("a;b", 5, 4),
            ("prometheus-0.prometheus:9100", 1_000_003, 152_291),
            ("zone-a;10.0.0.7:80", 2, 0),
        ];
        for (value, modulus, expected) in vectors {
            assert_eq!(
                hashmod(value, modulus),
                expected,
                "hashmod({value:?}, {modulus})"
            );
        }
    }

    #[test]
    fn joins_source_values_with_the_separator() {
        assert_eq!(hashmod_of(["a", "b"], ";", 5), hashmod("a;b", 5));
        assert_eq!(hashmod_of(["a", "b"], ";", 5), 4);
    }

    #[test]
    fn zero_modulus_does_not_panic() {
        assert_eq!(hashmod("x", 0), 0);
    }
}
