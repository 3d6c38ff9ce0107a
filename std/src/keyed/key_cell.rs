//! [`KeyCell`]: where an exact-mode table keeps a clone of a non-integer key, with the
//! reader count that keeps the insert lock from overwriting a key while it is compared.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;

use crate::sync::{loom_sc_fence, AtomicU32, Ordering};

/// A slot's stored key (initialised exactly while the slot's `ident` is not the empty
/// value) and the number of readers currently comparing it.
///
/// Protocol (a Dekker handshake, hence `SeqCst` on both sides):
/// - reader: `pins += 1`, re-read `ident`; only if it still names the key, read the key;
///   then `pins -= 1`.
/// - writer (holding the shard's insert lock): set `ident` to the empty value, then wait
///   until `pins == 0`; only then drop or write the key, and publish the new `ident` with
///   `Release`.
///
/// Either the writer sees the reader's pin (and waits), or the reader sees the empty
/// `ident` (and never touches the key): the key is never read while it is written.
///
/// Checked by the loom model `keyed_exact_key_pin_races_eviction` (`loom-tests`), with a
/// key type whose contents loom tracks, and its broken twin without the writer's wait.
#[derive(Debug)]
pub(crate) struct KeyCell<K> {
    pub(crate) pins: AtomicU32,
    key: UnsafeCell<MaybeUninit<K>>,
}

impl<K> KeyCell<K> {
    /// An empty cell.
    pub(crate) fn new() -> KeyCell<K> {
        KeyCell {
            pins: AtomicU32::new(0),
            key: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Marks a reader as comparing this cell's key until the guard drops (also on a panic
    /// in the key's `Eq`, so a slot can never stay pinned forever).
    #[inline]
    pub(crate) fn pin(&self) -> Pin<'_> {
        // SeqCst: the reader half of the Dekker handshake (see the type docs).
        self.pins.fetch_add(1, Ordering::SeqCst);
        // A no-op outside loom (see `loom_sc_fence`): the pin and the identity re-check
        // that follows are both SeqCst already.
        loom_sc_fence();
        Pin { pins: &self.pins }
    }

    /// The stored key.
    ///
    /// # Safety
    /// The key must be initialised, and no writer may write it for the lifetime of the
    /// reference: the caller holds a pin taken before re-checking `ident`, or holds the
    /// shard's insert lock (writers need it).
    #[inline]
    pub(crate) unsafe fn get(&self) -> &K {
        // SAFETY: initialised and not concurrently written, per the caller's contract.
        unsafe { (*self.key.get()).assume_init_ref() }
    }

    /// Writes a key into an empty cell.
    ///
    /// # Safety
    /// The cell must hold no key (or one already dropped), the caller holds the shard's
    /// insert lock, and no reader holds a pin (`pins == 0` observed after the slot's
    /// `ident` was set to the empty value).
    #[inline]
    pub(crate) unsafe fn write(&self, key: K) {
        // SAFETY: exclusive access per the caller's contract.
        unsafe { (*self.key.get()).write(key) };
    }

    /// Moves the stored key out, leaving the cell empty.
    ///
    /// # Safety
    /// As for [`KeyCell::drop_key`].
    #[inline]
    pub(crate) unsafe fn take(&self) -> K {
        // SAFETY: initialised and exclusively accessed, per the caller's contract; the cell
        // is treated as empty afterwards.
        unsafe { (*self.key.get()).assume_init_read() }
    }

    /// Drops the stored key, leaving the cell empty.
    ///
    /// # Safety
    /// As for [`KeyCell::write`], and the cell must hold an initialised key.
    #[inline]
    pub(crate) unsafe fn drop_key(&self) {
        // SAFETY: initialised and exclusively accessed, per the caller's contract.
        unsafe { (*self.key.get()).assume_init_drop() };
    }
}

/// A reader's pin on a [`KeyCell`]; unpins on drop.
#[derive(Debug)]
pub(crate) struct Pin<'a> {
    pins: &'a AtomicU32,
}

impl Drop for Pin<'_> {
    #[inline]
    fn drop(&mut self) {
        // SeqCst (Release would do: the pinned reader's key reads happen before a writer's
        // SeqCst load that sees the pin gone): keeping every modification of the count SC
        // leaves the handshake no mixed SC/non-SC reasoning, and a locked RMW costs the same
        // on x86 whatever its ordering.
        self.pins.fetch_sub(1, Ordering::SeqCst);
    }
}
