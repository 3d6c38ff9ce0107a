//! What the layer tells the operator through `tracing` (feature `tracing`, on by default):
//! a server wiring error, at most once a minute however many requests meet it (each is
//! still counted in [`LayerStats`](super::LayerStats) and answered 500).

use tollgate::{Gcra, RateLimiter};

/// At most one wiring-error event per minute, a burst of one: the first request that
/// meets the error logs it at once.
pub(crate) struct WiringLog {
    limiter: RateLimiter<Gcra>,
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
        }
    }

    /// A request met [`KeyError::NoPeerAddress`](super::KeyError::NoPeerAddress): logs
    /// it as an error naming the fix, unless one was logged within the minute; `total` is
    /// how many requests have met it so far.
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
