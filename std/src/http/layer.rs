//! [`RateLimitLayer`] and its service [`RateLimit`]: a policy in front of any
//! `tower::Service<http::Request<B>>`.

use core::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tollgate_core::{InsufficientCapacity, Nanos};
use tower_layer::Layer;
use tower_service::Service;

use super::response::{bad_request, cost_too_large, too_many_requests, Fields};
use super::{ClientKey, Endpoint, Head, HeaderStyle, Settle};
use crate::policy::{Delay, PolicyCheck, PolicyDecision};
use crate::sync::plain::{AtomicU64, Ordering};

/// The response body of a [`RateLimit`] service: the inner service's body, or the
/// layer's own problem body (429, 400, 413).
pub type RateLimitBody<B> = Either<B, Full<Bytes>>;

/// The object-safe part of [`PolicyCheck`] the layer needs, so the layer is one type
/// whatever policy (and decorators) it wraps.
trait Check: Send + Sync {
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity>;
    fn refund(&self, client: &str, endpoint: &str, cost: u32);
    fn charge(&self, client: &str, endpoint: &str, cost: u32);
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity>;
}

impl<P: PolicyCheck + Send + Sync> Check for P {
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        PolicyCheck::allow(self, client, endpoint, cost)
    }
    fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        PolicyCheck::refund(self, client, endpoint, cost)
    }
    fn charge(&self, client: &str, endpoint: &str, cost: u32) {
        let request = crate::policy::Request::new(client, endpoint, cost);
        PolicyCheck::charge_at(self, &request, PolicyCheck::now(self))
    }
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        PolicyCheck::peek(self, client, endpoint, cost)
    }
}

/// What to do with a request whose client key is missing or malformed
/// ([`KeyError`](super::KeyError)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBadKey {
    /// Answer 400 with a problem body saying what is wrong (the default).
    #[default]
    Reject,
    /// Count the request against this key instead (e.g. `"anonymous"`, one shared
    /// allowance for every request without a key).
    Fallback(String),
}

/// Counts of what the layer did since it was built (shared by every service it made).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests admitted (including delayed ones).
    pub admitted: u64,
    /// Requests answered 429.
    pub denied: u64,
    /// Admitted requests held for a leaky bucket's delay before being forwarded.
    pub delayed: u64,
    /// Requests a dropped (cancelled) future gave its permits back for.
    pub cancelled: u64,
    /// Admitted requests the shadow rules would have denied.
    pub shadow_denied: u64,
    /// Requests whose client key was missing or malformed (answered 400 or counted
    /// against the fallback key).
    pub bad_key: u64,
    /// Requests answered 413: their cost is more than the limits can ever admit.
    pub too_costly: u64,
    /// Permits given back by settlement (actual cost below the estimate).
    pub refunded: u64,
    /// Permits settlement charged beyond the estimates (actual cost above the estimate),
    /// recorded even past the limits: the work was done, so the client waits the debt out.
    pub charged: u64,
}

#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    denied: AtomicU64,
    delayed: AtomicU64,
    cancelled: AtomicU64,
    shadow_denied: AtomicU64,
    bad_key: AtomicU64,
    too_costly: AtomicU64,
    refunded: AtomicU64,
    charged: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics; nothing is published with them.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LayerStats {
        // Relaxed: statistics, read independently.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LayerStats {
            admitted: get(&self.admitted),
            denied: get(&self.denied),
            delayed: get(&self.delayed),
            cancelled: get(&self.cancelled),
            shadow_denied: get(&self.shadow_denied),
            bad_key: get(&self.bad_key),
            too_costly: get(&self.too_costly),
            refunded: get(&self.refunded),
            charged: get(&self.charged),
        }
    }
}

/// What the policy said about a forwarded request: with
/// [`RateLimitLayer::expose_admission`], inserted into the extensions of every request the
/// layer passes on, so a handler can see it (e.g. to log the delay it waited or show the
/// remaining quota).
///
/// ```
/// use tollgate::http::Admission;
/// async fn handler(request: http::Request<axum::body::Body>) -> String {
///     match request.extensions().get::<Admission>() {
///         Some(a) => format!("{} left, waited {:?}", a.remaining, a.delay.as_duration()),
///         None => "not rate limited".to_owned(),
///     }
/// }
/// # let _ = handler;
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admission {
    /// How long the request was held before being forwarded (leaky-bucket tiers).
    pub delay: Nanos,
    /// The tightest tier's remaining permits.
    pub remaining: u64,
    /// The tightest tier's limit.
    pub limit: u64,
    /// The permits charged (the estimate, when settled).
    pub cost: u32,
    /// Whether a shadow rule would have denied the request.
    pub shadow_denied: bool,
}

type CostFn = dyn Fn(&Head<'_>) -> u32 + Send + Sync;

#[derive(Clone)]
struct Shared {
    policy: Arc<dyn Check>,
    shadow: Option<Arc<dyn Check>>,
    key: ClientKey,
    endpoint: Endpoint,
    on_bad_key: OnBadKey,
    style: HeaderStyle,
    cost: Option<Arc<CostFn>>,
    settle: Option<Settle>,
    admission: bool,
    counters: Arc<Counters>,
}

/// A tower [`Layer`] that checks every request against a policy before the service sees
/// it.
///
/// Per request: the client key ([`ClientKey`], default the peer IP with IPv6 /64) and the
/// endpoint ([`Endpoint`], default axum's route template) are read from the head; the
/// policy is checked for the request's cost (default 1). Then:
///
/// - **admitted**: the service is called, and its response gets the rate-limit fields
///   ([`HeaderStyle`], draft-11 `RateLimit-Policy`/`RateLimit` by default). A leaky-bucket
///   tier's `delay` is waited out first (tokio's timer inside a tokio runtime, which must
///   have its timer enabled, as `#[tokio::main]` and `enable_all` do; tollgate's own
///   [`Delay`] outside one); if the response future is dropped while waiting, the permits
///   are given back (cancel-safe).
/// - **denied**: 429 with `Retry-After` (whole seconds rounded up, never 0), the
///   rate-limit fields and an RFC 9457 `application/problem+json` body naming each
///   violated rule and tier. The service is not called.
/// - **no usable key**: 400 with a problem body, or the [`OnBadKey::Fallback`] key.
/// - **cost beyond what the limits can ever admit**: 413 with a problem body.
///
/// Shadow rules ([`shadow`](Self::shadow)) are checked on admitted requests, reported in
/// the headers and counted, and never deny. Settlement ([`settle`](Self::settle)) turns
/// the up-front cost into an estimate corrected from the response.
///
/// The policy is shared, so [`Policy::reload`](crate::policy::Policy::reload) on the same
/// `Arc` takes effect on the next request.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::http::{ClientKey, RateLimitLayer};
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
///
/// let policy = Arc::new(Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
/// "#, MonotonicClock::new())?);
/// let layer = RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::header("x-api-key")?);
/// let app: axum::Router = axum::Router::new()
///     .route("/users/{id}", axum::routing::get(|| async { "hi" }))
///     .layer(layer);
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("key", &self.shared.key)
            .field("endpoint", &self.shared.endpoint)
            .field("on_bad_key", &self.shared.on_bad_key)
            .field("style", &self.shared.style)
            .field("shadow", &self.shared.shadow.is_some())
            .field("settle", &self.shared.settle)
            .finish()
    }
}

impl RateLimitLayer {
    /// A layer over `policy` (a [`Policy`](crate::policy::Policy), a decorator, or an
    /// `Arc` of one to keep a handle for reloads) with the defaults: peer-IP keys, route
    /// templates, draft-11 headers, 400 on a missing key, cost 1.
    pub fn new<P: PolicyCheck + Send + Sync + 'static>(policy: P) -> RateLimitLayer {
        RateLimitLayer {
            shared: Arc::new(Shared {
                policy: Arc::new(policy),
                shadow: None,
                key: ClientKey::default(),
                endpoint: Endpoint::default(),
                on_bad_key: OnBadKey::default(),
                style: HeaderStyle::default(),
                cost: None,
                settle: None,
                admission: false,
                counters: Arc::default(),
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Shared)) -> RateLimitLayer {
        let shared = Arc::make_mut(&mut self.shared);
        f(shared);
        // A reconfigured layer counts on its own.
        shared.counters = Arc::default();
        self
    }

    /// How the client key is read.
    pub fn key(self, key: ClientKey) -> RateLimitLayer {
        self.with(|s| s.key = key)
    }

    /// How the endpoint is named.
    pub fn endpoint(self, endpoint: Endpoint) -> RateLimitLayer {
        self.with(|s| s.endpoint = endpoint)
    }

    /// What a request without a usable key gets.
    pub fn on_bad_key(self, answer: OnBadKey) -> RateLimitLayer {
        self.with(|s| s.on_bad_key = answer)
    }

    /// Which rate-limit header fields responses carry.
    pub fn headers(self, style: HeaderStyle) -> RateLimitLayer {
        self.with(|s| s.style = style)
    }

    /// Shadow rules: `policy` is checked for every admitted request; its tiers are added
    /// to the headers and its would-be denials counted
    /// ([`LayerStats::shadow_denied`]; wrap it in [`Metered`](crate::policy::Metered)
    /// for counts per rule), but it never denies. See [`ShadowSplit`](super::ShadowSplit)
    /// to take the shadow rules out of one rules file.
    pub fn shadow<P: PolicyCheck + Send + Sync + 'static>(self, policy: P) -> RateLimitLayer {
        self.with(|s| s.shadow = Some(Arc::new(policy)))
    }

    /// The cost of a request, read from its head (an estimate when settled; default 1).
    pub fn cost<F>(self, cost: F) -> RateLimitLayer
    where
        F: Fn(&Head<'_>) -> u32 + Send + Sync + 'static,
    {
        self.with(|s| s.cost = Some(Arc::new(cost)))
    }

    /// Settles each admitted request's cost from its response (see [`Settle`]).
    pub fn settle(self, settle: Settle) -> RateLimitLayer {
        self.with(|s| s.settle = Some(settle))
    }

    /// Inserts an [`Admission`] into the extensions of every forwarded request (off by
    /// default: it costs an allocation per request).
    pub fn expose_admission(self) -> RateLimitLayer {
        self.with(|s| s.admission = true)
    }

    /// What the layer (and every service it made) has done so far.
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around `S`.
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
    /// What the layer that made this service has done so far.
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }
}

/// The permits one admitted request holds: given back if it is never forwarded, settled
/// from its response otherwise.
struct Charge {
    shared: Arc<Shared>,
    client: String,
    endpoint: String,
    cost: u32,
    /// The shadow policy admitted (and so charged) the request too.
    shadow_taken: bool,
}

impl Charge {
    fn refund(&self, cost: u32) {
        self.shared
            .policy
            .refund(&self.client, &self.endpoint, cost);
        if self.shadow_taken {
            if let Some(shadow) = &self.shared.shadow {
                shadow.refund(&self.client, &self.endpoint, cost);
            }
        }
    }

    /// Settles the estimate against `actual`; returns the key's state afterwards (a peek
    /// of nothing), for the response's rate-limit fields.
    fn settle(&self, actual: u32) -> Option<PolicyDecision> {
        let counters = &self.shared.counters;
        if actual < self.cost {
            let back = self.cost - actual;
            self.refund(back);
            Counters::add(&counters.refunded, u64::from(back));
        } else if actual > self.cost {
            // The work is done: the excess is recorded whatever the limits say (the key
            // goes into debt and is denied until it is repaid).
            let extra = actual - self.cost;
            self.shared
                .policy
                .charge(&self.client, &self.endpoint, extra);
            Counters::add(&counters.charged, u64::from(extra));
            if self.shadow_taken {
                if let Some(shadow) = &self.shared.shadow {
                    shadow.charge(&self.client, &self.endpoint, extra);
                }
            }
        }
        self.shared
            .policy
            .peek(&self.client, &self.endpoint, 0)
            .ok()
    }
}

/// A [`Charge`] that gives its permits back when dropped, unless taken out first: held
/// while a delayed request waits, so a cancelled wait leaves nothing consumed.
struct Held(Option<Box<Charge>>);

impl Held {
    fn release(&mut self) -> Option<Box<Charge>> {
        self.0.take()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(charge) = self.0.take() {
            charge.refund(charge.cost);
            Counters::add(&charge.shared.counters.cancelled, 1);
        }
    }
}

type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A delayed request: the sleep, the readied service and the request it will get, and
/// the permits to give back if it never does.
struct Waiting<S, B> {
    sleep: Sleep,
    inner: Option<S>,
    request: Option<Request<B>>,
    held: Held,
}

/// Sleeps `d` on tokio's timer inside a tokio runtime, on tollgate's [`Delay`] thread
/// outside one.
fn sleep(d: Nanos) -> Sleep {
    if tokio::runtime::Handle::try_current().is_ok() {
        Box::pin(tokio::time::sleep(d.as_duration()))
    } else {
        Box::pin(Delay::new(d.as_duration()))
    }
}

pin_project! {
    /// The future of [`RateLimit::call`].
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future>,
        fields: Fields,
        charge: Option<Box<Charge>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F> {
        Answer { response: Option<Response<Full<Bytes>>> },
        // Boxed: only delayed requests pay for the room it takes.
        Waiting { wait: Box<Waiting<S, B>> },
        Calling { #[pin] future: F },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn answer(response: Response<Full<Bytes>>) -> ResponseFuture<S, B> {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
            fields: Fields::default(),
            charge: None,
        }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Output = Result<Response<RateLimitBody<ResBody>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let this = self.as_mut().project();
            match this.state.project() {
                StateProj::Answer { response } => {
                    return match response.take() {
                        Some(r) => Poll::Ready(Ok(r.map(Either::Right))),
                        // Polled after completion.
                        None => Poll::Pending,
                    };
                }
                StateProj::Waiting { wait } => {
                    if wait.sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let (Some(mut service), Some(req)) = (wait.inner.take(), wait.request.take())
                    else {
                        return Poll::Pending;
                    };
                    // Forwarded: the permits are spent from here on (kept for settling).
                    let charge = wait.held.release();
                    let future = service.call(req);
                    let mut this = self.as_mut().project();
                    if this.charge.is_none() {
                        *this.charge = charge.filter(|c| c.shared.settle.is_some());
                    }
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => {
                    let mut response = match future.poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(r)) => r,
                    };
                    let mut fields = std::mem::take(this.fields);
                    if let Some(charge) = this.charge.take() {
                        if let Some(settle) = &charge.shared.settle {
                            if let Some(actual) = settle.actual(&mut response) {
                                // The fields report the settled cost, not the estimate.
                                if let Some(after) = charge.settle(actual) {
                                    fields =
                                        charge.shared.style.fields(&after, &[], &charge.client);
                                }
                            }
                        }
                    }
                    fields.insert_into(response.headers_mut());
                    return Poll::Ready(Ok(response.map(Either::Left)));
                }
            }
        }
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

    fn call(&mut self, mut request: Request<B>) -> ResponseFuture<S, B> {
        let shared = &self.shared;
        let counters = &shared.counters;
        // Everything read from the request borrows it; only what must outlive the call
        // (a charge to refund or settle) is copied out.
        let (fields, charge, delay, admission) = {
            let head = Head::of(&request);
            let client = match shared.key.extract(&head) {
                Ok(key) => key,
                Err(e) => {
                    Counters::add(&counters.bad_key, 1);
                    match &shared.on_bad_key {
                        OnBadKey::Reject => {
                            return ResponseFuture::answer(bad_request(&e.to_string()))
                        }
                        OnBadKey::Fallback(key) => key.as_str().into(),
                    }
                }
            };
            let endpoint = shared.endpoint.extract(&head);
            let cost = shared.cost.as_ref().map_or(1, |f| f(&head));
            let decision = match shared.policy.check(&client, &endpoint, cost) {
                Ok(d) => d,
                Err(e) => {
                    Counters::add(&counters.too_costly, 1);
                    return ResponseFuture::answer(cost_too_large(cost, e.max_cost));
                }
            };
            if !decision.allowed() {
                Counters::add(&counters.denied, 1);
                let mut response = too_many_requests(&decision);
                shared
                    .style
                    .fields(&decision, &[], &client)
                    .insert_into(response.headers_mut());
                return ResponseFuture::answer(response);
            }
            Counters::add(&counters.admitted, 1);
            let shadow = shared
                .shadow
                .as_ref()
                .map(|s| s.check(&client, &endpoint, cost));
            let shadow_taken = matches!(&shadow, Some(Ok(d)) if d.allowed());
            let shadow_denied =
                matches!(&shadow, Some(Ok(d)) if !d.allowed()) || matches!(&shadow, Some(Err(_)));
            if shadow_denied {
                Counters::add(&counters.shadow_denied, 1);
            }
            let shadow_tiers = match &shadow {
                Some(Ok(d)) => d.tiers(),
                _ => &[],
            };
            let fields = shared.style.fields(&decision, shadow_tiers, &client);
            let delay = decision.delay();
            let admission = shared.admission.then(|| Admission {
                delay,
                remaining: decision.remaining(),
                limit: decision.limit(),
                cost,
                shadow_denied,
            });
            let needs_charge = delay > Nanos::ZERO || shared.settle.is_some();
            let charge = needs_charge.then(|| {
                Box::new(Charge {
                    shared: Arc::clone(shared),
                    client: client.into_owned(),
                    endpoint: endpoint.into_owned(),
                    cost,
                    shadow_taken,
                })
            });
            (fields, charge, delay, admission)
        };
        if let Some(admission) = admission {
            request.extensions_mut().insert(admission);
        }
        if delay > Nanos::ZERO {
            Counters::add(&counters.delayed, 1);
            // The readied service waits with the request; this one takes its place.
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            return ResponseFuture {
                state: State::Waiting {
                    wait: Box::new(Waiting {
                        sleep: sleep(delay),
                        inner: Some(ready),
                        request: Some(request),
                        held: Held(charge),
                    }),
                },
                fields,
                charge: None,
            };
        }
        ResponseFuture {
            state: State::Calling {
                future: self.inner.call(request),
            },
            fields,
            charge,
        }
    }
}
