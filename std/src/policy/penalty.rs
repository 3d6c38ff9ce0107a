//! [`AdaptivePenalty`]: the progressive-penalty decorator: a client that keeps getting
//! denied has its limits cut for a cooldown, then gets them back.

use std::sync::OnceLock;

use tollgate_core::{Algorithm, ConfigError, FixedWindow, Gcra, InsufficientCapacity, Nanos};

use super::store::fingerprint;
use super::{Op, PenaltyConfig, PenaltyConfigError, PolicyCheck, PolicyDecision, Request};
use crate::keyed::{Geometry, Mode, Table, Upsert, WhenFull};

/// One word per client in a bounded, lock-free keyed table (the tier stores' kind),
/// allocated at the first write: the penalty's two halves each keep one.
#[derive(Debug)]
struct Words {
    geometry: Geometry,
    table: OnceLock<Table<()>>,
}

impl Words {
    fn new(geometry: Geometry) -> Words {
        let words = Words {
            geometry,
            table: OnceLock::new(),
        };
        // Under loom, allocated up front (as the tier stores are): a `OnceLock` racing its
        // initialisation would block a thread loom cannot switch away from.
        #[cfg(tollgate_loom)]
        words.table();
        words
    }

    /// The table, allocated on first use.
    fn table(&self) -> &Table<()> {
        self.table.get_or_init(|| {
            let seed = fingerprint("tollgate penalty state mask");
            Table::new(self.geometry, Mode::Fingerprint, WhenFull::Evict, seed)
        })
    }

    /// `client`'s word, if it has one (a lock-free lookup; a resident word is never
    /// missed, even racing a move).
    fn get(&self, h: u64) -> Option<u64> {
        self.table.get()?.update_resident(h, |word| (None, word))
    }

    /// Runs `step` on `client`'s word (`0` if it has none) in a compare-and-swap loop and
    /// stores what it returns; a new word is inserted, evicting per `judge` (idle words
    /// first, then the one that loses least) when the table is full.
    fn update<A: Algorithm, R>(
        &self,
        h: u64,
        judge: &A,
        now: Nanos,
        mut step: impl FnMut(u64) -> (Option<u64>, R),
    ) -> Option<R> {
        let table = self.table();
        if let Some(r) = table.update_if_found(h, &mut step) {
            return Some(r);
        }
        match table.upsert(h, judge, now, || true, || 0, step) {
            Upsert::Done(r) => Some(r),
            // The gate always admits; an evicting table always makes room.
            Upsert::Closed | Upsert::Full => None,
        }
    }

    /// Puts `client`'s word back to `0` (none), if it has one.
    fn clear(&self, h: u64) {
        if let Some(table) = self.table.get() {
            table.update_resident(h, |word| ((word != 0).then_some(0), ()));
        }
    }

    fn memory_bytes(&self) -> usize {
        self.table.get().map_or(0, Table::memory_bytes)
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
/// idle ones evicted first) and kept as the tiers keep theirs: one word per client for its
/// recent denials (a fixed window's state) and one for the end of its penalty, each in a
/// lock-free keyed table allocated at the first denial (about 19 bytes per client of
/// capacity each). A check reads the end word without a lock.
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
    /// Each client's recent denials: a fixed window's state word.
    denials: Words,
    window: FixedWindow,
    /// When each penalized client's penalty ends: an instant, idle once passed. That is
    /// the shape of a GCRA state (a time that is fresh once `now` reaches it), so a GCRA
    /// judges the entries for eviction: idle once ended, else what evicting one would
    /// forgive is its time left.
    ends: Words,
    judge_ends: Gcra,
}

impl<P: PolicyCheck> AdaptivePenalty<P> {
    /// Wraps `inner`, keeping penalty state for up to [`DEFAULT_CAPACITY`](crate::keyed::DEFAULT_CAPACITY)
    /// clients; the error names the invalid field.
    pub fn new(inner: P, config: PenaltyConfig) -> Result<AdaptivePenalty<P>, PenaltyConfigError> {
        AdaptivePenalty::with_capacity(inner, config, crate::keyed::DEFAULT_CAPACITY)
    }

    /// Wraps `inner`, keeping penalty state for at most `capacity` clients (at least 1).
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
        // validate() ruled out a zero cooldown and one past the core's horizon.
        let judge_ends = Gcra::from_interval(config.cooldown.as_u64(), 1).map_err(|e| match e {
            ConfigError::PeriodTooLong { max } => PenaltyConfigError::CooldownTooLong { max },
            _ => PenaltyConfigError::ZeroCooldown,
        })?;
        let geometry = Geometry::new(capacity.max(1), None).map_err(|_| {
            PenaltyConfigError::CapacityTooLarge {
                max: Geometry::MAX_CAPACITY,
            }
        })?;
        Ok(AdaptivePenalty {
            inner,
            config,
            denials: Words::new(geometry),
            window,
            ends: Words::new(geometry),
            judge_ends,
        })
    }

    /// Bytes of the penalty's tables (0 until the first denial).
    pub fn memory_bytes(&self) -> usize {
        self.denials.memory_bytes() + self.ends.memory_bytes()
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// When `client`'s penalty ends (`None` if it is not penalized at `now`).
    pub fn penalized_until(&self, client: &str, now: Nanos) -> Option<Nanos> {
        let until = self.ends.get(fingerprint(client))?;
        (until > now.as_u64()).then_some(Nanos::new(until))
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

    /// The request `op` runs on the inner policy: at the penalty's divisor, but for a
    /// refund (see the [`PolicyCheck`] impl).
    #[inline]
    fn effective_for<'a>(&self, op: Op, request: &Request<'a>, now: Nanos) -> Request<'a> {
        match op {
            Op::Check | Op::Peek | Op::Charge => self.effective(request, now),
            Op::Refund | Op::Reset => *request,
        }
    }

    /// Counts a check's deny against `client`: only a deny by one of the client's own
    /// tiers (a shared, global tier's deny is not its doing). A reset lifts the client's
    /// penalty and forgets its denials.
    #[inline]
    fn observe(&self, op: Op, client: &str, decision: Option<&PolicyDecision>, now: Nanos) {
        match (op, decision) {
            (Op::Check, Some(decision)) => {
                if decision.denied_by().any(|tier| !tier.shared()) {
                    self.record_denial(client, now);
                }
            }
            (Op::Reset, _) => self.lift(client),
            (Op::Check, None) | (Op::Peek | Op::Refund | Op::Charge, _) => {}
        }
    }

    /// Ends `client`'s penalty now, and forgets the denials counted towards the next one.
    pub fn lift(&self, client: &str) {
        let h = fingerprint(client);
        self.ends.clear(h);
        self.denials.clear(h);
    }

    fn record_denial(&self, client: &str, now: Nanos) {
        let h = fingerprint(client);
        let window = &self.window;
        // One more denial in the client's window; triggered when it reaches the threshold
        // (or the window is already full: still over it).
        let triggered =
            self.denials
                .update(h, window, now, |word| match window.decide(word, now, 1) {
                    Ok(outcome) => match outcome.next {
                        Some(next) => (Some(next), outcome.decision.remaining == 0),
                        None => (None, true),
                    },
                    Err(_) => (None, false),
                });
        if triggered == Some(true) {
            let end = now.saturating_add(self.config.cooldown).as_u64();
            // The latest end wins.
            self.ends.update(h, &self.judge_ends, now, |until| {
                ((end > until).then_some(end), ())
            });
        }
    }
}

/// Every operation on the inner policy, blocking or awaited: a check, peek or charge at the
/// client's penalty divisor (a penalized client pays the penalty's multiple), a refund at
/// the request's own; a reset also [`lift`](AdaptivePenalty::lift)s the client's penalty. The penalty's own state is in process: it counts this process's
/// denials of the client.
///
/// Why a refund gives back the request's cost at its own divisor, not the penalty's:
/// whether the refunded request was charged under a penalty is not known here (the penalty
/// may have started or ended since), and giving back `divisor` times what an unpenalized
/// check took would hand out permits. A request charged under the penalty gets back only
/// its plain cost: the penalty errs against the penalized client, never for it.
impl<P: PolicyCheck> PolicyCheck for AdaptivePenalty<P> {
    fn now(&self) -> Nanos {
        self.inner.now()
    }

    fn run(
        &self,
        op: Op,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        let effective = self.effective_for(op, request, now);
        let decision = self.inner.run(op, &effective, now)?;
        self.observe(op, request.client, decision.as_ref(), now);
        Ok(decision)
    }

    async fn run_async<'a>(
        &'a self,
        op: Op,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        let effective = self.effective_for(op, request, now);
        let decision = self.inner.run_async(op, &effective, now).await?;
        self.observe(op, request.client, decision.as_ref(), now);
        Ok(decision)
    }
}
