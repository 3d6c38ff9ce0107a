//! What the layer reads from a request: [`Head`] (method, URI, headers and extensions; never the
//! body), the key a request is limited under ([`ClientKey`], [`KeyError`]) and its endpoint
//! ([`Endpoint`]).

use core::fmt;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Extensions, HeaderMap, HeaderName, Method, Request, Uri};

use super::layer::Shared;
use super::{IpPrefix, KeyError, KeyText, TrustedProxies};

/// The parts of a request the layer's extractors may read: method, URI, headers and
/// extensions (where axum puts `MatchedPath` and `ConnectInfo`). The body is never touched.
///
/// ```
/// use tollgate_http::Head;
/// let request = http::Request::get("/users/42").header("x-api-key", "k1").body(())?;
/// let head = Head::of(&request);
/// assert_eq!(head.uri.path(), "/users/42");
/// assert_eq!(head.headers["x-api-key"], "k1");
/// assert_eq!(head.peer(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Head<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI (path and query).
    pub uri: &'a Uri,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The request extensions.
    pub extensions: &'a Extensions,
}

impl<'a> Head<'a> {
    /// The head of `request`.
    pub fn of<B>(request: &'a Request<B>) -> Head<'a> {
        Head {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }

    /// The TCP peer's address, from whichever the server provides: axum's
    /// `ConnectInfo<SocketAddr>` (from `into_make_service_with_connect_info::<SocketAddr>()`)
    /// or its `MockConnectInfo`; tonic's `TcpConnectInfo` (a tonic server over TCP or TLS,
    /// whose TLS connections carry it too, with this crate's `tonic` feature); or a bare
    /// `SocketAddr` extension (what a plain hyper server can insert per connection:
    /// hyper-util's server inserts none, and its `HttpInfo` is its client connector's, so
    /// `examples/hyper_service.rs` inserts the accepted connection's address itself).
    #[inline(always)]
    pub fn peer(&self) -> Option<SocketAddr> {
        use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
        if let Some(ConnectInfo(addr)) = self.extensions.get::<ConnectInfo<SocketAddr>>() {
            return Some(*addr);
        }
        if let Some(MockConnectInfo(addr)) = self.extensions.get::<MockConnectInfo<SocketAddr>>() {
            return Some(*addr);
        }
        #[cfg(feature = "tonic")]
        if let Some(info) = self
            .extensions
            .get::<tonic::transport::server::TcpConnectInfo>()
        {
            if let Some(addr) = info.remote_addr() {
                return Some(addr);
            }
        }
        self.extensions.get::<SocketAddr>().copied()
    }
}

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

/// The longest header or custom key accepted, in bytes (longer is [`KeyError::Malformed`]).
pub const MAX_KEY_LEN: usize = 256;

type KeyFn = dyn Fn(&Head<'_>) -> Result<String, KeyError> + Send + Sync;

/// `repr(u8)`: the tag, then each source's fields (the default source's prefix right after
/// the tag, in its layer's first cache line: see `Shared`).
#[derive(Clone)]
#[repr(u8)]
enum KeySource {
    Peer(IpPrefix),
    Header(HeaderName),
    ForwardedFor(Arc<TrustedProxies>, IpPrefix),
    Custom(Arc<KeyFn>),
}

/// How the layer names the client of a request: the string a [`Policy`]'s rules key their
/// state by.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate_http::{ClientKey, Head, KeyError};
/// let mut request = http::Request::get("/").header("x-api-key", "acct_7").body(())?;
/// request.extensions_mut().insert("[2001:db8:1:2::9]:443".parse::<SocketAddr>()?);
/// let head = Head::of(&request);
/// assert_eq!(ClientKey::peer_ip().extract(&head)?, "2001:db8:1:2::");
/// assert_eq!(ClientKey::header("x-api-key")?.extract(&head)?, "acct_7");
/// assert!(matches!(ClientKey::header("x-other")?.extract(&head), Err(KeyError::Missing(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Policy`]: tollgate::policy::Policy
#[derive(Clone)]
pub struct ClientKey {
    source: KeySource,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            KeySource::Peer(p) => f.debug_tuple("PeerIp").field(p).finish(),
            KeySource::Header(h) => f.debug_tuple("Header").field(h).finish(),
            KeySource::ForwardedFor(t, p) => {
                f.debug_tuple("ForwardedFor").field(t).field(p).finish()
            }
            KeySource::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl Default for ClientKey {
    /// [`peer_ip`](Self::peer_ip).
    fn default() -> ClientKey {
        ClientKey::peer_ip()
    }
}

impl ClientKey {
    /// The TCP peer's address (see [`Head::peer`]), IPv4 /32 and IPv6 /64; an IPv4 client
    /// arriving as IPv4-embedded IPv6 (NAT64 `64:ff9b::/96`, `::ffff:a.b.c.d`) by its IPv4
    /// (see [`IpPrefix`]).
    pub fn peer_ip() -> ClientKey {
        ClientKey {
            source: KeySource::Peer(IpPrefix::default()),
        }
    }

    /// The value of header `name` (an API key, a tenant id), which must be visible ASCII,
    /// non-empty and at most [`MAX_KEY_LEN`] bytes.
    ///
    /// # Errors
    ///
    /// `name` is not a valid header name.
    pub fn header(name: &str) -> Result<ClientKey, http::header::InvalidHeaderName> {
        Ok(ClientKey {
            source: KeySource::Header(HeaderName::from_bytes(name.as_bytes())?),
        })
    }

    /// The client behind the trusted proxies `trusted`: the rightmost untrusted
    /// `X-Forwarded-For` hop when the peer is trusted, else the peer (see
    /// [`TrustedProxies`]: the field is read as bytes, and what the client wrote left of
    /// its hop never changes its key); IPv4 /32, IPv6 /64, IPv4-embedded IPv6 by its IPv4
    /// (see [`IpPrefix`]).
    pub fn forwarded_for(trusted: TrustedProxies) -> ClientKey {
        ClientKey {
            source: KeySource::ForwardedFor(Arc::new(trusted), IpPrefix::default()),
        }
    }

    /// A key computed by `f`, which must be non-empty and at most [`MAX_KEY_LEN`] bytes
    /// (else [`KeyError::Malformed`]: an empty key would put every such client in one
    /// bucket).
    ///
    /// ```
    /// use tollgate_http::{ClientKey, Head, KeyError};
    /// let by_tenant = ClientKey::custom(|head: &Head<'_>| {
    ///     head.uri.path().split('/').nth(1).filter(|s| !s.is_empty())
    ///         .map(str::to_owned).ok_or(KeyError::Missing("tenant path segment"))
    /// });
    /// let request = http::Request::get("/acme/orders").body(())?;
    /// assert_eq!(by_tenant.extract(&Head::of(&request))?, "acme");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn custom<F>(f: F) -> ClientKey
    where
        F: Fn(&Head<'_>) -> Result<String, KeyError> + Send + Sync + 'static,
    {
        ClientKey {
            source: KeySource::Custom(Arc::new(f)),
        }
    }

    /// The same source with addresses grouped by `prefix` (peer IP and forwarded-for
    /// keys; no effect on the others).
    ///
    /// ```
    /// use tollgate_http::{ClientKey, IpPrefix};
    /// let per_48 = ClientKey::peer_ip().prefix(IpPrefix::new(32, 48));
    /// # let _ = per_48;
    /// ```
    pub fn prefix(mut self, prefix: IpPrefix) -> ClientKey {
        match &mut self.source {
            KeySource::Peer(p) | KeySource::ForwardedFor(_, p) => *p = prefix,
            KeySource::Header(_) | KeySource::Custom(_) => {}
        }
        self
    }

    /// The client key of the request `head` (borrowed from it where it can be).
    #[inline]
    ///
    /// # Errors
    ///
    /// The [`KeyError`] of a request whose key is missing or malformed, or that came
    /// without the peer address a peer key needs.
    pub fn extract<'a>(&self, head: &Head<'a>) -> Result<KeyText<'a>, KeyError> {
        // The default source inline, the others out of line: a match of all four compiles
        // to a jump table, one more cache line for a request that finds the caches cold.
        if let KeySource::Peer(prefix) = &self.source {
            return peer_key(prefix, head);
        }
        self.read(head)
    }

    /// [`extract`](Self::extract), of any source.
    #[inline(never)]
    fn read<'a>(&self, head: &Head<'a>) -> Result<KeyText<'a>, KeyError> {
        match &self.source {
            KeySource::Peer(prefix) => peer_key(prefix, head),
            KeySource::Header(name) => {
                let mut values = head.headers.get_all(name).iter();
                let value = values.next().ok_or(KeyError::Missing("key header"))?;
                if values.next().is_some() {
                    return Err(KeyError::Malformed("key header repeated"));
                }
                let text = value
                    .to_str()
                    .map_err(|_| KeyError::Malformed("key header not visible ASCII"))?
                    .trim();
                if text.is_empty() {
                    return Err(KeyError::Malformed("key header empty"));
                }
                if text.len() > MAX_KEY_LEN {
                    return Err(KeyError::Malformed("key header too long"));
                }
                Ok(KeyText::borrowed(text))
            }
            KeySource::ForwardedFor(trusted, prefix) => {
                let peer = head.peer().ok_or(KeyError::NoPeerAddress)?;
                // As bytes: the client's own part may hold anything (see TrustedProxies).
                let fields = head.headers.get_all("x-forwarded-for").iter().rev();
                let client = trusted
                    .client_rev(peer.ip(), fields.map(http::HeaderValue::as_bytes))
                    .map_err(|_| {
                        KeyError::Malformed("X-Forwarded-For entry of a trusted hop not an address")
                    })?;
                Ok(KeyText::address(prefix.mask(client)))
            }
            KeySource::Custom(f) => {
                let key = f(head)?;
                if key.is_empty() {
                    return Err(KeyError::Malformed("custom key empty"));
                }
                if key.len() > MAX_KEY_LEN {
                    return Err(KeyError::Malformed("custom key too long"));
                }
                Ok(KeyText::owned(key))
            }
        }
    }
}

/// The key of the peer of the request `head`, by `prefix`.
#[inline(always)]
fn peer_key<'a>(prefix: &IpPrefix, head: &Head<'a>) -> Result<KeyText<'a>, KeyError> {
    let peer = head.peer().ok_or(KeyError::NoPeerAddress)?;
    Ok(KeyText::address(prefix.mask(peer.ip())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_groups_ipv6_clients() {
        let trusted = TrustedProxies::new(["127.0.0.1"]).unwrap_or_default();
        let key = ClientKey::forwarded_for(trusted);
        let mut request = http::Request::new(());
        request.headers_mut().insert(
            "x-forwarded-for",
            http::HeaderValue::from_static("2001:db8:7:8:1::1"),
        );
        request
            .extensions_mut()
            .insert(std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(
            key.extract(&Head::of(&request)).as_deref(),
            Ok("2001:db8:7:8::")
        );
        request.extensions_mut().clear();
        assert_eq!(
            key.extract(&Head::of(&request)),
            Err(KeyError::NoPeerAddress)
        );
    }

    /// A custom key is held to the header key's bounds: never empty (one bucket for every
    /// such client), never longer than `MAX_KEY_LEN`.
    #[test]
    fn custom_keys_must_be_non_empty_and_bounded() {
        let by_path = ClientKey::custom(|head: &Head<'_>| Ok(head.uri.path()[1..].to_owned()));
        let key = |path: &str| {
            let request = http::Request::get(path).body(()).map_err(|e| e.to_string());
            request.map(|r| by_path.extract(&Head::of(&r)).map(KeyText::into_owned))
        };
        assert_eq!(key("/acme"), Ok(Ok("acme".to_owned())));
        assert_eq!(key("/"), Ok(Err(KeyError::Malformed("custom key empty"))));
        let longest = format!("/{}", "k".repeat(MAX_KEY_LEN));
        assert_eq!(key(&longest), Ok(Ok("k".repeat(MAX_KEY_LEN))));
        let longer = format!("/{}", "k".repeat(MAX_KEY_LEN + 1));
        assert_eq!(
            key(&longer),
            Ok(Err(KeyError::Malformed("custom key too long")))
        );
    }
}
