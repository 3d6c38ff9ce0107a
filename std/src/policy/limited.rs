//! A bounded listing of the clients currently limited ([`Policy::limited`]): the
//! candidates — the (rule, client) pairs the policy's checks denied recently (its
//! `DeniedRecord`) and those the store finds in its own state
//! ([`Store::scan_clients`]) — each peeked under its rule at `now`, charging nothing, and
//! kept if a check of one permit would be denied; [`LimitedClient`], [`LimitedClients`],
//! [`ListBounds`].

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tollgate_core::{Clock, InsufficientCapacity, Nanos};

use super::denied_record::{pair_fingerprint, DeniedRecord};
use super::limiter::decide_body;
use super::planning::tier_cost;
use super::store::fingerprint;
use super::{
    Op, Partition, Plan, PlannedTier, Policy, PolicyDecision, Request, RuleSet, ScanError, Store,
    StoreScan, TierOutcome,
};

/// The default of [`ListBounds::max_keys`]: 10 000 keys examined by a store's scan.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// The default of [`ListBounds::max_time`]: 2 s of peeks (on Redis each is a round trip).
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(2);

/// How much a listing ([`Policy::limited`]) may answer and do.
///
/// ```
/// use std::time::Duration;
/// use tollgate::policy::{ListBounds, DEFAULT_MAX_KEYS};
/// let bounds = ListBounds::new(100);
/// assert_eq!((bounds.max, bounds.max_keys), (100, DEFAULT_MAX_KEYS));
/// assert_eq!(bounds.with_max_keys(500).max_keys, 500);
/// assert_eq!(bounds.with_max_time(Duration::from_millis(300)).max_time, Duration::from_millis(300));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ListBounds {
    /// The most clients answered.
    pub max: usize,
    /// The most keys a store's own scan examines ([`Store::scan_clients`]).
    pub max_keys: usize,
    /// The longest the candidates are peeked for (the scan is bounded by `max_keys`, each
    /// of its calls by the store's timeout): past it the listing answers what it found,
    /// incomplete, so an operator's request cannot hold a server for long.
    pub max_time: Duration,
}

impl ListBounds {
    /// At most `max` clients, the store's scan examining at most [`DEFAULT_MAX_KEYS`].
    pub const fn new(max: usize) -> ListBounds {
        ListBounds {
            max,
            max_keys: DEFAULT_MAX_KEYS,
            max_time: DEFAULT_MAX_TIME,
        }
    }

    /// The same bounds, the store's scan examining at most `max_keys` keys.
    pub const fn with_max_keys(self, max_keys: usize) -> ListBounds {
        ListBounds { max_keys, ..self }
    }

    /// The same bounds, the candidates peeked for at most `max_time`.
    pub const fn with_max_time(self, max_time: Duration) -> ListBounds {
        ListBounds { max_time, ..self }
    }
}

/// A client a check would deny now under one rule ([`Policy::limited`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitedClient {
    /// The rule's name.
    pub rule: String,
    /// The client, as its requests give it.
    pub client: String,
    /// What a check of one permit under the rule's tiers gets now (denied), peeked:
    /// each tier's limit, remaining, `reset_after` and `retry_after`
    /// ([`tiers`](PolicyDecision::tiers)), and the combined decision. As a peek reports
    /// them: a denying tier its state now (nothing left), a tier that would admit what
    /// that one permit would leave.
    pub decision: PolicyDecision,
}

/// The answer of [`Policy::limited`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitedClients {
    /// The clients limited now, by rule name then client, at most
    /// [`ListBounds::max`].
    pub clients: Vec<LimitedClient>,
    /// Whether every candidate was looked at: `false` if the listing stopped at
    /// [`ListBounds::max`] or [`ListBounds::max_time`], or the store's scan at
    /// [`ListBounds::max_keys`] (more clients may be limited than answered).
    pub complete: bool,
}

/// The candidates of one listing, each once and in order, and whether they are all there
/// is to look at.
struct Candidates {
    pairs: BTreeSet<(String, String)>,
    complete: bool,
}

impl Candidates {
    /// The pairs `record` holds and those `scanned` found (`None`: the store lists none).
    fn of(record: &DeniedRecord, scanned: Option<StoreScan>) -> Candidates {
        let mut pairs: BTreeSet<(String, String)> = record
            .pairs()
            .into_iter()
            .map(|p| (p.rule, p.client))
            .collect();
        let mut complete = true;
        if let Some(scan) = scanned {
            complete = scan.complete;
            pairs.extend(scan.clients.into_iter().map(|c| (c.rule, c.client)));
        }
        Candidates { pairs, complete }
    }
}

/// The plan of a check of one permit by `client` under the rule named `rule` in `set`:
/// empty if no such rule is in force, it is global or has no limits, or one permit is
/// more than a tier can admit.
fn plan_pair<'a>(plan: &mut Plan<'a>, set: &'a RuleSet, rule: &str, client: &'a str) {
    let Some(rule) = set.rule(rule) else { return };
    if rule.partition() != Partition::Client || rule.special().is_some() {
        return;
    }
    let key = rule.key_id(fingerprint(client));
    let one = Request::new(client, "", 1);
    for tier in rule.tiers() {
        let Ok(cost) = tier_cost(&one, tier.max_cost()) else {
            *plan = Plan::new();
            return;
        };
        let planned = PlannedTier {
            rule,
            tier,
            key,
            client,
            cost,
        };
        // A rule has at most MAX_TIERS_PER_RULE tiers: they fit.
        let _ = plan.push(planned);
    }
}

impl<C, S> Policy<C, S> {
    /// Records the first pair of `plan` whose per-client tier denied (`outcomes`, in the
    /// plan's order): the listing's candidate. One per check, so a flood of denials pays
    /// for one (a client denied by two rules is listed under the first). Called on the deny
    /// path of a check only.
    #[inline]
    pub(super) fn note_denied(&self, plan: &Plan<'_>, outcomes: &[TierOutcome]) {
        let denier = plan.iter().zip(outcomes).find(|(p, outcome)| {
            !outcome.decision.allowed && p.rule.partition() == Partition::Client
        });
        if let Some((p, _)) = denier {
            let pair = pair_fingerprint(p.rule.id().0, p.key);
            self.denied_record().note(pair, p.rule.name(), p.client);
        }
    }

    /// How many (rule, client) pairs the record of denied ones holds at most
    /// ([`with_limited_record`](Self::with_limited_record)).
    pub fn limited_record_capacity(&self) -> usize {
        self.denied_record().capacity()
    }
}

impl<C: Clock, S: Store> Policy<C, S> {
    /// At most `bounds.max` clients a check would deny now, each with the rule and every
    /// tier's state (peeked: nothing is charged), by rule name then client.
    ///
    /// The candidates are the (rule, client) pairs this policy's checks denied recently
    /// (a bounded record, [`with_limited_record`](Self::with_limited_record)) and those the
    /// store finds in its own state ([`Store::scan_clients`]: on Redis, a `SCAN` of the
    /// prefix, so also clients other processes limited). Each is peeked under its rule as
    /// a check of one permit would be decided now, at the rule's own limits (a
    /// decorator's reduced limits are not applied), and listed if denied: a client whose
    /// limit has refilled, or that was [`reset`](Self::reset), is not. Only per-client
    /// rules are listed (a global rule limits every client alike), and no list entry or ban
    /// (they are in the rules). The work is bounded: at most the record's capacity plus
    /// `bounds.max_keys` peeks, stopping at `bounds.max` clients.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, ListBounds, Policy};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "default"
    ///     limit = 1
    ///     window = "1m"
    /// "#, FnClock(|| Nanos::ZERO))?;
    /// policy.allow("alice", "/", 1)?;
    /// assert!(!policy.allow("alice", "/", 1)?.allowed());
    /// let limited = policy.limited(ListBounds::new(10))?;
    /// assert!(limited.complete);
    /// assert_eq!(limited.clients.len(), 1);
    /// let alice = &limited.clients[0];
    /// assert_eq!((alice.rule.as_str(), alice.client.as_str()), ("default", "alice"));
    /// assert_eq!(alice.decision.remaining(), 0);
    /// assert_eq!(alice.decision.retry_after(), Nanos::from_secs(60));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ScanError`] if the store did not answer its scan.
    pub fn limited(&self, bounds: ListBounds) -> Result<LimitedClients, ScanError> {
        let scanned = self.backend().scan_clients(bounds.max_keys)?;
        let candidates = Candidates::of(self.denied_record(), scanned);
        let mut listed = Listed::new(bounds, candidates.complete);
        for (rule, client) in &candidates.pairs {
            if listed.full() {
                break;
            }
            let decision = self.peek_pair(rule, client, self.clock().now());
            listed.add(rule, client, decision);
        }
        Ok(listed.finish(candidates.pairs.len()))
    }

    /// A peek of one permit by `client` under the rule named `rule` at `now`: admitted
    /// with no tier if the rule is not one a client is limited by.
    fn peek_pair(
        &self,
        rule: &str,
        client: &str,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let mut decision = PolicyDecision::empty();
        let peeked: Result<(), InsufficientCapacity> = (|| {
            let decision = &mut decision;
            decide_body!(
                self,
                decision,
                1,
                false,
                |set, plan| {
                    plan_pair(plan, set, rule, client);
                    Ok::<_, InsufficientCapacity>(None)
                },
                |plan, outcomes| self.backend().run(Op::Peek, &plan, now, outcomes)
            )
        })();
        peeked.map(|()| decision)
    }
}

impl<C: Clock + Sync, S: Store> Policy<C, S> {
    /// [`limited`](Self::limited), awaiting the store (its scan and each peek).
    ///
    /// # Errors
    ///
    /// [`ScanError`] if the store did not answer its scan.
    pub async fn limited_async(&self, bounds: ListBounds) -> Result<LimitedClients, ScanError> {
        let scanned = self.backend().scan_clients_async(bounds.max_keys).await?;
        let candidates = Candidates::of(self.denied_record(), scanned);
        let mut listed = Listed::new(bounds, candidates.complete);
        for (rule, client) in &candidates.pairs {
            if listed.full() {
                break;
            }
            let decision = self.peek_pair_async(rule, client, self.clock().now()).await;
            listed.add(rule, client, decision);
        }
        Ok(listed.finish(candidates.pairs.len()))
    }

    /// [`peek_pair`](Self::peek_pair), awaiting the store.
    async fn peek_pair_async(
        &self,
        rule: &str,
        client: &str,
        now: Nanos,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let mut decision = PolicyDecision::empty();
        let peeked: Result<(), InsufficientCapacity> = async {
            let decision = &mut decision;
            decide_body!(
                self,
                decision,
                1,
                false,
                |set, plan| {
                    plan_pair(plan, set, rule, client);
                    Ok::<_, InsufficientCapacity>(None)
                },
                |plan, outcomes| self
                    .backend()
                    .run_async(Op::Peek, &plan, now, outcomes)
                    .await
            )
        }
        .await;
        peeked.map(|()| decision)
    }
}

/// A listing being made: the clients found so far, within its bounds.
struct Listed {
    bounds: ListBounds,
    /// When the peeks stop (`bounds.max_time` from the start; `None`: past the clock's
    /// range, never).
    deadline: Option<Instant>,
    clients: Vec<LimitedClient>,
    /// Candidates looked at.
    looked: usize,
    /// Whether the store's scan saw every key.
    scanned_all: bool,
}

impl Listed {
    fn new(bounds: ListBounds, scanned_all: bool) -> Listed {
        Listed {
            bounds,
            deadline: Instant::now().checked_add(bounds.max_time),
            clients: Vec::new(),
            looked: 0,
            scanned_all,
        }
    }

    /// Whether it holds `bounds.max` clients, or its time is up.
    fn full(&self) -> bool {
        self.clients.len() >= self.bounds.max || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The peek of (`rule`, `client`): listed if denied (a peek refused as too costly, or
    /// of no rule, lists nothing).
    fn add(
        &mut self,
        rule: &str,
        client: &str,
        peeked: Result<PolicyDecision, InsufficientCapacity>,
    ) {
        self.looked += 1;
        if let Ok(decision) = peeked {
            if !decision.allowed() && !decision.tiers().is_empty() {
                self.clients.push(LimitedClient {
                    rule: rule.to_owned(),
                    client: client.to_owned(),
                    decision,
                });
            }
        }
    }

    /// The answer, out of `candidates`.
    fn finish(self, candidates: usize) -> LimitedClients {
        LimitedClients {
            complete: self.scanned_all && self.looked == candidates,
            clients: self.clients,
        }
    }
}
