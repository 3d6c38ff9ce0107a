//! [`ClientKey`]: how the layer names a request's client (the peer's address, a header, the
//! client behind trusted proxies, a closure), the string a policy keys its state by.

use core::fmt;
use std::sync::Arc;

use http::HeaderName;

use super::{Head, IpPrefix, KeyError, KeyText, TrustedProxies};

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
    ///
    /// # Errors
    ///
    /// The [`KeyError`] of a request whose key is missing or malformed, or that came
    /// without the peer address a peer key needs.
    #[inline]
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
                bounded(text, "key header empty", "key header too long")?;
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
                bounded(&key, "custom key empty", "custom key too long")?;
                Ok(KeyText::owned(key))
            }
        }
    }
}

/// Refuses a header or custom `key` that is empty (`empty`: every such client would share
/// one bucket) or longer than [`MAX_KEY_LEN`] (`too_long`).
fn bounded(key: &str, empty: &'static str, too_long: &'static str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Malformed(empty));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::Malformed(too_long));
    }
    Ok(())
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
