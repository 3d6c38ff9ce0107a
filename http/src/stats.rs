//! [`LayerStats`]: the counts of what a [`RateLimitLayer`](super::RateLimitLayer) did, the
//! shared atomic `Counters` behind them, and the `Outcome`s they count (each also reported
//! as a metric: see [`events`](super::events)).

use tollgate::policy::StripedCounter;

/// Counts of what the layer did since it was built (shared by every service it made).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests admitted (including delayed ones).
    pub admitted: u64,
    /// Requests denied by a limit (a 429, a gRPC `RESOURCE_EXHAUSTED`, or what
    /// [`on_denied`](super::RateLimitLayer::on_denied) answers).
    pub denied: u64,
    /// Requests refused for good (403, or gRPC `PERMISSION_DENIED`): by a deny list entry
    /// or a ban rule (`limit = 0`); not counted in `denied`.
    pub refused: u64,
    /// Admitted requests held for a leaky bucket's delay before being forwarded.
    pub delayed: u64,
    /// Requests dropped before they were forwarded (their client gone, a timeout), whose
    /// permits are given back: while held for their delay (those are also `admitted`), or
    /// while their awaited check was in flight (counted nowhere else; what the check took
    /// is given back once its answer comes).
    pub cancelled: u64,
    /// Admitted requests the shadow rules would have denied.
    pub shadow_denied: u64,
    /// Requests whose client key was missing or malformed (answered 400 or counted
    /// against the fallback key).
    pub bad_key: u64,
    /// Requests refused because their cost is more than the limits can ever admit (a 413,
    /// or a gRPC `INVALID_ARGUMENT`).
    pub too_costly: u64,
    /// Requests answered 500 because the server gave the layer no peer address to key
    /// them by ([`KeyError::NoPeerAddress`](super::KeyError::NoPeerAddress): a wiring
    /// error), not counted in `bad_key`.
    pub no_peer_address: u64,
    /// Requests passed on unchecked ([`RateLimitLayer::skip_method`](super::RateLimitLayer::skip_method),
    /// [`skip_path_prefix`](super::RateLimitLayer::skip_path_prefix)).
    pub skipped: u64,
    /// Permits given back by settlement (actual cost below the estimate).
    pub refunded: u64,
    /// Permits settlement charged beyond the estimates (actual cost above the estimate),
    /// recorded even past the limits: the work was done, so the client waits the debt out.
    pub charged: u64,
    /// Responses whose actual-cost header ([`Settle::from_header`](super::Settle::from_header))
    /// was not a decimal `u32`: their estimate stands.
    pub unreadable_costs: u64,
}

/// The live counts behind [`LayerStats`], one per field, shared by a layer's services.
/// Striped (one padded word per core): a request's count is a write to its own core's
/// cache line, never one every core of a server contends for.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) admitted: StripedCounter,
    pub(super) denied: StripedCounter,
    pub(super) refused: StripedCounter,
    pub(super) delayed: StripedCounter,
    pub(super) cancelled: StripedCounter,
    pub(super) shadow_denied: StripedCounter,
    pub(super) bad_key: StripedCounter,
    pub(super) too_costly: StripedCounter,
    pub(super) no_peer_address: StripedCounter,
    pub(super) skipped: StripedCounter,
    pub(super) refunded: StripedCounter,
    pub(super) charged: StripedCounter,
    pub(super) unreadable_costs: StripedCounter,
}

/// What happened to a request, as counted: one per [`LayerStats`] request count.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Admitted,
    Denied,
    Refused,
    Delayed,
    Cancelled,
    ShadowDenied,
    BadKey,
    TooCostly,
    NoPeerAddress,
    Skipped,
}

impl Outcome {
    /// The `outcome` label of the `tollgate_http_requests_total` metric.
    #[cfg(feature = "metrics")]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Denied => "denied",
            Outcome::Refused => "refused",
            Outcome::Delayed => "delayed",
            Outcome::Cancelled => "cancelled",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::BadKey => "bad_key",
            Outcome::TooCostly => "too_costly",
            Outcome::NoPeerAddress => "no_peer_address",
            Outcome::Skipped => "skipped",
        }
    }
}

impl Counters {
    /// Counts one request's `outcome` (and reports it as a metric).
    #[inline]
    pub(super) fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Admitted => &self.admitted,
            Outcome::Denied => &self.denied,
            Outcome::Refused => &self.refused,
            Outcome::Delayed => &self.delayed,
            Outcome::Cancelled => &self.cancelled,
            Outcome::ShadowDenied => &self.shadow_denied,
            Outcome::BadKey => &self.bad_key,
            Outcome::TooCostly => &self.too_costly,
            Outcome::NoPeerAddress => &self.no_peer_address,
            Outcome::Skipped => &self.skipped,
        };
        super::events::counted(outcome);
        counter.add(1);
    }

    /// The counts now.
    pub(super) fn snapshot(&self) -> LayerStats {
        let get = StripedCounter::get;
        LayerStats {
            admitted: get(&self.admitted),
            denied: get(&self.denied),
            refused: get(&self.refused),
            delayed: get(&self.delayed),
            cancelled: get(&self.cancelled),
            shadow_denied: get(&self.shadow_denied),
            bad_key: get(&self.bad_key),
            too_costly: get(&self.too_costly),
            no_peer_address: get(&self.no_peer_address),
            skipped: get(&self.skipped),
            refunded: get(&self.refunded),
            charged: get(&self.charged),
            unreadable_costs: get(&self.unreadable_costs),
        }
    }
}
