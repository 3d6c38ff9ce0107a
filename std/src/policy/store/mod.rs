//! [`Store`]: where a policy's per-key state lives, and [`InProcess`], the default store.
//!
//! A [`Policy`](super::Policy) matches a request to its rules and compiles a *plan*: one
//! [`PlannedTier`] per tier that applies (rule, tier, the key under that rule, the permits
//! it charges). Everything after that is the store's: decide every tier of the plan and
//! record all or nothing, peek, refund, charge. The same plan runs on any store, so the
//! rules, headers, decorators (`Metered`, `AdaptivePenalty`), waiting and reservations
//! work unchanged whichever store holds the state.
//!
//! ```text
//! request ─▶ Policy: match rules ─▶ plan [PlannedTier; ≤ MAX_TIERS] ─▶ Store::run
//!                                                                      (all or nothing)
//! ```
//!
//! [`InProcess`] keeps each tier's keys in a bounded lock-free table of its own per tier
//! state (see `store::tables` and `store::tier`): no allocation and no lock on the check
//! path.
//!
//! A store whose operations wait on the network also overrides [`Store::run_async`], so an
//! async server awaits them ([`Policy::allow_async`](super::Policy::allow_async)) instead
//! of blocking one of its worker threads for the round trip.

use std::fmt;
use std::future::Future;

use tollgate_core::{InsufficientCapacity, Nanos};

use super::{RuleSet, Tier, TierOutcome};

mod cell;
mod in_process;
mod log;
mod plan;
mod scan;
mod tables;
mod tier;

pub use in_process::InProcess;
pub use plan::{Plan, PlanIter, PlannedTier};
pub use scan::{ScanError, StoreScan, StoredClient};
pub(crate) use tier::fingerprint;
pub use tier::{TakeReceipt, TierStore};

/// An operation a [`Store`] runs on every tier of a plan: the one list of them, shared by
/// the policy, every store, the Redis fallback and the leases.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Decide every tier and record them all if every tier admits (all or nothing).
    Check,
    /// What a check would decide, recording nothing.
    Peek,
    /// Give each tier's cost back (a request admitted but not served).
    Refund,
    /// Record each tier's cost whatever the limits say (work already done).
    Charge,
    /// Forget each tier's state for the key, as if it had never been seen (an operator
    /// lifting a client's limits: see [`Policy::reset`](super::Policy::reset)).
    Reset,
}

impl Op {
    /// Whether the operation answers a decision per tier (a check or a peek) rather than
    /// only recording (a refund or a charge).
    pub const fn decides(self) -> bool {
        match self {
            Op::Check | Op::Peek => true,
            Op::Refund | Op::Charge | Op::Reset => false,
        }
    }
}

/// A step of a reload, as a policy tells its store ([`Store::reload`]), in this order for
/// each reload (reloads of one policy never overlap).
#[derive(Copy, Clone, Debug)]
#[non_exhaustive]
pub enum ReloadStep<'a> {
    /// `new` will replace `old`; no check has seen it yet. The tiers of `new` that keep
    /// their state share it with their tier in `old`; those that convert an old tier's
    /// state are [`new.replacing(old)`](RuleSet::replacing).
    Prepare {
        /// The set in force.
        old: &'a RuleSet,
        /// The set replacing it.
        new: &'a RuleSet,
    },
    /// `new` becomes visible to checks right after this step, as generation `generation`
    /// (one more per reload). Checks already working on older sets go on with them.
    Publish {
        /// The set being published.
        new: &'a RuleSet,
        /// Its generation number.
        generation: u64,
    },
    /// `new` is in force, read at `now`; every set of a generation below `oldest_held` is
    /// gone (no check or decision uses it any more).
    Done {
        /// The set in force.
        new: &'a RuleSet,
        /// The policy's clock at the end of the reload.
        now: Nanos,
        /// The oldest generation a check or decision may still use.
        oldest_held: u64,
    },
}

/// Where a policy's per-key state lives (see the module docs): a store implements one
/// operation, [`run`](Self::run), and the policy's blocking and awaited forms both follow
/// from it.
///
/// The contract, for every store:
///
/// - [`Op::Check`] decides every tier of `plan` at `now` and records them all if every
///   tier admits. `outcomes[i].decision` receives tier `i`'s decision (`outcomes` is at
///   least as long as `plan`; the policy has filled in the rest of each outcome). When any
///   tier denies, nothing is recorded, and the tiers that would have admitted report their
///   current state (the request did not count);
/// - [`Op::Peek`] writes what a check would decide, recording nothing;
/// - [`Op::Refund`] and [`Op::Charge`] give back or record each tier's `cost` at `now`,
///   and leave `outcomes` alone (the policy passes none);
/// - [`Op::Reset`] forgets each tier's state for its key (a fresh key from then on), and
///   whatever the store keeps about it besides (cached denies, permits leased to this
///   process); it ignores `cost` and leaves `outcomes` alone. A check of the key racing the
///   reset counts either before it (forgotten) or after (kept).
///
/// [`run_async`](Self::run_async) is the same operation awaited. By default it runs
/// [`run`](Self::run) when first polled and is then ready, which is right for a store that
/// never waits ([`InProcess`]); a store that talks to a server (Redis) overrides it so an
/// async server awaits the round trip ([`Policy::allow_async`](super::Policy::allow_async))
/// instead of blocking one of its worker threads.
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
/// runtime.block_on(async {
///     assert!(policy.allow_async("a", "/", 1).await?.allowed());
///     assert!(!policy.allow_async("a", "/", 1).await?.allowed());
///     Ok::<(), tollgate::InsufficientCapacity>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Store: Send + Sync + fmt::Debug {
    /// Runs `op` on every tier of `plan` at `now`, blocking until it is done (see the trait
    /// docs for each operation's contract).
    fn run(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity>;

    /// [`run`](Self::run), awaited.
    fn run_async<'a>(
        &'a self,
        op: Op,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> impl Future<Output = Result<(), InsufficientCapacity>> + Send + 'a {
        std::future::ready(self.run(op, plan, now, outcomes))
    }

    /// A step of a reload of the policy this store serves. By default nothing: a store
    /// whose state is keyed by each tier's [`version`](Tier::version) (Redis) converts a
    /// state of another version when it reads it. The in-process store keeps a table per
    /// tier state: it links each new tier's table to the one it converts from when
    /// preparing, retires the replaced tables when publishing, and drops the tables and
    /// old generations nothing can use any more when done. A store that wraps another
    /// (counting its calls, delaying them) forwards every step to it, or the wrapped
    /// store's state does not follow the reload.
    fn reload(&self, step: ReloadStep<'_>) {
        let _ = step;
    }

    /// Bytes this store holds in this process for `tier`'s keys. By default 0: a store
    /// whose state lives elsewhere.
    fn memory_bytes(&self, tier: &Tier) -> usize {
        let _ = tier;
        0
    }

    /// The (rule, client) pairs this store keeps per-client state for, examining at most
    /// `max_keys` keys: the store's candidates for a listing of the clients currently
    /// limited ([`Policy::limited`](super::Policy::limited)), each then peeked by the
    /// policy under the rules in force. A pair whose rule is global (`per = "global"`) is
    /// no client's and is not answered.
    ///
    /// By default `Ok(None)`: the store keeps no names to list (the in-process tables keep
    /// 64-bit fingerprints of the keys), and the policy's own record of the pairs its
    /// checks denied is the listing's only source. A store that names its keys (Redis:
    /// `SCAN`) overrides it, and answers [`ScanError`] when it cannot answer.
    fn scan_clients(&self, max_keys: usize) -> Result<Option<StoreScan>, ScanError> {
        let _ = max_keys;
        Ok(None)
    }

    /// [`scan_clients`](Self::scan_clients), awaited. By default the blocking form, ready
    /// when first polled.
    fn scan_clients_async(
        &self,
        max_keys: usize,
    ) -> impl Future<Output = Result<Option<StoreScan>, ScanError>> + Send + '_ {
        std::future::ready(self.scan_clients(max_keys))
    }
}
