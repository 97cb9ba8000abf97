//! The caps on one backend's answer: what is read from the connection, and what it gunzips to.
//! A broken or hostile backend (a 200 MB answer, a gzip bomb) costs the federator these many
//! bytes, never all its memory, and never twice the cap: buffers grow by doubling, as `Vec`'s
//! do, clamped to the cap.

use axum::body::Bytes;
use http_body_util::BodyExt;

use crate::fetch::FetchError;

/// How much of one backend's answer is read, at most: a broken or hostile backend (a 200 MB
/// answer, a gzip bomb) costs the federator these many bytes, not all its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyCaps {
    /// Bytes read from the connection (compressed when the backend gzips).
    pub compressed: u64,
    /// Bytes of JSON: gunzipped, or read plain.
    pub uncompressed: u64,
}

impl BodyCaps {
    /// What a read of `gzipped` or plain bytes may take before it is cut, and the cap it meets.
    pub fn read_limit(self, gzipped: bool) -> (&'static str, u64) {
        if gzipped || self.compressed <= self.uncompressed {
            ("compressed", self.compressed)
        } else {
            ("uncompressed", self.uncompressed)
        }
    }
}

/// The body of `response`, counted as it streams in and cut (the connection dropped) once it
/// passes `cap`, or at once when its Content-Length says it would.
pub async fn read_capped(
    response: hyper::Response<hyper::body::Incoming>,
    (what, cap): (&'static str, u64),
) -> Result<Bytes, FetchError> {
    let too_large = FetchError::TooLarge { what, cap };
    let announced = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|length| length > cap) {
        return Err(too_large);
    }
    let mut body = response.into_body();
    let mut read = Vec::new();
    let limit = usize::try_from(cap).unwrap_or(usize::MAX);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| FetchError::Connect(error.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if (read.len() + data.len()) as u64 > cap {
                return Err(too_large);
            }
            append_within(&mut read, &data, limit);
        }
    }
    Ok(Bytes::from(read))
}

/// Appends `data` to `buffer`, whose capacity grows by doubling, as `Vec`'s does, but never
/// past `limit` (or what `data` needs, when more): a read cut at a cap must not reserve twice
/// the cap first.
fn append_within(buffer: &mut Vec<u8>, data: &[u8], limit: usize) {
    let needed = buffer.len() + data.len();
    if buffer.capacity() < needed {
        let doubled = buffer.capacity().saturating_mul(2).min(limit).max(needed);
        buffer.reserve_exact(doubled - buffer.len());
    }
    buffer.extend_from_slice(data);
}

/// Bytes gunzipped from `gzipped` at a time.
const GUNZIP_CHUNK: usize = 64 << 10;

/// `gzipped` gunzipped, up to one byte past `cap` (which tells an answer at the cap from one
/// over it). The buffer grows by doubling, as `read_to_end` would, but never past `cap + 1`:
/// doubling alone would reserve up to twice the cap (512 MiB under the 256Mi default) for an
/// answer that ends just over a power of two.
pub fn gunzip_capped(gzipped: &[u8], cap: u64) -> Result<Vec<u8>, FetchError> {
    let limit = usize::try_from(cap.saturating_add(1)).unwrap_or(usize::MAX);
    // A guess at the ratio of Prometheus's JSON: one allocation for most answers.
    let expected = gzipped.len().saturating_mul(8).min(limit);
    let mut plain = Vec::with_capacity(expected);
    let mut decoder = flate2::read::GzDecoder::new(gzipped);
    let mut chunk = vec![0; GUNZIP_CHUNK];
    while plain.len() < limit {
        let read = match std::io::Read::read(&mut decoder, &mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(FetchError::BadJson(format!("bad gzip: {error}"))),
        };
        let kept = read.min(limit - plain.len());
        append_within(&mut plain, &chunk[..kept], limit);
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Read in the chunks a connection gives, a body at the cap is held in no more than the cap.
    #[test]
    fn a_read_reserves_no_more_than_its_cap() {
        for cap in [(1 << 20) + 1, 3_000_000, 64 << 20] {
            let mut read = Vec::new();
            let chunk = vec![b' '; 16 << 10];
            while read.len() < cap {
                let take = chunk.len().min(cap - read.len());
                append_within(&mut read, &chunk[..take], cap);
            }
            assert_eq!(read.len(), cap);
            assert!(read.capacity() <= cap, "cap {cap}: {}", read.capacity());
        }
        let mut small = Vec::new();
        append_within(&mut small, b"{}", 1 << 20);
        assert_eq!(small, b"{}");
    }

    /// Never more than one byte past the cap is held, whatever the answer gunzips to: an answer
    /// just over a power of two does not double the buffer past the cap.
    #[test]
    fn gunzipping_never_reserves_past_the_cap() {
        let gzip = |plain: &[u8]| {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut encoder, plain).unwrap();
            encoder.finish().unwrap()
        };
        for cap in [(1 << 20) + 1, 3_000_000, (4 << 20) - 3] {
            let over = gzip(&vec![b' '; cap as usize * 2]);
            let plain = gunzip_capped(&over, cap).unwrap();
            assert_eq!(plain.len() as u64, cap + 1, "cut one byte past the cap");
            assert!(
                plain.capacity() as u64 <= cap + 1,
                "cap {cap}: capacity {}",
                plain.capacity()
            );
            let at = gzip(&vec![b' '; cap as usize]);
            let plain = gunzip_capped(&at, cap).unwrap();
            assert_eq!(plain.len() as u64, cap);
            assert!(plain.capacity() as u64 <= cap + 1, "cap {cap}");
        }
        let small = gzip(b"{}");
        assert_eq!(gunzip_capped(&small, 1 << 20).unwrap(), b"{}");
    }
}
