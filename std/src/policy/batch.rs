//! [`Policy::check_all`]: several requests decided as one, all or nothing — every tier of
//! every request admits, or none keeps a permit — in one store call (one round trip on
//! Redis); and its answer, [`BatchDecision`], which tells each request's tiers apart.
//!
//! For a caller whose one event is several limited things at once: Envoy's rate limit
//! service asks about every descriptor of a request together, an API call may count
//! against a user's and an organisation's quota.

use core::fmt;

use tollgate_core::{Clock, InsufficientCapacity};

use super::limiter::decide_body;
use super::planning::{plan_into, tier_cost, Filled};
use super::{Op, Plan, Policy, PolicyDecision, Request, Store, TierOutcome, MAX_TIERS};

/// The answer to [`Policy::check_all`]: the combined decision of every request's tiers
/// ([`decision`](Self::decision): admitted iff all admitted, the tightest tier named, as
/// for one request) and which of its tiers belong to which request
/// ([`tiers_of`](Self::tiers_of)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchDecision {
    /// Every tier of every request, combined: each (tier, key) once.
    pub decision: PolicyDecision,
    /// `requests[i]`: which of `decision.tiers()` request `i` was checked against, bit `j`
    /// for tier `j` (at most [`MAX_TIERS`] = 8 of them: one byte); `requests[..len]` are
    /// written.
    requests: [u8; MAX_TIERS],
    len: u8,
}

impl BatchDecision {
    /// Whether every request is admitted (by every one of its tiers).
    pub fn allowed(&self) -> bool {
        self.decision.allowed()
    }

    /// How many requests were decided.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the batch was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tiers request `i` was checked against, in order, with each tier's own answer
    /// (none for a request no rule matched, or an `i` past the batch). A tier two
    /// requests share (one key: the same client under a rule, or a `per = "global"`
    /// rule) is one tier charged both costs, and both list it.
    pub fn tiers_of(&self, i: usize) -> impl Iterator<Item = &TierOutcome> + '_ {
        let mask = self.requests[..self.len()].get(i).copied().unwrap_or(0);
        self.decision
            .tiers()
            .iter()
            .enumerate()
            .filter(move |(j, _)| mask & (1 << j) != 0)
            .map(|(_, tier)| tier)
    }
}

/// Why [`Policy::check_all`] decided nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchError {
    /// A request costs more than one of its tiers can ever admit.
    Capacity(InsufficientCapacity),
    /// The requests match more than [`MAX_TIERS`] tiers together (or are more than
    /// [`MAX_TIERS`] requests): split the batch, or give fewer tiers to its rules.
    TooLarge {
        /// The requests in the batch.
        requests: usize,
    },
}

impl From<InsufficientCapacity> for BatchError {
    fn from(e: InsufficientCapacity) -> BatchError {
        BatchError::Capacity(e)
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Capacity(e) => write!(f, "{e}"),
            BatchError::TooLarge { requests } => write!(
                f,
                "{requests} requests match more than the {MAX_TIERS} tiers one check decides"
            ),
        }
    }
}

impl std::error::Error for BatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BatchError::Capacity(e) => Some(e),
            BatchError::TooLarge { .. } => None,
        }
    }
}

impl<C: Clock, S: Store> Policy<C, S> {
    /// Checks every request of `requests` as one: admitted only if every tier of every
    /// request admits, and when one denies, no tier of any request keeps a permit. The
    /// store decides them in one call (on one Redis server, one round trip), at one clock
    /// read. Each request is charged at full limits (its `divisor` is not applied). A key
    /// two requests share is charged both costs at once (see
    /// [`tiers_of`](BatchDecision::tiers_of)). How a store keeps all or nothing is its
    /// own: on a Redis Cluster, where one script runs on one master, `tollgate-redis`
    /// sends each client's tiers to their master and has the parts that admitted give
    /// their permits back when another denies.
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy, Request};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "user"
    ///     endpoint = "user"
    ///     limit = 5
    ///     window = "1m"
    ///     [[rules]]
    ///     name = "org"
    ///     endpoint = "org"
    ///     limit = 2
    ///     window = "1m"
    /// "#, FnClock(|| Nanos::ZERO))?;
    /// let call = [Request::new("alice", "user", 1), Request::new("acme", "org", 1)];
    /// assert!(policy.check_all(&call)?.allowed());
    /// assert!(policy.check_all(&call)?.allowed());
    /// let third = policy.check_all(&call)?;
    /// assert!(!third.allowed()); // acme's 2 are spent...
    /// assert_eq!(third.tiers_of(0).next().unwrap().decision.remaining, 3); // ...so alice keeps her third
    /// assert_eq!(third.tiers_of(1).next().unwrap().rule_name(), "org");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`BatchError`]: a request costs more than a tier can admit, or the batch matches
    /// more than [`MAX_TIERS`] tiers; nothing is decided.
    pub fn check_all(&self, requests: &[Request<'_>]) -> Result<BatchDecision, BatchError> {
        let mut batch = BatchDecision::empty();
        let decision = &mut batch.decision;
        let tiers = &mut batch.requests;
        let decided: Result<(), BatchError> = (|| {
            decide_body!(
                self,
                decision,
                1,
                true,
                |set, plan| plan_batch(plan, set, requests, tiers),
                |plan, outcomes| self
                    .backend()
                    .run(Op::Check, &plan, self.clock().now(), outcomes)
                    .map_err(BatchError::from)
            )
        })();
        decided.map(|()| batch.decided(requests.len()))
    }

    /// [`check_all`](Self::check_all), awaiting the store (for a store that waits on the
    /// network: one round trip holds no worker thread).
    ///
    /// # Errors
    ///
    /// As [`check_all`](Self::check_all).
    pub async fn check_all_async(
        &self,
        requests: &[Request<'_>],
    ) -> Result<BatchDecision, BatchError> {
        let mut batch = BatchDecision::empty();
        let decision = &mut batch.decision;
        let tiers = &mut batch.requests;
        let decided: Result<(), BatchError> = async {
            decide_body!(
                self,
                decision,
                1,
                true,
                |set, plan| plan_batch(plan, set, requests, tiers),
                |plan, outcomes| self
                    .backend()
                    .run_async(Op::Check, &plan, self.clock().now(), outcomes)
                    .await
                    .map_err(BatchError::from)
            )
        }
        .await;
        decided.map(|()| batch.decided(requests.len()))
    }
}

impl BatchDecision {
    fn empty() -> BatchDecision {
        BatchDecision {
            decision: PolicyDecision::empty(),
            requests: [0; MAX_TIERS],
            len: 0,
        }
    }

    /// This batch, of `requests` requests, decided.
    fn decided(mut self, requests: usize) -> BatchDecision {
        // Truncation: `plan_batch` refused more than MAX_TIERS requests.
        #[allow(clippy::cast_possible_truncation)]
        let len = requests.min(MAX_TIERS) as u8;
        self.len = len;
        self
    }
}

/// Fills `plan` with every tier of every request of `requests`, in order, each (tier, key)
/// once, charged the costs of every request naming it (so no store ever sees one key
/// twice in a plan), and `tiers` with which tiers each request has. A request an allow
/// entry or an `unlimited` rule admits has no tier; one a deny entry or a ban refuses
/// refuses the batch: its listing is answered, and nothing is planned.
fn plan_batch<'a>(
    plan: &mut Plan<'a>,
    set: &'a super::RuleSet,
    requests: &[Request<'a>],
    tiers: &mut [u8; MAX_TIERS],
) -> Result<Option<u32>, BatchError> {
    let too_large = BatchError::TooLarge {
        requests: requests.len(),
    };
    if requests.len() > MAX_TIERS {
        return Err(too_large);
    }
    for (request, mask) in requests.iter().zip(tiers.iter_mut()) {
        // At full limits: the batch's one divisor is 1.
        let request = Request {
            divisor: 1,
            ..*request
        };
        let mut own = Plan::new();
        // One request's tiers always fit a plan of their own.
        let filled = plan_into(&mut own, set, &request, |tier| {
            tier_cost(&request, tier.max_cost())
        })?;
        match filled {
            Filled::Listed(at) if set.listings().get(at as usize).is_some_and(|l| !l.admits()) => {
                tiers.fill(0);
                return Ok(Some(at));
            }
            Filled::Listed(_) | Filled::All | Filled::Full => {}
        }
        for planned in &own {
            let same = plan.iter().position(|p| {
                core::ptr::eq(p.tier, planned.tier)
                    && p.key == planned.key
                    && (p.tier.label().shared || p.client == planned.client)
            });
            let j = match same {
                Some(j) => {
                    let cost = plan.cost_mut(j).ok_or(too_large)?;
                    let max_cost = planned.tier.max_cost();
                    let both = u64::from(*cost) + u64::from(planned.cost);
                    if both > max_cost {
                        return Err(BatchError::Capacity(InsufficientCapacity { max_cost }));
                    }
                    // Truncation: at most a tier's max cost, which a u32 cost fits.
                    #[allow(clippy::cast_possible_truncation)]
                    let both = both as u32;
                    *cost = both;
                    j
                }
                None => {
                    if !plan.push(*planned) {
                        return Err(too_large);
                    }
                    plan.len() - 1
                }
            };
            *mask |= 1 << j;
        }
    }
    Ok(None)
}
