//! Keys: from a key to its 64-bit identity (integer keys through a seeded bijection, exact
//! in 8 bytes; other keys through the limiter's hasher) and the per-key state mask; and
//! [`KeyCell`], where an exact-mode table keeps a clone of a non-integer key, with the
//! reader count that keeps the insert lock from overwriting a key while it is compared.

use core::any::TypeId;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use std::net::Ipv4Addr;

use crate::sync::{loom_sc_fence, AtomicU32, Ordering};

/// The key's value as a `u64` if `K` is an integer-like type that fits one (so that a
/// bijection of it identifies the key exactly), else `None`.
///
/// The `TypeId` comparisons are between constants once `K` is known, so the compiler folds
/// this to either the conversion or `None`.
#[inline(always)]
pub(crate) fn word_of<K: 'static>(key: &K) -> Option<u64> {
    let id = TypeId::of::<K>();
    macro_rules! words {
        ($($ty:ty => |$v:ident| $conv:expr),* $(,)?) => {$(
            if id == TypeId::of::<$ty>() {
                // SAFETY: the TypeIds are equal, so `K` is `$ty` and `key` points to a valid
                // `$ty`; every listed type is `Copy`.
                let $v: $ty = unsafe { *(key as *const K as *const $ty) };
                return Some($conv);
            }
        )*};
    }
    words!(
        u64 => |v| v,
        u32 => |v| u64::from(v),
        u16 => |v| u64::from(v),
        u8 => |v| u64::from(v),
        i64 => |v| v as u64,
        i32 => |v| v as u32 as u64,
        i16 => |v| v as u16 as u64,
        i8 => |v| v as u8 as u64,
        char => |v| u64::from(u32::from(v)),
        Ipv4Addr => |v| u64::from(u32::from(v)),
    );
    if usize::BITS <= 64 {
        words!(
            usize => |v| v as u64,
            isize => |v| v as usize as u64,
        );
    }
    None
}

/// Whether keys of type `K` are stored as integer words (a constant once `K` is known).
#[inline(always)]
pub(crate) fn is_word<K: 'static>() -> bool {
    let id = TypeId::of::<K>();
    id == TypeId::of::<u64>()
        || id == TypeId::of::<u32>()
        || id == TypeId::of::<u16>()
        || id == TypeId::of::<u8>()
        || id == TypeId::of::<i64>()
        || id == TypeId::of::<i32>()
        || id == TypeId::of::<i16>()
        || id == TypeId::of::<i8>()
        || id == TypeId::of::<char>()
        || id == TypeId::of::<Ipv4Addr>()
        || (usize::BITS <= 64 && (id == TypeId::of::<usize>() || id == TypeId::of::<isize>()))
}

/// A seeded bijection of `u64`: xor with the seed, multiply by an odd constant, fold the
/// high half into the low half (each step is invertible), so distinct integer keys always
/// get distinct identities. The multiply spreads every input bit into the high half (which
/// picks the shard and the second bucket); the fold carries it into the low half (which
/// picks the first bucket). One multiply: this is on every lookup.
#[inline(always)]
pub(crate) fn mix(value: u64, seed: u64) -> u64 {
    let z = (value ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 32)
}

/// The mask XORed into a slot's state word, derived from the key's identity. A check that
/// loaded key X's masked state and then lost the slot to key Y (evicted and replaced between
/// its load and its compare-and-swap) can only succeed its CAS if Y's masked state equals
/// the X-masked word it loaded: probability 2⁻⁶⁴ for a seeded mask.
#[inline(always)]
pub(crate) fn state_mask(ident: u64, seed: u64) -> u64 {
    let z = (ident ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_are_words_and_others_are_not() {
        assert_eq!(word_of(&7u64), Some(7));
        assert_eq!(word_of(&-1i32), Some(0xffff_ffff));
        assert_eq!(word_of(&Ipv4Addr::new(10, 0, 0, 1)), Some(0x0a00_0001));
        assert_eq!(word_of(&String::from("7")), None);
        assert_eq!(word_of(&7u128), None);
        assert!(is_word::<u64>() && is_word::<char>() && !is_word::<String>());
    }

    #[test]
    fn mix_is_injective_on_a_sample() {
        let n = if cfg!(miri) { 1_000 } else { 100_000 };
        let mut seen: Vec<u64> = (0..n).map(|v| mix(v, 12345)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len() as u64, n);
    }
}

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
