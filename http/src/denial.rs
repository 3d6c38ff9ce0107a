//! [`Denial`]: what a denied request's answer is made from — the decision (every tier,
//! the retry time, or the deny entry or ban that refused it), the rate-limit fields,
//! whether it is a gRPC call — handed to the
//! closure of [`RateLimitLayer::on_denied`](super::RateLimitLayer::on_denied), with the
//! layer's own answer one call away.

use core::fmt;
use core::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Response};
use http_body_util::Full;
use tollgate::policy::{Listing, PolicyDecision};

use super::grpc;
use super::problem::{forbidden, retry_secs, too_many_requests};

/// The closure of [`RateLimitLayer::on_denied`](super::RateLimitLayer::on_denied).
pub(crate) type DeniedFn = dyn Fn(&Denial<'_>) -> Response<Full<Bytes>> + Send + Sync;

/// A denied request, as the closure given to
/// [`RateLimitLayer::on_denied`](super::RateLimitLayer::on_denied) sees it. The response it
/// returns is sent as it is: copy [`headers`](Self::headers) into it to keep
/// `Retry-After` and the rate-limit fields, or start from
/// [`default_response`](Self::default_response).
///
/// ```
/// use std::sync::Arc;
/// use http_body_util::Full;
/// use tollgate_http::RateLimitLayer;
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
///
/// let policy = Arc::new(Policy::from_toml("[[rules]]\nname = \"api\"\nlimit = 10\nwindow = \"1m\"\n", MonotonicClock::new())?);
/// let layer = RateLimitLayer::new(policy).on_denied(|denial| {
///     if denial.is_grpc() {
///         return denial.default_response();
///     }
///     let body = format!("slow down: try again in {} s", denial.retry_after_secs());
///     let mut response = http::Response::new(Full::from(body));
///     *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
///     response.headers_mut().extend(denial.headers().clone());
///     response
/// });
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Denial<'a> {
    decision: &'a PolicyDecision,
    headers: HeaderMap,
    grpc: Option<HeaderValue>,
    client: &'a str,
    endpoint: &'a str,
}

impl fmt::Debug for Denial<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Denial")
            .field("client", &self.client)
            .field("endpoint", &self.endpoint)
            .field("grpc", &self.grpc)
            .field("listing", &self.listing())
            .field("retry_after_secs", &self.retry_after_secs())
            .finish_non_exhaustive()
    }
}

impl<'a> Denial<'a> {
    /// The denial of the request by `client` to `endpoint`, with the rate-limit `fields`
    /// (to which `Retry-After` is added, unless it is a ban: waiting does not end one).
    pub(crate) fn new(
        decision: &'a PolicyDecision,
        mut headers: HeaderMap,
        grpc: Option<HeaderValue>,
        client: &'a str,
        endpoint: &'a str,
    ) -> Denial<'a> {
        if !decision.is_ban() {
            let retry = retry_secs(decision.decision.retry_after);
            headers.insert(RETRY_AFTER, HeaderValue::from(retry));
        }
        Denial {
            decision,
            headers,
            grpc,
            client,
            endpoint,
        }
    }

    /// The policy's decision: every tier's outcome ([`PolicyDecision::denied_by`] for the
    /// ones that denied), the retry time.
    pub fn decision(&self) -> &PolicyDecision {
        self.decision
    }

    /// Whether a deny list entry or a ban refused the request ([`listing`](Self::listing)
    /// says which and why), rather than a limit: waiting will not let it in.
    pub fn is_ban(&self) -> bool {
        self.decision.is_ban()
    }

    /// The deny list entry or ban rule that refused the request, with its reason; `None`
    /// when a limit denied it.
    pub fn listing(&self) -> Option<&Listing> {
        self.decision.listing().filter(|l| !l.admits())
    }

    /// How long until the request could be admitted, exactly (for a ban, never:
    /// [`Nanos::MAX`](tollgate::Nanos::MAX) as a duration).
    pub fn retry_after(&self) -> Duration {
        self.decision.decision.retry_after.as_duration()
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up and never 0: the
    /// `Retry-After` the layer sends.
    pub fn retry_after_secs(&self) -> u64 {
        retry_secs(self.decision.decision.retry_after)
    }

    /// `Retry-After` and the rate-limit fields the layer's own answer carries (in the
    /// configured [`HeaderStyle`](super::HeaderStyle)); none for a ban.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// Whether the request is a gRPC or gRPC-Web call (its client reads only a gRPC status:
    /// see [`default_response`](Self::default_response), which answers in the call's
    /// content type).
    pub fn is_grpc(&self) -> bool {
        self.grpc.is_some()
    }

    /// The client key the request was checked under.
    pub fn client(&self) -> &str {
        self.client
    }

    /// The endpoint the request was checked under.
    pub fn endpoint(&self) -> &str {
        self.endpoint
    }

    /// The layer's own answer: a 429 with an RFC 9457 problem body, or for a gRPC call a
    /// trailers-only `RESOURCE_EXHAUSTED`; both with [`headers`](Self::headers). For a ban,
    /// a 403 with the reason ([`forbidden`](super::forbidden)), or `PERMISSION_DENIED`.
    pub fn default_response(&self) -> Response<Full<Bytes>> {
        let ban = self.decision.is_ban();
        let mut response = match (self.grpc.clone(), ban) {
            (Some(content_type), true) => grpc::permission_denied(content_type, self.decision),
            (Some(content_type), false) => grpc::resource_exhausted(content_type, self.decision),
            (None, true) => forbidden(self.decision),
            (None, false) => too_many_requests(self.decision),
        };
        response.headers_mut().extend(self.headers.clone());
        response
    }
}
