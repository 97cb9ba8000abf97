//! The caps on one endpoint's answer: what is read from the connection, and what it gunzips to.
//! A broken or hostile endpoint (a 200 MB answer, a gzip bomb) costs its reader these many
//! bytes, never all its memory, and never twice the cap: buffers grow by doubling, as `Vec`'s
//! do, clamped to the cap.

use http_body_util::BodyExt;
use hyper::body::Bytes;

use super::ApiError;

/// How much of one endpoint's answer is read, at most: a broken or hostile endpoint (a 200 MB
/// answer, a gzip bomb) costs the reader these many bytes, not all its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyCaps {
    /// Bytes read from the connection (compressed when the endpoint gzips).
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
) -> Result<Bytes, ApiError> {
    let too_large = ApiError::TooLarge { what, cap };
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
        let frame = frame.map_err(|error| ApiError::Connect(error.to_string()))?;
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

/// `gzipped` gunzipped, or [`ApiError::TooLarge`] once it passes `cap` bytes. The bytes go
/// into segments, each as large as all before it (the doubling of a `Vec`, without its copies):
/// a cut answer never holds more than the cap, where a doubling buffer would hold its old and
/// new allocation at once (up to three times the cap's half, 384 MiB under the 256Mi default)
/// as it grows. An answer under the cap in more than one segment is joined into one buffer.
pub fn gunzip_capped(gzipped: &[u8], cap: u64) -> Result<Vec<u8>, ApiError> {
    // The size the gzip trailer announces (ISIZE, the last four bytes): one segment of exactly
    // the answer's size, nothing to join. It is only a hint, checked by the decoder at the end
    // (a hostile endpoint can announce anything): it is bounded by deflate's largest ratio, and
    // the segments and the cap hold whatever comes. Without one, a guess at the ratio of
    // Prometheus's JSON.
    let announced = gzipped
        .len()
        .checked_sub(4)
        .and_then(|at| <[u8; 4]>::try_from(&gzipped[at..]).ok())
        .map(|size| u32::from_le_bytes(size) as usize)
        .filter(|&size| size > 0)
        .map(|size| size.min(gzipped.len().saturating_mul(MAX_DEFLATE_RATIO)));
    gunzip_in_segments(
        gzipped,
        cap,
        announced.unwrap_or_else(|| gzipped.len().saturating_mul(8)),
    )
}

/// Deflate's largest compression ratio (a run of one byte): no honest answer gunzips to more.
const MAX_DEFLATE_RATIO: usize = 1032;

/// [`gunzip_capped`] with a first segment of `first` bytes.
fn gunzip_in_segments(gzipped: &[u8], cap: u64, first: usize) -> Result<Vec<u8>, ApiError> {
    let limit = usize::try_from(cap).unwrap_or(usize::MAX);
    let first = first.clamp(1, limit.max(1));
    let mut segments = vec![Vec::with_capacity(first)];
    let mut total = 0usize;
    let mut decoder = flate2::read::GzDecoder::new(gzipped);
    let mut chunk = vec![0; GUNZIP_CHUNK];
    loop {
        let read = match std::io::Read::read(&mut decoder, &mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(ApiError::BadJson(format!("bad gzip: {error}"))),
        };
        if total + read > limit {
            return Err(ApiError::TooLarge {
                what: "uncompressed",
                cap,
            });
        }
        let mut data = &chunk[..read];
        while !data.is_empty() {
            if segments
                .last()
                .is_none_or(|last| last.len() == last.capacity())
            {
                // As large as all before it, never past the cap.
                segments.push(Vec::with_capacity(total.min(limit - total).max(1)));
            }
            let Some(segment) = segments.last_mut() else {
                break;
            };
            let room = segment.capacity() - segment.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            segment.extend_from_slice(now);
            total += now.len();
            data = rest;
        }
    }
    Ok(if segments.len() == 1 {
        segments.pop().unwrap_or_default()
    } else {
        segments.concat()
    })
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

    /// An answer over the cap is refused without ever holding more than the cap; one at the
    /// cap, or in many segments, comes out whole.
    #[test]
    fn gunzipping_holds_no_more_than_the_cap() {
        let gzip = |plain: &[u8]| {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut encoder, plain).unwrap();
            encoder.finish().unwrap()
        };
        for cap in [(1 << 20) + 1, 3_000_000, (4 << 20) - 3] {
            let over = gzip(&vec![b' '; cap as usize * 2]);
            assert_eq!(
                gunzip_capped(&over, cap),
                Err(ApiError::TooLarge {
                    what: "uncompressed",
                    cap
                })
            );
            let one_more = gzip(&vec![b' '; cap as usize + 1]);
            assert!(
                gunzip_capped(&one_more, cap).is_err(),
                "one byte past the cap"
            );
            // In one segment of the size the trailer announces, or in many from a first one
            // far too small (as when there is no size to go by).
            let plain: Vec<u8> = (0..cap).map(|i| (i % 7) as u8).collect();
            let at = gunzip_capped(&gzip(&plain), cap).unwrap();
            assert_eq!(at, plain, "cap {cap}");
            assert_eq!(
                at.capacity() as u64,
                cap,
                "one segment of the announced size"
            );
            let pieced = gunzip_in_segments(&gzip(&plain), cap, 1000).unwrap();
            assert_eq!(pieced, plain, "cap {cap}");
            assert!(
                pieced.capacity() as u64 <= cap,
                "cap {cap}: {}",
                pieced.capacity()
            );
        }
        let small = gzip(b"{}");
        assert_eq!(gunzip_capped(&small, 1 << 20).unwrap(), b"{}");
    }
}
