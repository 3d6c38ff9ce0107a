//! [`Metered`]: the metrics decorator: allowed and denied counts per rule, lock-free.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tollgate_core::{InsufficientCapacity, Nanos};

use super::{Op, PolicyCheck, PolicyDecision, Request, StripedCounter};

/// Counters of one rule.
#[derive(Debug, Default)]
struct RuleCounters {
    /// The rule's name, as first counted (a copy: the rule set it came from may go).
    name: OnceLock<Arc<str>>,
    allowed: StripedCounter,
    denied: StripedCounter,
}

/// One rule's counts, as read by [`Metered::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleMetrics {
    /// The rule's name.
    pub rule: Arc<str>,
    /// Requests this rule admitted (all its tiers admitted).
    pub allowed: u64,
    /// Requests this rule denied (one of its tiers denied).
    pub denied: u64,
}

/// Wraps any [`PolicyCheck`] and counts, per rule, the requests it admitted and denied,
/// plus overall totals. Counting is a relaxed add on a per-thread, cache-padded stripe: no
/// lock, no shared cache line between cores. Peeks and refunds are not counted.
///
/// Rules are indexed by their [`RuleId`](super::RuleId) (stable across reloads); a rule
/// whose id is `max_rules` or more is counted in the totals only. Ids are given to names
/// in the order a policy first meets them over its lifetime, and a name that leaves the
/// rules and comes back gets a new one: a policy reloaded with many renames can pass
/// `max_rules` ids with few rules in force (the `metrics` counter, keyed by name, is not
/// bounded by it).
///
/// With the `metrics` feature every counted decision is also reported to the
/// [`metrics`](https://docs.rs/metrics) facade as the counter
/// `tollgate_policy_decisions_total{rule, outcome}`.
///
/// ```
/// use tollgate::policy::{FnClock, Metered, Policy, PolicyCheck};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 2
///     window = "1m"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let metered = Metered::new(policy);
/// for _ in 0..3 { metered.allow("a", "/", 1)?; }
/// let rules = metered.snapshot();
/// assert_eq!((&*rules[0].rule, rules[0].allowed, rules[0].denied), ("default", 2, 1));
/// assert_eq!((metered.allowed(), metered.denied()), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Metered<P> {
    inner: P,
    rules: Box<[RuleCounters]>,
    allowed: StripedCounter,
    denied: StripedCounter,
}

impl<P: PolicyCheck> Metered<P> {
    /// Counts for up to 256 rules.
    pub fn new(inner: P) -> Metered<P> {
        Metered::with_max_rules(inner, 256)
    }

    /// Counts for the rules of ids below `max_rules` (see the type's docs).
    pub fn with_max_rules(inner: P, max_rules: usize) -> Metered<P> {
        Metered {
            inner,
            rules: (0..max_rules).map(|_| RuleCounters::default()).collect(),
            allowed: StripedCounter::new(),
            denied: StripedCounter::new(),
        }
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Requests admitted overall.
    pub fn allowed(&self) -> u64 {
        self.allowed.get()
    }

    /// Requests denied overall.
    pub fn denied(&self) -> u64 {
        self.denied.get()
    }

    /// Per-rule counts of every rule that has decided something, by rule id.
    pub fn snapshot(&self) -> Vec<RuleMetrics> {
        self.rules
            .iter()
            .filter_map(|c| {
                c.name.get().map(|rule| RuleMetrics {
                    rule: Arc::clone(rule),
                    allowed: c.allowed.get(),
                    denied: c.denied.get(),
                })
            })
            .collect()
    }

    /// Counts `decision` if `op` is a check (peeks, refunds, charges and resets are not
    /// traffic).
    #[inline]
    fn observe(&self, op: Op, decision: Option<&PolicyDecision>) {
        match (op, decision) {
            (Op::Check, Some(decision)) => self.count(decision),
            (Op::Check, None) | (Op::Peek | Op::Refund | Op::Charge | Op::Reset, _) => {}
        }
    }

    fn count(&self, decision: &PolicyDecision) {
        if decision.allowed() {
            self.allowed.add(1);
        } else {
            self.denied.add(1);
        }
        for (tier, rule_allowed) in decision.rule_outcomes() {
            if let Some(counters) = self.rules.get(tier.rule().index()) {
                counters.name.get_or_init(|| tier.rule_name().into());
                if rule_allowed {
                    counters.allowed.add(1);
                } else {
                    counters.denied.add(1);
                }
            }
            #[cfg(feature = "metrics")]
            metrics::counter!(
                "tollgate_policy_decisions_total",
                "rule" => match self.rules.get(tier.rule().index()).and_then(|c| c.name.get()) {
                    Some(name) => metrics::SharedString::from(Arc::clone(name)),
                    None => metrics::SharedString::from(tier.rule_name().to_owned()),
                },
                "outcome" => if rule_allowed { "allowed" } else { "denied" }
            )
            .increment(1);
        }
    }
}

/// Counts every check's decision, blocking or awaited; peeks, refunds and charges pass
/// through uncounted. (A wrapped decorator that answers `None` to a check through `run` is
/// not counted there; the in-place forms read that as an empty decision, counted admitted.)
impl<P: PolicyCheck> PolicyCheck for Metered<P> {
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
        let decision = self.inner.run(op, request, now)?;
        self.observe(op, decision.as_ref());
        Ok(decision)
    }

    fn run_async<'a>(
        &'a self,
        op: Op,
        request: &'a Request<'a>,
        now: Nanos,
    ) -> impl Future<Output = Result<Option<PolicyDecision>, InsufficientCapacity>> + Send + 'a
    {
        let run = self.inner.run_async(op, request, now);
        async move {
            let decision = run.await?;
            self.observe(op, decision.as_ref());
            Ok(decision)
        }
    }

    // The hot path's forms, each the inner policy's own, counted: a policy writes its
    // decision in place and names the endpoint only if its rules read it; the defaults
    // would go through `run` and name it first.
    #[inline]
    fn check_at(
        &self,
        request: &Request<'_>,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let decision = self.inner.check_at(request, now)?;
        self.count(&decision);
        Ok(decision)
    }

    #[inline]
    fn allow(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let decision = self.inner.allow(client, endpoint, cost)?;
        self.count(&decision);
        Ok(decision)
    }

    #[inline]
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        self.inner.peek(client, endpoint, cost)
    }

    #[inline]
    fn allow_into(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        self.inner.allow_into(client, endpoint, cost, decision)?;
        self.count(decision);
        Ok(())
    }

    #[inline]
    fn allow_into_with<E: AsRef<str>>(
        &self,
        client: &str,
        endpoint: impl FnOnce() -> E,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        self.inner
            .allow_into_with(client, endpoint, cost, decision)?;
        self.count(decision);
        Ok(())
    }
}
