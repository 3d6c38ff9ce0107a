//! [`PolicyCheck`]: the interface shared by [`Policy`](super::Policy) and its decorators:
//! one operation ([`run`](PolicyCheck::run), and its awaited form), from which every
//! convenience form follows, blocking or awaited; and [`Request`]: what a check is asked
//! about.

use std::future::Future;

use tollgate_core::{InsufficientCapacity, Nanos};

use super::{Op, PolicyDecision, Reservation, UntilReady};
use crate::wait::DelaySleep;

/// An awaited refund, charge or reset (`run`): it decides nothing, so it cannot fail.
async fn recorded(run: impl Future<Output = Result<Option<PolicyDecision>, InsufficientCapacity>>) {
    let _ = run.await;
}

/// The decision of a check or peek that [`PolicyCheck::run`] answered: `None` decided
/// nothing, which is what no matching rule decides (admitted, unlimited).
#[inline]
fn decided(decision: Option<PolicyDecision>) -> PolicyDecision {
    decision.unwrap_or_else(PolicyDecision::empty)
}

/// A policy that can check, peek and refund requests: [`Policy`](super::Policy),
/// [`Metered`](super::Metered), [`AdaptivePenalty`](super::AdaptivePenalty), stacked in any
/// order. An implementation writes one operation, [`run`](Self::run) (and, if it waits on
/// the network, its awaited form [`run_async`](Self::run_async)); every other form, blocking
/// or awaited, follows from it. Shared between threads, so `Sync`.
///
/// ```
/// use tollgate::policy::{FnClock, Metered, Policy, PolicyCheck};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml("[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n", FnClock(|| Nanos::ZERO))?;
/// let metered = Metered::new(policy);
/// assert!(metered.allow("a", "/", 1)?.allowed());
/// assert!(!metered.allow("a", "/", 1)?.allowed());
/// assert_eq!(metered.snapshot()[0].denied, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PolicyCheck: Sync {
    /// The policy's clock.
    fn now(&self) -> Nanos;

    /// Whether the rules in force select endpoints by route template (a `{param}`, as
    /// `endpoint = "/users/{id}"`: names only axum's `MatchedPath` gives): a caller that
    /// names endpoints by raw path can tell its operator those rules never match. `false`
    /// unless the policy says otherwise.
    fn names_route_templates(&self) -> bool {
        false
    }

    /// Runs `op` for `request` at `now` on every tier it matches, blocking until the store
    /// answers: [`Op::Check`] all or nothing, [`Op::Peek`] consuming nothing, [`Op::Refund`]
    /// giving `request.cost` back (a request admitted but not served), [`Op::Charge`]
    /// recording it whatever the limits say (work already done whose cost was known only
    /// afterwards: see [`reserve`](Self::reserve); a key over its limit goes into debt and
    /// is denied until it is repaid), [`Op::Reset`] forgetting the client's state (see
    /// [`reset_at`](Self::reset_at)).
    ///
    /// The decision of a check or a peek; `None` for a refund, a charge or a reset. (A decorator may
    /// answer `None` to a check too: the convenience forms read that as no rule matching,
    /// admitted and unlimited.)
    fn run(
        &self,
        op: Op,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity>;

    /// [`run`](Self::run), awaited: for a policy whose store waits on the network (a
    /// `RedisStore`), so that a round trip holds no worker thread. By default the blocking
    /// [`run`](Self::run), ready when first polled (right for a store that never waits).
    fn run_async<'a>(
        &'a self,
        op: Op,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = Result<Option<PolicyDecision>, InsufficientCapacity>> + Send + 'a
    {
        std::future::ready(self.run(op, request, now))
    }

    /// Checks `request` at `now` against every matching tier, all or nothing.
    #[inline]
    fn check_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.run(Op::Check, request, now).map(decided)
    }

    /// What `request` would get at `now`; consumes nothing.
    fn peek_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.run(Op::Peek, request, now).map(decided)
    }

    /// Gives `request.cost` permits back to every matching tier at `now` (for a request
    /// that was admitted but not served).
    fn refund_at(&self, request: &Request<'_>, now: Nanos) {
        // A refund decides nothing, so it cannot fail.
        let _ = self.run(Op::Refund, request, now);
    }

    /// Records `request`'s cost on every tier it matches at `now`, whatever the limits say
    /// ([`Op::Charge`]).
    fn charge_at(&self, request: &Request<'_>, now: Nanos) {
        // A charge decides nothing, so it cannot fail.
        let _ = self.run(Op::Charge, request, now);
    }

    /// Forgets `request.client`'s state under every tier `request` matches (its cost is
    /// not used): from now on the client starts afresh there, as a key never seen. An
    /// operator's action (a client wrongly limited, a penalty to lift), not traffic: see
    /// [`Op::Reset`] for what each store forgets. `now` is when the reset happens.
    fn reset_at(&self, request: &Request<'_>, now: Nanos) {
        // A reset decides nothing, so it cannot fail.
        let _ = self.run(Op::Reset, request, now);
    }

    /// [`check_at`](Self::check_at), awaited ([`run_async`](Self::run_async)).
    ///
    /// ```
    /// use tollgate::policy::{AdaptivePenalty, PenaltyConfig, Policy, PolicyCheck, Request};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 1
    ///     window = "1m"
    /// "#, tollgate::policy::FnClock(|| Nanos::ZERO))?;
    /// let penalty = PenaltyConfig { denials: 1, period: Nanos::from_secs(60), divisor: 2, cooldown: Nanos::from_secs(60) };
    /// let guarded = AdaptivePenalty::new(policy, penalty)?;
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// let request = Request::new("a", "/", 1);
    /// let (first, second) = runtime.block_on(async {
    ///     let now = guarded.now();
    ///     (guarded.check_at_async(&request, now).await, guarded.check_at_async(&request, now).await)
    /// });
    /// assert!(first?.allowed() && !second?.allowed());
    /// assert!(guarded.is_penalized("a", Nanos::ZERO));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn check_at_async<'a>(
        &'a self,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = Result<PolicyDecision, InsufficientCapacity>> + Send + 'a {
        let run = self.run_async(Op::Check, request, now);
        async move { run.await.map(decided) }
    }

    /// [`peek_at`](Self::peek_at), awaited.
    fn peek_at_async<'a>(
        &'a self,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = Result<PolicyDecision, InsufficientCapacity>> + Send + 'a {
        let run = self.run_async(Op::Peek, request, now);
        async move { run.await.map(decided) }
    }

    /// [`refund_at`](Self::refund_at), awaited.
    fn refund_at_async<'a>(
        &'a self,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = ()> + Send + 'a {
        recorded(self.run_async(Op::Refund, request, now))
    }

    /// [`charge_at`](Self::charge_at), awaited.
    fn charge_at_async<'a>(
        &'a self,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = ()> + Send + 'a {
        recorded(self.run_async(Op::Charge, request, now))
    }

    /// [`reset_at`](Self::reset_at), awaited.
    fn reset_at_async<'a>(
        &'a self,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = ()> + Send + 'a {
        recorded(self.run_async(Op::Reset, request, now))
    }

    /// Reserves `estimate` permits for work whose real cost is known only afterwards (LLM
    /// tokens, bytes, CPU time): a check of `estimate` now, and, if admitted, a guard that
    /// [`settle`](Reservation::settle)s the actual cost later (refunding the difference, or
    /// charging the excess) and refunds the whole estimate if dropped unsettled.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy, PolicyCheck};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "tokens"
    ///     limit = 1000
    ///     window = "1m"
    ///     algorithm = "fixed_window"
    /// "#, FnClock(|| Nanos::ZERO))?;
    /// let reservation = policy.reserve("acct", "/chat", 400)?;
    /// assert!(reservation.allowed());
    /// // ... the model answered with 150 tokens:
    /// let after = reservation.settle(150)?;
    /// assert_eq!(after.remaining(), 850);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn reserve<'a>(
        &'a self,
        client: &'a str,
        endpoint: &'a str,
        estimate: u32,
    ) -> Result<Reservation<'a, Self>, InsufficientCapacity>
    where
        Self: Sized,
    {
        let request = Request::new(client, endpoint, estimate);
        let decision = self.check_at(&request, self.now())?;
        Ok(Reservation::new(self, request, decision))
    }

    /// Checks `cost` permits for `client` on `endpoint` now.
    fn allow(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.check_at(&Request::new(client, endpoint, cost), self.now())
    }

    /// What `cost` permits would get now; consumes nothing.
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.peek_at(&Request::new(client, endpoint, cost), self.now())
    }

    /// [`allow`](Self::allow), writing the decision into `decision` (replacing what it
    /// held) instead of returning it: the same check, for a caller that keeps one decision
    /// per request on a hot path, as the HTTP layer does. A [`PolicyDecision`] is a few
    /// hundred bytes, and each move of a returned one copies them; a
    /// [`Policy`](super::Policy) writes its decision in place. On an error, `decision` is
    /// [`empty`](PolicyDecision::empty).
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy, PolicyCheck, PolicyDecision};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(
    ///     "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n",
    ///     FnClock(|| Nanos::ZERO),
    /// )?;
    /// let mut decision = PolicyDecision::empty();
    /// policy.allow_into("a", "/", 1, &mut decision)?;
    /// assert!(decision.allowed());
    /// policy.allow_into("a", "/", 1, &mut decision)?;
    /// assert!(!decision.allowed());
    /// // More than the limit can ever admit: an error, and the decision empty.
    /// assert!(policy.allow_into("a", "/", 5, &mut decision).is_err());
    /// assert!(decision.tiers().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn allow_into(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        match self.allow(client, endpoint, cost) {
            Ok(d) => {
                *decision = d;
                Ok(())
            }
            Err(e) => {
                *decision = PolicyDecision::empty();
                Err(e)
            }
        }
    }

    /// [`allow_into`](Self::allow_into), the endpoint named by `endpoint` only if the rules
    /// in force read it: for a caller whose endpoint costs work to name (a router's route
    /// template, looked up per request), which rules that select no endpoint then skip. A
    /// [`Policy`](super::Policy) calls `endpoint` at most once, and only when its rule set
    /// has an `endpoint` or `prefix` rule; by default it is named first, then checked.
    ///
    /// ```
    /// use std::cell::Cell;
    /// use tollgate::policy::{FnClock, Policy, PolicyCheck, PolicyDecision};
    /// use tollgate::Nanos;
    /// let named = Cell::new(0);
    /// let endpoint = || {
    ///     named.set(named.get() + 1);
    ///     "/search"
    /// };
    /// let policy = Policy::from_toml(
    ///     "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n",
    ///     FnClock(|| Nanos::ZERO),
    /// )?;
    /// let mut decision = PolicyDecision::empty();
    /// policy.allow_into_with("a", endpoint, 1, &mut decision)?;
    /// assert!(decision.allowed());
    /// assert_eq!(named.get(), 0, "no rule reads the endpoint");
    /// policy.reload_toml(
    ///     "[[rules]]\nname = \"s\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1s\"\n",
    /// )?;
    /// policy.allow_into_with("a", endpoint, 1, &mut decision)?;
    /// assert_eq!(named.get(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn allow_into_with<E: AsRef<str>>(
        &self,
        client: &str,
        endpoint: impl FnOnce() -> E,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        self.allow_into(client, endpoint().as_ref(), cost, decision)
    }

    /// Gives `cost` permits back now.
    fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        self.refund_at(&Request::new(client, endpoint, cost), self.now())
    }

    /// Blocks the thread until `cost` permits are admitted, then (leaky bucket tiers)
    /// for the decision's `delay`, and returns the admitting decision. Sleeps with
    /// `std::thread::sleep`; see [`wait_with`](Self::wait_with) to sleep otherwise.
    /// `InsufficientCapacity` if the cost can never pass.
    fn wait(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.wait_with(&Request::new(client, endpoint, cost), |d| {
            std::thread::sleep(d.as_duration())
        })
    }

    /// [`wait`](Self::wait) with a custom `sleep` (a manual clock's `advance` in tests).
    fn wait_with(
        &self,
        request: &Request<'_>,
        mut sleep: impl FnMut(Nanos),
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        loop {
            let decision = self.check_at(request, self.now())?;
            if decision.allowed() {
                if decision.delay() > Nanos::ZERO {
                    sleep(decision.delay());
                }
                return Ok(decision);
            }
            sleep(decision.retry_after().max(Nanos::new(1)));
        }
    }

    /// A future that resolves once `cost` permits are admitted (and the leaky bucket's
    /// `delay` has passed). Needs no particular runtime: it sleeps on
    /// [`Delay`](crate::wait::Delay), a timer thread of tollgate's own. Dropping it before it
    /// resolves leaves no permit consumed.
    fn until_ready<'a>(
        &'a self,
        client: &'a str,
        endpoint: &'a str,
        cost: u32,
    ) -> UntilReady<'a, Self, DelaySleep>
    where
        Self: Sized,
    {
        UntilReady::new(
            self,
            Request::new(client, endpoint, cost),
            crate::wait::delay_sleep(),
        )
    }

    /// [`until_ready`](Self::until_ready) with a custom timer: `sleep(d)` returns a future
    /// that completes after `d` (a runtime's sleep, or a manual clock's advance in tests).
    fn until_ready_with<'a, S, F>(
        &'a self,
        request: Request<'a>,
        sleep: S,
    ) -> UntilReady<'a, Self, S>
    where
        Self: Sized,
        S: FnMut(Nanos) -> F,
        F: Future<Output = ()>,
    {
        UntilReady::new(self, request, sleep)
    }
}

/// The forwarding of a reference and an `Arc` to the policy behind it: the one operation,
/// its awaited form, and the forms a policy may answer faster than the defaults do (a
/// [`Policy`](super::Policy) reads its clock only after matching the rules).
macro_rules! forward_policy_check {
    ($($pointer:ty $(: $extra:ident)?),+) => {$(
        impl<P: PolicyCheck + ?Sized $(+ $extra)?> PolicyCheck for $pointer {
            fn now(&self) -> Nanos {
                (**self).now()
            }

            fn names_route_templates(&self) -> bool {
                (**self).names_route_templates()
            }

            #[inline]
            fn run(
                &self,
                op: Op,
                request: &Request<'_>,
                now: Nanos,
            ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
                (**self).run(op, request, now)
            }

            fn run_async<'a>(
                &'a self,
                op: Op,
                request: &'a Request<'a>,
                now: Nanos,
            ) -> impl Future<Output = Result<Option<PolicyDecision>, InsufficientCapacity>>
                   + Send
                   + 'a {
                (**self).run_async(op, request, now)
            }

            #[inline]
            fn check_at(
                &self,
                request: &Request<'_>,
                now: Nanos,
            ) -> Result<PolicyDecision, InsufficientCapacity> {
                (**self).check_at(request, now)
            }

            #[inline]
            fn allow(
                &self,
                client: &str,
                endpoint: &str,
                cost: u32,
            ) -> Result<PolicyDecision, InsufficientCapacity> {
                (**self).allow(client, endpoint, cost)
            }

            #[inline]
            fn peek(
                &self,
                client: &str,
                endpoint: &str,
                cost: u32,
            ) -> Result<PolicyDecision, InsufficientCapacity> {
                (**self).peek(client, endpoint, cost)
            }

            #[inline]
            fn allow_into(
                &self,
                client: &str,
                endpoint: &str,
                cost: u32,
                decision: &mut PolicyDecision,
            ) -> Result<(), InsufficientCapacity> {
                (**self).allow_into(client, endpoint, cost, decision)
            }

            #[inline]
            fn allow_into_with<E: AsRef<str>>(
                &self,
                client: &str,
                endpoint: impl FnOnce() -> E,
                cost: u32,
                decision: &mut PolicyDecision,
            ) -> Result<(), InsufficientCapacity> {
                (**self).allow_into_with(client, endpoint, cost, decision)
            }
        }
    )+};
}

// An `Arc` is `Sync` only over a `Send + Sync` value.
forward_policy_check!(&P, std::sync::Arc<P>: Send);

/// One request to check: who, where, how many permits.
///
/// `divisor` is how much the client's limits are reduced (1 = not at all); the
/// [`AdaptivePenalty`](super::AdaptivePenalty) decorator raises it for a penalized client,
/// and the policy charges `cost · divisor` permits per tier (capped at the tier's largest
/// cost).
///
/// ```
/// use tollgate::policy::Request;
/// let r = Request::new("acct_123", "/search", 1);
/// assert_eq!((r.client, r.endpoint, r.cost, r.divisor), ("acct_123", "/search", 1, 1));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request<'a> {
    /// The client (API key, user id, IP).
    pub client: &'a str,
    /// The endpoint (route).
    pub endpoint: &'a str,
    /// Permits the request consumes.
    pub cost: u32,
    /// Limit divisor (1 = full limits).
    pub divisor: u32,
}

impl<'a> Request<'a> {
    /// A request of `cost` permits with full limits.
    pub const fn new(client: &'a str, endpoint: &'a str, cost: u32) -> Request<'a> {
        Request {
            client,
            endpoint,
            cost,
            divisor: 1,
        }
    }

    /// The same request with limits divided by `divisor` (at least 1).
    pub const fn with_divisor(mut self, divisor: u32) -> Request<'a> {
        self.divisor = if divisor == 0 { 1 } else { divisor };
        self
    }
}
