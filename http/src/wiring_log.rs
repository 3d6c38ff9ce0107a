//! `WiringLog`: the events of a server wired so that the layer cannot do its job — no
//! peer address to key requests by, or route-template rules on a layer that names requests
//! by their raw path — each logged at most once a minute (their rows in `events.rs`'s
//! table).

#[cfg(feature = "tracing")]
use std::cell::Cell;
#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicBool, Ordering};

use tollgate::{Gcra, RateLimiter};

use super::check::Check;
#[cfg(doc)]
use super::error::KeyError;

/// At most one wiring-error event per minute of each kind, a burst of one: the first
/// request that meets the error logs it at once.
pub(crate) struct WiringLog {
    limiter: RateLimiter<Gcra>,
    /// When a sampled request named by its raw path next asks whether the rules name
    /// templates.
    #[cfg(feature = "tracing")]
    raw_path: RateLimiter<Gcra>,
    /// Whether a request of this layer has been named by axum's `MatchedPath`: the layer
    /// is inside a router, and a request named by its raw path is one no route matched.
    #[cfg(feature = "tracing")]
    routed: AtomicBool,
}

/// Of the requests a thread names by their raw path, one in this many (its first included)
/// goes on to ask whether the rules name route templates: a clock read and the policy's
/// rule set are not for every request of a hyper service.
#[cfg(feature = "tracing")]
const RAW_PATH_SAMPLE: u32 = 1 << 12;

#[cfg(feature = "tracing")]
thread_local! {
    /// How many requests this thread has named by their raw path, modulo
    /// [`RAW_PATH_SAMPLE`]: a thread's own count, so counting writes no line another core
    /// reads.
    static RAW_NAMED: Cell<u32> = const { Cell::new(0) };
}

impl WiringLog {
    pub(crate) fn new() -> WiringLog {
        // One per minute builds: a valid GCRA (limit 1, one-minute period).
        const ONCE_A_MINUTE: Gcra = match Gcra::per_minute(1).build() {
            Ok(gcra) => gcra,
            Err(_) => panic!("one per minute is a valid GCRA"),
        };
        WiringLog {
            limiter: RateLimiter::new(ONCE_A_MINUTE),
            #[cfg(feature = "tracing")]
            raw_path: RateLimiter::new(ONCE_A_MINUTE),
            #[cfg(feature = "tracing")]
            routed: AtomicBool::new(false),
        }
    }

    /// A request was named by axum's `MatchedPath`.
    #[inline]
    pub(crate) fn routed(&self) {
        // Relaxed: a hint for the warning below, publishing nothing; stored once.
        #[cfg(feature = "tracing")]
        if !self.routed.load(Ordering::Relaxed) {
            self.routed.store(true, Ordering::Relaxed);
        }
    }

    /// A request was named by its raw path, which no route template matches: unless a
    /// request of this layer has been routed (a router's unmatched request), asks `policy`
    /// whether its rules name route templates (for one such request of a thread in
    /// [`RAW_PATH_SAMPLE`], and at most once a minute), and if they do warns that those
    /// rules never match here, naming the fix. Nothing without the `tracing` feature.
    #[inline]
    pub(crate) fn named_by_raw_path(&self, policy: &dyn Check) {
        #[cfg(feature = "tracing")]
        {
            let sampled = RAW_NAMED.with(|n| {
                let seen = n.get();
                n.set((seen + 1) % RAW_PATH_SAMPLE);
                seen == 0
            });
            if sampled {
                self.sampled_raw_path(policy);
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = policy;
    }

    /// [`named_by_raw_path`](Self::named_by_raw_path)'s sampled request.
    #[cfg(feature = "tracing")]
    #[cold]
    #[inline(never)]
    fn sampled_raw_path(&self, policy: &dyn Check) {
        // Relaxed: see `routed`.
        if !self.routed.load(Ordering::Relaxed)
            && self.raw_path.check().allowed
            && policy.names_route_templates()
        {
            tracing::warn!(
                "tollgate-http: rules select endpoints by route template (`/users/{{id}}`), \
                 but this layer names requests by their raw path, which a template never \
                 matches: outside an axum Router (a hyper or tonic service, or with \
                 Endpoint::raw_path()) select by path (`/users/*`, `prefix = \"/users/\"`) \
                 instead; inside a router, no request has matched a route yet"
            );
        }
    }

    /// A request met [`KeyError::NoPeerAddress`]: logs it as an error naming the fix,
    /// unless one was logged within the minute; `total` is how many requests have met it
    /// so far.
    pub(crate) fn no_peer_address(&self, total: u64) {
        if !self.limiter.check().allowed {
            return;
        }
        #[cfg(feature = "tracing")]
        tracing::error!(
            total,
            "tollgate-http: no peer address to key requests by, answering 500: serve axum \
             with into_make_service_with_connect_info::<SocketAddr>(), tonic with \
             tollgate-http's `tonic` feature, or insert the connection's SocketAddr into \
             each request's extensions"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = total;
    }
}
