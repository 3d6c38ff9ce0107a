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
    /// Whether the layer awaits this policy's answers (its store makes remote calls)
    /// rather than taking them from the methods above.
    fn awaited(&self) -> bool {
        false
    }
    /// The operation, as a future owning what it needs. The default runs the synchronous
    /// method and returns its answer ready (a shadow or in-process policy next to an
    /// awaited one).
    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        let answer = match op {
            Op::Check => Some(self.check(&client, &endpoint, cost)),
            Op::Peek => Some(self.peek(&client, &endpoint, cost)),
            Op::Refund => {
                self.refund(&client, &endpoint, cost);
                None
            }
            Op::Charge => {
                self.charge(&client, &endpoint, cost);
                None
            }
        };
        Box::pin(std::future::ready(answer))
    }
}

/// A policy operation the layer runs (see [`Check::run`]).
#[derive(Copy, Clone, Debug)]
enum Op {
    Check,
    Peek,
    Refund,
    Charge,
}

/// The answer of an awaited operation: the decision of a check or peek, `None` for a
/// refund or charge.
type Answer =
    Pin<Box<dyn Future<Output = Option<Result<PolicyDecision, InsufficientCapacity>>> + Send>>;

/// A policy whose checks are awaited ([`PolicyCheck::run_async`]): see
/// [`RateLimitLayer::awaited`].
struct Awaited<P>(P);

impl<P: PolicyCheck + Send + Sync + 'static> Check for Awaited<P> {
    // The blocking forms, for completeness: the layer runs this policy through `run`.
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Check::check(&self.0, client, endpoint, cost)
    }
    fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        Check::refund(&self.0, client, endpoint, cost)
    }
    fn charge(&self, client: &str, endpoint: &str, cost: u32) {
        Check::charge(&self.0, client, endpoint, cost)
    }
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Check::peek(&self.0, client, endpoint, cost)
    }
    fn awaited(&self) -> bool {
        true
    }
    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        Box::pin(async move {
            let policy = &self.0;
            let request = crate::policy::Request::new(&client, &endpoint, cost);
            let now = policy.now();
            match op {
                Op::Check => Some(policy.check_at_async(&request, now).await),
                Op::Peek => Some(policy.peek_at_async(&request, now).await),
                Op::Refund => {
                    policy.refund_at_async(&request, now).await;
                    None
                }
                Op::Charge => {
                    policy.charge_at_async(&request, now).await;
                    None
                }
            }
        })
    }
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
        RateLimitLayer::with_check(Arc::new(policy))
    }

    /// A layer over a `policy` whose checks are awaited ([`PolicyCheck::run_async`]: a policy
    /// on a store that waits on the network, such as a `RedisStore`, feature
    /// `redis`, a decorator over one, or an `Arc` of either), with the defaults of
    /// [`new`](Self::new). Each request's check (and
    /// its settlement's refund or charge, and a cancelled request's refund) is awaited in
    /// the response future, so a round trip to Redis holds no worker thread: on a runtime
    /// with one worker, other requests go on while one waits. The rest is as with
    /// [`new`](Self::new); shadow rules ([`shadow`](Self::shadow)) stay synchronous (keep
    /// them in process). On a multi-threaded runtime, build the `RedisStore` with
    /// `RedisStore::on_runtime(.., tokio::runtime::Handle::current())` so that the round
    /// trip stays on the server's runtime.
    ///
    /// ```no_run
    /// # #[cfg(feature = "redis")]
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use tollgate::http::RateLimitLayer;
    /// use tollgate::policy::Policy;
    /// use tollgate::redis::{RedisConfig, RedisStore, RedisTarget};
    /// use tollgate::MonotonicClock;
    ///
    /// let store = RedisStore::new(
    ///     RedisTarget::Single("redis://127.0.0.1:6379".into()),
    ///     RedisConfig::new("api")?,
    /// )?;
    /// let policy = Arc::new(Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 100
    ///     window = "1m"
    /// "#, MonotonicClock::new())?.store(store));
    /// let layer = RateLimitLayer::awaited(Arc::clone(&policy));
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/", axum::routing::get(|| async { "hi" }))
    ///     .layer(layer);
    /// # let _ = app;
    /// # Ok(())
    /// # }
    /// # #[cfg(not(feature = "redis"))]
    /// # fn main() {}
    /// ```
    pub fn awaited<P: PolicyCheck + Send + Sync + 'static>(policy: P) -> RateLimitLayer {
        RateLimitLayer::with_check(Arc::new(Awaited(policy)))
    }

    fn with_check(policy: Arc<dyn Check>) -> RateLimitLayer {
        RateLimitLayer {
            shared: Arc::new(Shared {
                policy,
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

impl Charge {
    /// Runs `op` for `n` permits on the policy, and on the shadow policy if it took the
    /// request too, each awaited.
    async fn run_awaited(&self, op: Op, n: u32) {
        let run = |check: &Arc<dyn Check>| {
            Arc::clone(check).run(op, self.client.clone(), self.endpoint.clone(), n)
        };
        run(&self.shared.policy).await;
        if let (true, Some(shadow)) = (self.shadow_taken, &self.shared.shadow) {
            run(shadow).await;
        }
    }

    /// [`settle`](Self::settle) on a policy whose store is awaited: the refund or charge,
    /// then the peek, each awaited; the rate-limit fields of the state afterwards.
    async fn settle_awaited(self: Box<Self>, actual: u32) -> Option<Fields> {
        let counters = &self.shared.counters;
        let (op, n) = if actual < self.cost {
            Counters::add(&counters.refunded, u64::from(self.cost - actual));
            (Op::Refund, self.cost - actual)
        } else {
            // Recorded whatever the limits say, as in `settle`.
            Counters::add(&counters.charged, u64::from(actual - self.cost));
            (Op::Charge, actual - self.cost)
        };
        if n > 0 {
            self.run_awaited(op, n).await;
        }
        let after = Arc::clone(&self.shared.policy)
            .run(Op::Peek, self.client.clone(), self.endpoint.clone(), 0)
            .await?
            .ok()?;
        Some(self.shared.style.fields(&after, &[], &self.client))
    }

    /// Gives the whole charge back: awaited on a spawned task when the policy's store is
    /// awaited and a tokio runtime is at hand (a drop cannot wait), else here.
    fn give_back(self: Box<Self>) {
        Counters::add(&self.shared.counters.cancelled, 1);
        if self.shared.policy.awaited() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { self.run_awaited(Op::Refund, self.cost).await });
                return;
            }
        }
        self.refund(self.cost);
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
            charge.give_back();
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

/// What an admitted request carries on with: its rate-limit fields, the permits to give
/// back or settle, the delay to wait out first, the admission to expose.
struct Admitted {
    fields: Fields,
    charge: Option<Box<Charge>>,
    delay: Nanos,
    admission: Option<Admission>,
}

/// What the layer does with a request once the policy decided.
enum Verdict {
    /// Pass it on (see [`forward`]).
    Forward(Admitted),
    /// Answer it without calling the service.
    Answer(Response<Full<Bytes>>),
}

/// The layer's verdict on the policy's `decision` for a request: the response that ends it
/// (denied: 429; a cost beyond the limits: 413), or, once the shadow rules are checked,
/// what the admitted request carries on with.
fn admit(
    shared: &Arc<Shared>,
    decision: Result<PolicyDecision, InsufficientCapacity>,
    client: &str,
    endpoint: &str,
    cost: u32,
) -> Verdict {
    let counters = &shared.counters;
    let decision = match decision {
        Ok(d) => d,
        Err(e) => {
            Counters::add(&counters.too_costly, 1);
            return Verdict::Answer(cost_too_large(cost, e.max_cost));
        }
    };
    if !decision.allowed() {
        Counters::add(&counters.denied, 1);
        let mut response = too_many_requests(&decision);
        shared
            .style
            .fields(&decision, &[], client)
            .insert_into(response.headers_mut());
        return Verdict::Answer(response);
    }
    Counters::add(&counters.admitted, 1);
    let shadow = shared
        .shadow
        .as_ref()
        .map(|s| s.check(client, endpoint, cost));
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
    let fields = shared.style.fields(&decision, shadow_tiers, client);
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
            client: client.to_owned(),
            endpoint: endpoint.to_owned(),
            cost,
            shadow_taken,
        })
    });
    Verdict::Forward(Admitted {
        fields,
        charge,
        delay,
        admission,
    })
}

/// Passes an admitted request on to the readied service `inner`: at once, or after its
/// delay (then a clone of `inner` takes the readied one's place).
fn forward<S, B>(
    shared: &Shared,
    admitted: Admitted,
    mut request: Request<B>,
    inner: &mut S,
) -> ResponseFuture<S, B>
where
    S: Service<Request<B>> + Clone,
{
    let Admitted {
        fields,
        charge,
        delay,
        admission,
    } = admitted;
    if let Some(admission) = admission {
        request.extensions_mut().insert(admission);
    }
    if delay > Nanos::ZERO {
        Counters::add(&shared.counters.delayed, 1);
        // The readied service waits with the request; a clone takes its place.
        let clone = inner.clone();
        let ready = std::mem::replace(inner, clone);
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
            future: inner.call(request),
        },
        fields,
        charge,
    }
}

/// A request whose check is awaited (see [`RateLimitLayer::awaited`]): the answer to come,
/// the readied service and the request it will get, and the key the answer is for.
struct Deciding<S, B> {
    answer: Answer,
    shared: Arc<Shared>,
    inner: Option<S>,
    request: Option<Request<B>>,
    client: String,
    endpoint: String,
    cost: u32,
}

/// The rate-limit fields after an awaited settlement (`None`: keep the admission's).
type Settled = Pin<Box<dyn Future<Output = Option<Fields>> + Send>>;

pin_project! {
    /// The future of [`RateLimit::call`].
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future, S::Response>,
        fields: Fields,
        charge: Option<Box<Charge>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F, R> {
        Answer { response: Option<Response<Full<Bytes>>> },
        // Boxed: only awaited checks pay for the room it takes.
        Deciding { deciding: Box<Deciding<S, B>> },
        // Boxed: only delayed requests pay for the room it takes.
        Waiting { wait: Box<Waiting<S, B>> },
        Calling { #[pin] future: F },
        // An awaited settlement, with the response it completes.
        Settling { settled: Settled, response: Option<R> },
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
    S: Service<Request<B>, Response = Response<ResBody>> + Clone,
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
                StateProj::Deciding { deciding } => {
                    let Poll::Ready(answer) = deciding.answer.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    let (Some(mut service), Some(request)) =
                        (deciding.inner.take(), deciding.request.take())
                    else {
                        // Polled after completion.
                        return Poll::Pending;
                    };
                    // A check always answers with a decision.
                    let decision = answer.unwrap_or(Err(InsufficientCapacity { max_cost: 0 }));
                    let shared = Arc::clone(&deciding.shared);
                    let next = match admit(
                        &shared,
                        decision,
                        &deciding.client,
                        &deciding.endpoint,
                        deciding.cost,
                    ) {
                        Verdict::Forward(admitted) => {
                            forward(&shared, admitted, request, &mut service)
                        }
                        Verdict::Answer(response) => ResponseFuture::answer(response),
                    };
                    self.set(next);
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
                    if let Some(charge) = this.charge.take() {
                        if let Some(settle) = &charge.shared.settle {
                            if let Some(actual) = settle.actual(&mut response) {
                                // The fields report the settled cost, not the estimate.
                                if charge.shared.policy.awaited() {
                                    let settled = Box::pin(charge.settle_awaited(actual));
                                    self.as_mut().project().state.set(State::Settling {
                                        settled,
                                        response: Some(response),
                                    });
                                    continue;
                                }
                                if let Some(after) = charge.settle(actual) {
                                    *this.fields =
                                        charge.shared.style.fields(&after, &[], &charge.client);
                                }
                            }
                        }
                    }
                    let fields = std::mem::take(this.fields);
                    fields.insert_into(response.headers_mut());
                    return Poll::Ready(Ok(response.map(Either::Left)));
                }
                StateProj::Settling { settled, response } => {
                    let Poll::Ready(after) = settled.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    let Some(mut response) = response.take() else {
                        // Polled after completion.
                        return Poll::Pending;
                    };
                    let fields = after.unwrap_or_else(|| std::mem::take(this.fields));
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

    fn call(&mut self, request: Request<B>) -> ResponseFuture<S, B> {
        let shared = &self.shared;
        // Everything read from the request borrows it; only what must outlive the call
        // (a charge to refund or settle, or an awaited check's key) is copied out.
        let admitted = {
            let head = Head::of(&request);
            let client = match shared.key.extract(&head) {
                Ok(key) => key,
                Err(e) => {
                    Counters::add(&shared.counters.bad_key, 1);
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
            if shared.policy.awaited() {
                // The check is awaited in the response future, with the readied service
                // and the request; this service takes the readied one's place.
                let (client, endpoint) = (client.into_owned(), endpoint.into_owned());
                let answer = Arc::clone(&shared.policy).run(
                    Op::Check,
                    client.clone(),
                    endpoint.clone(),
                    cost,
                );
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                return ResponseFuture {
                    state: State::Deciding {
                        deciding: Box::new(Deciding {
                            answer,
                            shared: Arc::clone(shared),
                            inner: Some(ready),
                            request: Some(request),
                            client,
                            endpoint,
                            cost,
                        }),
                    },
                    fields: Fields::default(),
                    charge: None,
                };
            }
            let decision = shared.policy.check(&client, &endpoint, cost);
            match admit(shared, decision, &client, &endpoint, cost) {
                Verdict::Forward(admitted) => admitted,
                Verdict::Answer(response) => return ResponseFuture::answer(response),
            }
        };
        forward(shared, admitted, request, &mut self.inner)
    }
}
