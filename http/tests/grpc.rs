//! gRPC behind `RateLimitLayer`, as a tonic user runs it: a real tonic server on
//! 127.0.0.1:0 (tonic-health's `Health` service: no proto to compile) with the layer in
//! `Server::builder().layer(..)`, and a real tonic client over HTTP/2. Admitted calls
//! succeed; a denied call is the gRPC status `RESOURCE_EXHAUSTED` with `retry-after`, the
//! `RateLimit` fields as metadata and a `google.rpc.RetryInfo` the client decodes; a call
//! without a usable key is `INVALID_ARGUMENT`. The clients are keyed by their peer address,
//! which the layer reads from tonic's `TcpConnectInfo` (the `tonic` feature), over TCP and
//! over TLS.

mod http_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tollgate::policy::Policy;
use tollgate::{ManualClock, Nanos};
use tollgate_http::{ClientKey, RateLimitLayer};
use tonic::transport::{Channel, Server};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

use http_support::BoxError;

const RULES: &str = r#"
    [[rules]]
    name = "grpc"
    limit = 2
    window = "1m"
    algorithm = "fixed_window"
"#;

/// Serves tonic-health behind `layer` on 127.0.0.1:0; the address.
async fn serve(layer: RateLimitLayer) -> Result<SocketAddr, BoxError> {
    serve_on(Server::builder(), layer).await
}

/// [`serve`] with `server` (one configured for TLS, say).
async fn serve_on(server: Server, layer: RateLimitLayer) -> Result<SocketAddr, BoxError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        // Keep the reporter alive: dropping it ends the health service's watch streams.
        let _reporter = reporter;
        server
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    });
    Ok(addr)
}

async fn client(addr: SocketAddr) -> Result<HealthClient<Channel>, BoxError> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(HealthClient::new(channel))
}

fn check() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_resource_exhausted_with_retry_info() -> Result<(), BoxError> {
    let clock = ManualClock::new();
    // The start of a minute: the fixed window runs to 1 020 s.
    clock.set(Nanos::from_secs(960));
    let policy = Policy::from_toml(RULES, clock.clone())?;
    // The default key: the peer's IP, which tonic gives as `TcpConnectInfo`.
    let addr = serve(RateLimitLayer::new(Arc::new(policy)).key(ClientKey::peer_ip())).await?;
    let mut health = client(addr).await?;

    for _ in 0..2 {
        let reply = health.check(check()).await?;
        assert_eq!(reply.get_ref().status(), ServingStatus::Serving);
        // Admitted calls carry the rate-limit fields too (as initial metadata).
        assert!(reply.metadata().get("ratelimit").is_some());
    }
    let status = health
        .check(check())
        .await
        .expect_err("the third call in the minute is denied");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        "rate limit exceeded by rule 'grpc' tier 'grpc'; retry in 60 s"
    );
    let metadata = status.metadata();
    assert_eq!(metadata.get("retry-after").unwrap(), "60");
    let limit = metadata.get("ratelimit").unwrap().to_str()?;
    assert!(limit.starts_with("\"grpc\";r=0;t=60"), "{limit}");
    let policy_field = metadata.get("ratelimit-policy").unwrap().to_str()?;
    assert!(
        policy_field.starts_with("\"grpc\";q=2;w=60"),
        "{policy_field}"
    );
    let retry = status
        .get_details_retry_info()
        .expect("a RetryInfo in grpc-status-details-bin");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(60)));

    // Half a minute on, the fixed window still denies, and says so exactly.
    clock.set(Nanos::from_secs(990));
    let status = health.check(check()).await.expect_err("still denied");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.metadata().get("retry-after").unwrap(), "30");
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(30))
    );

    // The next window admits again, on the same connection.
    clock.set(Nanos::from_secs(1_020));
    assert_eq!(
        health.check(check()).await?.get_ref().status(),
        ServingStatus::Serving
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_a_key_is_invalid_argument() -> Result<(), BoxError> {
    let policy = Policy::from_toml(RULES, ManualClock::new())?;
    let addr =
        serve(RateLimitLayer::new(Arc::new(policy)).key(ClientKey::header("x-api-key")?)).await?;
    let mut health = client(addr).await?;

    let status = health
        .check(check())
        .await
        .expect_err("no x-api-key metadata");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "missing client key: key header");

    let mut keyed = tonic::Request::new(check());
    keyed.metadata_mut().insert("x-api-key", "k1".parse()?);
    assert_eq!(
        health.check(keyed).await?.get_ref().status(),
        ServingStatus::Serving
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_no_limit_can_admit_is_invalid_argument() -> Result<(), BoxError> {
    let policy = Policy::from_toml(RULES, ManualClock::new())?;
    let layer = RateLimitLayer::new(Arc::new(policy))
        .key(ClientKey::peer_ip())
        .cost(|_| 3);
    let addr = serve(layer).await?;
    let status = client(addr)
        .await?
        .check(check())
        .await
        .expect_err("a cost of 3 never fits a limit of 2");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "request cost 3 exceeds the most the limits can admit (2)"
    );
    assert!(status.get_details_retry_info().is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banned_call_is_permission_denied_without_retry() -> Result<(), BoxError> {
    let policy = Policy::from_toml(
        &format!("{RULES}\n[[deny]]\ncidr = \"127.0.0.0/8\"\nreason = \"no loopback callers\"\n"),
        ManualClock::new(),
    )?;
    let addr = serve(RateLimitLayer::new(Arc::new(policy)).key(ClientKey::peer_ip())).await?;
    let mut health = client(addr).await?;
    let status = health.check(check()).await.expect_err("banned");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(
        status.message(),
        "refused by deny list: no loopback callers"
    );
    assert!(status.metadata().get("retry-after").is_none());
    assert!(status.get_details_retry_info().is_none());
    Ok(())
}

/// A certificate for `localhost` and 127.0.0.1 with its key, self-signed, valid from 2000
/// to 2125 (so no host clock falls outside it), for the TLS server (`tests/data`).
const CERT: &str = include_str!("data/localhost.crt");
const KEY: &str = include_str!("data/localhost.key");

/// Over TLS, tonic gives the connection as a `TlsConnectInfo<TcpConnectInfo>` and the
/// `TcpConnectInfo` beside it: the default key reads the peer there, as over TCP (were
/// tonic to give only the TLS form, every call would be `INTERNAL`: no peer address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_peer_key_is_read_too() -> Result<(), BoxError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
    let policy = Policy::from_toml(RULES, ManualClock::new())?;
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(CERT, KEY));
    let layer = RateLimitLayer::new(Arc::new(policy));
    let addr = serve_on(Server::builder().tls_config(tls)?, layer.clone()).await?;
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(CERT))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let mut health = HealthClient::new(channel);
    for _ in 0..2 {
        assert_eq!(
            health.check(check()).await?.get_ref().status(),
            ServingStatus::Serving
        );
    }
    let status = health
        .check(check())
        .await
        .expect_err("the third is denied");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let stats = layer.stats();
    assert_eq!(
        (stats.admitted, stats.denied, stats.no_peer_address),
        (2, 1, 0)
    );
    Ok(())
}

/// A gRPC-Web call (a browser's, or any client of a gRPC-Web proxy) that reaches the layer
/// before anything translates it is answered as gRPC-Web answers a status: HTTP 200 in the
/// call's own content type, the status in the headers, no body. Over real HTTP/1.1 to an
/// axum server, binary and text forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_grpc_web_call_is_a_status_in_its_own_content_type() -> Result<(), BoxError> {
    use axum::{routing::post, Router};
    let policy = Policy::from_toml(RULES, ManualClock::new())?;
    let app = Router::new()
        .route("/grpc.health.v1.Health/Check", post(|| async { "served" }))
        .layer(RateLimitLayer::new(Arc::new(policy)));
    let addr = http_support::serve(app).await?;
    for content_type in [
        "application/grpc-web+proto",
        "application/grpc-web-text+proto",
    ] {
        let call = [("content-type", content_type.as_bytes())];
        let path = "/grpc.health.v1.Health/Check";
        let send = || http_support::send_method(addr, http::Method::POST, path, &call);
        // The rule's two calls are spent once, by the first form: every call of the second
        // is denied.
        if content_type == "application/grpc-web+proto" {
            for _ in 0..2 {
                assert_eq!(send().await?.body, "served");
            }
        }
        let denied = send().await?;
        assert_eq!(denied.status, http::StatusCode::OK, "{denied:?}");
        assert_eq!(denied.header("content-type"), content_type);
        assert_eq!(denied.header("grpc-status"), "8");
        assert_eq!(
            denied.header("grpc-message"),
            "rate limit exceeded by rule 'grpc' tier 'grpc'; retry in 60 s"
        );
        assert_eq!(denied.header("retry-after"), "60");
        assert!(!denied.header("grpc-status-details-bin").is_empty());
        assert!(denied.header("ratelimit").starts_with("\"grpc\";r=0;t=60"));
        assert_eq!(denied.body, "");
    }
    Ok(())
}
