//! [`LogCells`]: a sliding-window-log tier's per-key state in the keyed table family.
//!
//! A log is up to `limit` timestamps, which no single word holds, so the table's word for a
//! key is a *handle*: `1 +` the index of the key's slot in a slab of logs allocated with the
//! table, one slot per table slot. A lookup is the keyed table's lock-free probe (no shard
//! lock, no write), then the slot's own mutex:
//!
//! ```text
//!   table (lock-free probe)            slab (one mutex per slot)
//!   +-----------+-------------+        +-------------------------------+
//!   | identity h| word = i + 1| -----> | i: owner = Some(h), log [t..] |
//!   +-----------+-------------+        +-------------------------------+
//! ```
//!
//! The slot's `owner` is the authority: an operation that found handle `i` for `h` locks
//! slot `i` and works on it only if `owner == Some(h)`; otherwise (the key was evicted or
//! carried away since the probe, and the slot perhaps given to another key) it looks again
//! under the shard lock, where no slot changes hands. Slots change hands only under the
//! table's shard lock, and always under their own mutex: an insert takes a free slot,
//! writes `owner` and the log, then publishes the handle; an eviction (idle: only if the
//! log is still idle under the slot's mutex; under pressure: always) clears the slot and
//! frees it; a reload's carry extracts the handle, then takes the log out. So a log is
//! never read while another key's is written, and a record made before an eviction or a
//! carry is evicted with the log or carried with it, never lost to a stale slot.
//!
//! Lock order: shard lock, then a slot's mutex, then the free list; a lookup holds no shard
//! lock while it holds a slot's mutex.
//!
//! Memory, for a table of `capacity` keys with `S` slots (`S ≈ 1.25 · capacity`, see
//! `Geometry`): the table's `16 · S` bytes plus the slab's `S · size_of::<Slot>()`
//! (48 bytes per slot on 64-bit Linux), allocated at the tier's first use, plus under
//! `16 · limit` bytes per key whose log holds anything from admissions alone, and under
//! `16 · (limit + 4096)` for a key charged or converted beyond its limit (the log's
//! [`ceiling`](SlidingWindowLog::ceiling), where it saturates; an evicted or emptied slot's
//! log is let go of). Per request, a log tier's cost is capped at its `limit` (`max_cost`),
//! so a check appends at most `limit` stamps; a charge at most the ceiling.

use tollgate_core::{Nanos, SlidingWindowLog};

use super::cell::{Log, TierCell};
use crate::keyed::{DebtSummary, Geometry, Judge, Mode, Table, Upsert, WhenFull};
use crate::sync::{lock, Mutex};

/// One slot of the slab: the key it belongs to (`None`: free) and its log.
#[derive(Debug, Default)]
struct Slot {
    owner: Option<u64>,
    log: Log,
}

/// The slab and its free list: the judge of the table's handles (see the module docs).
#[derive(Debug)]
struct Slab {
    params: SlidingWindowLog,
    slots: Box<[Mutex<Slot>]>,
    /// Free slot indices (a stack). Every resident key holds one slot and the slab has one
    /// per table slot, more than the table's capacity, so it is never empty at an insert.
    free: Mutex<Vec<u32>>,
}

impl Slab {
    /// The slot a handle names.
    fn slot(&self, handle: u64) -> Option<&Mutex<Slot>> {
        self.slots
            .get(usize::try_from(handle.checked_sub(1)?).ok()?)
    }

    /// Takes a free slot for `h` holding `log`; its handle.
    fn claim(&self, h: u64, log: Log) -> Option<u64> {
        let index = lock(&self.free).pop()?;
        let mut slot = lock(&self.slots[index as usize]);
        slot.owner = Some(h);
        slot.log = log;
        Some(u64::from(index) + 1)
    }

    /// Clears the slot `handle` names and frees it, returning its log; with `idle_at`, only
    /// if the log is idle at that instant (`None` otherwise: the slot stays as it is).
    /// Judged and cleared under one lock: a holder of the handle records into the log only
    /// under this mutex, and after it finds the owner cleared.
    fn vacate(&self, handle: u64, idle_at: Option<Nanos>) -> Option<Log> {
        let Some(slot) = self.slot(handle) else {
            return Some(Log::default());
        };
        let log = {
            let mut slot = lock(slot);
            if idle_at.is_some_and(|now| !slot.log.is_idle(&self.params, now)) {
                return None;
            }
            slot.owner = None;
            std::mem::take(&mut slot.log)
        };
        // Truncation: the handle came from `claim`, so it is 1 + a u32 index.
        #[allow(clippy::cast_possible_truncation)]
        let index = (handle - 1) as u32;
        lock(&self.free).push(index);
        Some(log)
    }

    /// Clears the slot `handle` names and frees it; its log.
    fn free(&self, handle: u64) -> Log {
        self.vacate(handle, None).unwrap_or_default()
    }
}

impl Judge for Slab {
    fn is_idle(&self, handle: u64, now: Nanos) -> bool {
        match self.slot(handle) {
            Some(slot) => lock(slot).log.is_idle(&self.params, now),
            None => true,
        }
    }

    fn loss(&self, handle: u64, now: Nanos) -> (u64, u64) {
        self.slot(handle)
            .map_or((0, u64::MAX), |slot| lock(slot).log.loss(&self.params, now))
    }

    fn release(&self, handle: u64, now: Nanos, idle: bool) -> bool {
        self.vacate(handle, idle.then_some(now)).is_some()
    }

    /// A log table has no debt summary.
    fn seed_from(&self, _: &DebtSummary, _: u64, seed: u64, _: Nanos) -> (u64, bool) {
        (seed, false)
    }

    fn record_evicted(&self, _: &DebtSummary, _: u64, _: u64, _: bool, _: Nanos) {}
}

/// A sliding-log tier's keys (see the module docs).
#[derive(Debug)]
pub(crate) struct LogCells {
    table: Table<()>,
    slab: Slab,
}

impl LogCells {
    /// Cells for `geometry`'s keys under `params`.
    pub(crate) fn new(params: SlidingWindowLog, geometry: Geometry) -> LogCells {
        let mask_seed = super::tier::fingerprint("tollgate policy log handles");
        let table = Table::new(geometry, Mode::Fingerprint, WhenFull::Evict, mask_seed);
        let slots = table.slot_count();
        // A handle is 1 + a u32 index, so at most u32::MAX slots are handed out. A policy
        // tier (at most MAX_CAPACITY = 2^26 keys, about 1.2 slots each) hands out all of
        // them; a table with more (only a Redis fallback asked for billions of keys) leaves
        // the rest unused rather than wrapping the count.
        let handed_out = u32::try_from(slots).unwrap_or(u32::MAX);
        let free = (0..handed_out).rev().collect();
        LogCells {
            slab: Slab {
                params,
                slots: (0..slots).map(|_| Mutex::new(Slot::default())).collect(),
                free: Mutex::new(free),
            },
            table,
        }
    }

    /// Starts loading the table buckets that may hold `h` into the cache (a hint).
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        self.table.prefetch(h);
    }

    /// Runs `f` on `h`'s log if a lock-free probe finds `h` in its slot: `None` if absent,
    /// or if the probe raced a move or the slot changed hands (a miss is not confirmed: for
    /// callers that go on to [`with`](Self::with), which looks again under the shard lock).
    #[inline]
    pub(crate) fn find<R>(&self, h: u64, f: impl FnOnce(&mut Log) -> R) -> Option<R> {
        let handle = self.table.update_if_found(h, |word| (None, word))?;
        self.on_slot(h, handle, &mut Some(f))
    }

    /// Runs `f` on `h`'s log if `h` is resident (the probe confirms a miss, so a resident
    /// key racing a move is not reported absent).
    pub(crate) fn with_existing<R>(&self, h: u64, f: impl FnOnce(&mut Log) -> R) -> Option<R> {
        let handle = self.table.update_resident(h, |word| (None, word))?;
        let mut f = Some(f);
        if let Some(r) = self.on_slot(h, handle, &mut f) {
            return Some(r);
        }
        // The slot changed hands after the probe: look again under the shard lock.
        self.locked(h, &mut f)
    }

    /// Under `h`'s shard lock: runs `f` on `h`'s log; if `h` is absent and `admit()` allows,
    /// inserts it first with the log `seed()` gives (or an empty one), evicting per the
    /// table's rules when full.
    pub(crate) fn with<R>(
        &self,
        h: u64,
        now: Nanos,
        admit: impl FnOnce() -> bool,
        seed: impl FnOnce() -> Option<TierCell>,
        f: impl FnOnce(&mut Log) -> R,
    ) -> Upsert<R> {
        let mut f = Some(f);
        let mut claimed = None;
        let upsert = self.table.upsert(
            h,
            &self.slab,
            now,
            admit,
            || {
                let log = seed().map(TierCell::into_log).unwrap_or_default();
                claimed = self.slab.claim(h, log);
                claimed.unwrap_or(0)
            },
            // Under the shard lock, where a resident handle names `h`'s slot.
            |handle| (None, self.on_slot(h, handle, &mut f)),
        );
        match upsert {
            Upsert::Done(Some(r)) => Upsert::Done(r),
            Upsert::Closed => Upsert::Closed,
            // `Done(None)`: no slot was free to claim (never: the slab has more slots than
            // the table keys). `Full`: no room was made; the claimed slot goes back.
            Upsert::Done(None) | Upsert::Full => {
                if let Some(handle) = claimed {
                    self.slab.free(handle);
                }
                Upsert::Full
            }
        }
    }

    /// Runs `f` (once) on slot `handle` if it is `h`'s.
    fn on_slot<R>(
        &self,
        h: u64,
        handle: u64,
        f: &mut Option<impl FnOnce(&mut Log) -> R>,
    ) -> Option<R> {
        let mut slot = lock(self.slab.slot(handle)?);
        if slot.owner != Some(h) {
            return None;
        }
        let f = f.take()?;
        Some(f(&mut slot.log))
    }

    /// [`with_existing`](Self::with_existing) under the shard lock.
    fn locked<R>(&self, h: u64, f: &mut Option<impl FnOnce(&mut Log) -> R>) -> Option<R> {
        let upsert = self.table.upsert(
            h,
            &self.slab,
            Nanos::ZERO,
            || false,
            || 0,
            |handle| (None, self.on_slot(h, handle, f)),
        );
        match upsert {
            Upsert::Done(r) => r,
            Upsert::Closed | Upsert::Full => None,
        }
    }

    /// Takes `h` out: its log (`None` if absent).
    pub(crate) fn extract(&self, h: u64) -> Option<Log> {
        let handle = self.table.extract(h)?;
        Some(self.slab.free(handle))
    }

    /// The keys whose log is not idle at `now`.
    pub(crate) fn live_keys(&self, now: Nanos) -> Vec<u64> {
        self.table
            .resident()
            .into_iter()
            .filter(|&(_, handle)| !self.slab.is_idle(handle, now))
            .map(|(h, _)| h)
            .collect()
    }

    /// Every key holding a slot (a scan, shard by shard under its lock).
    pub(crate) fn keys(&self) -> Vec<u64> {
        self.table.resident().into_iter().map(|(h, _)| h).collect()
    }

    /// The most keys it holds.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Keys holding a slot.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Bytes: the table, the slab, and every log's storage (a scan of the slab).
    pub(crate) fn memory_bytes(&self) -> usize {
        let logs: usize = self
            .slab
            .slots
            .iter()
            .map(|slot| lock(slot).log.heap_bytes())
            .sum();
        self.table.memory_bytes()
            + self.slab.slots.len() * core::mem::size_of::<Mutex<Slot>>()
            + logs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::LogView;

    fn cells(limit: u64, capacity: usize) -> LogCells {
        let params = SlidingWindowLog::new(limit, Nanos::from_secs(60)).unwrap();
        LogCells::new(params, Geometry::new(capacity, None).unwrap())
    }

    /// Every slot is either free (once) or named by exactly one resident key's handle,
    /// and owned by that key.
    fn assert_accounted(cells: &LogCells) {
        let free = lock(&cells.slab.free).clone();
        let mut seen = vec![false; cells.slab.slots.len()];
        for &i in &free {
            assert!(
                !std::mem::replace(&mut seen[i as usize], true),
                "slot {i} freed twice"
            );
            assert_eq!(lock(&cells.slab.slots[i as usize]).owner, None);
        }
        for (h, handle) in cells.table.resident() {
            let i = usize::try_from(handle - 1).unwrap();
            assert!(
                !std::mem::replace(&mut seen[i], true),
                "slot {i} held twice"
            );
            assert_eq!(lock(&cells.slab.slots[i]).owner, Some(h));
        }
        assert!(seen.iter().all(|&s| s), "a slot leaked");
    }

    fn take(cells: &LogCells, h: u64, now: Nanos) -> bool {
        let params = cells.slab.params;
        let take = |log: &mut Log| log.take(&params, now, 1);
        let taken = match cells.find(h, take) {
            Some(taken) => taken,
            None => match cells.with(h, now, || true, || None, take) {
                Upsert::Done(taken) => taken,
                Upsert::Closed | Upsert::Full => return false,
            },
        };
        taken.is_ok_and(|(d, _)| d.allowed)
    }

    #[test]
    fn a_key_keeps_its_log_and_a_limit_holds() {
        let cells = cells(3, 64);
        let now = Nanos::from_secs(1);
        let admitted = (0..5).filter(|_| take(&cells, 7, now)).count();
        assert_eq!(admitted, 3);
        assert_eq!(cells.len(), 1);
        let log = cells.extract(7).unwrap();
        assert_eq!(LogView::len(&log), 3);
        assert_eq!(cells.len(), 0);
        assert!(cells.extract(7).is_none());
        assert_accounted(&cells);
    }

    /// Threads churning many more keys than the capacity (idle and pressure evictions all
    /// the time, racing lookups of the same keys): no slot is leaked, freed twice or shared,
    /// and a key never admits more than its limit within the window while it stays resident.
    #[test]
    fn churn_under_threads_keeps_every_slot_accounted() {
        let cells = cells(4, 64);
        // Under miri, 4 x 48 takes of 512 keys still overflow the 64 places three times.
        let rounds = if cfg!(miri) { 48 } else { 20_000u64 };
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let cells = &cells;
                s.spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for i in 0..rounds {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // 512 keys for 64 places; time moves so old logs go idle.
                        let h = (x % 512).wrapping_mul(0xff51_afd7_ed55_8ccd) | 1;
                        take(cells, h, Nanos::from_millis(i * 10));
                    }
                });
            }
        });
        assert_accounted(&cells);
        assert!(cells.len() <= cells.capacity());
        for (h, _) in cells.table.resident() {
            let stamps = cells.with_existing(h, |log| LogView::len(&*log)).unwrap();
            assert!(stamps <= cells.slab.params.limit(), "{stamps} stamps");
        }
    }
}
