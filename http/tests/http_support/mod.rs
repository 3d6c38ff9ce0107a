//! Shared support of the HTTP tests: one request on a fresh connection with a real hyper
//! client, an axum app served on loopback, and a layer called in process over a handler
//! that answers at once.
#![allow(dead_code)]

pub(crate) mod lists;

use std::convert::Infallible;
use std::future::Ready;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tollgate_http::{RateLimit, RateLimitLayer};
use tower::Layer;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One response as the client saw it.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// A header's value as text (`""` if absent or not text).
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// The `x-api-key` header of client `key`, for [`send`].
pub(crate) fn api_key(key: &str) -> Vec<(&'static str, &[u8])> {
    vec![("x-api-key", key.as_bytes())]
}

/// One GET of `path` with `headers` on a fresh connection to `addr`.
pub(crate) async fn send(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Result<Reply, BoxError> {
    send_method(addr, http::Method::GET, path, headers).await
}

/// One `method` request for `path` with `headers` on a fresh connection to `addr`.
pub(crate) async fn send_method(
    addr: SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Result<Reply, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new())?)
        .await?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Serves `app` on 127.0.0.1:0 on the current runtime, with `ConnectInfo<SocketAddr>`.
pub(crate) async fn serve(app: Router) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    Ok(addr)
}

/// A handler that answers every request at once, 200 with an empty body.
#[derive(Clone, Debug)]
pub(crate) struct Answers;

impl tower::Service<Request<Empty<Bytes>>> for Answers {
    type Response = http::Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<Empty<Bytes>>) -> Self::Future {
        std::future::ready(Ok(http::Response::new(Empty::new())))
    }
}

/// `layer` over [`Answers`], to call in process (`tower::ServiceExt::oneshot`).
pub(crate) fn in_process(layer: &RateLimitLayer) -> RateLimit<Answers> {
    layer.layer(Answers)
}

/// A request from the peer `ip` (port 9), given as a bare `SocketAddr` extension, as a
/// plain hyper server can.
pub(crate) fn from_peer(ip: [u8; 4]) -> Request<Empty<Bytes>> {
    let mut request = Request::new(Empty::new());
    request.extensions_mut().insert(SocketAddr::from((ip, 9)));
    request
}

/// Whether `holds` comes true within two seconds, asked every 10 ms: for work a spawned
/// task does (a refund landing), with no timed assertion.
pub(crate) async fn eventually(
    mut holds: impl FnMut() -> Result<bool, BoxError>,
) -> Result<bool, BoxError> {
    for _ in 0..200 {
        if holds()? {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(false)
}
