//! [`RateLimit`]: the service [`RateLimitLayer`](super::RateLimitLayer) wraps around an
//! inner service — reads the key, endpoint and cost from each request's head, checks the
//! policy, and answers or forwards.

use core::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use tower_service::Service;

use super::admit::{admit, Verdict};
use super::endpoint::Named;
use super::error::KeyError;
use super::events;
use super::future::{Deciding, ResponseFuture};
use super::grpc;
use super::layer::{OnBadKey, Shared};
use super::problem::{bad_request, server_error};
use super::stats::{LayerStats, Outcome};
use super::{Head, KeyText};
use tollgate::policy::{Op, PolicyDecision};

/// The response body of a [`RateLimit`] service: the inner service's body, or the layer's
/// own answer's (a problem body: 429, 403, 400, 413, 500; empty for a gRPC call's
/// trailers-only status; or what an [`on_denied`](super::RateLimitLayer::on_denied)
/// closure wrote).
pub type RateLimitBody<B> = Either<B, Full<Bytes>>;

/// The service [`RateLimitLayer`](super::RateLimitLayer) wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> RateLimit<S> {
    /// `inner` behind the layer configured as `shared`.
    pub(super) fn new(inner: S, shared: Arc<Shared>) -> RateLimit<S> {
        RateLimit { inner, shared }
    }

    /// What the layer that made this service has done so far.
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }
}

/// The future of an awaited check of `cost` permits of `client` on `endpoint` (see
/// [`RateLimitLayer::awaited`](super::RateLimitLayer::awaited)), started at `timer`: the
/// check runs in it, with the readied service `inner` and the request; a clone of the
/// service takes the readied one's place. Out of line: an in-process check's path stays
/// compact.
#[inline(never)]
fn awaited<S: Service<Request<B>> + Clone, B>(
    inner: &mut S,
    shared: &Arc<Shared>,
    request: Request<B>,
    client: String,
    endpoint: String,
    cost: u32,
    timer: events::CheckTimer,
) -> ResponseFuture<S, B> {
    let answer = Arc::clone(&shared.policy).run(Op::Check, client.clone(), endpoint.clone(), cost);
    let clone = inner.clone();
    let ready = std::mem::replace(inner, clone);
    ResponseFuture::deciding(Deciding {
        answer,
        shared: Arc::clone(shared),
        inner: Some(ready),
        request: Some(request),
        client,
        endpoint,
        cost,
        timer,
    })
}

/// The answer to a request without a peer address: the server's wiring, not the client's
/// doing — a 500 (gRPC `INTERNAL`), counted, and the operator told how to fix it.
#[cold]
#[inline(never)]
fn no_peer_address(shared: &Shared, headers: &http::HeaderMap) -> Response<Full<Bytes>> {
    shared.counters.count(Outcome::NoPeerAddress);
    let total = shared.counters.no_peer_address.get();
    shared.wiring_log.no_peer_address(total);
    let detail = KeyError::NoPeerAddress.to_string();
    if let Some(content_type) = grpc::answer_type(headers) {
        grpc::refusal(content_type, grpc::Code::Internal, &detail, None)
    } else {
        server_error(&detail)
    }
}

/// Counts and tells of a request whose key could not be read (`e`).
#[cold]
#[inline(never)]
fn count_bad_key(shared: &Shared, e: &KeyError) {
    shared.counters.count(Outcome::BadKey);
    events::bad_key(e);
}

/// The answer to a request whose key could not be read (`e`), refused: a 400 (gRPC
/// `INVALID_ARGUMENT`), counted.
#[cold]
#[inline(never)]
fn bad_key(shared: &Shared, headers: &http::HeaderMap, e: &KeyError) -> Response<Full<Bytes>> {
    count_bad_key(shared, e);
    if let Some(content_type) = grpc::answer_type(headers) {
        grpc::refusal(
            content_type,
            grpc::Code::InvalidArgument,
            &e.to_string(),
            None,
        )
    } else {
        bad_request(&e.to_string())
    }
}

impl<S, B, ResBody> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> ResponseFuture<S, B> {
        let shared = &self.shared;
        // Everything read from the request borrows it; only what must outlive the call
        // (a charge to refund or settle, or an awaited check's key) is copied out.
        let verdict = {
            let head = Head::of(&request);
            if shared.skips && shared.skip.matches(&head) {
                shared.counters.count(Outcome::Skipped);
                return ResponseFuture::pass(request, &mut self.inner);
            }
            // The key is borrowed where it was written, never moved: a copy of a key just
            // written byte by byte reads it back in words that straddle those writes, and
            // stalls on each.
            let extracted = shared.key.extract(&head);
            let fallback;
            let client = match &extracted {
                Ok(key) => key,
                Err(KeyError::NoPeerAddress) => {
                    return ResponseFuture::answer(no_peer_address(shared, head.headers));
                }
                Err(e) => match &shared.on_bad_key {
                    OnBadKey::Reject => {
                        return ResponseFuture::answer(bad_key(shared, head.headers, e));
                    }
                    OnBadKey::Fallback(key) => {
                        count_bad_key(shared, e);
                        fallback = KeyText::borrowed(key.as_str());
                        &fallback
                    }
                },
            };
            // Named only where it is read (see `Named`).
            let endpoint = Named::new(shared, &head);
            let cost = shared.cost.as_ref().map_or(1, |f| f(&head));
            let timer = events::CheckTimer::start();
            if shared.awaited {
                let (client, endpoint) = (client.as_str().to_owned(), endpoint.into_owned());
                return awaited(
                    &mut self.inner,
                    shared,
                    request,
                    client,
                    endpoint,
                    cost,
                    timer,
                );
            }
            // The request's one decision, written in place (never moved).
            let mut decision = PolicyDecision::empty();
            let endpoint = || endpoint.get();
            let checked = shared
                .policy
                .check_now(client, &endpoint, cost, &mut decision)
                .map(|()| &decision);
            timer.checked();
            admit(shared, head.headers, checked, client, &endpoint, cost)
        };
        match verdict {
            Verdict::Forward(admitted) => {
                ResponseFuture::forward(shared, admitted, request, &mut self.inner)
            }
            Verdict::Answer(response) => ResponseFuture::answer(response),
            Verdict::Pass => ResponseFuture::pass(request, &mut self.inner),
        }
    }
}
