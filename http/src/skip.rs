//! [`Skip`]: the requests a layer passes on without a check — by method (CORS preflight
//! `OPTIONS`, say, or every method but those the layer limits) or by path prefix (health
//! checks, metrics) — and [`PrefixError`], a prefix no request path can start with.

use core::fmt;

use http::Method;
use tollgate::policy::EndpointSelector;

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
    /// The only methods checked, if the layer names them (every other one passes).
    only: Option<Vec<Method>>,
    /// Each an [`EndpointSelector::Prefix`], matched against the request's path.
    prefixes: Vec<EndpointSelector>,
}

impl Skip {
    pub(crate) fn method(&mut self, method: Method) {
        if !self.methods.contains(&method) {
            self.methods.push(method);
        }
    }

    /// Checks requests with one of `methods` (and those named before) and lets those of
    /// every method not so named pass: none named, none checked.
    pub(crate) fn only_methods(&mut self, methods: impl IntoIterator<Item = Method>) {
        let only = self.only.get_or_insert_with(Vec::new);
        for method in methods {
            if !only.contains(&method) {
                only.push(method);
            }
        }
    }

    pub(crate) fn prefix(&mut self, prefix: &str) -> Result<(), PrefixError> {
        let refuse = |reason| PrefixError {
            prefix: prefix.to_owned(),
            reason,
        };
        if !prefix.starts_with('/') {
            return Err(refuse("a request path starts with '/'"));
        }
        if prefix.contains(['?', '#']) {
            return Err(refuse("a request path holds no query or fragment"));
        }
        // A rule's prefix may name route templates (`/users/{id}/`, matched against
        // axum's `MatchedPath`); a skip prefix is matched against the request's own path,
        // where `{id}` or `{*rest}` never stands for a segment.
        if prefix.contains(['{', '}', '*']) {
            return Err(refuse(
                "it is matched against the request's own path, not a route template: \
                 write the literal prefix (`/users/`, not `/users/{id}` or `/static/{*path}`)",
            ));
        }
        let selector = EndpointSelector::prefix(prefix).map_err(|e| refuse(e.reason))?;
        self.prefixes.push(selector);
        Ok(())
    }

    /// Whether no request passes unchecked.
    pub(crate) fn is_empty(&self) -> bool {
        self.methods.is_empty() && self.only.is_none() && self.prefixes.is_empty()
    }

    /// Whether the request with `head` passes unchecked.
    pub(crate) fn matches(&self, head: &Head<'_>) -> bool {
        self.methods.contains(head.method)
            || self
                .only
                .as_ref()
                .is_some_and(|only| !only.contains(head.method))
            || {
                let path = head.uri.path();
                self.prefixes.iter().any(|p| p.matches(path))
            }
    }
}

/// A path prefix given to [`RateLimitLayer::skip_path_prefix`](super::RateLimitLayer::skip_path_prefix)
/// that no request path can match (one not starting with `/`, or holding a query or a
/// fragment), or that is written as a route template (`{id}`, `{*rest}`, a `*`), which a
/// skip prefix, matched against the request's own path, would take literally.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefixError {
    /// The prefix given.
    pub prefix: String,
    /// Why it is refused.
    pub reason: &'static str,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path prefix {:?} refused: {}", self.prefix, self.reason)
    }
}

impl std::error::Error for PrefixError {}
