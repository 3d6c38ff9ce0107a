//! The store's side of a lease: [`RedisStore::lease_op`] takes or returns permits of one
//! tier without the failure policy, and follows a call that timed out to its outcome
//! ([`LeaseReply`], [`PendingLease`]) for the [`LeasedStore`](crate::LeasedStore).

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::call::Mode;
use super::RedisStore;
use crate::keys::TierKey;
use crate::reply::decode_into;
use crate::FailureCause;
use tollgate::policy::PlannedTier;
use tollgate::{Decision, Nanos};

/// How long a lease operation that timed out is still awaited for its answer (see
/// [`RedisStore::lease_op`]); a stall longer than this leaves its outcome unknown.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

/// What a single-tier operation of [`RedisStore::lease_op`] does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    /// Take `cost` permits as a check of that cost would (all or nothing).
    Take,
    /// Give `cost` permits back (the core's refund).
    Return,
}

/// What became of a lease operation (see [`RedisStore::lease_op`]).
#[derive(Debug)]
pub(crate) enum LeaseReply {
    /// Redis ran it: its decision.
    Done(Decision),
    /// Redis did not run it, and never will.
    NotRun,
    /// No answer within the timeout: the outcome comes later.
    Pending(PendingLease),
    /// Whether Redis ran it is not known.
    Unknown,
}

/// Why a lease call failed, and what Redis or the connection said.
type Failed = (FailureCause, Option<Arc<str>>);

/// A lease operation whose answer is still awaited (see [`RedisStore::lease_op`]).
#[derive(Debug)]
pub(crate) struct PendingLease {
    /// The outcome, and why the call failed if it did and what Redis said (counted when it
    /// came in time).
    rx: mpsc::Receiver<(LeaseReply, Option<Failed>)>,
}

impl PendingLease {
    /// Its outcome if it has one now: never [`LeaseReply::Pending`].
    pub(crate) fn settled(&self) -> Option<LeaseReply> {
        match self.rx.try_recv() {
            Ok((reply, _)) => Some(reply),
            Err(mpsc::TryRecvError::Empty) => None,
            // The task ended without an answer (its runtime shut down).
            Err(mpsc::TryRecvError::Disconnected) => Some(LeaseReply::Unknown),
        }
    }

    /// Its outcome, waiting at most `wait`: [`LeaseReply::Unknown`] if there is none by then.
    pub(crate) fn wait(&self, wait: Duration) -> LeaseReply {
        self.rx
            .recv_timeout(wait)
            .map_or(LeaseReply::Unknown, |(reply, _)| reply)
    }
}

impl RedisStore {
    /// Tier `p` of its key, owned (see [`TierKey`]).
    pub(crate) fn tier_key(&self, p: &PlannedTier<'_>) -> TierKey {
        TierKey::of(self.shared.config.prefix(), p)
    }

    /// Runs `op` of `cost` permits on one tier at `now` (the instant a client time source
    /// decides at), waiting at most the configured timeout for Redis (the failure policy is
    /// *not* applied: a lease is only what Redis granted):
    ///
    /// - [`LeaseReply::Done`]: Redis ran it: its decision (for a [`LeaseOp::Return`], the
    ///   refund's own reply is not a decision: an admitting one at the limit);
    /// - [`LeaseReply::NotRun`]: Redis did not run it and never will (not sent during a
    ///   backoff, refused as expired, answered by an error);
    /// - [`LeaseReply::Pending`]: no answer in time. The call goes on (in a task of the
    ///   store's runtime, for up to [`SETTLE`]) and its outcome comes later: it either ran
    ///   in time on the server and its answer was late, or it reached the script past its
    ///   deadline and changed nothing. Nothing Redis records is left unaccounted;
    /// - [`LeaseReply::Unknown`]: whether it ran is not known (the connection failed with it
    ///   in flight).
    pub(crate) fn lease_op(
        &self,
        tier: &TierKey,
        cost: u32,
        now: Nanos,
        op: LeaseOp,
    ) -> LeaseReply {
        let shared = &self.shared;
        let op = match op {
            LeaseOp::Take => Mode::Check,
            LeaseOp::Return => Mode::Refund,
        };
        let call = self.lease_call(tier, cost, now);
        if shared.backing_off(call.tag) {
            return LeaseReply::NotRun;
        }
        let Some(runtime) = self.runtime.as_ref() else {
            return LeaseReply::NotRun;
        };
        let limit = tier.algorithm.limit();
        let (tx, rx) = mpsc::sync_channel(1);
        let task = Arc::clone(shared);
        let tag = call.tag;
        runtime.handle().spawn(async move {
            let script = call.script(task.mode(op));
            let result = task.eval_for(&script, Instant::now(), SETTLE).await;
            let cause = result.as_ref().err().map(|f| (f.cause, f.error.clone()));
            let reply = match result {
                Ok(reply) => {
                    let decision = match op {
                        Mode::Refund => Some(Decision::allow(limit, limit, Nanos::ZERO)),
                        _ => {
                            let mut decision = [Decision::allow(0, 0, Nanos::ZERO)];
                            decode_into(&[limit], &reply, &mut decision).map(|()| decision[0])
                        }
                    };
                    match decision {
                        Some(decision) => {
                            task.counters.redis_decisions.add(1);
                            if op == Mode::Refund || decision.allowed {
                                task.denies.invalidate([&call]);
                            }
                            LeaseReply::Done(decision)
                        }
                        // The script ran and answered something else: what it did is not
                        // known.
                        None => LeaseReply::Unknown,
                    }
                }
                Err(failure) if failure.maybe_ran => LeaseReply::Unknown,
                Err(_) => LeaseReply::NotRun,
            };
            // The receiver is gone only if the lease thread stopped waiting for good.
            let _ = tx.send((reply, cause));
        });
        match rx.recv_timeout(shared.config.timeout()) {
            Ok((reply, cause)) => {
                if let Some((cause, error)) = cause {
                    shared.failed(tag, cause, error.as_deref());
                }
                reply
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                shared.failed(tag, FailureCause::Timeout, None);
                LeaseReply::Pending(PendingLease { rx })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                shared.failed(
                    tag,
                    FailureCause::Connection,
                    Some("the lease's call was lost"),
                );
                LeaseReply::Unknown
            }
        }
    }
}
