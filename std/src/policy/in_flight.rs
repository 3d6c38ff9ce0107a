//! [`Published`]: the rule set in force, and how many checks are working on each generation
//! of it, so a reload can wait until no check still uses the set it replaced (a grace
//! period, as in read-copy-update) before it lets keys move and frees the old set.
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
//! A `generation` counts reloads. The set of generation `g` is published in slot `g & 1`,
//! and the checks working on it are counted in count `g & 1` (cache-padded stripes: a
//! thread adds to its own, so checks on different cores do not share a line). A check
//! takes no reference count and writes no shared line but its own stripe:
//!
//! - a check loads the generation `g`, adds one to count `g & 1`, and loads the generation
//!   again: if it changed, it takes its count back and starts over. Otherwise it reads
//!   slot `g & 1` and works on that set; it takes its count back when done;
//! - a reload (one at a time) from generation `g` stores the new set in slot `(g + 1) & 1`,
//!   bumps the generation, and waits until count `g & 1` is zero. Only then may keys move,
//!   and the set of generation `g` be freed.
//!
//! The generation loads and bump and the counts' increments are `SeqCst`, so they fall in
//! one total order. A check whose second load saw `g` incremented count `g & 1` before the
//! bump to `g + 1`, hence before that reload reads the count: the reload waits for it. It
//! works on the set of generation `g`: its first load acquired the bump to `g`, made after
//! slot `g & 1` was written, and the slot is written next by the reload to `g + 2`, which
//! starts only after the reload to `g + 1` saw the check leave. So the set a counted check
//! reads is alive and is the one its count names, and a reload never waits for a check on
//! the new set (which may be waiting for that reload, for a key that has not moved yet: no
//! deadlock). A check whose two loads differ may read a slot whose set is gone, but only
//! its address: it never dereferences it.

use core::marker::PhantomData;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::striped_counter::{stripe_count, thread_stripe};
use crate::sync::{wait_a_little, AtomicPtr, AtomicU64, Ordering};

/// The rule set in force and the checks working on each generation (see the module docs).
///
/// It holds addresses, not the sets: the owner keeps each set alive until
/// [`publish`](Self::publish) has returned for the set that replaced it.
#[derive(Debug)]
pub(crate) struct Published<T> {
    /// Bumped by every reload after it publishes a set; loom's atomic under
    /// `--cfg tollgate_loom`.
    generation: AtomicU64,
    /// Slot `g & 1`: the set of generation `g`.
    sets: [AtomicPtr<T>; 2],
    /// Count `g & 1`: the checks working on the set of generation `g`.
    counts: [InFlight; 2],
    /// Shares `&T` between threads, as an `Arc<T>` would (`Send` and `Sync` only for a
    /// `T` that is both).
    _sets: PhantomData<Arc<T>>,
}

impl<T> Published<T> {
    /// Generation 0, working on `first` (which the owner keeps alive).
    pub(crate) fn new(first: *const T) -> Published<T> {
        Published {
            generation: AtomicU64::new(0),
            sets: [
                AtomicPtr::new(first.cast_mut()),
                AtomicPtr::new(core::ptr::null_mut()),
            ],
            counts: [InFlight::new(), InFlight::new()],
            _sets: PhantomData,
        }
    }

    /// The set in force, counted as in use until the returned value drops.
    #[inline]
    pub(crate) fn enter(&self) -> Active<'_, T> {
        loop {
            // SeqCst (both loads): see the module docs.
            let generation = self.generation.load(Ordering::SeqCst);
            let parity = (generation & 1) as usize;
            let counts = &self.counts[parity];
            let stripe = counts.enter();
            if self.generation_after_enter() == generation {
                // Acquire: the slot was written (Release) before the bump the first
                // generation load read, which that SeqCst load acquired; no later write
                // can happen while this check is counted (see the module docs).
                let set = self.sets[parity].load(Ordering::Acquire);
                // SAFETY: counted in generation `generation`'s count, which the reload
                // to the next generation waits on before its owner frees this set; the
                // slot holds this generation's set, published before its bump (see the
                // module docs), and never null for a generation that was reached.
                let set = unsafe { &*set };
                return Active {
                    set,
                    counts,
                    stripe,
                };
            }
            counts.leave(stripe);
        }
    }

    /// The generation, read again after a check counted itself in: a `SeqCst` load, which
    /// the protocol needs in one total order with the reload's bump and its read of the
    /// count. loom models `SeqCst` only as acquire/release (it would report executions no
    /// `SeqCst` machine allows), so under loom this is an acquire-release read-modify-write,
    /// which gives the protocol the same guarantee within loom's model: a read-modify-write
    /// reads the latest bump, so either it reads the reload's bump (the check retries) or
    /// the reload's bump reads it and then sees the check's count.
    #[inline]
    fn generation_after_enter(&self) -> u64 {
        #[cfg(not(tollgate_loom))]
        {
            // SeqCst: see the module docs.
            self.generation.load(Ordering::SeqCst)
        }
        #[cfg(tollgate_loom)]
        {
            // AcqRel: see above.
            self.generation.fetch_add(0, Ordering::AcqRel)
        }
    }

    /// Publishes `next` as the set in force and waits until no check works on the set it
    /// replaces; the owner may free that set once this returns. One call at a time (the
    /// owner serializes reloads).
    pub(crate) fn publish(&self, next: *const T) {
        // Relaxed: only this (serialized) method writes the generation.
        let generation = self.generation.load(Ordering::Relaxed);
        let slot = ((generation + 1) & 1) as usize;
        // Release: read by checks that acquired the bump below (see `enter`).
        self.sets[slot].store(next.cast_mut(), Ordering::Release);
        // SeqCst: in one total order with the checks' generation loads and their count
        // increments (see the module docs).
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.counts[(generation & 1) as usize].wait_idle();
    }
}

/// A set a check is working on: counted in its generation's count until dropped.
#[derive(Debug)]
pub(crate) struct Active<'a, T> {
    set: &'a T,
    counts: &'a InFlight,
    stripe: usize,
}

impl<T> core::ops::Deref for Active<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        self.set
    }
}

impl<T> Drop for Active<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.counts.leave(self.stripe);
    }
}

/// Checks working on one rule set (see the module docs).
#[derive(Debug)]
struct InFlight {
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
