//! The smallest axum service behind tollgate: each client IP gets 5 requests a second
//! with bursts of 10; CORS preflights pass unchecked. Run it and `curl -i localhost:3000/`:
//! `cargo run -p tollgate-http --example axum_service [ADDR]`.
use std::{net::SocketAddr, sync::Arc};

use axum::{routing::get, Router};
use tollgate::{policy::Policy, MonotonicClock};
use tollgate_http::RateLimitLayer;

const RULES: &str = r#"rules = [{ name = "per-client", limit = 5, window = "1s", burst = 10 }]"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Arc::new(Policy::from_toml(RULES, MonotonicClock::new())?);
    let layer = RateLimitLayer::new(policy).skip_method(http::Method::OPTIONS);
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    // The peer address is the default client key: serve with ConnectInfo.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
