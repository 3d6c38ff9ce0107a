//! [`Published`]: the rule set in force, and the holds that keep every set a reload replaced
//! alive until the last check (or decision) using it is gone. A reload never waits: it
//! publishes the new set and returns, and the old one is reclaimed by whoever lets go of it
//! last (a check, a decision, or the reload itself if nothing held it).
//!
//! ## Generations
//!
//! Each published set lives in a *generation node*: the set (an `Arc`, kept as a raw
//! pointer), its number (0 for the first set, then one more per reload), its state, and
//! the *holds* on it, counted in cache-padded stripes (a thread adds to its own stripe, so
//! checks on different cores share no line). A node goes
//!
//! ```text
//!   FREE ──publish──▶ CURRENT ──next publish──▶ RETIRED ──last hold gone──▶ RECLAIMING ─▶ FREE
//!                                                  ▲                             │
//!                                                  └──── a hold came back ───────┘
//! ```
//!
//! and is reused for a later set once FREE. Nodes are never freed (type-stable memory): a
//! check that reads a node just as it is retired, reclaimed or reused, or a release that
//! looks at its node just after another thread reclaimed it, touches valid memory and finds
//! a state that tells it to do nothing. When the owner is dropped, each node is *orphaned*:
//! once nothing holds it (a decision may outlive the policy) it is reclaimed as usual and
//! goes to a process-wide pool, from which any later owner takes its nodes; the nodes in
//! existence are at most the peak number in use at once.
//!
//! ## Protocol
//!
//! - **enter** (a check): load `current` (node `N`), add one to `N`'s stripe, load
//!   `current` again: if it is still `N`, read `N`'s set and work on it; otherwise take the
//!   hold back and start over;
//! - **release** (a check ends, or the decision it returned is dropped): take one off the
//!   stripe, then load `N`'s state: if `N` is no longer current, try to reclaim it;
//! - **publish** (a reload; reloads are serialized by their owner): put the new set in a
//!   FREE node (or a new one), make it CURRENT, swap it into `current`, mark the node it
//!   replaced RETIRED and try to reclaim that. Nothing waits;
//! - **reclaim**: claim a RETIRED node (RECLAIMING, by compare-and-swap, so one thread
//!   does it); if every stripe reads zero, drop the set and make the node FREE; otherwise
//!   mark it RETIRED again and look once more (a release that came while it was claimed saw
//!   RECLAIMING and left the reclaim to the claimer).
//!
//! The loads and stores of `current`, the holds' increments and decrements, the state's
//! stores and loads, and the reclaimer's stripe loads are `SeqCst`: one total order `S`.
//!
//! *A held set is never reclaimed.* A check working on `N`'s set added its hold before its
//! second load of `current` read `N`; the reload that retired `N` swapped `current` after
//! that load (else the load would not have read `N` … or `N` was reused since, and the
//! check works on the set `N` holds now, retired later still), then stored RETIRED, and a
//! reclaimer's stripe loads follow its claim, which read RETIRED: in `S` they follow the
//! hold, so they see it until the check releases it.
//!
//! *The last hold's release reclaims.* The release that takes the last hold of a retired
//! node loads the state after its decrement. If it reads RETIRED, it reclaims. If it reads
//! CURRENT, the retirement comes later in `S`, and the reload's own reclaim after it sees
//! the decrement. If it reads RECLAIMING, the claimer's second look, after it stores
//! RETIRED again, sees the decrement. So a retired set is dropped as soon as nothing holds
//! it, by whoever finds it free.
//!
//! A check that loaded a node which was retired before its hold never works on that node's
//! set (its second load of `current` differs); its hold, briefly counted, at most makes a
//! reclaimer leave the reclaim to this check's release.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::striped_counter::{stripe_count, thread_stripe};
use crate::sync::{lock, loom_sc_fence, AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering};

/// The phase bits of a node's state word: no set, ready for the next publish.
const FREE: u32 = 0;
/// The node of the set in force.
const CURRENT: u32 = 1;
/// A replaced set, alive while anything holds it.
const RETIRED: u32 = 2;
/// A replaced set being reclaimed, by the one thread that claimed it.
const RECLAIMING: u32 = 3;
/// The phase bits.
const PHASE: u32 = 0b11;
/// Set when the node's owner is dropped: whoever makes it FREE then hands it to the pool.
const ORPHAN: u32 = 0b100;

/// The set in force, and every set still held (see the module docs). `current` first: what
/// a check reads (`repr(C)`, so that it shares its owner's first cache line with what
/// precedes it there: the clock, in `Policy`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Published<T> {
    /// The CURRENT node.
    current: AtomicPtr<Generation>,
    /// The nodes this owner uses, reused once FREE; touched by publishes and by the drop
    /// (boxed: `current` alone shares its owner's first cache line).
    nodes: Box<Mutex<Nodes>>,
    /// Shares `&T` between threads and drops it on any thread, as an `Arc<T>` would.
    _sets: PhantomData<Arc<T>>,
}

/// The nodes of a [`Published`] (under its lock).
#[derive(Debug)]
struct Nodes {
    all: Vec<NodeRef>,
    /// The number the next published set gets.
    next: u64,
}

/// A node, by address: nodes are never freed (see [`POOL`]), so any copy stays valid.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct NodeRef(NonNull<Generation>);

// SAFETY: a node is only reached through its atomics and, for its set slot, under the
// exclusive phases (FREE at the publisher, RECLAIMING at the claimer); it lives forever.
unsafe impl Send for NodeRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for NodeRef {}

impl NodeRef {
    #[inline(always)]
    fn get(self) -> &'static Generation {
        // SAFETY: nodes are leaked at allocation and never freed (see `POOL`).
        unsafe { self.0.as_ref() }
    }
}

/// Nodes whose owner was dropped, reclaimed and ready for any owner. Nodes are never freed:
/// a releasing thread inspects its node just after taking its hold back, and by then the
/// node may have been reclaimed by another; type-stable memory makes that late look
/// harmless (it finds the node FREE, or another owner's CURRENT, and does nothing). The pool
/// holds at most the peak number of nodes ever in use at once.
#[cfg(not(tollgate_loom))]
static POOL: std::sync::Mutex<Vec<NodeRef>> = std::sync::Mutex::new(Vec::new());

/// One generation: a set, its number and the holds on it (see the module docs). A check
/// reads `holds`, `state` and `set_ptr`: with the node on a cache line of its own
/// (`repr(C)`, aligned), that is one line.
#[repr(C, align(64))]
pub(crate) struct Generation {
    holds: Box<[Stripe]>,
    /// The set's pointer, for checks (a copy of `set`'s, published with it).
    set_ptr: AtomicPtr<()>,
    /// The phase (FREE, CURRENT, RETIRED, RECLAIMING) and the ORPHAN bit.
    state: AtomicU32,
    /// The set held (from `Arc::into_raw`) and how to drop it: written by the publisher while
    /// the node is FREE and its own, taken by the claimer while RECLAIMING.
    set: UnsafeCell<Option<Slot>>,
    /// The set's generation number (written by publishes, read by publishes under the
    /// owner's lock, and by checks as the key of their hints: `policy::warm`).
    number: AtomicU64,
}

// SAFETY: `set` is accessed only in the exclusive phases (see its docs); everything else is
// atomic. The sets it holds are `Send + Sync` (see `Published::publish`).
unsafe impl Sync for Generation {}

impl core::fmt::Debug for Generation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Generation")
            // Relaxed: a snapshot for debugging.
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A held set: its `Arc`'s raw pointer and the function that gives that `Arc` back.
#[derive(Copy, Clone)]
struct Slot {
    ptr: *const (),
    release: unsafe fn(*const ()),
}

/// Gives back the `Arc<T>` behind `ptr`.
///
/// # Safety
///
/// `ptr` came from `Arc::<T>::into_raw` and is given back once.
unsafe fn release_arc<T>(ptr: *const ()) {
    // SAFETY: per the caller.
    drop(unsafe { Arc::from_raw(ptr.cast::<T>()) });
}

impl Generation {
    /// A FREE node: from the pool of orphans if one is there, else new (leaked for good).
    fn allocate() -> NodeRef {
        #[cfg(not(tollgate_loom))]
        if let Some(node) = POOL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
        {
            return node;
        }
        // Under loom one stripe keeps the models small (a stripe is a hint, not a rule).
        let stripes = if cfg!(tollgate_loom) {
            1
        } else {
            stripe_count()
        };
        let node = Box::new(Generation {
            holds: (0..stripes)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            state: AtomicU32::new(FREE),
            set: UnsafeCell::new(None),
            set_ptr: AtomicPtr::new(core::ptr::null_mut()),
            number: AtomicU64::new(0),
        });
        NodeRef(NonNull::from(Box::leak(node)))
    }

    /// Adds a hold on this thread's stripe; returns the stripe, for [`release`].
    ///
    /// [`release`]: Self::release
    #[inline(always)]
    fn hold(&self) -> usize {
        let stripe = stripe_among(self.holds.len());
        // SeqCst: in the total order of the module docs.
        self.holds[stripe].fetch_add(1, Ordering::SeqCst);
        stripe
    }

    /// Whether no stripe holds the node (each stripe read once, in order).
    fn idle(&self) -> bool {
        // SeqCst: in the total order of the module docs (after a claim or a state store).
        self.holds.iter().all(|h| h.load(Ordering::SeqCst) == 0)
    }

    /// Takes a hold of `stripe` back, reclaiming the node's set if it was the last hold on
    /// a replaced set.
    #[inline(always)]
    fn release(&'static self, stripe: usize) {
        // SeqCst: in the total order of the module docs.
        self.holds[stripe].fetch_sub(1, Ordering::SeqCst);
        loom_sc_fence();
        // SeqCst: see the module docs (the last release of a retired node reclaims it).
        if self.state.load(Ordering::SeqCst) & PHASE != CURRENT {
            self.try_reclaim();
        }
    }

    /// Reclaims a RETIRED node's set if nothing holds it (see the module docs); an orphan
    /// reclaimed goes to the pool.
    #[cold]
    #[inline(never)]
    fn try_reclaim(&'static self) {
        loop {
            // SeqCst: the claim, in the total order (its stripe loads follow it).
            let state = self.state.load(Ordering::SeqCst);
            if state & PHASE != RETIRED {
                return;
            }
            if self
                .state
                .compare_exchange(
                    state,
                    state ^ (RETIRED ^ RECLAIMING),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                // The ORPHAN bit came, or another claimed: look again.
                continue;
            }
            if !self.idle() {
                // SeqCst: a release that saw RECLAIMING left the reclaim to us; the second
                // look below follows this store, so it sees that release's decrement. (An
                // exclusive-or keeps an ORPHAN bit set meanwhile.)
                self.state.fetch_xor(RECLAIMING ^ RETIRED, Ordering::SeqCst);
                loom_sc_fence();
                if !self.idle() {
                    return;
                }
                continue;
            }
            // SAFETY: claimed (RECLAIMING): no other thread reads or writes the slot.
            let slot = unsafe { (*self.set.get()).take() };
            // Relaxed: no check reads it any more (the node is not current, and a check
            // that loads a non-current node never reads its set).
            self.set_ptr.store(core::ptr::null_mut(), Ordering::Relaxed);
            if let Some(slot) = slot {
                // SAFETY: the slot held the `Arc` `publish` gave up, taken out once.
                unsafe { (slot.release)(slot.ptr) };
            }
            // SeqCst: the publish that reuses the node (an Acquire load of FREE) sees the
            // slot empty; and in the total order with the owner's drop (its ORPHAN bit).
            let before = self.state.fetch_xor(RECLAIMING ^ FREE, Ordering::SeqCst);
            if before & ORPHAN != 0 {
                self.adopt();
            }
            return;
        }
    }

    /// Hands a FREE orphan to the pool (clearing its ORPHAN bit): any owner may take it.
    fn adopt(&'static self) {
        // SeqCst: FREE and orphaned, so no other thread changes the state now.
        self.state.store(FREE, Ordering::SeqCst);
        #[cfg(not(tollgate_loom))]
        POOL.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(NodeRef(NonNull::from(self)));
        // (Under loom the pool would outlive the model's execution: the node is dropped
        // from sight instead, leaked.)
    }
}

impl<T> Published<T> {
    /// Generation 0, working on `first`.
    pub(crate) fn new(first: Arc<T>) -> Published<T> {
        let node = Generation::allocate();
        // Relaxed, here and below: the node is not shared until `Published` is (which
        // publishes it). The first set is number 0; a node from the pool still carries its
        // last owner's number.
        node.get().number.store(0, Ordering::Relaxed);
        Published::install(node, first);
        node.get().state.store(CURRENT, Ordering::Relaxed);
        Published {
            current: AtomicPtr::new(node.0.as_ptr()),
            nodes: Box::new(Mutex::new(Nodes {
                all: vec![node],
                next: 1,
            })),
            _sets: PhantomData,
        }
    }

    /// Puts `set` in `node`, which is FREE and this owner's alone (being published).
    fn install(node: NodeRef, set: Arc<T>) {
        let ptr = Arc::into_raw(set).cast::<()>();
        // SAFETY: FREE and not yet visible as current: no other thread touches the slot
        // (a reclaim takes it only while RECLAIMING, which needs RETIRED first).
        unsafe {
            *node.get().set.get() = Some(Slot {
                ptr,
                release: release_arc::<T>,
            });
        }
        // Release: read (Acquire) by checks after they read `current` as this node.
        node.get().set_ptr.store(ptr.cast_mut(), Ordering::Release);
    }

    /// The set in force, held until the returned value (or the [`Hold`] it becomes) drops.
    #[inline]
    pub(crate) fn enter(&self) -> Active<'_, T> {
        loop {
            // SeqCst: see the module docs.
            let node = self.current.load(Ordering::SeqCst);
            // SAFETY: `current` always points at a node, and nodes are never freed.
            let this: &'static Generation = unsafe { &*node };
            let stripe = this.hold();
            if self.still_current(node) {
                // Acquire: the slot was written before the publish that made `node`
                // current, whose `current` store the load above read.
                let set = this.set_ptr.load(Ordering::Acquire);
                // SAFETY: `node` held (counted before a load of `current` that read it),
                // so its set is not reclaimed while the hold lasts (module docs); the
                // pointer came from `Arc::<T>::into_raw` in `install`.
                let set = unsafe { &*set.cast::<T>() };
                return Active {
                    set,
                    _hold: Hold {
                        node: this,
                        stripe,
                        _set: PhantomData,
                    },
                };
            }
            this.release(stripe);
        }
    }

    /// Whether `current` still is `node`, read after a hold was taken on it: a `SeqCst`
    /// load, in the total order of the module docs. loom models `SeqCst` accesses only as
    /// acquire/release, so under loom this is a compare-and-swap of `node` for itself (a
    /// read-modify-write reads the latest value, which gives the protocol the same
    /// guarantee within loom's model).
    #[inline(always)]
    fn still_current(&self, node: *mut Generation) -> bool {
        #[cfg(not(tollgate_loom))]
        {
            // SeqCst: see the module docs.
            self.current.load(Ordering::SeqCst) == node
        }
        #[cfg(tollgate_loom)]
        {
            // AcqRel: see above.
            self.current
                .compare_exchange(node, node, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }
    }

    /// The set in force, as an owned `Arc`.
    pub(crate) fn load_full(&self) -> Arc<T> {
        let active = self.enter();
        // The pointer `install` published (with the provenance of the whole `Arc`
        // allocation, which the reference `active` derefs to lacks). Acquire: as in `enter`.
        let set = active
            ._hold
            .node
            .set_ptr
            .load(Ordering::Acquire)
            .cast::<T>();
        // SAFETY: `set` came from `Arc::into_raw` and is alive while `active` holds it (the
        // node keeps this set while held): one more strong count for the `Arc` made from it.
        unsafe {
            Arc::increment_strong_count(set);
            Arc::from_raw(set)
        }
    }

    /// Publishes `next` as the set in force and returns at once; the set it replaces is
    /// reclaimed when nothing holds it any more. `before` runs with the new set's
    /// generation number just before the set becomes visible. One call at a time (the
    /// owner serializes reloads).
    pub(crate) fn publish(&self, next: Arc<T>, before: impl FnOnce(u64))
    where
        T: Send + Sync,
    {
        let mut nodes = lock(&self.nodes);
        let number = nodes.next;
        nodes.next += 1;
        let reused = nodes.all.iter().copied().find(|node| {
            // Acquire: pairs with the reclaimer's store of FREE (the slot is empty).
            node.get().state.load(Ordering::Acquire) == FREE
        });
        let node = reused.unwrap_or_else(|| {
            let node = Generation::allocate();
            nodes.all.push(node);
            node
        });
        // Relaxed: publishes only, under the lock.
        node.get().number.store(number, Ordering::Relaxed);
        Published::install(node, next);
        // SeqCst: a stale check's release on this node must not find it RETIRED.
        node.get().state.store(CURRENT, Ordering::SeqCst);
        before(number);
        // SeqCst: see the module docs.
        let old = self.current.swap(node.0.as_ptr(), Ordering::SeqCst);
        // SAFETY: `current` always points at a node, and nodes are never freed.
        let old: &'static Generation = unsafe { &*old };
        // SeqCst: see the module docs (only the owner changes a CURRENT node's state).
        old.state.store(RETIRED, Ordering::SeqCst);
        loom_sc_fence();
        old.try_reclaim();
    }

    /// The oldest generation number a check or decision may still work on (every set older
    /// than it is gone): a lower bound, as reclaims run concurrently.
    pub(crate) fn oldest_held(&self) -> u64 {
        let nodes = lock(&self.nodes);
        nodes
            .all
            .iter()
            // Acquire: pairs with the reclaimer's store of FREE.
            .filter(|node| node.get().state.load(Ordering::Acquire) != FREE)
            // Relaxed: written by publishes, which hold the lock we hold.
            .map(|node| node.get().number.load(Ordering::Relaxed))
            .min()
            .unwrap_or(nodes.next)
    }

    /// A broken twin's reload step (loom models only): reclaims every replaced set now,
    /// whatever still holds it.
    #[cfg(tollgate_loom)]
    pub(crate) fn reclaim_ignoring_holds(&self) {
        for node in &lock(&self.nodes).all {
            let node = node.get();
            // SeqCst: as in `try_reclaim`, without its look at the holds.
            if node
                .state
                .compare_exchange(RETIRED, RECLAIMING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                // SAFETY: claimed (RECLAIMING), as in `try_reclaim`.
                if let Some(slot) = unsafe { (*node.set.get()).take() } {
                    // SAFETY: as in `try_reclaim`.
                    unsafe { (slot.release)(slot.ptr) };
                }
                // SeqCst: as `try_reclaim`'s store of FREE (a loom twin's fault only).
                node.state.fetch_xor(RECLAIMING ^ FREE, Ordering::SeqCst);
            }
        }
    }

    /// Nodes this owner uses.
    #[cfg(test)]
    fn nodes(&self) -> usize {
        lock(&self.nodes).all.len()
    }
}

impl<T> Drop for Published<T> {
    /// Retires the set in force and orphans every node: a node nothing holds is reclaimed
    /// now, a held one by the release of its last hold, and either then goes to the pool.
    fn drop(&mut self) {
        // SeqCst: only the owner changes a CURRENT node's state; see the module docs.
        let current = self.current.load(Ordering::SeqCst);
        // SAFETY: `current` always points at a node, and nodes are never freed.
        unsafe { &*current }.state.store(RETIRED, Ordering::SeqCst);
        let nodes = core::mem::take(&mut lock(&self.nodes).all);
        for node in nodes {
            let node = node.get();
            // SeqCst: in the total order with a reclaimer's last exclusive-or (which reads
            // this bit): exactly one of the two sees the other.
            let before = node.state.fetch_or(ORPHAN, Ordering::SeqCst);
            loom_sc_fence();
            match before & PHASE {
                FREE => node.adopt(),
                // A reclaim now if nothing holds it, else the last release's.
                RETIRED => node.try_reclaim(),
                // The claimer sees the bit when it is done (or gives the node back
                // RETIRED, for the last release to reclaim).
                RECLAIMING => {}
                // Every CURRENT node was retired above (a node is current for one owner).
                _ => node.try_reclaim(),
            }
        }
    }
}

/// The set a check works on, held until dropped (or turned into a [`Hold`]).
#[derive(Debug)]
pub(crate) struct Active<'a, T> {
    set: &'a T,
    /// Released when the check is done.
    _hold: Hold<T>,
}

/// One stripe of a node's holds (a thread's count of holds on the node's set).
pub(crate) type Stripe = CachePadded<AtomicU64>;

/// The calling thread's stripe among `stripes` (a power of two): where its holds count.
#[inline(always)]
fn stripe_among(stripes: usize) -> usize {
    thread_stripe() & (stripes - 1)
}

#[cfg(not(tollgate_loom))]
impl<T> Active<'_, T> {
    /// The holds of the node held, for a check on any thread to find its own stripe (see
    /// [`Holds::line`]).
    #[inline]
    pub(crate) fn holds(&self) -> Holds {
        let holds = &self._hold.node.holds;
        Holds {
            first: holds.as_ptr(),
            stripes: holds.len(),
        }
    }

    /// The number of the set held (its generation: unique among the sets of its owner).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        // Relaxed: the number was written before the set was published, which the hold's
        // `enter` read; a hint's key (see `policy::warm`) needs no more.
        self._hold.node.number.load(Ordering::Relaxed)
    }
}

/// Where a node's holds lie (see [`Active::holds`]).
#[cfg(not(tollgate_loom))]
#[derive(Copy, Clone, Debug)]
pub(crate) struct Holds {
    /// The first stripe.
    pub(crate) first: *const Stripe,
    /// How many stripes there are (a power of two).
    pub(crate) stripes: usize,
}

#[cfg(not(tollgate_loom))]
impl Holds {
    /// The address of the calling thread's stripe, which its hold counts on
    /// (`Generation::hold`): an address to prefetch, never read through (nodes are never
    /// freed, but the node may hold another set by then).
    #[inline(always)]
    pub(crate) fn line(self) -> *const u8 {
        self.first.wrapping_add(stripe_among(self.stripes)).cast()
    }
}

impl<T> core::ops::Deref for Active<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        self.set
    }
}

impl<T> Active<'_, T> {
    /// The hold, without the borrow: keeps the set alive as long as it lives, beyond the
    /// owner's borrow (what a decision keeps, so that the labels it points into live).
    #[inline(always)]
    pub(crate) fn into_hold(self) -> Hold<T> {
        self._hold
    }
}

/// A hold on a published set (see the module docs): the set lives at least as long.
#[derive(Debug)]
pub(crate) struct Hold<T> {
    node: &'static Generation,
    stripe: usize,
    _set: PhantomData<Arc<T>>,
}

impl<T> Hold<T> {
    /// The set held.
    #[inline]
    pub(crate) fn get(&self) -> &T {
        // Acquire: as in `enter` (the slot was written before the publish that made the
        // node current, and the hold keeps the node from being reused meanwhile).
        let set = self.node.set_ptr.load(Ordering::Acquire);
        // SAFETY: the node is held, so its set is not reclaimed nor the node reused while
        // `self` lives (module docs); the pointer came from `Arc::<T>::into_raw` in
        // `install`, for a `T` (a hold is only made by `enter` on a `Published<T>`).
        unsafe { &*set.cast::<T>() }
    }
}

impl<T> Clone for Hold<T> {
    /// Another hold on the same set (on this thread's stripe).
    fn clone(&self) -> Hold<T> {
        Hold {
            node: self.node,
            stripe: self.node.hold(),
            _set: PhantomData,
        }
    }
}

impl<T> Drop for Hold<T> {
    #[inline]
    fn drop(&mut self) {
        self.node.release(self.stripe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Weak;

    /// A new owner's first set is generation 0 even on a node from the pool, which carried
    /// its last owner's number: else `oldest_held` names a generation above a set a check
    /// still holds, and a reload's clean-up trims what that check may still use.
    #[cfg(not(tollgate_loom))]
    #[test]
    fn a_first_set_on_a_pooled_node_is_generation_zero() {
        for _ in 0..8 {
            let old = Published::new(Arc::new(0u32));
            for n in 1..=5 {
                old.publish(Arc::new(n), |_| {});
            }
            // Its nodes go back to the pool, numbered up to 5.
            drop(old);
            let published = Published::new(Arc::new(1u32));
            let held = published.enter();
            assert_eq!(published.oldest_held(), 0);
            assert_eq!(*held, 1);
        }
    }

    /// The stripe `Holds::line` names is the one this thread's hold counted on.
    #[cfg(not(tollgate_loom))]
    #[test]
    fn the_holds_line_is_the_stripe_this_threads_hold_counts_on() {
        let published = Published::new(Arc::new(1u32));
        let active = published.enter();
        let hold = &active._hold;
        let counted: *const Stripe = &hold.node.holds[hold.stripe];
        assert_eq!(active.holds().line(), counted.cast::<u8>());
        // SeqCst: as every read of the holds.
        assert_eq!(hold.node.holds[hold.stripe].load(Ordering::SeqCst), 1);
    }

    /// A reload returns while a check holds the old set; the old set is reclaimed when the
    /// check (or a hold cloned from it) lets go, and its node is then reused.
    #[test]
    fn a_replaced_set_lives_until_its_last_hold_is_gone() {
        let first = Arc::new(1u32);
        let weak: Weak<u32> = Arc::downgrade(&first);
        let published = Published::new(first);
        let active = published.enter();
        assert_eq!(*active, 1);
        published.publish(Arc::new(2), |n| assert_eq!(n, 1));
        assert_eq!(*published.enter(), 2);
        assert!(weak.upgrade().is_some(), "held by the check");
        assert_eq!(published.oldest_held(), 0);
        let hold = active.into_hold();
        let clone = hold.clone();
        drop(hold);
        assert!(weak.upgrade().is_some(), "held by the clone");
        drop(clone);
        assert!(weak.upgrade().is_none(), "reclaimed by the last release");
        assert_eq!(published.oldest_held(), 1);
        // The freed node is reused: still two nodes after another reload.
        published.publish(Arc::new(3), |n| assert_eq!(n, 2));
        assert_eq!(published.nodes(), 2);
        assert_eq!(*published.load_full(), 3);
    }

    /// Nothing held: a reload reclaims the old set itself.
    #[test]
    fn a_set_nothing_holds_is_reclaimed_by_the_reload() {
        let first = Arc::new(String::from("a"));
        let weak = Arc::downgrade(&first);
        let published = Published::new(first);
        published.publish(Arc::new(String::from("b")), |_| {});
        assert!(weak.upgrade().is_none());
    }

    /// A hold that outlives its owner keeps its set, and frees it (and its node) when
    /// dropped; miri checks that nothing leaks or is freed twice.
    #[test]
    fn a_hold_outliving_its_owner_frees_its_node() {
        let first = Arc::new(vec![1u8; 16]);
        let weak = Arc::downgrade(&first);
        let published = Published::new(first);
        let hold = published.enter().into_hold();
        drop(published);
        assert!(weak.upgrade().is_some());
        drop(hold);
        assert!(weak.upgrade().is_none());
    }

    /// Checks on several threads racing reloads: every set a check read was alive and
    /// is reclaimed in the end.
    #[test]
    fn checks_racing_reloads_read_live_sets() {
        let published = Arc::new(Published::new(Arc::new(0u64)));
        let rounds = if cfg!(miri) { 20 } else { 2_000 };
        let weaks = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let active = published.enter();
                        let seen = *active;
                        assert!(seen < rounds as u64 + 1);
                    }
                });
            }
            s.spawn(|| {
                for i in 1..=rounds as u64 {
                    let next = Arc::new(i);
                    weaks.lock().unwrap().push(Arc::downgrade(&next));
                    published.publish(next, |_| {});
                }
            });
        });
        let weaks = weaks.into_inner().unwrap();
        let live = weaks.iter().filter(|w| w.upgrade().is_some()).count();
        assert_eq!(live, 1, "only the set in force is left");
    }
}
