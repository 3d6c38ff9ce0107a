//! [`AdaptivePenalty`]: the progressive-penalty decorator: a client that keeps getting
//! denied has its limits cut for a cooldown, then gets them back.

use tollgate_core::{Algorithm, ConfigError, FixedWindow, InsufficientCapacity, Nanos};

use super::keyed_cells::{KeyedCells, KeyedValue};
use super::tier_store::fingerprint;
use super::{PenaltyConfig, PenaltyConfigError, PolicyCheck, PolicyDecision, Request};
use crate::sync::plain::{AtomicU64, Ordering};

/// A client's penalty state: its recent denials (a fixed window) and when its penalty ends.
#[derive(Debug)]
struct PenaltyCell {
    denials: AtomicU64,
    until: AtomicU64,
}

impl KeyedValue<FixedWindow> for PenaltyCell {
    fn fresh(_: &FixedWindow) -> PenaltyCell {
        PenaltyCell {
            denials: AtomicU64::new(0),
            until: AtomicU64::new(0),
        }
    }

    fn is_idle(&self, window: &FixedWindow, now: Nanos) -> bool {
        // Relaxed: self-contained words read under the shard's write lock.
        self.until.load(Ordering::Relaxed) <= now.as_u64()
            && window.is_idle(self.denials.load(Ordering::Relaxed), now)
    }

    fn loss(&self, _: &FixedWindow, now: Nanos) -> u64 {
        // Relaxed: see `is_idle`. The remaining penalty is what eviction would forgive.
        self.until
            .load(Ordering::Relaxed)
            .saturating_sub(now.as_u64())
    }
}

/// Wraps any [`PolicyCheck`]: after [`PenaltyConfig::denials`] denied requests within
/// `period`, the client's limits are divided by `divisor` (each request is charged
/// `divisor` times its cost, and decisions report the reduced limit) until `cooldown` after
/// its latest triggering denial; then full limits return by themselves. A client that
/// keeps hammering while penalized keeps extending its cooldown.
///
/// Only a client's own tiers count: a deny by a tier every client shares (a
/// `per = "global"` rule) is nobody's own doing and penalizes nobody.
///
/// Penalty state is per client, bounded like the tiers' state (100 000 clients by default,
/// idle ones evicted first).
///
/// ```
/// use tollgate::policy::{AdaptivePenalty, FnClock, PenaltyConfig, Policy, PolicyCheck};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 4
///     window = "1m"
///     algorithm = "fixed_window"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let penalty = PenaltyConfig { denials: 1, period: Nanos::from_secs(60), divisor: 2, cooldown: Nanos::from_secs(600) };
/// let guarded = AdaptivePenalty::new(policy, penalty)?;
/// for _ in 0..5 { guarded.allow("a", "/", 1)?; } // 4 admitted, 1 denied: penalized
/// assert!(guarded.is_penalized("a", Nanos::ZERO));
/// assert_eq!(guarded.peek("a", "/", 1)?.limit(), 2); // 4 / 2
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AdaptivePenalty<P> {
    inner: P,
    config: PenaltyConfig,
    cells: KeyedCells<PenaltyCell, FixedWindow>,
}

impl<P: PolicyCheck> AdaptivePenalty<P> {
    /// Wraps `inner`; the error names the invalid field.
    pub fn new(inner: P, config: PenaltyConfig) -> Result<AdaptivePenalty<P>, PenaltyConfigError> {
        AdaptivePenalty::with_capacity(inner, config, 100_000)
    }

    /// Wraps `inner`, keeping penalty state for at most `capacity` clients.
    pub fn with_capacity(
        inner: P,
        config: PenaltyConfig,
        capacity: usize,
    ) -> Result<AdaptivePenalty<P>, PenaltyConfigError> {
        config.validate()?;
        let window =
            FixedWindow::new(u64::from(config.denials), config.period).map_err(|e| match e {
                ConfigError::LimitTooLarge { max } => PenaltyConfigError::DenialsTooMany { max },
                // validate() ruled out a zero count or period.
                _ => PenaltyConfigError::ZeroPeriod,
            })?;
        Ok(AdaptivePenalty {
            inner,
            config,
            cells: KeyedCells::new(window, capacity.max(1)),
        })
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// When `client`'s penalty ends (`None` if it is not penalized at `now`).
    pub fn penalized_until(&self, client: &str, now: Nanos) -> Option<Nanos> {
        self.cells.with_existing(fingerprint(client), |_, cell| {
            // Relaxed: a self-contained word.
            let until = cell.map_or(0, |c| c.until.load(Ordering::Relaxed));
            (until > now.as_u64()).then_some(Nanos::new(until))
        })
    }

    /// Whether `client` is penalized at `now`.
    pub fn is_penalized(&self, client: &str, now: Nanos) -> bool {
        self.penalized_until(client, now).is_some()
    }

    fn effective<'a>(&self, request: &Request<'a>, now: Nanos) -> Request<'a> {
        if self.is_penalized(request.client, now) {
            request.with_divisor(request.divisor.saturating_mul(self.config.divisor))
        } else {
            *request
        }
    }

    fn record_denial(&self, client: &str, now: Nanos) {
        let cooldown_end = now.saturating_add(self.config.cooldown).as_u64();
        // A penalty cell is always admitted (the gate is for tier stores a reload retired).
        self.cells.with(
            fingerprint(client),
            now,
            || true,
            || None,
            |window, cell| {
                // Relaxed: each word is self-contained; the CAS orders updates of one word.
                let mut current = cell.denials.load(Ordering::Relaxed);
                let triggered = loop {
                    let Ok(outcome) = window.decide(current, now, 1) else {
                        break false;
                    };
                    let Some(next) = outcome.next else {
                        // The window is already full: still over the threshold.
                        break true;
                    };
                    match cell.denials.compare_exchange_weak(
                        current,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break outcome.decision.remaining == 0,
                        Err(actual) => current = actual,
                    }
                };
                if triggered {
                    // Relaxed: self-contained; `fetch_max` keeps the latest end.
                    cell.until.fetch_max(cooldown_end, Ordering::Relaxed);
                }
            },
        );
    }
}

impl<P: PolicyCheck> PolicyCheck for AdaptivePenalty<P> {
    fn now(&self) -> Nanos {
        self.inner.now()
    }

    fn check_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let decision = self.inner.check_at(&self.effective(request, now), now)?;
        // Only the client's own tiers: a shared (global) tier's deny is not its doing.
        if decision.denied_by().any(|tier| !tier.shared()) {
            self.record_denial(request.client, now);
        }
        Ok(decision)
    }

    fn peek_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.inner.peek_at(&self.effective(request, now), now)
    }

    /// Gives back the request's cost at its own divisor, not the penalty's: whether the
    /// refunded request was charged under a penalty is not known here (the penalty may
    /// have started or ended since), and giving back `divisor` times what an unpenalized
    /// check took would hand out permits. A request charged under the penalty gets back
    /// only its plain cost: the penalty errs against the penalized client, never for it.
    fn refund_at(&self, request: &Request<'_>, now: Nanos) {
        self.inner.refund_at(request, now)
    }

    /// Charged as a check would be now: a penalized client pays the penalty's multiple.
    fn charge_at(&self, request: &Request<'_>, now: Nanos) {
        self.inner.charge_at(&self.effective(request, now), now)
    }
}
