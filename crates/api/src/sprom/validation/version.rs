//! `spec.version`: the Prometheus version the shards run, whose major chooses their flags.

use std::fmt;

/// The version when neither `spec.version` nor the image's tag gives one: the default image's.
pub const DEFAULT_VERSION: PrometheusVersion = PrometheusVersion {
    major: 3,
    minor: 16,
    patch: 0,
};

/// The majors the shards' flags are written for.
pub const SUPPORTED_MAJORS: [u32; 2] = [2, 3];

/// A Prometheus release, `major.minor.patch` (a pre-release suffix is kept out: it does not
/// change the flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PrometheusVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl fmt::Display for PrometheusVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl PrometheusVersion {
    /// `v2.55.1`, `3.16.0`, `3.0.0-rc.1`; None for anything else.
    pub fn parse(text: &str) -> Option<PrometheusVersion> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let release = text
            .split_once(['-', '+'])
            .map_or(text, |(release, _)| release);
        let mut parts = release.split('.');
        let mut number = || -> Option<u32> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) || part.len() > 9 {
                return None;
            }
            part.parse().ok()
        };
        let version = PrometheusVersion {
            major: number()?,
            minor: number()?,
            patch: number()?,
        };
        parts.next().is_none().then_some(version)
    }

    /// The version an image reference names by its tag (`quay.io/prometheus/prometheus:v2.55.1`,
    /// with or without a digest), if its tag is a version.
    pub fn of_image(image: &str) -> Option<PrometheusVersion> {
        let name = image.split_once('@').map_or(image, |(name, _)| name);
        let (_, tag) = name.rsplit_once(':')?;
        // A registry's port (`host:5000/prometheus`) is no tag.
        if tag.contains('/') {
            return None;
        }
        PrometheusVersion::parse(tag)
    }

    /// Prometheus 2: auto-reload and agent mode are feature flags.
    pub fn is_v2(self) -> bool {
        self.major == 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> PrometheusVersion {
        PrometheusVersion {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn versions_parse_as_prometheus_tags_them() {
        assert_eq!(PrometheusVersion::parse("v2.55.1"), Some(v(2, 55, 1)));
        assert_eq!(PrometheusVersion::parse("3.16.0"), Some(v(3, 16, 0)));
        assert_eq!(PrometheusVersion::parse("v3.0.0-rc.1"), Some(v(3, 0, 0)));
        for bad in [
            "",
            "v",
            "3",
            "3.16",
            "3.16.0.1",
            "v3.x.0",
            "latest",
            "3.16.-1",
            "99999999999.0.0",
        ] {
            assert_eq!(PrometheusVersion::parse(bad), None, "{bad}");
        }
        assert_eq!(DEFAULT_VERSION.to_string(), "3.16.0");
    }

    #[test]
    fn an_image_names_its_version_by_its_tag() {
        let of = PrometheusVersion::of_image;
        assert_eq!(
            of("quay.io/prometheus/prometheus:v2.55.1"),
            Some(v(2, 55, 1))
        );
        assert_eq!(
            of("registry:5000/prometheus:v3.16.0@sha256:abc"),
            Some(v(3, 16, 0))
        );
        assert_eq!(of("registry:5000/prometheus"), None);
        assert_eq!(of("prometheus:latest"), None);
        assert_eq!(of("prometheus@sha256:abc"), None);
    }
}
