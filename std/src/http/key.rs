//! [`ClientKey`]: which client a request counts against (peer IP with a prefix, a header
//! such as an API key, `X-Forwarded-For` behind trusted proxies, or a closure), and
//! [`KeyError`] for a request that names none.

use core::fmt;
use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderName;

use super::{Head, IpPrefix, TrustedProxies};

/// The longest header key accepted, in bytes (longer is [`KeyError::Malformed`]).
pub const MAX_KEY_LEN: usize = 256;

/// Why no client key could be read from a request. The layer answers it as configured
/// with [`OnBadKey`](super::OnBadKey): a 400, or a fallback key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request carries no key: no such header, or no peer address.
    Missing(&'static str),
    /// The key is there but unusable: not visible ASCII, empty, longer than
    /// [`MAX_KEY_LEN`], or an `X-Forwarded-For` entry that is not an address.
    Malformed(&'static str),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing(what) => write!(f, "missing client key: {what}"),
            KeyError::Malformed(what) => write!(f, "malformed client key: {what}"),
        }
    }
}

impl std::error::Error for KeyError {}

type KeyFn = dyn Fn(&Head<'_>) -> Result<String, KeyError> + Send + Sync;

#[derive(Clone)]
enum Source {
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
/// use tollgate::http::{ClientKey, Head, KeyError};
/// let mut request = http::Request::get("/").header("x-api-key", "acct_7").body(())?;
/// request.extensions_mut().insert("[2001:db8:1:2::9]:443".parse::<SocketAddr>()?);
/// let head = Head::of(&request);
/// assert_eq!(ClientKey::peer_ip().extract(&head)?, "2001:db8:1:2::");
/// assert_eq!(ClientKey::header("x-api-key")?.extract(&head)?, "acct_7");
/// assert!(matches!(ClientKey::header("x-other")?.extract(&head), Err(KeyError::Missing(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Policy`]: crate::policy::Policy
#[derive(Clone)]
pub struct ClientKey {
    source: Source,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::Peer(p) => f.debug_tuple("PeerIp").field(p).finish(),
            Source::Header(h) => f.debug_tuple("Header").field(h).finish(),
            Source::ForwardedFor(t, p) => f.debug_tuple("ForwardedFor").field(t).field(p).finish(),
            Source::Custom(_) => f.write_str("Custom"),
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
    /// The TCP peer's address (see [`Head::peer`]), IPv4 /32 and IPv6 /64.
    pub fn peer_ip() -> ClientKey {
        ClientKey {
            source: Source::Peer(IpPrefix::default()),
        }
    }

    /// The value of header `name` (an API key, a tenant id), which must be visible ASCII,
    /// non-empty and at most [`MAX_KEY_LEN`] bytes.
    pub fn header(name: &str) -> Result<ClientKey, http::header::InvalidHeaderName> {
        Ok(ClientKey {
            source: Source::Header(HeaderName::from_bytes(name.as_bytes())?),
        })
    }

    /// The client behind the trusted proxies `trusted`: the rightmost untrusted
    /// `X-Forwarded-For` hop when the peer is trusted, else the peer (see
    /// [`TrustedProxies::client`]); IPv4 /32, IPv6 /64.
    pub fn forwarded_for(trusted: TrustedProxies) -> ClientKey {
        ClientKey {
            source: Source::ForwardedFor(Arc::new(trusted), IpPrefix::default()),
        }
    }

    /// A key computed by `f`.
    ///
    /// ```
    /// use tollgate::http::{ClientKey, Head, KeyError};
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
            source: Source::Custom(Arc::new(f)),
        }
    }

    /// The same source with addresses grouped by `prefix` (peer IP and forwarded-for
    /// keys; no effect on the others).
    ///
    /// ```
    /// use tollgate::http::{ClientKey, IpPrefix};
    /// let per_48 = ClientKey::peer_ip().prefix(IpPrefix::new(32, 48));
    /// # let _ = per_48;
    /// ```
    pub fn prefix(mut self, prefix: IpPrefix) -> ClientKey {
        match &mut self.source {
            Source::Peer(p) | Source::ForwardedFor(_, p) => *p = prefix,
            Source::Header(_) | Source::Custom(_) => {}
        }
        self
    }

    /// The client key of the request `head` (borrowed from it where it can be).
    pub fn extract<'a>(&self, head: &Head<'a>) -> Result<Cow<'a, str>, KeyError> {
        match &self.source {
            Source::Peer(prefix) => {
                let peer = head.peer().ok_or(KeyError::Missing("peer address"))?;
                Ok(Cow::Owned(ip_key(prefix.mask(peer.ip()))))
            }
            Source::Header(name) => {
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
                Ok(Cow::Borrowed(text))
            }
            Source::ForwardedFor(trusted, prefix) => {
                let peer = head.peer().ok_or(KeyError::Missing("peer address"))?;
                let mut fields = Vec::new();
                for value in head.headers.get_all("x-forwarded-for") {
                    fields.push(
                        value
                            .to_str()
                            .map_err(|_| KeyError::Malformed("X-Forwarded-For not ASCII"))?,
                    );
                }
                let client = trusted
                    .client(peer.ip(), fields)
                    .map_err(|_| KeyError::Malformed("X-Forwarded-For entry"))?;
                Ok(Cow::Owned(ip_key(prefix.mask(client))))
            }
            Source::Custom(f) => f(head).map(Cow::Owned),
        }
    }
}

/// `ip` as text, as `Display` writes it; IPv4 without the `fmt` machinery (per request).
fn ip_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut out = String::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                if octet >= 100 {
                    out.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    out.push(char::from(b'0' + octet / 10 % 10));
                }
                out.push(char::from(b'0' + octet % 10));
            }
            out
        }
        IpAddr::V6(v6) => v6.to_string(),
    }
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
            Err(KeyError::Missing("peer address"))
        );
    }

    #[test]
    fn ipv4_keys_match_display() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.100.255.9",
            "255.255.255.255",
            "192.0.2.10",
        ] {
            let parsed: IpAddr = ip
                .parse()
                .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::BROADCAST));
            assert_eq!(ip_key(parsed), parsed.to_string());
        }
    }
}
