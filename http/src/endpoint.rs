//! [`Endpoint`]: how the layer names a request's endpoint (axum's route template, the raw
//! path, a constant, a closure), and `Named`, the name found only where the rules read it.

use core::fmt;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::Arc;

use super::layer::Shared;
use super::Head;

type EndpointFn = dyn Fn(&Head<'_>) -> Option<String> + Send + Sync;

#[derive(Clone)]
enum EndpointSource {
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
/// use tollgate_http::{Endpoint, Head};
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
    source: EndpointSource,
    fallback: Fallback,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            EndpointSource::MatchedPath => "MatchedPath",
            EndpointSource::RawPath => "RawPath",
            EndpointSource::Constant(c) => c,
            EndpointSource::Custom(_) => "Custom",
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
            source: EndpointSource::MatchedPath,
            fallback: Fallback::RawPath,
        }
    }

    /// The raw request path (no query).
    pub fn raw_path() -> Endpoint {
        Endpoint {
            source: EndpointSource::RawPath,
            fallback: Fallback::RawPath,
        }
    }

    /// Every request is the same endpoint `name`.
    pub fn constant(name: &str) -> Endpoint {
        Endpoint {
            source: EndpointSource::Constant(Arc::from(name)),
            fallback: Fallback::RawPath,
        }
    }

    /// The endpoint `f` maps the request to; where it returns `None`, the fallback.
    pub fn custom<F>(f: F) -> Endpoint
    where
        F: Fn(&Head<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Endpoint {
            source: EndpointSource::Custom(Arc::new(f)),
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
    #[inline]
    pub fn extract<'a>(&'a self, head: &Head<'a>) -> Cow<'a, str> {
        self.name(head).0
    }

    /// [`extract`](Self::extract), and how the name was found.
    #[inline]
    pub(crate) fn name<'a>(&'a self, head: &Head<'a>) -> (Cow<'a, str>, Naming) {
        let found = match &self.source {
            EndpointSource::MatchedPath => head
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map(|m| (Cow::Borrowed(m.as_str()), Naming::Routed)),
            EndpointSource::RawPath => Some((Cow::Borrowed(head.uri.path()), Naming::RawPath)),
            EndpointSource::Constant(c) => Some((Cow::Borrowed(&**c), Naming::Given)),
            EndpointSource::Custom(f) => f(head).map(|name| (Cow::Owned(name), Naming::Given)),
        };
        found.unwrap_or_else(|| match &self.fallback {
            Fallback::RawPath => (Cow::Borrowed(head.uri.path()), Naming::RawPath),
            Fallback::Constant(c) => (Cow::Borrowed(&**c), Naming::Given),
        })
    }
}

/// How [`Endpoint::name`] named a request's endpoint.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Naming {
    /// By axum's `MatchedPath`: a route template.
    Routed,
    /// By the raw path, which no route template matches.
    RawPath,
    /// By a constant or the service's own mapping.
    Given,
}

/// A request's endpoint, named on first use and kept: the policy asks for it only if its
/// rules select by endpoint, and the layer only on a path that reports or keeps it (a
/// denial, a charge, a shadow check). Named by the raw path, it tells the layer's
/// [`WiringLog`](super::wiring_log::WiringLog), which warns if route-template rules cannot
/// match (see `WiringLog::named_by_raw_path`).
pub(crate) struct Named<'a> {
    shared: &'a Shared,
    head: &'a Head<'a>,
    name: OnceCell<Cow<'a, str>>,
}

impl<'a> Named<'a> {
    /// The endpoint of `head` under the layer configured as `shared`, not named yet.
    #[inline]
    pub(crate) fn new(shared: &'a Shared, head: &'a Head<'a>) -> Named<'a> {
        Named {
            shared,
            head,
            name: OnceCell::new(),
        }
    }

    /// The endpoint, named on the first call (and how, told to the layer's wiring log).
    #[inline]
    pub(crate) fn get(&self) -> &str {
        self.name.get_or_init(|| {
            let (name, naming) = self.shared.endpoint.name(self.head);
            match naming {
                Naming::Routed => self.shared.wiring_log.routed(),
                Naming::RawPath => self
                    .shared
                    .wiring_log
                    .named_by_raw_path(&*self.shared.policy),
                Naming::Given => {}
            }
            name
        })
    }

    /// The endpoint, owned (named as [`get`](Self::get) names it).
    pub(crate) fn into_owned(self) -> String {
        self.get();
        self.name
            .into_inner()
            .map(Cow::into_owned)
            .unwrap_or_default()
    }
}
