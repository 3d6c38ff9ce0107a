//! A plain hyper service (no framework) behind tollgate: each client IP gets 5 requests a
//! second with bursts of 10. `cargo run -p tollgate-http --example hyper_service [ADDR]`.
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use tollgate::{policy::Policy, MonotonicClock};
use tollgate_http::RateLimitLayer;
use tower::ServiceBuilder;

const RULES: &str = "[[rules]]\nname = \"per-client\"\nlimit = 5\nwindow = \"1s\"\nburst = 10\n";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::new(Arc::new(Policy::from_toml(RULES, MonotonicClock::new())?));
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, peer) = listener.accept().await?;
        let service = ServiceBuilder::new()
            // The client key is the peer address: hand it over as an extension.
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(peer);
                request
            })
            .layer(layer.clone())
            .service_fn(|_: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
            });
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new();
            let service = TowerToHyperService::new(service);
            if let Err(e) = connection
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                eprintln!("connection from {peer}: {e}");
            }
        });
    }
}
