//! [`KeyError`]: why a request has no usable client key. (The errors of the layer's
//! configuration live beside what they refuse: `CidrError` in `ip.rs`, `ForwardedForError`
//! in `proxies.rs`, `PrefixError` in `skip.rs`.)

use core::fmt;

/// Why no client key could be read from a request. The layer answers a client's mistake
/// as configured with [`OnBadKey`](super::OnBadKey) (a 400, or a fallback key), and the
/// server's own, [`NoPeerAddress`](KeyError::NoPeerAddress), with a 500.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request carries no key: no such header (or what a custom key names).
    Missing(&'static str),
    /// The key is the peer's address, and the server put none in the request's
    /// extensions: a wiring error of the server, never the client's. Serve axum with
    /// `into_make_service_with_connect_info::<SocketAddr>()`; a tonic server with this
    /// crate's `tonic` feature; a plain hyper server by inserting the connection's
    /// `SocketAddr` into each request's extensions.
    NoPeerAddress,
    /// The key is there but unusable: a header key not visible ASCII, a header or custom
    /// key empty or longer than [`MAX_KEY_LEN`](super::MAX_KEY_LEN), or an
    /// `X-Forwarded-For` entry that is not an address.
    Malformed(&'static str),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing(what) => write!(f, "missing client key: {what}"),
            KeyError::NoPeerAddress => f.write_str(
                "no peer address to key the request by: the server provides none (serve \
                 axum with into_make_service_with_connect_info::<SocketAddr>(), tonic with \
                 tollgate-http's `tonic` feature, or insert the connection's SocketAddr \
                 into each request's extensions)",
            ),
            KeyError::Malformed(what) => write!(f, "malformed client key: {what}"),
        }
    }
}

impl std::error::Error for KeyError {}
