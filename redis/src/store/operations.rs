//! The store's operations: a check (the deny cache, then the client's and the global tiers'
//! calls, all or nothing), a peek, a refund, a charge and a reset, each written once and run
//! blocking or awaited ([`Store`](tollgate::policy::Store)), and the failure policy's answers when Redis has none.

use super::call::{Call, Mode};
use super::denies::Identity;
use super::io::{Budget, Io};
use super::RedisStore;
use crate::reply::decode_into;
use crate::{FailureCause, FailurePolicy};
use arrayvec::ArrayVec;
use tollgate::policy::{Op, Plan, TierOutcome, MAX_TIERS};
use tollgate::{Decision, Nanos};

impl RedisStore {
    /// the [`Op::Check`] of [`Store::run`](tollgate::policy::Store::run), by `io`.
    /// Whether Redis made every answer (a cached deny is one): `false` when the failure
    /// policy answered some call.
    pub(crate) async fn check_io(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) -> bool {
        let shared = &self.shared;
        let budget = Budget::start();
        shared.counters.decisions.add(1);
        let calls = self.calls(plan, now);
        // The deny cache first (see "Deny cache" on `RedisStore`), looked up only if a deny
        // of the plan's first key may still stand: most checks build no identity.
        let cache = if shared.denies.enabled() && !plan.is_empty() {
            let local = self.cache_now(now);
            let first = calls.iter().flat_map(Call::keys).next();
            let id = if first.is_some_and(|key| shared.denies.may_stand(key, local)) {
                let id = Identity::of(plan, shared.config.prefix());
                if shared.denies.find(&id, local, outcomes) {
                    shared.counters.deny_cache_hits.add(1);
                    return true;
                }
                Some(id)
            } else {
                None
            };
            Some((id, local, shared.denies.marks()))
        } else {
            None
        };
        // The calls whose tiers admitted so far, and whether Redis did (took the permits
        // there) or the failure policy answered.
        let mut admitted: ArrayVec<(&Call, bool), MAX_TIERS> = ArrayVec::new();
        let mut denied = false;
        // Whether Redis made every answer (only such denies are cached).
        let mut clean = true;
        for call in calls.iter() {
            if denied {
                // An earlier group denied: this one only reports.
                clean &= self
                    .decide(plan, call, Mode::PeekDenied, now, outcomes, io, budget)
                    .await
                    .1;
                continue;
            }
            let (all, redis) = self
                .decide(plan, call, Mode::Check, now, outcomes, io, budget)
                .await;
            clean &= redis;
            if all {
                // At most one call per tier of the plan: never full.
                let _ = admitted.try_push((call, redis));
            } else {
                denied = true;
            }
        }
        if denied {
            // Give back what the groups that admitted took, then report their state.
            for (call, redis) in admitted {
                // Only what Redis took goes back to Redis: a group the failure policy
                // admitted took nothing there (failing open), or took from the fallback's
                // local share, which keeps it (the strict side). If Redis cannot take the
                // refund now, it keeps the permits: the strict side too (they return with
                // the window or the drain).
                if redis {
                    clean &= self.call(call, Mode::Refund, io, budget).await.is_ok();
                }
                clean &= self
                    .decide(plan, call, Mode::PeekDenied, now, outcomes, io, budget)
                    .await
                    .1;
            }
            if let (true, Some((id, sent, marks))) = (clean, cache) {
                let id = id.unwrap_or_else(|| Identity::of(plan, shared.config.prefix()));
                shared.denies.remember(plan, &id, sent, marks, outcomes);
            }
        } else {
            // Admitted: the permits taken change what other cached denies of these keys
            // would now hear (a retry later, fewer remaining).
            shared.denies.invalidate(calls.iter());
        }
        clean
    }

    /// [`Op::Peek`], by `io`: whether Redis made every answer.
    pub(crate) async fn peek_io(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) -> bool {
        // Not answered from the deny cache: a peek reports the admitting tiers with the
        // request counted, a denied check without.
        self.shared.counters.decisions.add(1);
        let budget = Budget::start();
        let mut clean = true;
        for call in self.calls(plan, now).iter() {
            clean &= self
                .decide(plan, call, Mode::Peek, now, outcomes, io, budget)
                .await
                .1;
        }
        clean
    }

    /// [`Op::Refund`], by `io`.
    async fn refund_io(&self, plan: &Plan<'_>, now: Nanos, io: Io) {
        let budget = Budget::start();
        let calls = self.calls(plan, now);
        for call in calls.iter() {
            // A refund Redis cannot take is dropped: the strict side (the permits come back
            // with the window or the drain).
            let _ = self.call(call, Mode::Refund, io, budget).await;
        }
        self.shared.denies.invalidate(calls.iter());
    }

    /// [`Op::Charge`], by `io`.
    async fn charge_io(&self, plan: &Plan<'_>, now: Nanos, io: Io) {
        let budget = Budget::start();
        let calls = self.calls(plan, now);
        for call in calls.iter() {
            if let (Err(_), Some(fallback)) = (
                self.call(call, Mode::Charge, io, budget).await,
                &self.fallback,
            ) {
                // Work done during an outage counts against the local share.
                fallback.run(
                    plan,
                    call.tiers(),
                    Mode::Charge,
                    now,
                    &mut [],
                    &self.shared.counters,
                );
            }
        }
        self.shared.denies.invalidate(calls.iter());
    }

    /// [`Op::Reset`], by `io`: each tier's key deleted, the deny cache's answers for them
    /// invalidated, and the fallback's local share of them forgotten. A reset Redis does not
    /// take is a failure like any other (counted, its `tracing` event): the key keeps its
    /// state there.
    pub(crate) async fn reset_io(&self, plan: &Plan<'_>, now: Nanos, io: Io) {
        let budget = Budget::start();
        let calls = self.calls(plan, now);
        for call in calls.iter() {
            let _ = self.call(call, Mode::Reset, io, budget).await;
            if let Some(fallback) = &self.fallback {
                fallback.run(
                    plan,
                    call.tiers(),
                    Mode::Reset,
                    now,
                    &mut [],
                    &self.shared.counters,
                );
            }
        }
        self.shared.denies.invalidate(calls.iter());
    }

    /// Runs a check or peek `call` within what is left of `budget`, writing each covered
    /// tier's decision: whether every tier admitted, and whether Redis decided (`false`:
    /// the failure policy answered).
    #[allow(clippy::too_many_arguments)]
    async fn decide(
        &self,
        plan: &Plan<'_>,
        call: &Call,
        op: Mode,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
        budget: Budget,
    ) -> (bool, bool) {
        let reply = self.call(call, op, io, budget).await;
        // (after the await: not kept in the future while Redis answers)
        let mut limits = [0; MAX_TIERS];
        for (limit, &i) in limits.iter_mut().zip(call.tiers()) {
            *limit = plan.get(i).map_or(0, |p| p.tier.algorithm().limit());
        }
        let limits = &limits[..call.tiers().len()];
        let mut decisions = [Decision::allow(0, 0, Nanos::ZERO); MAX_TIERS];
        let decided = reply.and_then(|reply| {
            decode_into(limits, &reply, &mut decisions).ok_or(FailureCause::Server)
        });
        match decided {
            Ok(()) => {
                self.shared.counters.redis_decisions.add(1);
                let mut all = true;
                for (&i, decision) in call.tiers().iter().zip(decisions) {
                    all &= decision.allowed;
                    outcomes[i].decision = decision;
                }
                (all, true)
            }
            Err(_cause) => {
                if let Some(fallback) = &self.fallback {
                    let local = match op {
                        Mode::Check | Mode::Peek | Mode::PeekDenied => op,
                        Mode::Refund | Mode::Charge | Mode::Reset => Mode::PeekDenied,
                    };
                    return (
                        fallback.run(
                            plan,
                            call.tiers(),
                            local,
                            now,
                            outcomes,
                            &self.shared.counters,
                        ),
                        false,
                    );
                }
                let policy = self.shared.config.failure_policy();
                for (&i, limit) in call.tiers().iter().zip(limits) {
                    let cost = plan.get(i).map_or(0, |p| u64::from(p.cost));
                    outcomes[i].decision = match policy {
                        FailurePolicy::FailClosed { retry_after } => {
                            let retry = Nanos::from_duration(retry_after);
                            Decision::deny(*limit, 0, retry, retry)
                        }
                        // (a fallback policy answered above)
                        FailurePolicy::FailOpen | FailurePolicy::Fallback { .. } => {
                            Decision::allow(*limit, limit.saturating_sub(cost), Nanos::ZERO)
                        }
                    };
                }
                (!matches!(policy, FailurePolicy::FailClosed { .. }), false)
            }
        }
    }
}

impl RedisStore {
    /// [`Store::run`](tollgate::policy::Store::run) by `io`.
    pub(crate) async fn run_io(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) {
        match op {
            Op::Check => {
                self.check_io(plan, now, outcomes, io).await;
            }
            Op::Peek => {
                self.peek_io(plan, now, outcomes, io).await;
            }
            Op::Refund => self.refund_io(plan, now, io).await,
            Op::Charge => self.charge_io(plan, now, io).await,
            Op::Reset => self.reset_io(plan, now, io).await,
        }
    }
}

/// [`Store`] for a store whose operations are written once, as `run_io(op, plan, now,
/// outcomes, io)`: run blocking ([`finish`]ed: every call in it blocks, so it completes on
/// its first poll) or awaited.
macro_rules! store_by_io {
    ($(#[$doc:meta])* $store:ty) => {
        $(#[$doc])*
        impl tollgate::policy::Store for $store {
            fn run(
                &self,
                op: tollgate::policy::Op,
                plan: &tollgate::policy::Plan<'_>,
                now: tollgate::Nanos,
                outcomes: &mut [tollgate::policy::TierOutcome],
            ) -> Result<(), tollgate::InsufficientCapacity> {
                $crate::store::finish(self.run_io(
                    op,
                    plan,
                    now,
                    outcomes,
                    $crate::store::Io::Blocking,
                ));
                Ok(())
            }

            async fn run_async<'a>(
                &'a self,
                op: tollgate::policy::Op,
                plan: &'a tollgate::policy::Plan<'a>,
                now: tollgate::Nanos,
                outcomes: &'a mut [tollgate::policy::TierOutcome],
            ) -> Result<(), tollgate::InsufficientCapacity> {
                self.run_io(op, plan, now, outcomes, $crate::store::Io::Async)
                    .await;
                Ok(())
            }

            /// `SCAN` of the prefix's keys (on every master of a cluster), each read back
            /// into its rule and client (see `store::scan`).
            fn scan_clients(
                &self,
                max_keys: usize,
            ) -> Result<Option<tollgate::policy::StoreScan>, tollgate::policy::ScanError> {
                self.scanner().scan_blocking(max_keys).map(Some)
            }

            async fn scan_clients_async(
                &self,
                max_keys: usize,
            ) -> Result<Option<tollgate::policy::StoreScan>, tollgate::policy::ScanError> {
                self.scanner().scan_io(max_keys).await.map(Some)
            }
        }
    };
}
pub(crate) use store_by_io;

impl RedisStore {
    /// The store whose keys a scan lists: this one.
    pub(crate) fn scanner(&self) -> &RedisStore {
        self
    }
}

store_by_io!(
    /// Each operation written once (`run_io`), run blocking or
    /// awaited. A refund, a charge and a reset also invalidate the cached denies touching the plan's
    /// keys (after Redis has answered: see "Deny cache" on [`RedisStore`]). Awaited, the
    /// calling task sends each script call on the store's connection (driven by the store's
    /// I/O thread) and waits for its reply without holding its thread; no task is spawned
    /// per call (see "Blocking" on [`RedisStore`]).
    RedisStore
);
