//! [`AdaptivePenalty`]: limits that adapt to how a client behaves. A client that keeps
//! getting denied has its limits cut for a cooldown, then gets them back; with a
//! [`RewardConfig`], a client that stays within them has them raised, up to a cap. The
//! state lives in a [`Store`] (`state`), so on a shared store every process sees the same
//! penalty and the same reward.

mod counts;
mod reward;
mod state;

pub use reward::RewardConfig;

use tollgate_core::{Gcra, InsufficientCapacity, Nanos};

use self::counts::Counts;
use self::state::{PenaltyState, Reading};
use super::{
    InProcess, Op, PenaltyConfig, PenaltyConfigError, PolicyCheck, PolicyDecision, Request, Store,
};
use crate::keyed::Geometry;

/// Wraps any [`PolicyCheck`]: after [`PenaltyConfig::denials`] denied requests within
/// `period`, the client's limits are divided by `divisor` (each request is charged
/// `divisor` times its cost, and decisions report the reduced limit) until `cooldown` after
/// its latest triggering denial; then full limits return by themselves. A client that
/// keeps hammering while penalized keeps extending its cooldown.
///
/// Only a client's own tiers count: a deny by a tier every client shares (a
/// `per = "global"` rule) is nobody's own doing and penalizes nobody.
///
/// **Rewards** ([`reward`](Self::reward)): a client active for
/// [`quiet_windows`](RewardConfig::quiet_windows) windows without a deny of its own has
/// its limits multiplied by [`factor`](RewardConfig::factor), and again for each such run,
/// up to [`max_factor`](RewardConfig::max_factor); its next deny takes the reward away.
/// A rewarded client's checks are charged `1/m` of their permits (its multiplier `m`),
/// counted per client and endpoint in this process: a check is charged the multiples of
/// `m` its cost crosses in the running count (the first one charged), as a check of that
/// many permits, and otherwise decided as a peek of its cost (admitted while its tiers have
/// room, taking nothing); decisions report the raised limit. So every tier it checks,
/// its own or one shared by all clients, is charged at least `admitted / m − 1` permits
/// per endpoint in each process: a tier of limit `L` admits a rewarded client at most
/// `m·(L + E·P)` permits per window over `E` endpoints and `P` processes. With a reward
/// configured a refund gives nothing back (the refunded request may have been free), and
/// a charge is at full cost: the reward errs against the client, never for it. A
/// penalized client earns no standing while penalized.
///
/// **Where the state lives**: in a [`Store`], as tiers of an internal rule named
/// `tollgate:penalty` (see the `state` module for its layout). By default
/// [`InProcess`]: bounded like a policy's tiers (100 000 clients by default, idle ones
/// evicted first), allocated at first use. With [`store`](Self::store) a shared one,
/// such as a Redis store given its own key prefix: then a client penalized through one
/// process is penalized in all of them, each key expiring with its state. Each check
/// asks that store once before the inner policy (on Redis, one more round trip) and a
/// deny of the client's own at most three times more.
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
pub struct AdaptivePenalty<P, S = InProcess> {
    inner: P,
    config: PenaltyConfig,
    reward: Option<RewardConfig>,
    geometry: Geometry,
    capacity: usize,
    /// The internal rule whose tiers hold each client's state.
    state: PenaltyState,
    /// Where those tiers' state lives.
    store: S,
    /// What a rewarded client's checks are charged, per client and endpoint.
    counts: Counts,
}

impl<P: PolicyCheck> AdaptivePenalty<P> {
    /// Wraps `inner`, keeping penalty state in process for up to
    /// [`DEFAULT_CAPACITY`](crate::keyed::DEFAULT_CAPACITY) clients; the error names the
    /// invalid field.
    pub fn new(inner: P, config: PenaltyConfig) -> Result<AdaptivePenalty<P>, PenaltyConfigError> {
        AdaptivePenalty::with_capacity(inner, config, crate::keyed::DEFAULT_CAPACITY)
    }

    /// Wraps `inner`, keeping penalty state in process for at most `capacity` clients
    /// (at least 1).
    pub fn with_capacity(
        inner: P,
        config: PenaltyConfig,
        capacity: usize,
    ) -> Result<AdaptivePenalty<P>, PenaltyConfigError> {
        config.validate()?;
        let capacity = capacity.max(1);
        let geometry =
            Geometry::new(capacity, None).map_err(|_| PenaltyConfigError::CapacityTooLarge {
                max: Geometry::MAX_CAPACITY,
            })?;
        // The denial counter must fit a fixed window's layout, and the cooldown a GCRA's.
        tollgate_core::FixedWindow::new(u64::from(config.denials), config.period).map_err(|e| {
            match e {
                tollgate_core::ConfigError::LimitTooLarge { max } => {
                    PenaltyConfigError::DenialsTooMany { max }
                }
                // validate() ruled out a zero count or period.
                _ => PenaltyConfigError::ZeroPeriod,
            }
        })?;
        Gcra::from_interval(config.cooldown.as_u64(), 1).map_err(|e| match e {
            tollgate_core::ConfigError::PeriodTooLong { max } => {
                PenaltyConfigError::CooldownTooLong { max }
            }
            _ => PenaltyConfigError::ZeroCooldown,
        })?;
        Ok(AdaptivePenalty {
            state: PenaltyState::compile(&config, None, capacity)?,
            inner,
            config,
            reward: None,
            geometry,
            capacity,
            store: InProcess::new(),
            counts: Counts::new(geometry),
        })
    }
}

impl<P: PolicyCheck, S: Store> AdaptivePenalty<P, S> {
    /// Adds a reward for clients that stay within their limits (see the type's docs); the
    /// error names the invalid field.
    ///
    /// ```
    /// use tollgate::policy::{AdaptivePenalty, FnClock, PenaltyConfig, Policy, PolicyCheck, RewardConfig};
    /// use tollgate::Nanos;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// let t = Arc::new(AtomicU64::new(0));
    /// let clock = { let t = Arc::clone(&t); FnClock(move || Nanos::new(t.load(Ordering::Relaxed))) };
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 10
    ///     window = "1m"
    ///     algorithm = "fixed_window"
    /// "#, clock)?;
    /// let penalty = PenaltyConfig { denials: 3, period: Nanos::from_secs(60), divisor: 2, cooldown: Nanos::from_secs(600) };
    /// let reward = RewardConfig { window: Nanos::from_secs(60), quiet_windows: 2, factor: 2, max_factor: 2 };
    /// let guarded = AdaptivePenalty::new(policy, penalty)?.reward(reward)?;
    /// for minute in 0..3 {
    ///     t.store(minute * 60_000_000_000, Ordering::Relaxed);
    ///     assert!(guarded.allow("a", "/", 1)?.allowed());
    /// }
    /// // Two quiet minutes earned a step: the limit is doubled.
    /// assert_eq!(guarded.reward_multiplier("a", guarded.now()), 2);
    /// assert_eq!(guarded.peek("a", "/", 1)?.limit(), 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reward(
        mut self,
        reward: RewardConfig,
    ) -> Result<AdaptivePenalty<P, S>, PenaltyConfigError> {
        reward.validate()?;
        self.state = PenaltyState::compile(&self.config, Some(&reward), self.capacity)?;
        self.reward = Some(reward);
        Ok(self)
    }

    /// The same penalty keeping its state in `store` instead (e.g. a Redis store with a
    /// key prefix of its own, shared by the fleet). State kept so far is not carried over.
    pub fn store<T: Store>(self, store: T) -> AdaptivePenalty<P, T> {
        AdaptivePenalty {
            inner: self.inner,
            config: self.config,
            reward: self.reward,
            geometry: self.geometry,
            capacity: self.capacity,
            state: self.state,
            store,
            counts: Counts::new(self.geometry),
        }
    }

    /// Bytes of the penalty's in-process tables (0 until first used; on another store,
    /// only the reward's counts).
    pub fn memory_bytes(&self) -> usize {
        self.state.memory_bytes(&self.store) + self.counts.memory_bytes()
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The store the penalty's state is in.
    pub fn backend(&self) -> &S {
        &self.store
    }

    /// When `client`'s penalty ends (`None` if it is not penalized at `now`). Asks the
    /// store, blocking.
    pub fn penalized_until(&self, client: &str, now: Nanos) -> Option<Nanos> {
        self.read(client, now).penalized_until
    }

    /// Whether `client` is penalized at `now`. Asks the store, blocking.
    pub fn is_penalized(&self, client: &str, now: Nanos) -> bool {
        self.penalized_until(client, now).is_some()
    }

    /// What `client`'s limits are multiplied by at `now` (1: no reward, or penalized).
    /// Asks the store, blocking.
    pub fn reward_multiplier(&self, client: &str, now: Nanos) -> u32 {
        self.multiplier(&self.read(client, now))
    }

    /// Ends `client`'s penalty and takes its standing away now: forgets all the penalty
    /// keeps about it (blocking). A [`reset_at`](PolicyCheck::reset_at) of the client does the
    /// same, besides resetting the inner policy.
    pub fn lift(&self, client: &str) {
        let now = self.inner.now();
        let _ = self
            .store
            .run(Op::Reset, &self.state.lift_plan(client), now, &mut []);
    }

    fn read(&self, client: &str, now: Nanos) -> Reading {
        let (_, plan, parts) = self.state.read_plan(Op::Peek, client);
        let mut read = PolicyDecision::empty();
        read.label(&plan);
        match self.store.run(Op::Peek, &plan, now, read.outcomes_mut()) {
            Ok(()) => self.state.reading(&read, parts, now),
            Err(_) => Reading::UNKNOWN,
        }
    }

    /// The multiplier `reading` earns: 1 while penalized or without a reward.
    fn multiplier(&self, reading: &Reading) -> u32 {
        match (&self.reward, reading.penalized_until) {
            (Some(reward), None) => reward.multiplier(reward.step(reading.standing)),
            (Some(_), Some(_)) | (None, _) => 1,
        }
    }

    /// What runs on the inner policy for `op` on `request`, given the client's state:
    /// a check, peek or charge at the penalty's divisor; a rewarded client's check as a
    /// peek, or a check of the permits it is charged; a refund at the request's own divisor
    /// (see the [`PolicyCheck`] impl), nothing with a reward configured.
    fn effective<'a>(
        &self,
        op: Op,
        request: &Request<'a>,
        reading: &Reading,
        multiplier: u32,
        now: Nanos,
    ) -> Option<(Op, Request<'a>)> {
        let penalized = reading.penalized_until.is_some();
        let divided = if penalized {
            request.with_divisor(request.divisor.saturating_mul(self.config.divisor))
        } else {
            *request
        };
        match op {
            Op::Check if multiplier > 1 => match self.counts.charge(request, multiplier, now) {
                0 => Some((Op::Peek, divided)),
                charged => Some((
                    Op::Check,
                    Request {
                        cost: charged,
                        ..divided
                    },
                )),
            },
            Op::Check | Op::Peek | Op::Charge => Some((op, divided)),
            // With a reward, the refunded request may have been free.
            Op::Refund if self.reward.is_some() => None,
            Op::Refund | Op::Reset => Some((op, *request)),
        }
    }
}

/// Raises a rewarded client's decision to the limits it has: limit, remaining and quota
/// times `multiplier`.
fn raise(decision: Option<PolicyDecision>, multiplier: u32) -> Option<PolicyDecision> {
    decision.map(|mut d| {
        d.scale_up(multiplier);
        d
    })
}

/// The body of [`AdaptivePenalty`]'s `run` and `run_async`, written once: `$store` runs
/// one plan on the penalty's store and `$inner` the effective request on the inner
/// policy, each blocking or awaited.
macro_rules! run_body {
    (
        $this:ident, $op:ident, $request:ident, $now:ident,
        |$sop:ident, $plan:ident, $outcomes:ident| $store:expr,
        |$iop:ident, $effective:ident| $inner:expr
    ) => {{
        let client = $request.client;
        // 1. The client's state: read (a check also marks the window's activity; a
        // refund needs it only with a reward, but reads it anyway: one path).
        let reading = match $op {
            Op::Check | Op::Peek | Op::Charge | Op::Refund => {
                let (read_op, plan, parts) = $this.state.read_plan($op, client);
                let mut read = PolicyDecision::empty();
                read.label(&plan);
                let ($sop, $plan, $outcomes) = (read_op, &plan, read.outcomes_mut());
                match $store {
                    Ok(()) => $this.state.reading(&read, parts, $now),
                    // Costs of 0 to 2 on tiers built for them: not reached.
                    Err(_) => Reading::UNKNOWN,
                }
            }
            Op::Reset => Reading::UNKNOWN,
        };
        // A penalized client earns no standing: what this window's read marked goes.
        if let (true, Some(_), Some(forfeit)) = (
            reading.marked,
            reading.penalized_until,
            $this.state.forfeit_plan(client),
        ) {
            let ($sop, $plan, $outcomes) = (Op::Reset, &forfeit, &mut []);
            let _ = $store;
        }
        let multiplier = $this.multiplier(&reading);
        // 2. The inner policy, at the client's limits.
        let decision = match $this.effective($op, $request, &reading, multiplier, $now) {
            Some(($iop, effective)) => {
                let $effective = &effective;
                $inner?
            }
            None => None,
        };
        // 3. What the outcome teaches: a deny of the client's own counts towards a
        // penalty and takes its standing; a reset forgets everything.
        match ($op, decision.as_ref()) {
            (Op::Check, Some(d)) if d.denied_by().any(|tier| !tier.shared()) => {
                let plan = $this.state.denial_plan(client);
                let mut counted = PolicyDecision::empty();
                counted.label(&plan);
                let ($sop, $plan, $outcomes) = (Op::Check, &plan, counted.outcomes_mut());
                let triggered = $store.is_ok() && PenaltyState::triggered(&counted);
                if triggered {
                    let (reset, start) = $this.state.penalize_plans(client);
                    let ($sop, $plan, $outcomes) = (Op::Reset, &reset, &mut []);
                    let _ = $store;
                    let mut started = PolicyDecision::empty();
                    started.label(&start);
                    let ($sop, $plan, $outcomes) = (Op::Check, &start, started.outcomes_mut());
                    let _ = $store;
                } else if reading.standing > Nanos::ZERO {
                    if let Some(forfeit) = $this.state.forfeit_plan(client) {
                        let ($sop, $plan, $outcomes) = (Op::Reset, &forfeit, &mut []);
                        let _ = $store;
                    }
                }
            }
            (Op::Reset, _) => {
                let plan = $this.state.lift_plan(client);
                let ($sop, $plan, $outcomes) = (Op::Reset, &plan, &mut []);
                let _ = $store;
            }
            (Op::Check, _) | (Op::Peek | Op::Refund | Op::Charge, _) => {}
        }
        Ok(raise(decision, multiplier))
    }};
}

/// Every operation on the inner policy, blocking or awaited: a check, peek or charge at the
/// client's penalty divisor (a penalized client pays the penalty's multiple), a refund at
/// the request's own; a reset also [`lift`](AdaptivePenalty::lift)s the client's penalty.
/// Each first asks the penalty's store for the client's state (see the type's docs).
///
/// Why a refund gives back the request's cost at its own divisor, not the penalty's:
/// whether the refunded request was charged under a penalty is not known here (the penalty
/// may have started or ended since), and giving back `divisor` times what an unpenalized
/// check took would hand out permits. A request charged under the penalty gets back only
/// its plain cost: the penalty errs against the penalized client, never for it.
impl<P: PolicyCheck, S: Store> PolicyCheck for AdaptivePenalty<P, S> {
    fn now(&self) -> Nanos {
        self.inner.now()
    }

    fn names_route_templates(&self) -> bool {
        self.inner.names_route_templates()
    }

    fn run(
        &self,
        op: Op,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        run_body!(
            self,
            op,
            request,
            now,
            |sop, plan, outcomes| self.store.run(sop, plan, now, outcomes),
            |iop, effective| self.inner.run(iop, effective, now)
        )
    }

    async fn run_async<'a>(
        &'a self,
        op: Op,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        run_body!(
            self,
            op,
            request,
            now,
            |sop, plan, outcomes| self.store.run_async(sop, plan, now, outcomes).await,
            |iop, effective| self.inner.run_async(iop, effective, now).await
        )
    }
}
