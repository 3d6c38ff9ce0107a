//! A tonic gRPC service (tonic-health's, so there is no proto to compile) behind tollgate:
//! each client IP gets 5 calls a second with bursts of 10, and a denied call gets
//! `RESOURCE_EXHAUSTED` with a `RetryInfo`.
//! `cargo run -p tollgate-http --features tonic --example tonic_service [ADDR]`.
use std::sync::Arc;

use tokio_stream::wrappers::TcpListenerStream;
use tollgate::{policy::Policy, MonotonicClock};
use tollgate_http::RateLimitLayer;
use tonic::transport::Server;

const RULES: &str = "[[rules]]\nname = \"per-client\"\nlimit = 5\nwindow = \"1s\"\nburst = 10\n";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Arc::new(Policy::from_toml(RULES, MonotonicClock::new())?);
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:50051".into());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    // With the `tonic` feature the default key reads tonic's TcpConnectInfo.
    Server::builder()
        .layer(RateLimitLayer::new(policy))
        .add_service(health)
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await?;
    Ok(())
}
