//! # tollgate-http
//!
//! A tower [`Layer`](tower_layer::Layer) that puts a tollgate
//! [`Policy`](tollgate::policy::Policy) in front of any `tower::Service<http::Request<B>>` —
//! axum routers and plain hyper services (both tested end to end), or any other tower HTTP
//! stack, tonic's gRPC services among them: a gRPC call is refused with a gRPC status
//! (`RESOURCE_EXHAUSTED` with a `RetryInfo` when denied), not an HTTP error its client
//! could not read.
//!
//! - [`RateLimitLayer`] / [`RateLimit`]: check, then forward (after a leaky bucket's delay,
//!   cancel-safe) or answer 429 with `Retry-After` and an RFC 9457 problem body; a request
//!   a deny list entry or a ban refuses gets 403 with the rules file's reason. A policy
//!   on a store that answers over the network (`tollgate-redis`) goes behind
//!   [`RateLimitLayer::awaited`], which awaits the check in the response future.
//! - Who: [`ClientKey`] — the peer IP grouped by [`IpPrefix`] (IPv6 /64 by default), a
//!   header such as an API key, `X-Forwarded-For` behind [`TrustedProxies`] only, or a
//!   closure; a missing or malformed key gets [`OnBadKey`] (400 or a fallback key).
//! - Where: [`Endpoint`] — axum's route template (`MatchedPath`), so `/users/42` and
//!   `/users/43` share a rule; or a custom mapping, the raw path, a constant.
//! - Headers: [`HeaderStyle`] — `RateLimit-Policy` / `RateLimit` (which draft, and the
//!   default, are on its page), legacy `X-RateLimit-*`, or none.
//! - Shadow rules ([`ShadowSplit`], [`RateLimitLayer::shadow`]): checked, counted and
//!   reported, never blocking.
//! - Reservations ([`Settle`], [`TokensUsed`]): charge an estimate, settle from the
//!   response.
//! - gRPC: a call with `content-type: application/grpc…` is refused the gRPC way, with a
//!   trailers-only answer: `grpc-status` 8 (`RESOURCE_EXHAUSTED`) with `retry-after`, the
//!   rate-limit fields and a `google.rpc.RetryInfo` when denied; 7 (`PERMISSION_DENIED`)
//!   with the reason when refused by a deny entry or a ban; 3 (`INVALID_ARGUMENT`) for a
//!   missing key or a cost no limit can admit; a gRPC-Web call gets the same status in its
//!   own content type. With the `tonic` feature the peer key reads tonic's
//!   `TcpConnectInfo`.
//! - The service's own answers: [`RateLimitLayer::on_denied`] (from a [`Denial`]);
//!   requests skipped by method or path prefix ([`RateLimitLayer::skip_method`],
//!   [`RateLimitLayer::skip_path_prefix`]), or by every method but those limited
//!   ([`RateLimitLayer::limit_methods`]).
//! - Observability: `tracing` events (feature `tracing`, default) and `metrics` counters
//!   (feature `metrics`) of every outcome and each rule's decisions; [`LayerStats`].
//!
//! Features: `tracing` (default), `metrics`, `tonic` (the peer key also reads tonic's
//! `TcpConnectInfo`). Whole programs for axum, hyper and tonic are in the crate's
//! `examples/`; the guide is the repository's `docs/http.md`.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use tollgate_http::{ClientKey, RateLimitLayer};
//! use tollgate::policy::Policy;
//! use tollgate::MonotonicClock;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Arc::new(Policy::from_toml(r#"
//!     [[rules]]                    # every client: 100 per minute
//!     name = "default"
//!     limit = 100
//!     window = "1m"
//!
//!     [[rules]]                    # and 10 per minute per client on any user
//!     name = "users"
//!     endpoint = "/users/{id}"
//!     limit = 10
//!     window = "1m"
//! "#, MonotonicClock::new())?);
//! let app = Router::new()
//!     .route("/users/{id}", get(|| async { "user" }))
//!     .layer(RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::peer_ip()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let server =
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>());
//! // .await? — and `policy.reload_toml(..)` whenever the rules file changes.
//! # drop(server); Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admit;
mod charge;
mod check;
mod client_key;
mod denial;
mod endpoint;
mod error;
mod events;
mod future;
mod grpc;
mod head;
mod header_style;
mod ip;
mod key_text;
mod layer;
mod problem;
mod proxies;
mod service;
mod settle;
mod shadow;
mod skip;
mod stats;
mod wiring_log;

pub use admit::Admission;
pub use client_key::{ClientKey, MAX_KEY_LEN};
pub use denial::Denial;
pub use endpoint::Endpoint;
pub use error::KeyError;
pub use future::ResponseFuture;
pub use head::Head;
pub use header_style::HeaderStyle;
pub use ip::{Cidr, CidrError, IpPrefix};
pub use key_text::KeyText;
pub use layer::{OnBadKey, RateLimitLayer};
pub use problem::{forbidden, too_many_requests};
pub use proxies::{ForwardedForError, TrustedProxies};
pub use service::{RateLimit, RateLimitBody};
pub use settle::{Settle, TokensUsed};
pub use shadow::ShadowSplit;
pub use skip::PrefixError;
pub use stats::LayerStats;

/// The Rust blocks of the guides in `docs/`, compiled and run as doctests. They live in this
/// crate, the one above every other they show (`tollgate`, `tollgate-http`,
/// `tollgate-redis`). Each is a whole program with no hidden lines, so a reader sees all of
/// it; a block marked with a file (`<!-- file: … -->`, as in README) is `rust,ignore` here
/// and is that file byte for byte (`scripts/check-docs.py`), run as an example instead.
#[cfg(doctest)]
pub mod guides {
    #[doc = include_str!("../../docs/limiters.md")]
    pub struct Limiters;
    #[doc = include_str!("../../docs/rules.md")]
    pub struct Rules;
    #[doc = include_str!("../../docs/redis.md")]
    pub struct Redis;
    #[doc = include_str!("../../docs/http.md")]
    pub struct Http;
    #[doc = include_str!("../../docs/embedded.md")]
    pub struct Embedded;
    #[doc = include_str!("../../docs/algorithms.md")]
    pub struct Algorithms;
    #[doc = include_str!("../../docs/operations.md")]
    pub struct Operations;
}
