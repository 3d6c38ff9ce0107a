//! [`Endpoint`]: which endpoint a request is checked as — axum's route template, a custom
//! mapping, the raw path or a constant.

use core::fmt;
use std::borrow::Cow;
use std::sync::Arc;

use super::Head;

type EndpointFn = dyn Fn(&Head<'_>) -> Option<String> + Send + Sync;

#[derive(Clone)]
enum Source {
    MatchedPath,
    RawPath,
    Constant(Arc<str>),
    Custom(Arc<EndpointFn>),
}

#[derive(Clone, Debug)]
enum Fallback {
    RawPath,
    Constant(Arc<str>),
}

/// How the layer names the endpoint of a request: the string rules' `endpoint = "..."`
/// selectors match.
///
/// The default is axum's `MatchedPath`, the route *template* (`/users/{id}`), so
/// `/users/42` and `/users/43` share one rule and one client cannot mint endpoints by
/// varying ids. Where no template is known (a plain hyper service, a layer outside the
/// router, an unmatched route) it falls back to the raw path, or to a constant set with
/// [`or_constant`](Self::or_constant).
///
/// ```
/// use tollgate::http::{Endpoint, Head};
/// let request = http::Request::get("/users/42?x=1").body(())?;
/// let head = Head::of(&request);
/// assert_eq!(Endpoint::matched_path().extract(&head), "/users/42");
/// assert_eq!(Endpoint::matched_path().or_constant("unrouted").extract(&head), "unrouted");
/// let api = Endpoint::custom(|h: &Head<'_>| h.uri.path().starts_with("/users/").then(|| "/users/{id}".to_owned()));
/// assert_eq!(api.extract(&head), "/users/{id}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Endpoint {
    source: Source,
    fallback: Fallback,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::MatchedPath => "MatchedPath",
            Source::RawPath => "RawPath",
            Source::Constant(c) => c,
            Source::Custom(_) => "Custom",
        };
        f.debug_struct("Endpoint")
            .field("source", &source)
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl Default for Endpoint {
    /// [`matched_path`](Self::matched_path).
    fn default() -> Endpoint {
        Endpoint::matched_path()
    }
}

impl Endpoint {
    /// axum's `MatchedPath` (the route template), falling back to the raw path.
    pub fn matched_path() -> Endpoint {
        Endpoint {
            source: Source::MatchedPath,
            fallback: Fallback::RawPath,
        }
    }

    /// The raw request path (no query).
    pub fn raw_path() -> Endpoint {
        Endpoint {
            source: Source::RawPath,
            fallback: Fallback::RawPath,
        }
    }

    /// Every request is the same endpoint `name`.
    pub fn constant(name: &str) -> Endpoint {
        Endpoint {
            source: Source::Constant(Arc::from(name)),
            fallback: Fallback::RawPath,
        }
    }

    /// The endpoint `f` maps the request to; where it returns `None`, the fallback.
    pub fn custom<F>(f: F) -> Endpoint
    where
        F: Fn(&Head<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Endpoint {
            source: Source::Custom(Arc::new(f)),
            fallback: Fallback::RawPath,
        }
    }

    /// Where the source gives nothing, the endpoint is `name` (instead of the raw path).
    pub fn or_constant(mut self, name: &str) -> Endpoint {
        self.fallback = Fallback::Constant(Arc::from(name));
        self
    }

    /// Where the source gives nothing, the endpoint is the raw path (the default).
    pub fn or_raw_path(mut self) -> Endpoint {
        self.fallback = Fallback::RawPath;
        self
    }

    /// The endpoint of the request `head` (borrowed where it can be).
    pub fn extract<'a>(&'a self, head: &Head<'a>) -> Cow<'a, str> {
        let found = match &self.source {
            Source::MatchedPath => head
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map(|m| Cow::Borrowed(m.as_str())),
            Source::RawPath => Some(Cow::Borrowed(head.uri.path())),
            Source::Constant(c) => Some(Cow::Borrowed(&**c)),
            Source::Custom(f) => f(head).map(Cow::Owned),
        };
        found.unwrap_or_else(|| match &self.fallback {
            Fallback::RawPath => Cow::Borrowed(head.uri.path()),
            Fallback::Constant(c) => Cow::Borrowed(&**c),
        })
    }
}
