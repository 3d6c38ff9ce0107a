//! [`Head`]: the parts of a request the layer's extractors read (method, URI, headers and
//! extensions; never the body), and the peer address it finds among the extensions.

use std::net::SocketAddr;

use http::{Extensions, HeaderMap, Method, Request, Uri};

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
