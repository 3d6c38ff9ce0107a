//! [`RateLimitLayer`]: the tower layer putting a policy in front of any
//! `tower::Service<http::Request<B>>`, its builder options ([`OnBadKey`] among them) and
//! the configuration (`Shared`) every service it makes reads.

use core::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::check::{Awaited, Check};
use super::denial::{Denial, DeniedFn};
use super::skip::{PrefixError, Skip};
use super::stats::{Counters, LayerStats};
use super::wiring_log::WiringLog;
use super::{ClientKey, Endpoint, Head, HeaderStyle, RateLimit, Settle};
use bytes::Bytes;
use http::header::HeaderName;
use http::{Method, Response};
use http_body_util::Full;
use tollgate::policy::PolicyCheck;

/// What to do with a request whose client key is missing or malformed
/// ([`KeyError`](super::KeyError)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBadKey {
    /// Answer 400 with a problem body saying what is wrong (the default).
    #[default]
    Reject,
    /// Count the request against this key instead (e.g. `"anonymous"`, one shared
    /// allowance for every request without a key). The operator's own key, used as given:
    /// [`MAX_KEY_LEN`](super::MAX_KEY_LEN) bounds what clients send, not this.
    Fallback(String),
}

/// A request's cost, read from its head.
type CostFn = dyn Fn(&Head<'_>) -> u32 + Send + Sync;

/// What a layer was configured with, shared by every service it made (and every request
/// future of theirs that still needs it).
///
/// Laid out for a request that finds the caches cold, as a busy server's requests do: what
/// every checked request reads comes first, in one cache line of its own (`repr(C)`, aligned
/// to a line, so the `Arc`'s counts sit in the line before), and the rest after it:
///
/// ```text
///  line 0:  policy (16) │ cost (16) │ counters (8) │ awaited, plain, skips (3) │ key …
///  line 1:  … key (the peer-IP source's prefix is in line 0) │ the rest, read only when used
/// ```
///
/// `plain` and `skips` are kept in step by [`RateLimitLayer::with`], the one place a
/// layer's configuration changes.
#[derive(Clone)]
#[repr(C, align(64))]
pub(super) struct Shared {
    /// The policy checked.
    pub(super) policy: Arc<dyn Check>,
    /// `None`: every request costs 1.
    pub(super) cost: Option<Arc<CostFn>>,
    pub(super) counters: Arc<Counters>,
    /// Whether its checks are awaited (its [`Check::awaited`], asked once: not a call per
    /// request).
    pub(super) awaited: bool,
    /// Whether an admitted request without delay is passed on as it came: no fields, no
    /// shadow rules, no admission, no settlement, no exempt header.
    pub(super) plain: bool,
    /// Whether any request is passed on unchecked (`skip` has a method, a prefix, or the
    /// methods the layer limits).
    pub(super) skips: bool,
    pub(super) key: ClientKey,
    /// The requests passed on unchecked.
    pub(super) skip: Skip,
    pub(super) endpoint: Endpoint,
    /// The shadow rules, if any.
    pub(super) shadow: Option<Arc<dyn Check>>,
    /// Whether the shadow rules' tiers are written into responses' rate-limit fields.
    pub(super) shadow_headers: bool,
    pub(super) on_bad_key: OnBadKey,
    /// The answer to a denied request (`None`: the layer's own, a 429 or gRPC status).
    pub(super) on_denied: Option<Arc<DeniedFn>>,
    pub(super) style: HeaderStyle,
    /// The header naming why a request met no limit (`None`: no header).
    pub(super) exempt_header: Option<HeaderName>,
    pub(super) settle: Option<Settle>,
    /// Whether forwarded requests get an [`Admission`](super::Admission) extension.
    pub(super) admission: bool,
    /// The wiring-error events, at most one a minute.
    pub(super) wiring_log: Arc<WiringLog>,
}

impl Shared {
    /// [`plain`](Self::plain) as the configuration says.
    fn is_plain(&self) -> bool {
        matches!(self.style, HeaderStyle::None)
            && self.shadow.is_none()
            && !self.admission
            && self.settle.is_none()
            && self.exempt_header.is_none()
    }
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
///   tier's `delay` is waited out first (on tollgate's own
///   [`Delay`](tollgate::wait::Delay) timer, under any executor and whether or not a
///   tokio runtime has its timer enabled); if the response future is dropped while
///   waiting, the permits are given back (cancel-safe).
/// - **denied**: 429 with `Retry-After` (whole seconds rounded up, never 0), the
///   rate-limit fields and an RFC 9457 `application/problem+json` body naming each
///   violated rule and tier. The service is not called.
/// - **refused** by a deny list entry or a ban (`limit = 0`): 403 with a problem body
///   carrying the rules file's reason, and no `Retry-After` (waiting does not end a ban).
///   The service is not called.
/// - **admitted without limits** (an allow list entry, `unlimited` rules): the service is
///   called, and its response gets no rate-limit field (or the
///   [`exempt_header`](Self::exempt_header) if set).
/// - **no usable key**: 400 with a problem body, or the [`OnBadKey::Fallback`] key.
/// - **no peer address** to key by (the server is not wired to give one:
///   [`KeyError::NoPeerAddress`](super::KeyError::NoPeerAddress)): 500 naming the fix, and a
///   `tracing` error at most once a minute.
/// - **cost beyond what the limits can ever admit**: 413 with a problem body.
/// - **a gRPC call** (`content-type: application/grpc…`): the same answers as gRPC
///   statuses in a trailers-only response (`RESOURCE_EXHAUSTED` with a `RetryInfo`,
///   `PERMISSION_DENIED`, `INVALID_ARGUMENT`, `INTERNAL`).
///
/// Shadow rules ([`shadow`](Self::shadow)) are checked on admitted requests and counted,
/// never deny, and stay out of the headers unless [`shadow_headers`](Self::shadow_headers)
/// asks for them. Settlement ([`settle`](Self::settle)) turns
/// the up-front cost into an estimate corrected from the response.
///
/// The policy is shared, so [`Policy::reload`](tollgate::policy::Policy::reload) on the same
/// `Arc` takes effect on the next request.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_http::{ClientKey, RateLimitLayer};
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
            .field("skip", &self.shared.skip)
            .field("on_denied", &self.shared.on_denied.is_some())
            .field("style", &self.shared.style)
            .field("exempt_header", &self.shared.exempt_header)
            .field("shadow", &self.shared.shadow.is_some())
            .field("settle", &self.shared.settle)
            .finish()
    }
}

impl RateLimitLayer {
    /// A layer over `policy` (a [`Policy`](tollgate::policy::Policy) or a decorator over
    /// one, shared: keep a clone of the `Arc` to reload it) with the defaults: peer-IP
    /// keys, route templates, draft-11 headers, 400 on a missing key, cost 1.
    ///
    /// The layer holds this `Arc` itself, so a check goes straight from the layer's
    /// configuration to the policy (an `Arc` of an `Arc` would put one more pointer, and
    /// from a cold cache one more miss, on every request's path).
    pub fn new<P: PolicyCheck + Send + Sync + 'static>(policy: Arc<P>) -> RateLimitLayer {
        RateLimitLayer::with_check(policy)
    }

    /// A layer over a `policy` whose checks are awaited ([`PolicyCheck::run_async`]: a policy
    /// on a store that waits on the network, such as a `RedisStore`, feature
    /// `redis`, or a decorator over one, shared), with the defaults of
    /// [`new`](Self::new). Each request's check (and
    /// its settlement's refund or charge, and a cancelled request's refund) is awaited in
    /// the response future (a request dropped while its check is in flight has the answer
    /// awaited on a spawned task, and what an admitting one took given back), so a round
    /// trip to Redis holds no worker thread: on a runtime
    /// with one worker, other requests go on while one waits. The rest is as with
    /// [`new`](Self::new); shadow rules ([`shadow`](Self::shadow)) stay synchronous (keep
    /// them in process). On a multi-threaded runtime, build the `RedisStore` with
    /// `RedisStore::on_runtime(.., tokio::runtime::Handle::current())` so that the round
    /// trip stays on the server's runtime.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use tollgate_http::RateLimitLayer;
    /// use tollgate::policy::Policy;
    /// use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};
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
    /// ```
    pub fn awaited<P: PolicyCheck + Send + Sync + 'static>(policy: Arc<P>) -> RateLimitLayer {
        RateLimitLayer::with_check(Arc::new(Awaited(policy)))
    }

    fn with_check(policy: Arc<dyn Check>) -> RateLimitLayer {
        RateLimitLayer {
            shared: Arc::new(Shared {
                awaited: policy.awaited(),
                policy,
                cost: None,
                counters: Arc::default(),
                plain: false,
                skips: false,
                shadow: None,
                shadow_headers: false,
                key: ClientKey::default(),
                endpoint: Endpoint::default(),
                on_bad_key: OnBadKey::default(),
                skip: Skip::default(),
                on_denied: None,
                style: HeaderStyle::default(),
                exempt_header: None,
                settle: None,
                admission: false,
                wiring_log: Arc::new(WiringLog::new()),
            }),
        }
        .with(|_| ())
    }

    /// The layer reconfigured by `f`: the one place its configuration changes.
    fn with(mut self, f: impl FnOnce(&mut Shared)) -> RateLimitLayer {
        let shared = Arc::make_mut(&mut self.shared);
        f(shared);
        shared.plain = shared.is_plain();
        shared.skips = !shared.skip.is_empty();
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

    /// Answers denied requests with `answer`'s response instead of the layer's own (a 429
    /// with a problem body, or a gRPC `RESOURCE_EXHAUSTED`): it gets the [`Denial`] — the
    /// decision, the retry time, the rate-limit fields, whether the call is gRPC — and
    /// its response is sent as it is ([`Denial::default_response`] is the layer's own).
    /// Requests without a usable key are answered as [`on_bad_key`](Self::on_bad_key) says.
    pub fn on_denied<F>(self, answer: F) -> RateLimitLayer
    where
        F: Fn(&Denial<'_>) -> Response<Full<Bytes>> + Send + Sync + 'static,
    {
        self.with(|s| s.on_denied = Some(Arc::new(answer)))
    }

    /// Passes requests with `method` on unchecked: no key is read, nothing is charged, no
    /// rate-limit field is added ([`LayerStats::skipped`] counts them). For CORS
    /// preflights, `skip_method(Method::OPTIONS)`: a browser's preflight then gets the
    /// CORS layer's answer, never a 429 without CORS headers.
    pub fn skip_method(self, method: Method) -> RateLimitLayer {
        self.with(|s| s.skip.method(method))
    }

    /// Checks only requests whose method is one of `methods` (with those of earlier calls):
    /// requests of every other method pass unchecked, as
    /// [`skip_method`](Self::skip_method)'s do (an empty list checks none).
    /// `tower_governor`'s `.methods(..)`. A method both limited and skipped is skipped.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::Method;
    /// use tollgate::{policy::Policy, MonotonicClock};
    /// use tollgate_http::RateLimitLayer;
    /// let policy = Policy::from_toml(
    ///     "[[rules]]\nname = \"writes\"\nlimit = 10\nwindow = \"1s\"\n",
    ///     MonotonicClock::new(),
    /// )?;
    /// // Writes are limited; GET, HEAD, OPTIONS and the rest pass.
    /// let layer = RateLimitLayer::new(Arc::new(policy))
    ///     .limit_methods([Method::POST, Method::PUT, Method::PATCH, Method::DELETE]);
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit_methods(self, methods: impl IntoIterator<Item = Method>) -> RateLimitLayer {
        self.with(|s| s.skip.only_methods(methods))
    }

    /// Passes requests whose path is `prefix` or below it on unchecked, as
    /// [`skip_method`](Self::skip_method) does. A prefix matches whole segments: `/health`
    /// matches `/health` and `/health/live`, not `/healthz`; one ending in `/` matches
    /// every path below it. The path is the request's own (not a route template).
    ///
    /// # Errors
    ///
    /// [`PrefixError`] for a prefix no path can match (one not starting with `/`, or
    /// holding `?` or `#`) or one written as a route template (a `*` or a `{param}`).
    pub fn skip_path_prefix(self, prefix: &str) -> Result<RateLimitLayer, PrefixError> {
        let mut skip = self.shared.skip.clone();
        skip.prefix(prefix)?;
        Ok(self.with(|s| s.skip = skip))
    }

    /// Which rate-limit header fields responses carry.
    pub fn headers(self, style: HeaderStyle) -> RateLimitLayer {
        self.with(|s| s.style = style)
    }

    /// A header for requests admitted without any limit — by an allow list entry, or by
    /// `unlimited` rules only — which otherwise carry no rate-limit field (there is no
    /// quota to state): `name: allow` or `name: unlimited`. Off by default (such a
    /// request's response is the service's own); for clients or tools that need to tell
    /// "not limited" from "no rate limiter".
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::header::HeaderName;
    /// use tollgate_http::RateLimitLayer;
    /// use tollgate::policy::Policy;
    /// use tollgate::MonotonicClock;
    /// let policy = Arc::new(Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 100
    ///     window = "1m"
    ///     [[allow]]
    ///     cidr = "10.0.0.0/8"
    /// "#, MonotonicClock::new())?);
    /// let layer = RateLimitLayer::new(policy)
    ///     .exempt_header(HeaderName::from_static("ratelimit-exempt"));
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exempt_header(self, name: HeaderName) -> RateLimitLayer {
        self.with(|s| s.exempt_header = Some(name))
    }

    /// Shadow rules: `policy` is checked for every admitted request and its would-be
    /// denials counted ([`LayerStats::shadow_denied`]; per rule, with the `metrics`
    /// feature, as `tollgate_http_rule_decisions_total{mode="shadow"}`), but it never denies,
    /// and its tiers stay out of the responses' rate-limit fields (a client that paces
    /// itself on `RateLimit` would otherwise back off for a rule nobody enforces) unless
    /// [`shadow_headers`](Self::shadow_headers) asks for them. See
    /// [`ShadowSplit`](super::ShadowSplit) to take the shadow rules out of one rules file.
    pub fn shadow<P: PolicyCheck + Send + Sync + 'static>(self, policy: Arc<P>) -> RateLimitLayer {
        self.with(|s| s.shadow = Some(policy))
    }

    /// Whether the [`shadow`](Self::shadow) rules' tiers are added to the rate-limit
    /// fields of admitted responses (default `false`: clients never see a rule that is not
    /// enforced). For trying a rule out with clients that know it is a trial.
    pub fn shadow_headers(self, shown: bool) -> RateLimitLayer {
        self.with(|s| s.shadow_headers = shown)
    }

    /// The cost of a request, read from its head (an estimate when settled; default 1).
    /// A cost of 0 takes no permit: the request is admitted unless its key is past its
    /// limit (in debt after a [`settle`](Self::settle) charged more than it had), and its
    /// fields report the key's state, as a peek does.
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

    /// Inserts an [`Admission`](super::Admission) into the extensions of every forwarded
    /// request (off by default: it costs an allocation per request).
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
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}
