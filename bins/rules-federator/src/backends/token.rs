//! The bearer token sent to every backend (`--backend-bearer-token-file`): a projected
//! ServiceAccount token, or any token a proxy in front of Prometheus checks. The kubelet rotates
//! a projected token in place, so the file is re-read, at most every [`RELOAD`]: a rotated token
//! is sent without a restart, and a request costs no file read. The token is never logged.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use zone_operator::ErrorChain;

/// How stale the token sent may be. A projected token is replaced at 80% of its lifetime (an
/// hour by default, ten minutes at least), so the old one stays valid far longer than this.
pub const RELOAD: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("--backend-bearer-token-file {path}: cannot read")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--backend-bearer-token-file {path}: empty")]
    Empty { path: String },
    #[error(
        "--backend-bearer-token-file {path}: not a token (characters an HTTP header cannot hold)"
    )]
    Header { path: String },
}

/// The `Authorization` header of the token file, re-read when older than the reload period.
pub struct BearerToken {
    path: PathBuf,
    reload: Duration,
    current: Mutex<Current>,
}

struct Current {
    header: HeaderValue,
    read_at: Instant,
}

impl BearerToken {
    /// Reads the file now, so a missing or empty one fails the start.
    pub fn read(path: &Path, reload: Duration) -> Result<Self, TokenError> {
        let header = read_header(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            reload,
            current: Mutex::new(Current {
                header,
                read_at: Instant::now(),
            }),
        })
    }

    /// `Bearer <token>`; the file is re-read first when the last read is older than the reload
    /// period. A file that cannot be read (mid-rotation, say) keeps the last token, with a
    /// warning.
    pub fn header(&self) -> HeaderValue {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.read_at.elapsed() >= self.reload {
            // Counted from the attempt: a failing file is retried once a period, not per request.
            current.read_at = Instant::now();
            match read_header(&self.path) {
                Ok(header) => current.header = header,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "cannot re-read the backends' bearer token; sending the last one");
                }
            }
        }
        current.header.clone()
    }
}

/// The token of `path`, trimmed (a file written by hand ends with a newline), as a header value
/// marked sensitive (kept out of hyper's debug output).
fn read_header(path: &Path) -> Result<HeaderValue, TokenError> {
    let shown = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| TokenError::Read {
        path: shown(),
        source,
    })?;
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(TokenError::Empty { path: shown() });
    }
    let mut value = b"Bearer ".to_vec();
    value.extend_from_slice(token);
    let mut header =
        HeaderValue::from_bytes(&value).map_err(|_| TokenError::Header { path: shown() })?;
    header.set_sensitive(true);
    Ok(header)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backends::testing::temp_dir;

    #[test]
    fn a_rotated_token_is_sent_once_the_reload_period_has_passed() {
        let dir = temp_dir("token");
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let always = BearerToken::read(&path, Duration::ZERO).unwrap();
        let hourly = BearerToken::read(&path, Duration::from_secs(3600)).unwrap();
        assert_eq!(always.header(), "Bearer first");
        assert!(always.header().is_sensitive());

        std::fs::write(&path, "second").unwrap();
        assert_eq!(always.header(), "Bearer second", "re-read once due");
        assert_eq!(hourly.header(), "Bearer first", "not re-read before");

        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            always.header(),
            "Bearer second",
            "a missing file keeps the last"
        );
        std::fs::write(&path, "  \n").unwrap();
        assert_eq!(
            always.header(),
            "Bearer second",
            "an empty file keeps the last"
        );
        std::fs::write(&path, "third").unwrap();
        assert_eq!(always.header(), "Bearer third");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_empty_or_unusable_file_fails_the_start() {
        let dir = temp_dir("token-bad");
        let path = dir.join("token");
        let error = |path: &Path| {
            BearerToken::read(path, RELOAD)
                .err()
                .map(|e| e.to_string())
                .unwrap()
        };
        assert_eq!(
            error(&path),
            format!(
                "--backend-bearer-token-file {}: cannot read",
                path.display()
            )
        );
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(
            error(&path),
            format!("--backend-bearer-token-file {}: empty", path.display())
        );
        std::fs::write(&path, "a\nb").unwrap();
        assert!(error(&path).ends_with("characters an HTTP header cannot hold)"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
