//! Shared support of the HTTP tests: one request on a fresh connection with a real hyper
//! client, and an axum app served on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

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
