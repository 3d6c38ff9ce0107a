//! [`InFlight`]: how many checks are working on one rule set, so a reload can wait until no
//! check still uses the set it replaced (a grace period, as in read-copy-update).
//!
//! Why a reload waits: a check that took a permit from a tier and must undo it (another
//! tier denied) undoes it in the store it took it from, with that store's algorithm. A
//! reload that changes a tier moves every key to a new store, converting its state; if it
//! moved a key between such a take and its undo, the undo would find nothing to undo (or,
//! converted through a capped limit, undo the wrong amount). So the reload publishes the
//! new set, then waits until no check is working on the old one, and only then lets keys
//! move. Checks on tiers the reload left alone never wait; checks on a changed tier wait
//! only if they need a key that has not moved yet.
//!
//! ## Protocol
//!
//! Each rule set counts the checks working on it, in cache-padded stripes (a thread adds to
//! its own, so checks on different cores do not share a line). The policy keeps a
//! `generation`, bumped by every reload:
//!
//! - a check loads the generation, loads the set, adds one to the set's count, and loads
//!   the generation again: if it changed, it takes its count back and starts over. It takes
//!   its count back when done;
//! - a reload stores the new set, bumps the generation, and waits until the old set's count
//!   is zero.
//!
//! The generation loads and bump and the count's increment are `SeqCst`, so they fall in
//! one total order. A check whose second load saw the old generation incremented its count
//! before the reload's bump, hence before the reload reads the count: if that check holds
//! the old set, the reload waits for it; if it holds the new set, it is counted there and
//! uses only the new set. A check whose first load saw the new generation loads the set
//! after the reload's store (the bump it read was made after the store), so it holds the
//! new set. The reload never waits for a check on the new set, so a check that waits for
//! the reload (for a key that has not moved yet) cannot deadlock it.

use crossbeam_utils::CachePadded;

use super::striped_counter::{stripe_count, thread_stripe};
use crate::sync::{wait_a_little, AtomicU64, Ordering};

/// Checks working on one rule set (see the module docs).
#[derive(Debug)]
pub(crate) struct InFlight {
    counts: Box<[CachePadded<AtomicU64>]>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::new()
    }
}

impl InFlight {
    /// No check in flight.
    pub(crate) fn new() -> InFlight {
        // Under loom one stripe keeps the models small (a stripe is a hint, not a rule).
        let stripes = if cfg!(tollgate_loom) {
            1
        } else {
            stripe_count()
        };
        InFlight {
            counts: (0..stripes)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Counts one more check; returns its stripe, for [`leave`](Self::leave).
    #[inline]
    pub(crate) fn enter(&self) -> usize {
        let stripe = thread_stripe() & (self.counts.len() - 1);
        // SeqCst: in one total order with the policy's generation loads and a reload's
        // bump (see the module docs).
        self.counts[stripe].fetch_add(1, Ordering::SeqCst);
        stripe
    }

    /// Counts a check of `stripe` out.
    #[inline]
    pub(crate) fn leave(&self, stripe: usize) {
        // Release: the check's accesses to this set's stores happen before a reload that
        // reads the count as zero (its SeqCst loads acquire) moves their keys.
        self.counts[stripe].fetch_sub(1, Ordering::Release);
    }

    /// Waits until no check is counted (a reload, after publishing a newer set).
    pub(crate) fn wait_idle(&self) {
        for count in self.counts.iter() {
            let mut round = 0;
            // SeqCst: see `enter`; acquires the finished checks' Release `leave`s.
            while count.load(Ordering::SeqCst) != 0 {
                wait_a_little(round);
                round = round.saturating_add(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn waits_until_every_counted_check_has_left() {
        let in_flight = InFlight::new();
        in_flight.wait_idle();
        let first = in_flight.enter();
        let second = in_flight.enter();
        let left = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                in_flight.wait_idle();
                assert!(left.load(std::sync::atomic::Ordering::SeqCst));
            });
            in_flight.leave(first);
            // Give the waiter a chance to return too early (it must not: one check is
            // still counted).
            std::thread::sleep(std::time::Duration::from_millis(20));
            left.store(true, std::sync::atomic::Ordering::SeqCst);
            in_flight.leave(second);
        });
    }
}
