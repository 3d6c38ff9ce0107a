//! [`Skip`]: the requests a layer passes on without a check — by method (CORS preflight
//! `OPTIONS`, say) or by path prefix (health checks, metrics) — and [`PrefixError`], a
//! prefix no request path can start with.

use core::fmt;

use http::Method;

use super::Head;

/// The methods and path prefixes a layer lets through unchecked: no key is read, nothing
/// is charged, no rate-limit field is added, and the request counts in
/// [`LayerStats::skipped`](super::LayerStats::skipped) only.
///
/// A prefix matches whole path segments: `/health` matches `/health` and `/health/live`,
/// not `/healthz`; a prefix ending in `/` (`/static/`) matches every path below it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Skip {
    methods: Vec<Method>,
    prefixes: Vec<String>,
}

impl Skip {
    pub(crate) fn method(&mut self, method: Method) {
        if !self.methods.contains(&method) {
            self.methods.push(method);
        }
    }

    pub(crate) fn prefix(&mut self, prefix: &str) -> Result<(), PrefixError> {
        if !prefix.starts_with('/') {
            return Err(PrefixError {
                prefix: prefix.to_owned(),
                reason: "a request path starts with '/'",
            });
        }
        if prefix.contains(['?', '#', '*']) {
            return Err(PrefixError {
                prefix: prefix.to_owned(),
                reason: "a prefix is a literal path: no query, fragment or wildcard",
            });
        }
        self.prefixes.push(prefix.to_owned());
        Ok(())
    }

    /// Whether the request with `head` passes unchecked.
    #[inline]
    pub(crate) fn matches(&self, head: &Head<'_>) -> bool {
        if self.methods.is_empty() && self.prefixes.is_empty() {
            return false;
        }
        self.methods.contains(head.method) || {
            let path = head.uri.path();
            self.prefixes.iter().any(|p| under(path, p))
        }
    }
}

/// Whether `path` is `prefix` or below it, by whole segments.
fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        None => false,
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
    }
}

/// A path prefix given to [`RateLimitLayer::skip_path_prefix`](super::RateLimitLayer::skip_path_prefix)
/// that no request path could ever match.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefixError {
    /// The prefix given.
    pub prefix: String,
    /// Why it can never match.
    pub reason: &'static str,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "path prefix {:?} can never match: {}",
            self.prefix, self.reason
        )
    }
}

impl std::error::Error for PrefixError {}

#[cfg(test)]
mod tests {
    use super::under;

    #[test]
    fn prefixes_match_whole_segments() {
        assert!(under("/health", "/health"));
        assert!(under("/health/live", "/health"));
        assert!(!under("/healthz", "/health"));
        assert!(!under("/api/health", "/health"));
        assert!(under("/static/a.css", "/static/"));
        assert!(!under("/static", "/static/"));
        assert!(under("/anything", "/"));
    }
}
