//! [`Policy`]: rules per client, endpoint and (client, endpoint), checked all-or-nothing,
//! reloadable while traffic flows.

use std::sync::{Arc, Mutex, PoisonError};

use tollgate_core::{Clock, InsufficientCapacity, Nanos};

use super::denied_record::{DeniedRecord, DEFAULT_LIMITED_RECORD};
use super::events;
use super::planning::{plan_request, record_plan};
use super::published::{Active, Published};
use super::rule_ids::{assign_ids, Registry};
use super::warm::Warm;
use super::{
    InProcess, Op, Plan, PolicyCheck, PolicyConfig, PolicyConfigError, PolicyDecision,
    ReloadReport, ReloadStep, Request, RuleId, RuleSet, Store,
};

/// The gateway-facing limiter: a [`RuleSet`] checked all-or-nothing, swappable at runtime.
///
/// `allow(client, endpoint, cost)` checks every tier of every matching rule (see
/// [`RuleSet`] for which rules match) and admits only if all admit. When one denies, no
/// other keeps a permit. [`reload`](Self::reload) swaps the rules without a restart and
/// without losing any key's state.
///
/// ```
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 20
///     window = "1m"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let d = policy.allow("acct_123", "/search", 1)?;
/// assert!(d.allowed());
/// assert_eq!(d.remaining(), 19);
/// assert_eq!(d.reset_after(), Nanos::from_secs(3)); // one emission interval to refill
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ## Where the state lives: a store
///
/// The policy matches a request to its rules and compiles a plan of tiers; a [`Store`]
/// decides the plan all or nothing and keeps the per-key state. The default,
/// [`InProcess`], keeps it in this process, lock-free (its docs describe how a multi-tier
/// check stays all or nothing); [`store`](Self::store) puts the same rules on another.
///
/// ## Hot reload
///
/// [`reload`](Self::reload) validates the new config, then publishes it atomically and
/// returns: it never waits for a check. Checks in flight finish on the set they started
/// with, which is reclaimed once the last of them is done (a check holds its set on its own
/// cache line: no shared reference count, no shared write). State is keyed by
/// (rule name, tier name): every tier whose names survive keeps its per-key state, so a key
/// keeps its state across the swap. Where a tier's algorithm or numbers changed, the tier
/// gets a new store, and each key's state is converted when a request first touches it
/// there (and carried over when one first records something): at the request's time,
/// exactly as the Redis store converts a state written under another version, so both
/// answer the same trace identically. No sweep: checks of keys already in place never
/// wait, and nothing is lost or double-counted (the protocol is in the `store::tier`
/// module docs):
///
/// - **same algorithm, new numbers** — the key keeps exactly the permits it has used:
///   GCRA / token bucket / leaky bucket keep their debt in permits (`debt · T_new / T_old`,
///   rounded against the client); the fixed window and the sliding counter keep their
///   counts as they are (same window length), also above a lowered limit; the sliding log
///   keeps the timestamps its old parameters still count, up to `limit + 4096` of them.
///   *A raised limit* therefore takes effect on the next request (acct_123 with 100 of
///   100/min used moves to 100 of 500/min used: 400 remaining). *A lowered limit* never
///   hands out a fresh burst: a key that used more than the new limit is denied until
///   enough has refilled at the new rate or left the window.
/// - **changed algorithm (or window length of a window algorithm)** — the key starts
///   conservatively: its used count under the old algorithm (`limit − remaining`, rounded
///   against the client) is recorded, at the instant the key is converted, in a fresh
///   state of the new one: a bucket's debt, a window's count in the current window, as
///   many log entries. A key that was exhausted stays exhausted; none gains a fresh
///   burst, but the new algorithm's own refill (or window boundary) applies from then on.
/// - **nothing is capped at the new limit** (a count saturates only where its packed
///   layout is full: 2^35 − 1 for a one-minute fixed window, the log's `limit + 4096`), so
///   flipping a rule down and up again, with refunds, charges or settled reservations in
///   between, never grants the same permits twice: 100 used of 100/min, lowered to
///   10/min, one refunded, raised back to 100/min, leaves exactly 1. And a take converted
///   and then refunded is the state converted without it, for every pair of algorithms,
///   so an undo may be given back as a refund to a key that has already moved.
///
/// Renaming a rule or tier starts it fresh; removing one drops its state. A changed
/// `capacity` (or laundering guard) is a changed tier: it gets a table of the new size, and
/// each key's state is carried over to it as above.
// Laid out for a check that finds the caches cold: what every check reads first (the
// clock, the set in force: one cache line for `TscClock`; then the store, and the warm
// hints on lines of their own, fetched with the first: see `warm`), the rest after;
// aligned to a line, so that those never share one with the `Arc`'s counts.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Policy<C, S = InProcess> {
    clock: C,
    /// The set in force, and every replaced set still held by a check or a decision (see
    /// `published`).
    published: Published<RuleSet>,
    store: S,
    /// The lines a check reads past the first few, fetched together (see `warm`).
    warm: Warm,
    /// The (rule, client) pairs checks denied recently: the listing's candidates (see
    /// `denied_record`).
    denied: DeniedRecord,
    registry: Mutex<Registry>,
    /// A reload step switched off for a loom model's broken twin.
    #[cfg(tollgate_loom)]
    fault: Option<super::PolicyFault>,
}

impl<C: Clock> Policy<C> {
    /// A policy over a validated `config`, reading time from `clock`.
    pub fn new(config: PolicyConfig, clock: C) -> Result<Policy<C>, PolicyConfigError> {
        let mut set = RuleSet::compile(&config)?;
        let mut registry = Registry::default();
        assign_ids(&mut registry, &mut set)?;
        events::built(set.rules().len());
        let published = Published::new(Arc::new(set));
        Ok(Policy {
            clock,
            registry: Mutex::new(registry),
            store: InProcess::new(),
            warm: Warm::new(),
            published,
            denied: DeniedRecord::new(DEFAULT_LIMITED_RECORD),
            #[cfg(tollgate_loom)]
            fault: None,
        })
    }

    /// A policy from a TOML rules file.
    pub fn from_toml(text: &str, clock: C) -> Result<Policy<C>, PolicyConfigError> {
        Policy::new(PolicyConfig::from_toml(text)?, clock)
    }

    /// Turns the in-process store's precheck (step 1 of its all-or-nothing scheme) off or
    /// on. Off, every deny takes and compensates; only useful to exercise compensation in
    /// tests (the crate's own, and the loom models'), so it exists only in them.
    #[cfg(any(test, tollgate_loom))]
    #[doc(hidden)]
    pub fn with_precheck(mut self, precheck: bool) -> Policy<C> {
        self.store = self.store.with_precheck(precheck);
        self
    }

    /// How many checks had to compensate a partial take (a tier denied after another had
    /// admitted, racing a concurrent caller): [`InProcess::compensations`].
    pub fn compensations(&self) -> u64 {
        self.store.compensations()
    }
}

impl<C, S> Policy<C, S> {
    /// The same policy (rules, clock, state of the rules) on another store: where per-key
    /// state lives from now on. Call it before serving traffic: state already recorded in
    /// the previous store stays there.
    pub fn store<T: Store>(self, store: T) -> Policy<C, T> {
        Policy {
            clock: self.clock,
            registry: self.registry,
            store,
            // The lines of the old store's tables are not this one's.
            warm: Warm::new(),
            published: self.published,
            denied: self.denied,
            #[cfg(tollgate_loom)]
            fault: self.fault,
        }
    }

    /// Switches a step of the reload protocol off (loom models' broken twins only).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_inject(&mut self, fault: super::PolicyFault) {
        self.fault = Some(fault);
    }

    /// The store the policy's state lives in.
    pub fn backend(&self) -> &S {
        &self.store
    }

    /// The same policy recording at most `capacity` (rule, client) pairs its checks denied
    /// (default [`DEFAULT_LIMITED_RECORD`](super::DEFAULT_LIMITED_RECORD), rounded up to a
    /// multiple of 4, at most [`MAX_LIMITED_RECORD`](super::MAX_LIMITED_RECORD); 0 records
    /// none): the in-process candidates of a listing of the clients currently limited
    /// ([`limited`](Self::limited)). Memory is fixed by the capacity, allocated by the
    /// first denial (64 bytes a slot): each slot holds one pair's names, up to
    /// [`MAX_RECORDED_NAME`](super::MAX_RECORDED_NAME) bytes each (longer ones are not
    /// recorded). A denial already recorded costs a check a few atomic loads; a new one
    /// takes a slot's lock if it is free (and is not recorded if it is not). Pairs recorded
    /// so far are forgotten.
    pub fn with_limited_record(mut self, capacity: usize) -> Policy<C, S> {
        self.denied = DeniedRecord::new(capacity);
        self
    }

    /// The record of denied pairs.
    #[inline]
    pub(super) fn denied_record(&self) -> &DeniedRecord {
        &self.denied
    }
}

impl<C: Clock, S: Store> Policy<C, S> {
    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Swaps in a new rule set, keeping every surviving tier's per-key state (see the type
    /// docs), and reports what it changed (rules added, removed, changed). On error nothing
    /// changes. A config with no rules is an error unless it says so
    /// ([`PolicyConfig::allow_empty`]).
    ///
    /// Never waits on a check: it publishes the new set and returns. Checks already under
    /// way (an awaited one may be suspended in its store call) finish on the set they
    /// started with, which is reclaimed when the last of them, and the last decision
    /// pointing into it, is gone. Safe to call from async code, on any runtime thread.
    ///
    /// Each reload is reported: a `tracing` event (`info` when applied, `warn` when
    /// refused; feature `tracing`) and the `metrics` counter
    /// `tollgate_policy_reloads_total{outcome}` with the gauge `tollgate_policy_rules`
    /// (feature `metrics`).
    pub fn reload(&self, config: PolicyConfig) -> Result<ReloadReport, PolicyConfigError> {
        match self.swap_in(&config) {
            Ok((report, generation, rules)) => {
                events::reloaded(Ok((&report, generation, rules)));
                Ok(report)
            }
            Err(error) => {
                events::reloaded(Err(&error));
                Err(error)
            }
        }
    }

    /// What [`reload`](Self::reload) of `config` would change, without changing anything:
    /// the same checks (an error is the one the reload would give, an empty set refused
    /// unless it says [`allow_empty`](PolicyConfig::allow_empty)) and the same report, for
    /// a tool that refuses a suspicious change before it is in force. Nothing is logged or
    /// counted. A reload in between makes the report stale: it compares with the set in
    /// force now.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy, PolicyConfig};
    /// use tollgate::Nanos;
    /// let rules = "[[rules]]\nname = \"api\"\nlimit = 100\nwindow = \"1m\"\n";
    /// let policy = Policy::from_toml(rules, FnClock(|| Nanos::ZERO))?;
    /// let edited = PolicyConfig::from_toml(&rules.replace("100", "1"))?;
    /// let report = policy.preview(&edited)?;
    /// assert_eq!(report.changed(), ["api"]);
    /// if report.removed().is_empty() && report.changed().len() <= 1 {
    ///     policy.reload(edited)?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn preview(&self, config: &PolicyConfig) -> Result<ReloadReport, PolicyConfigError> {
        let set = RuleSet::compile(config)?;
        Ok(ReloadReport::between(&self.published.load_full(), &set))
    }

    /// [`reload`](Self::reload)'s work: what changed, the generation now in force and how
    /// many rules it has.
    fn swap_in(
        &self,
        config: &PolicyConfig,
    ) -> Result<(ReloadReport, u64, usize), PolicyConfigError> {
        let mut set = RuleSet::compile(config)?;
        // One reload at a time, so each adopts the state of the set it replaces. (Held for
        // the compile's bookkeeping and the publish only: nothing in it waits on a check.)
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        assign_ids(&mut registry, &mut set)?;
        let old = self.published.load_full();
        let report = ReloadReport::between(&old, &set);
        set.adopt_state(&old);
        self.store.reload(ReloadStep::Prepare {
            old: &old,
            new: &set,
        });
        drop(old);
        let set = Arc::new(set);
        #[cfg(tollgate_loom)]
        let retire_first = self.fault != Some(super::PolicyFault::RetireAfterPublish);
        #[cfg(not(tollgate_loom))]
        let retire_first = true;
        let mut generation = 0;
        // The replaced stores are retired before the new set is visible: a check still on
        // the old set then inserts no key there that a check on the new set could miss (see
        // `store::tier`).
        let publish = |generation| {
            self.store.reload(ReloadStep::Publish {
                new: &set,
                generation,
            });
        };
        self.published.publish(Arc::clone(&set), |number| {
            generation = number;
            if retire_first {
                publish(number);
            }
        });
        if !retire_first {
            publish(generation);
        }
        #[cfg(tollgate_loom)]
        if self.fault == Some(super::PolicyFault::ReclaimAtPublish) {
            self.published.reclaim_ignoring_holds();
        }
        // Keys move one by one, each converted when a request that records something first
        // touches it (no sweep): the same instant the Redis store rewrites it at. Old
        // generations nothing can write to any more are dropped now.
        self.store.reload(ReloadStep::Done {
            new: &set,
            now: self.clock.now(),
            oldest_held: self.published.oldest_held(),
        });
        Ok((report, generation, set.rules().len()))
    }

    /// [`reload`](Self::reload) from TOML.
    pub fn reload_toml(&self, text: &str) -> Result<ReloadReport, PolicyConfigError> {
        match PolicyConfig::from_toml(text) {
            Ok(config) => self.reload(config),
            Err(error) => {
                // Refused before a rule set could be compiled: reported all the same.
                events::reloaded(Err(&error));
                Err(error)
            }
        }
    }

    /// The rule set in force.
    pub fn rule_set(&self) -> Arc<RuleSet> {
        self.published.load_full()
    }

    /// The name of rule `id`, if it is in force.
    pub fn rule_name(&self, id: RuleId) -> Option<String> {
        let set = self.published.enter();
        set.rules()
            .iter()
            .find(|rule| rule.id() == id)
            .map(|rule| rule.name().to_owned())
    }

    /// Checks `cost` permits for `client` on `endpoint` now (one clock read).
    pub fn allow(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.check_with(&Request::new(client, endpoint, cost), || self.clock.now())
    }

    /// [`allow`](Self::allow) at a given `now`.
    pub fn allow_at(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.check_with(&Request::new(client, endpoint, cost), || now)
    }

    /// What `cost` permits would get now; consumes nothing.
    pub fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.peek_with(&Request::new(client, endpoint, cost), || self.clock.now())
    }

    /// Gives `cost` permits back to every matching tier now.
    pub fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        self.record(
            Op::Refund,
            &Request::new(client, endpoint, cost),
            self.clock.now(),
        )
    }

    /// Forgets `client`'s state under every tier a request on `endpoint` matches: the
    /// client starts afresh there, as a key never seen ([`PolicyCheck::reset_at`]).
    /// A tier kept for every client at once (`per = "global"`) is not the client's, and
    /// is left alone. What a client has used is read with a [`peek`](Self::peek) of cost
    /// 0, which consumes nothing.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 2
    ///     window = "1m"
    /// "#, FnClock(|| Nanos::ZERO))?;
    /// policy.allow("acct_123", "/", 2)?;
    /// assert_eq!(policy.peek("acct_123", "/", 0)?.remaining(), 0);
    /// policy.reset("acct_123", "/");
    /// assert_eq!(policy.peek("acct_123", "/", 0)?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self, client: &str, endpoint: &str) {
        self.record(
            Op::Reset,
            &Request::new(client, endpoint, 0),
            self.clock.now(),
        )
    }
}

/// Checks that await the store: for async servers whose store waits on the network
/// (`tollgate_redis::RedisStore`), so the round trip holds no worker thread.
/// Same rules, tiers, clock reading and decisions as the synchronous methods.
impl<C: Clock + Sync, S: Store> Policy<C, S> {
    /// [`allow`](Self::allow), awaiting the store.
    ///
    /// While it awaits, the check holds the rule set it matched: a
    /// [`reload`](Self::reload) meanwhile does not wait for it, and the check finishes on
    /// that set.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 1
    ///     window = "1m"
    /// "#, FnClock(|| Nanos::ZERO))?;
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// let (first, second) = runtime.block_on(async {
    ///     (policy.allow_async("a", "/", 1).await, policy.allow_async("a", "/", 1).await)
    /// });
    /// assert!(first?.allowed() && !second?.allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn allow_async(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.decide_async(Op::Check, &Request::new(client, endpoint, cost), None)
            .await
    }

    /// [`peek`](Self::peek), awaiting the store.
    pub async fn peek_async(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.decide_async(Op::Peek, &Request::new(client, endpoint, cost), None)
            .await
    }

    /// [`refund`](Self::refund), awaiting the store.
    pub async fn refund_async(&self, client: &str, endpoint: &str, cost: u32) {
        let request = Request::new(client, endpoint, cost);
        self.record_async(Op::Refund, &request, self.clock.now())
            .await
    }

    /// [`reset`](Self::reset), awaiting the store.
    pub async fn reset_async(&self, client: &str, endpoint: &str) {
        let request = Request::new(client, endpoint, 0);
        self.record_async(Op::Reset, &request, self.clock.now())
            .await
    }

    /// Records `cost` permits for `client` on `endpoint` now whatever the limits say (work
    /// already done; [`PolicyCheck::charge_at`]), awaiting the store.
    pub async fn charge_async(&self, client: &str, endpoint: &str, cost: u32) {
        let request = Request::new(client, endpoint, cost);
        self.record_async(Op::Charge, &request, self.clock.now())
            .await
    }

    /// [`decide`](Self::decide), awaiting the store's check (or peek) at `now` (the
    /// clock's, read once the rules matched, if `None`); the rule set is held by an owned
    /// reference while it waits.
    async fn decide_async(
        &self,
        op: Op,
        request: &Request<'_>,
        now: Option<Nanos>,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let mut decision = PolicyDecision::empty();
        let decided: Result<(), InsufficientCapacity> = async {
            let decision = &mut decision;
            decide_body!(
                self,
                decision,
                request.divisor,
                op == Op::Check,
                |set, plan| plan_request(plan, set, request),
                |plan, outcomes| {
                    let now = now.unwrap_or_else(|| self.clock.now());
                    self.store.run_async(op, &plan, now, outcomes).await
                }
            )
        }
        .await;
        decided.map(|()| decision)
    }

    /// [`record`](Self::record), awaiting the store.
    async fn record_async(&self, op: Op, request: &Request<'_>, now: Nanos) {
        let set = self.active_set();
        if let Some(plan) = record_plan(op, &set, request) {
            // A refund or a charge decides nothing, so it cannot fail.
            let _ = self.store.run_async(op, &plan, now, &mut []).await;
        };
    }
}

impl<C: Clock, S: Store> Policy<C, S> {
    /// A check of `request` at the time `now()` returns, called once, after the rules are
    /// matched and the tiers' state is being fetched (so the clock read overlaps the
    /// cache misses instead of preceding them); not at all if no rule matches.
    #[inline(always)]
    fn check_with(
        &self,
        request: &Request<'_>,
        now: impl FnOnce() -> Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.decide(Op::Check, request, now)
    }

    /// [`check_with`](Self::check_with)'s peek.
    #[inline(always)]
    fn peek_with(
        &self,
        request: &Request<'_>,
        now: impl FnOnce() -> Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.decide(Op::Peek, request, now)
    }

    /// A check or peek of `request` (`op`): the plan of the tiers it matches, decided by
    /// the store at `now()`, combined.
    #[inline(always)]
    fn decide(
        &self,
        op: Op,
        request: &Request<'_>,
        now: impl FnOnce() -> Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let mut decision = PolicyDecision::empty();
        self.decide_into(op, request, now, &mut decision)?;
        Ok(decision)
    }

    /// [`decide`](Self::decide) into `decision`, which it replaces (emptied on an error).
    #[inline(always)]
    fn decide_into(
        &self,
        op: Op,
        request: &Request<'_>,
        now: impl FnOnce() -> Nanos,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        decide_body!(
            self,
            decision,
            request.divisor,
            op == Op::Check,
            |set, plan| plan_request(plan, set, request),
            |plan, outcomes| self.store.run(op, &plan, now(), outcomes)
        )
    }

    /// A refund or a charge of `request` (`op`) at `now`.
    fn record(&self, op: Op, request: &Request<'_>, now: Nanos) {
        let set = self.active_set();
        if let Some(plan) = record_plan(op, &set, request) {
            // A refund or a charge decides nothing, so it cannot fail.
            let _ = self.store.run(op, &plan, now, &mut []);
        };
    }
}

impl<C: Clock + Sync, S: Store> PolicyCheck for Policy<C, S> {
    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn names_route_templates(&self) -> bool {
        self.published.enter().names_route_templates()
    }

    #[inline]
    fn run(
        &self,
        op: Op,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        if op.decides() {
            self.decide(op, request, || now).map(Some)
        } else {
            self.record(op, request, now);
            Ok(None)
        }
    }

    async fn run_async<'a>(
        &'a self,
        op: Op,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> Result<Option<PolicyDecision>, InsufficientCapacity> {
        if op.decides() {
            self.decide_async(op, request, Some(now)).await.map(Some)
        } else {
            self.record_async(op, request, now).await;
            Ok(None)
        }
    }

    // The forms of the hot path, straight to the check (no operation to match on); the
    // convenience forms read the clock after matching the rules (see `check_with`).
    #[inline]
    fn check_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.check_with(request, || now)
    }

    #[inline]
    fn allow(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Policy::allow(self, client, endpoint, cost)
    }

    #[inline]
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Policy::peek(self, client, endpoint, cost)
    }

    #[inline]
    fn allow_into(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        self.allow_into_with(client, || endpoint, cost, decision)
    }

    // The endpoint is named once the set is held, if the set reads it (else the request's
    // endpoint is "", which such a set never looks at).
    #[inline]
    fn allow_into_with<E: AsRef<str>>(
        &self,
        client: &str,
        endpoint: impl FnOnce() -> E,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        let mut named = None;
        decide_body!(
            self,
            decision,
            1,
            true,
            |set, plan| {
                let endpoint = if set.reads_endpoints() {
                    AsRef::<str>::as_ref(&*named.insert(endpoint()))
                } else {
                    ""
                };
                plan_request(plan, set, &Request::new(client, endpoint, cost))
            },
            |plan, outcomes| self.store.run(Op::Check, &plan, self.clock.now(), outcomes)
        )
    }
}

/// The one body of a check or peek, blocking ([`Policy::decide`]) or awaited
/// ([`Policy::decide_async`]), of one request or of a batch (`batch.rs`): the plan of the
/// tiers the request(s) match (`fill`, given the set and the plan), decided by `run` (the
/// store's operation on `plan`, writing `outcomes`; awaited or not), combined with
/// `divisor`; the decision holds the rule set its labels live in. `fill` answers the
/// listing that decides the request(s) without the store, if one does (then the store is
/// not asked). `fill` and `run` answer the caller's error type. With `note` (a check),
/// a denied decision's denying per-client tiers are recorded (`note_denied`: the
/// candidates of `Policy::limited`), at the cost of one branch when admitted.
macro_rules! decide_body {
    (
        $policy:ident, $decision:ident, $divisor:expr, $note:expr,
        |$set:ident, $filling:ident| $fill:expr,
        |$plan:ident, $outcomes:ident| $run:expr
    ) => {{
        // Before the set is entered: what the chain will read is on its way meanwhile.
        $policy.warm().fetch();
        let set = $policy.active_set();
        $decision.clear();
        // The plan borrows the set, which the decision takes after it.
        {
            let mut $plan = Plan::new();
            let listed = {
                let ($set, $filling) = (&*set, &mut $plan);
                $fill?
            };
            if let Some(at) = listed {
                drop($plan);
                $decision.list(at, &set);
                // The listing lives in the set: the decision keeps it.
                $decision.hold(set.into_hold());
                return Ok(());
            }
            $decision.label(&$plan);
            if $plan.is_empty() {
                $decision.settle($divisor);
                return Ok(());
            }
            let $outcomes = $decision.outcomes_mut();
            if let Err(e) = $run {
                // The labels point into the set, which is not held: empty again.
                $decision.clear();
                return Err(e);
            }
            $decision.settle($divisor);
            $policy.warm().follow(&set, &$plan);
            if $note && !$decision.allowed() {
                $policy.note_denied(&$plan, $decision.tiers());
            }
        }
        // The labels point into the set: the decision keeps it.
        $decision.hold(set.into_hold());
        Ok(())
    }};
}
pub(super) use decide_body;

impl<C, S> Policy<C, S> {
    /// The lines a check reads past the first few (see `warm`).
    #[inline(always)]
    pub(super) fn warm(&self) -> &Warm {
        &self.warm
    }

    /// The rule set in force, held until the returned value drops (see the `published`
    /// module docs). Held across an awaited store call too: a reload meanwhile does not
    /// wait, and the set lives until the call is done.
    #[inline]
    pub(super) fn active_set(&self) -> Active<'_, RuleSet> {
        self.published.enter()
    }
}
